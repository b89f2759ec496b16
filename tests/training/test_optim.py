"""Optimizer parameter groups and learning-rate schedules."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from attnkit.training.config import TrainConfig
from attnkit.training.optim import LRScheduler, build_optimizer, lr_at, param_groups
from helpers import assert_close


# --- schedules --------------------------------------------------------------------------------------
def test_cosine_warmup_peak_and_end():
    kw = dict(schedule="cosine", lr=1e-3, min_lr=1e-4, warmup_steps=10, total_steps=110)
    assert lr_at(0, **kw) == pytest.approx(1e-4)          # update 1 of 10 warmup updates
    assert lr_at(4, **kw) == pytest.approx(5e-4)          # update 5: half way up
    assert lr_at(9, **kw) == pytest.approx(1e-3)          # update 10: the peak
    assert lr_at(59, **kw) == pytest.approx(5.5e-4)       # update 60: half way down = (lr + min_lr) / 2
    assert lr_at(109, **kw) == pytest.approx(1e-4)        # the last update runs at min_lr
    assert lr_at(500, **kw) == pytest.approx(1e-4)        # and beyond
    # strictly decreasing after the peak
    values = [lr_at(s, **kw) for s in range(9, 110)]
    assert all(a > b for a, b in zip(values, values[1:]))


def test_cosine_value_inside_the_decay_matches_formula():
    kw = dict(schedule="cosine", lr=2.0, min_lr=0.5, warmup_steps=4, total_steps=20)
    n = 8  # update number -> step = 7
    expected = 0.5 + 1.5 * 0.5 * (1 + math.cos(math.pi * (n - 4) / (20 - 4)))
    assert lr_at(n - 1, **kw) == pytest.approx(expected, rel=1e-12)


def test_inverse_sqrt_is_the_paper_formula():
    d, w = 512, 4000
    for step in (0, 99, 3998, 3999, 4000, 19999):
        n = step + 1
        paper = d ** -0.5 * min(n ** -0.5, n * w ** -1.5)
        assert lr_at(step, schedule="inverse_sqrt", lr=1.0, warmup_steps=w, d_model=d) == pytest.approx(paper, rel=1e-12)
        assert lr_at(step, schedule="inverse_sqrt", lr=2.0, warmup_steps=w, d_model=d) == pytest.approx(2 * paper, rel=1e-12)
    # the peak is at update n = warmup: d**-0.5 * w**-0.5
    assert lr_at(w - 1, schedule="inverse_sqrt", lr=1.0, warmup_steps=w, d_model=d) == pytest.approx((d * w) ** -0.5)


def test_constant_with_and_without_warmup():
    assert lr_at(0, schedule="constant", lr=0.3, warmup_steps=3) == pytest.approx(0.1)
    assert lr_at(2, schedule="constant", lr=0.3, warmup_steps=3) == pytest.approx(0.3)
    assert lr_at(1000, schedule="constant", lr=0.3, warmup_steps=3) == 0.3
    assert lr_at(0, schedule="constant", lr=0.3) == 0.3


@pytest.mark.parametrize("kwargs,message", [
    (dict(schedule="step", lr=1.0), "schedule must be one of"),
    (dict(schedule="cosine", lr=1.0, warmup_steps=1), "needs total_steps"),  # neither steps nor time
    (dict(schedule="inverse_sqrt", lr=1.0, warmup_steps=10), "needs d_model"),
    (dict(schedule="inverse_sqrt", lr=1.0, warmup_steps=0, d_model=8), "needs warmup_steps >= 1"),
    (dict(schedule="cosine", lr=1.0, warmup_steps=-2, total_steps=10), r"warmup_steps must be an int >= 0, got -2"),
    (dict(schedule="constant", lr=-1.0), r"lr must be a finite number in \[0.0, inf\), got -1.0"),
    (dict(schedule="cosine", lr=1.0, min_lr=float("nan"), total_steps=10), "min_lr must be a finite number"),
    (dict(schedule="cosine", lr=1.0, total_steps=0), "total_steps must be an int >= 1, got 0"),
    (dict(schedule="inverse_sqrt", lr=1.0, warmup_steps=4, d_model=0), "d_model must be an int >= 1, got 0"),
])
def test_lr_at_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        lr_at(0, **kwargs)


def test_lr_at_negative_step():
    with pytest.raises(ValueError, match="step must be an int >= 0, got -1"):
        lr_at(-1, schedule="constant", lr=1.0)


def test_scheduler_drives_the_optimizer_and_round_trips():
    cfg = TrainConfig(steps=50, lr=1e-2, min_lr=1e-3, warmup_steps=5)
    model = torch.nn.Linear(3, 3)
    opt = build_optimizer(model, cfg)
    sched = LRScheduler(opt, cfg)
    seen = []
    for _ in range(12):
        seen.append(opt.param_groups[0]["lr"])
        assert all(g["lr"] == seen[-1] for g in opt.param_groups)
        opt.step()
        sched.step()
    assert seen == [sched.lr_at(s) for s in range(12)]
    state = sched.state_dict()
    assert state["step"] == 12

    opt2 = build_optimizer(model, cfg)
    sched2 = LRScheduler(opt2, cfg)
    sched2.load_state_dict(state)
    assert sched2.last_step == 12
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"] == sched.lr_at(12)


def test_scheduler_inverse_sqrt_needs_d_model():
    cfg = TrainConfig(schedule="inverse_sqrt", warmup_steps=10, lr=1.0)
    opt = build_optimizer(torch.nn.Linear(2, 2), cfg)
    with pytest.raises(ValueError, match="needs d_model"):
        LRScheduler(opt, cfg)
    sched = LRScheduler(opt, cfg, d_model=64)
    assert opt.param_groups[0]["lr"] == pytest.approx(64 ** -0.5 * 10 ** -1.5)
    assert sched.d_model == 64


def test_scheduler_rejects_bad_state():
    cfg = TrainConfig()
    sched = LRScheduler(build_optimizer(torch.nn.Linear(2, 2), cfg), cfg)
    with pytest.raises(ValueError, match="int 'step'"):
        sched.load_state_dict({"step": -3})


# --- parameter groups ---------------------------------------------------------------------------------
def test_decay_only_on_matrices_gpt():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16))
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    names = dict(model.named_parameters())
    assert all(names[n].ndim >= 2 for n in decay["param_names"])
    assert all(names[n].ndim < 2 for n in no_decay["param_names"])
    # embeddings decay (nanoGPT); norms and biases do not
    assert "wte.weight" in decay["param_names"] and "wpe.weight" in decay["param_names"]
    assert any(n.endswith("ln_1.weight") for n in no_decay["param_names"])
    assert any(n.endswith("bias") for n in no_decay["param_names"])
    # the tied head appears once (as wte.weight), and every trainable parameter is in exactly one group
    assert "lm_head.weight" not in decay["param_names"]
    all_ids = [id(p) for g in (decay, no_decay) for p in g["params"]]
    assert len(all_ids) == len(set(all_ids)) == len(list(model.parameters()))


def test_frozen_parameters_are_left_out(tiny_lm):
    model = tiny_lm()
    model.ln.weight.requires_grad_(False)
    groups = param_groups(model, 0.1)
    assert "ln.weight" not in groups[1]["param_names"] and "ln.bias" in groups[1]["param_names"]


def test_no_trainable_parameters():
    model = torch.nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        param_groups(model, 0.1)


def test_weight_decay_really_skips_norms():
    """One AdamW step with zero gradients: decayed weights shrink by lr*wd, no-decay ones stay put."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    cfg = TrainConfig(lr=0.1, weight_decay=0.5, warmup_steps=0, schedule="constant")
    opt = build_optimizer(model, cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    after = dict(model.named_parameters())
    torch.testing.assert_close(after["0.weight"], before["0.weight"] * (1 - 0.1 * 0.5))
    for n in ("0.bias", "1.weight", "1.bias"):
        assert_close(after[n], before[n], "exact")


@pytest.mark.parametrize("impl,flag", [("fused", "fused"), ("foreach", "foreach")])
def test_adamw_impl_flags(impl, flag):
    opt = build_optimizer(torch.nn.Linear(2, 2), TrainConfig(adamw_impl=impl))
    assert opt.param_groups[0][flag] is True
    assert opt.param_groups[0]["betas"] == (0.9, 0.95)


def test_cosine_over_time_fraction():
    """A time-limited run (no total_steps) decays the cosine over the fraction of its time budget."""
    kw = dict(schedule="cosine", lr=2.0, min_lr=0.5, warmup_steps=4)
    assert lr_at(1, time_fraction=0.9, **kw) == pytest.approx(2.0 * 2 / 4)  # still warming up
    assert lr_at(10, time_fraction=0.0, **kw) == pytest.approx(2.0)
    assert lr_at(10, time_fraction=0.5, **kw) == pytest.approx(0.5 + 1.5 * 0.5)
    assert lr_at(10, time_fraction=1.0, **kw) == pytest.approx(0.5)
    assert lr_at(10, time_fraction=3.0, **kw) == pytest.approx(0.5)  # past the budget: clamped


def test_a_time_limited_warmup_also_ends_at_its_share_of_the_budget():
    """warmup_time_share: the warmup lasts while n <= W and less than that share of the budget has passed, at the
    larger of the two ramps; without it (or with a step limit) the warmup is by updates only, as before."""
    kw = dict(schedule="cosine", lr=2.0, min_lr=0.5, warmup_steps=100, warmup_time_share=0.1)
    assert lr_at(9, time_fraction=0.0, **kw) == pytest.approx(2.0 * 10 / 100)  # by updates
    assert lr_at(9, time_fraction=0.05, **kw) == pytest.approx(1.0)  # by time: half the share
    assert lr_at(9, time_fraction=0.5, **kw) == pytest.approx(0.5 + 1.5 * 0.5)  # warmup over: the cosine at 0.5
    assert lr_at(9, time_fraction=0.5, **dict(kw, warmup_time_share=None)) == pytest.approx(0.2)  # updates only
    assert lr_at(9, time_fraction=0.5, total_steps=1000, **kw) == pytest.approx(0.2)  # a step limit: updates only
    const = dict(kw, schedule="constant")
    assert [lr_at(9, time_fraction=f, **const) for f in (0.0, 0.05, 0.1, 0.7)] == pytest.approx([0.2, 1.0, 2.0, 2.0])
    assert lr_at(200, time_fraction=0.01, **kw) == pytest.approx(0.5 + 1.5 * 0.5 * (1 + math.cos(math.pi * 0.01)))


def test_the_time_warmup_ends_exactly_at_its_share_of_the_budget():
    """The warmup lasts while ``f < s``: at ``f == s`` the cosine already runs (mutation check: ``f > s``)."""
    kw = dict(schedule="cosine", lr=2.0, min_lr=0.5, warmup_steps=100, warmup_time_share=0.5)
    assert lr_at(9, time_fraction=0.5, **kw) == pytest.approx(0.5 + 1.5 * 0.5)


@pytest.mark.parametrize("fraction", [1.5, 2.0, 1.0 + 1e-9])
def test_a_time_limited_cosine_past_its_budget_stays_at_min_lr(fraction):
    """Past the time budget (the last update may start after max_time) the lr stays at min_lr; an unclamped
    cosine would climb back towards lr (at 2.0 it is back at the peak)."""
    kw = dict(schedule="cosine", lr=2.0, min_lr=0.5, warmup_steps=4)
    assert lr_at(10, time_fraction=fraction, **kw) == pytest.approx(0.5)
