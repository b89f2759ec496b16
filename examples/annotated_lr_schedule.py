"""The learning-rate schedule, drawn and checked: the paper's warmup + inverse square root, and attnkit's
warmup + cosine (``attnkit.training.optim``).

Run it:  python examples/annotated_lr_schedule.py [--out DIR]     (about a second on a laptop CPU)
Open it as a notebook: Jupyter (with jupytext) or VS Code read the ``# %%`` cells.
Part of the walkthroughs of the seeds (docs/from-the-seeds.md); the schedule trains the model of
examples/annotated_copy_task.py. Like the Annotated Transformer, it draws the schedule before using it.

"Attention Is All You Need" (section 5.3) raises the learning rate linearly for ``warmup`` updates, then lowers
it with the inverse square root of the update number::

    lrate(n) = d_model^-0.5 * min(n^-0.5, n * warmup^-1.5)

attnkit's trainer offers it as ``schedule="inverse_sqrt"`` (``lr`` is then a factor: 1.0 is the paper) and, by
default, a linear warmup to ``lr`` followed by a cosine down to ``min_lr`` at the last update. This script writes
the paper's formula out, checks ``lr_at`` against it and against the properties each schedule promises, drives a
real optimizer with ``LRScheduler`` and draws the curves.

There are no tensor axes here: a schedule maps an update number ``n`` (1-based) to a learning rate.
"""

# %%
from __future__ import annotations

import math

import torch

from _walkthrough import annotate_axes, figure, output_dir, save, section, setup
from attnkit.training import LRScheduler, TrainConfig, lr_at

setup(seed=0)
OUT = output_dir()


def paper_rate(n: int, d_model: int, warmup: int) -> float:
    """Equation 3 of the paper, for update ``n`` (1-based)."""
    return d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)


# %% [markdown]
# ## 1. The paper's schedule: warmup, then 1/√n / 论文的学习率：预热后按 1/√n 衰减
#
# ``lr_at(step, ...)`` gives the rate of the update after ``step`` completed updates, i.e. update ``n = step + 1``.
# The rate climbs linearly for ``warmup`` updates, peaks there at ``(d_model · warmup)^-0.5`` and then falls as
# ``1/√n``: four times as many updates, half the rate. A wider model gets a smaller rate, a longer warmup a lower
# and later peak (the checks: the peak at ``warmup``, half of it at ``warmup / 2``, the peak / √2 at twice
# ``warmup``). The figure shows the Annotated Transformer's three settings.
# 预热阶段线性上升，之后按更新次数的平方根反比下降。

# %%
section("1. The paper's schedule: warmup, then 1/sqrt(n)", "论文的学习率：预热后按 1/√n 衰减")
settings = [(512, 4000), (512, 8000), (256, 4000)]
n_updates = 20_000
fig, ax = figure(8, 4.5)
for d_model, warmup in settings:
    rates = [lr_at(step, schedule="inverse_sqrt", lr=1.0, d_model=d_model, warmup_steps=warmup)
             for step in range(n_updates)]
    by_hand = [paper_rate(n, d_model, warmup) for n in range(1, n_updates + 1)]
    assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(rates, by_hand))
    peak = max(range(n_updates), key=rates.__getitem__) + 1
    assert peak == warmup and math.isclose(rates[peak - 1], (d_model * warmup) ** -0.5)
    assert math.isclose(rates[2 * warmup - 1], rates[warmup - 1] / math.sqrt(2))  # 2x the updates: / √2
    assert math.isclose(rates[warmup // 2 - 1], rates[warmup - 1] / 2)  # linear warmup
    print(f"  d_model {d_model}, warmup {warmup}: equal to the paper's formula at all {n_updates:,} updates; "
          f"peak {rates[peak - 1]:.2e} at update {peak}; half of it at {warmup // 2}, / √2 at {2 * warmup}")
    ax.plot(range(1, n_updates + 1), rates, label=f"d_model {d_model}, warmup {warmup}")
annotate_axes(ax, "update n", "learning rate",
              "the paper's schedule: d_model^-0.5 · min(n^-0.5, n · warmup^-1.5)")
save(fig, OUT, "annotated_lr_inverse_sqrt.png")

# %% [markdown]
# ## 2. attnkit's default: linear warmup, then a cosine to min_lr / attnkit 默认：线性预热后余弦衰减
#
# For ``W`` warmup updates the rate rises as ``lr · n / W``; from there to the last update ``N`` it follows half
# a cosine from ``lr`` down to ``min_lr``: the peak at update ``W``, halfway between ``lr`` and ``min_lr`` at the
# middle of the decay, ``min_lr`` at update ``N``. Unlike the inverse square root it ends at a chosen rate, at a
# chosen update, and it is the same curve whatever the model's width.
# 余弦调度在给定的更新次数处结束于 min_lr。

# %%
section("2. attnkit's default: linear warmup, then a cosine to min_lr", "attnkit 默认：线性预热后余弦衰减")
lr, min_lr, W, N = 3e-4, 3e-5, 100, 1000
cosine = [lr_at(step, schedule="cosine", lr=lr, min_lr=min_lr, warmup_steps=W, total_steps=N) for step in range(N)]
constant = [lr_at(step, schedule="constant", lr=lr, warmup_steps=W) for step in range(N)]
assert all(math.isclose(cosine[n - 1], lr * n / W) for n in range(1, W + 1))  # linear warmup up to the peak
assert math.isclose(cosine[W - 1], lr) and max(cosine) == cosine[W - 1]
assert math.isclose(cosine[(W + N) // 2 - 1], (lr + min_lr) / 2)  # halfway through the decay
assert cosine[N - 1] == min_lr and all(a >= b for a, b in zip(cosine[W - 1:], cosine[W:]))
print(f"  lr {lr:g}, min_lr {min_lr:g}, warmup {W}, {N} updates: peak {lr:g} at update {W}, "
      f"{(lr + min_lr) / 2:.3g} at update {(W + N) // 2}, {min_lr:g} at update {N}")
fig, ax = figure(8, 4.5)
ax.plot(range(1, N + 1), cosine, label="cosine (attnkit's default)")
ax.plot(range(1, N + 1), constant, label="constant after warmup")
ax.axvline(W, color="grey", linestyle=":", label=f"end of warmup (update {W})")
annotate_axes(ax, "update n", "learning rate",
              f"warmup + cosine: lr {lr:g} -> min_lr {min_lr:g} over {N} updates")
save(fig, OUT, "annotated_lr_cosine.png")

# %% [markdown]
# ## 3. The schedule drives a real optimizer / 调度器驱动真实的优化器
#
# ``LRScheduler(optimizer, TrainConfig)`` is what the trainer uses: it sets the rate for the first update when it
# is made and, after every ``optimizer.step()``, ``sched.step()`` sets the rate of the next one. The rates it
# gives the optimizer are ``lr_at``'s, for both schedules.
# 训练器用 LRScheduler 在每次更新后设置下一次的学习率。

# %%
section("3. The schedule drives a real optimizer", "调度器驱动真实的优化器")
for config in (TrainConfig(steps=N, lr=lr, min_lr=min_lr, warmup_steps=W, schedule="cosine"),
               TrainConfig(steps=N, lr=1.0, warmup_steps=40, schedule="inverse_sqrt", d_model=64)):
    weight = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.SGD([weight], lr=0.0)
    sched = LRScheduler(optimizer, config)
    used = []
    for _ in range(N):
        used.append(optimizer.param_groups[0]["lr"])  # the rate this update runs with
        weight.sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        sched.step()
    expected = [lr_at(step, schedule=config.schedule, lr=config.lr, min_lr=config.min_lr,
                      warmup_steps=config.warmup_steps, total_steps=config.steps, d_model=config.d_model)
                for step in range(N)]
    assert used == expected
    print(f"  {config.schedule}: the {N} rates the optimizer ran with are lr_at's (first {used[0]:.3g}, "
          f"largest {max(used):.3g}, last {used[-1]:.3g})")
