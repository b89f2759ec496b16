"""Label smoothing, drawn and checked: the target distribution it trains towards, why it stops a model from
becoming over-confident, and attnkit's translation loss (``MTTask``) against the formula.

Run it:  python examples/annotated_label_smoothing.py [--out DIR]     (a few seconds on a laptop CPU)
Open it as a notebook: Jupyter (with jupytext) or VS Code read the ``# %%`` cells.
Part of the walkthroughs of the seeds (docs/from-the-seeds.md). Like the Annotated Transformer, it draws the
smoothed targets and the loss as a function of the model's confidence.

"Attention Is All You Need" trains with label smoothing ε = 0.1 (section 5.4, after Szegedy et al. 2016): instead
of all probability on the reference token, the target puts ``1 - ε`` there and spreads ``ε`` uniformly over the
vocabulary. attnkit follows PyTorch's definition (``F.cross_entropy(..., label_smoothing=ε)``)::

    q(v) = (1 - ε) · [v = y] + ε / V            loss = -Σ_v q(v) · log p(v)

(the Annotated Transformer spreads ``ε`` over the ``V - 2`` tokens that are neither the reference nor padding;
in attnkit padding positions are dropped from the loss altogether, ``ignore_index``). ``MTTask`` applies ε
(default 0.1) to the training loss and reports the validation loss unsmoothed.

Axis legend: N positions (rows of a batch, flattened), V vocabulary, B batch, S source length, T target length.
"""

# %%
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from _walkthrough import annotate_axes, figure, output_dir, save, section, setup, show
from attnkit.data.pipeline.mt_batching import EncodedPairs
from attnkit.models import Transformer, TransformerConfig
from attnkit.training import MTTask

setup(seed=0)
OUT = output_dir()


def smoothed_targets(labels: torch.Tensor, V: int, eps: float) -> torch.Tensor:
    """The target distribution of label smoothing, written out: ``(1 - eps)`` on the label, ``eps / V`` everywhere.

    Shape: labels ``(N,)`` -> ``(N, V)``.
    """
    return (1 - eps) * F.one_hot(labels, V).float() + eps / V


# %% [markdown]
# ## 1. The smoothed target distribution / 平滑后的目标分布
#
# Each row is one position's target: most of the mass on the reference token, the rest spread evenly. The figure
# uses ε = 0.4, as the Annotated Transformer's does, on a vocabulary of 8 (its figure has 5), so the spread is
# visible; the paper's 0.1 on a 37,000-token vocabulary leaves 0.9 + 2.7e-6 on the reference and 2.7e-6 on every
# other token.
# 目标分布：正确词得到 1-ε+ε/V，其余每个词得到 ε/V。

# %%
section("1. The smoothed target distribution", "平滑后的目标分布")
V, eps = 8, 0.4
labels = torch.tensor([2, 1, 0, 5, 7])
q = smoothed_targets(labels, V, eps)
show("reference tokens", labels, "N")
show("smoothed targets", q, "N, V")
assert torch.allclose(q.sum(-1), torch.ones(len(labels)))
assert torch.allclose(q[range(len(labels)), labels], torch.full((len(labels),), 1 - eps + eps / V))
print(f"  each row sums to 1; the reference gets 1 - ε + ε/V = {1 - eps + eps / V:.2f}, every other token "
      f"ε/V = {eps / V:.2f}")
fig, ax = figure(6.5, 3.8)
image = ax.imshow(q.numpy(), cmap="viridis", vmin=0, vmax=1)
for (i, j), value in zip(torch.cartesian_prod(torch.arange(len(labels)), torch.arange(V)).tolist(), q.flatten()):
    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, color="white" if value < 0.5 else "black")
ax.set_xticks(range(V))
ax.set_yticks(range(len(labels)), [f"reference {int(y)}" for y in labels])
ax.set_xlabel("token v")
ax.set_title(f"label smoothing ε = {eps}: target q(v) for 5 positions, V = {V}")
fig.colorbar(image, ax=ax, label="q(v)")
save(fig, OUT, "annotated_label_smoothing_targets.png")

# %% [markdown]
# ## 2. The loss is the cross-entropy against those targets / 损失就是与平滑目标的交叉熵
#
# ``F.cross_entropy(logits, y, label_smoothing=ε)`` equals ``-Σ q log p`` with the targets above; equivalently
# ``(1 - ε)`` times the usual loss plus ``ε`` times the loss against the uniform distribution.
# 平滑损失 = (1-ε)·普通交叉熵 + ε·对均匀分布的交叉熵。

# %%
section("2. The loss is the cross-entropy against those targets", "损失就是与平滑目标的交叉熵")
logits = torch.randn(len(labels), V)
log_p = logits.log_softmax(-1)
torch_loss = F.cross_entropy(logits, labels, label_smoothing=eps)
by_hand = -(q * log_p).sum(-1).mean()
mixed = (1 - eps) * F.cross_entropy(logits, labels) + eps * -log_p.mean(-1).mean()
assert torch.allclose(torch_loss, by_hand) and torch.allclose(torch_loss, mixed)
print(f"  F.cross_entropy(label_smoothing={eps}) = {torch_loss:.5f} = -Σ q log p = {by_hand:.5f} "
      f"= (1-ε)·CE + ε·CE(uniform) = {mixed:.5f}")

# %% [markdown]
# ## 3. Smoothing punishes over-confidence / 平滑惩罚过度自信
#
# Let a model give probability ``p`` to the reference token and spread ``1 - p`` over the others. Without
# smoothing the loss ``-log p`` falls all the way to 0 at ``p = 1``: the model is pushed to ever larger logits.
# With smoothing the loss is smallest at ``p = 1 - ε + ε/V`` and rises again beyond it, and its minimum is the
# entropy of the targets, not 0: a smoothed training loss never reaches zero.
# 不平滑时 p→1 损失→0；平滑后损失在 p = 1-ε+ε/V 处最小，之后反而上升。

# %%
section("3. Smoothing punishes over-confidence", "平滑惩罚过度自信")
V = 8
p = torch.linspace(0.01, 0.999, 2000)
fig, ax = figure(7.5, 4.5)
for e in (0.0, 0.1, 0.4):
    # logits that give p to token 0 and (1 - p) / (V - 1) to each other token
    confident = torch.stack([p.log(), *[((1 - p) / (V - 1)).log()] * (V - 1)], dim=-1)  # (N, V)
    loss = F.cross_entropy(confident, torch.zeros(len(p), dtype=torch.long), label_smoothing=e, reduction="none")
    best = float(p[loss.argmin()])
    target = smoothed_targets(torch.tensor([0]), V, e)
    entropy = float(-(target * target.clamp_min(1e-30).log()).sum())
    if e == 0.0:
        assert (loss[1:] < loss[:-1]).all()
        print("  ε = 0: the loss keeps falling as p -> 1")
    else:
        assert abs(best - (1 - e + e / V)) < 1e-3 and math.isclose(float(loss.min()), entropy, rel_tol=1e-4)
        assert loss[-1] > loss.min() + 0.05
        print(f"  ε = {e}: smallest loss {float(loss.min()):.4f} (the targets' entropy) at p = {best:.3f} "
              f"(1 - ε + ε/V = {1 - e + e / V:.3f}); at p = 0.999 it is {float(loss[-1]):.4f}")
    ax.plot(p.numpy(), loss.numpy(), label=f"ε = {e}")
ax.set_ylim(0, 3)
annotate_axes(ax, "probability p the model gives the reference token", "loss",
              f"label-smoothed loss against the model's confidence (V = {V})")
save(fig, OUT, "annotated_label_smoothing_loss.png")

# %% [markdown]
# ## 4. In attnkit: MTTask's training and validation losses / attnkit 中的用法
#
# ``MTTask(train, valid, label_smoothing=0.1)`` (the default) computes the training loss with smoothing over the
# non-padding labels of a batch; ``evaluate`` reports the plain cross-entropy (and perplexity), which is what
# tells how well the model predicts. Below a tiny untrained translator, two sentence pairs, and both losses
# recomputed from the model's logits by hand.
# MTTask 的训练损失带平滑，验证损失不带。

# %%
section("4. In attnkit: MTTask's training and validation losses", "attnkit 中的用法")
PAD, BOS, EOS, V = 0, 1, 2, 12
pairs = EncodedPairs(src=[[5, 6, 7, EOS], [8, 9, EOS]], tgt=[[10, 11, 4], [3, 4]], pad_id=PAD, bos_id=BOS,
                     eos_id=EOS)
task = MTTask(pairs, pairs, max_tokens=16, label_smoothing=0.1)
model = Transformer(TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=16, num_heads=2,
                                      num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32, dropout=0.0,
                                      pad_id=PAD)).eval()
batch = task.batch("train", 0)
show("batch src (ends with <eos>)", batch.src, "B, S")
show("batch tgt_in (<bos> + target)", batch.tgt_in, "B, T")
show("batch labels (target + <eos>; -100 = pad)", batch.labels, "B, T")
with torch.no_grad():
    logits = model(batch.src, batch.tgt_in, src_key_padding_mask=batch.src_key_padding_mask,
                   tgt_key_padding_mask=batch.tgt_key_padding_mask)
    real = batch.labels != -100  # the padding positions are left out
    log_p = logits[real].log_softmax(-1)  # (N, V)
    smoothed = -(smoothed_targets(batch.labels[real], V, 0.1) * log_p).sum(-1).mean()
    plain = F.nll_loss(log_p, batch.labels[real])
    train_loss, n_tokens = task.loss(model, batch)
    valid = task.evaluate(model, n_batches=1)
assert n_tokens == int(real.sum()) and torch.allclose(train_loss, smoothed, atol=1e-6)
assert math.isclose(valid["loss"], float(plain), rel_tol=1e-5)
print(f"  {n_tokens} labels: MTTask.loss = {float(train_loss):.5f} = the smoothed formula {float(smoothed):.5f}; "
      f"evaluate()['loss'] = {valid['loss']:.5f} = the plain cross-entropy {float(plain):.5f}")
