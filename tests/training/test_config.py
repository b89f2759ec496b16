"""TrainConfig: validation (one test per rule), JSON round-trip, resume comparison."""

from __future__ import annotations

import json

import pytest

from attnkit.training.config import TrainConfig


def test_defaults_are_valid_and_round_trip_json():
    cfg = TrainConfig()
    assert TrainConfig.from_json(cfg.to_json()) == cfg
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


def test_round_trip_of_non_default_values():
    cfg = TrainConfig(steps=None, max_time=2.5, batch_size=3, block_size=7, grad_accum=4, lr=0.7, min_lr=0.0,
                      warmup_steps=40, schedule="inverse_sqrt", d_model=64, weight_decay=0.0, betas=(0.9, 0.98),
                      eps=1e-9, adamw_impl="foreach", grad_clip=None, eval_every=3, eval_batches=2, log_every=1,
                      ckpt_every=5, keep_last=1, best_metric="valid_bleu", best_mode="max", seed=7,
                      compile=True, autocast="bf16")
    text = cfg.to_json()
    assert json.loads(text)["betas"] == [0.9, 0.98]
    back = TrainConfig.from_json(text)
    assert back == cfg and isinstance(back.betas, tuple)


def test_ints_become_floats_so_round_trip_is_exact():
    cfg = TrainConfig(lr=1, max_time=3)
    assert isinstance(cfg.lr, float) and isinstance(cfg.max_time, float)
    assert TrainConfig.from_json(cfg.to_json()) == cfg


def test_steps_or_max_time_required():
    with pytest.raises(ValueError, match="steps or max_time"):
        TrainConfig(steps=None, max_time=None, schedule="constant")


def test_max_time_only_is_allowed_with_constant_schedule():
    assert TrainConfig(steps=None, max_time=1.0, schedule="constant").steps is None


def test_cosine_over_time_budget_when_steps_is_none():
    assert TrainConfig(steps=None, max_time=1.0, schedule="cosine").steps is None


def test_cosine_warmup_longer_than_steps():
    with pytest.raises(ValueError, match="warmup_steps must be <= steps = 10 for the cosine schedule, got 20"):
        TrainConfig(steps=10, warmup_steps=20)


def test_inverse_sqrt_needs_warmup():
    with pytest.raises(ValueError, match="warmup_steps must be >= 1 for the inverse_sqrt"):
        TrainConfig(schedule="inverse_sqrt", warmup_steps=0)


@pytest.mark.parametrize("field,value,message", [
    ("steps", 0, "steps must be an int >= 1, got 0"),
    ("steps", 2.0, "steps must be an int >= 1 or None, got 2.0"),
    ("steps", True, "steps must be an int"),
    ("max_time", 0.0, r"max_time must be a finite number in \(0.0, 1000000000.0\], got 0.0"),
    ("max_time", 1e308, r"max_time must be a finite number in \(0.0, 1000000000.0\], got 1e\+308"),
    ("max_time", float("inf"), "max_time must be a finite number"),
    ("batch_size", 0, "batch_size must be an int >= 1, got 0"),
    ("block_size", -1, "block_size must be an int >= 1, got -1"),
    ("grad_accum", 0, "grad_accum must be an int >= 1, got 0"),
    ("lr", 0.0, "lr must be a finite number in"),
    ("lr", "fast", "lr must be a number"),
    ("min_lr", -1e-5, "min_lr must be a finite number"),
    ("warmup_steps", -1, "warmup_steps must be an int >= 0, got -1"),
    ("schedule", "linear", r"schedule must be one of \['cosine', 'inverse_sqrt', 'constant'\], got 'linear'"),
    ("d_model", 0, "d_model must be an int >= 1"),
    ("weight_decay", -0.1, "weight_decay must be a finite number"),
    ("betas", (0.9,), r"betas must be a pair"),
    ("betas", (0.9, 1.0), r"betas\[1\] must be a finite number in \[0.0, 1.0\), got 1.0"),
    ("eps", 0.0, "eps must be a finite number"),
    ("adamw_impl", "apex", "adamw_impl must be one of"),
    ("grad_clip", 0.0, "grad_clip must be a finite number"),
    ("eval_every", 0, "eval_every must be an int >= 1, got 0"),
    ("eval_batches", 0, "eval_batches must be an int >= 1, got 0"),
    ("log_every", 0, "log_every must be an int >= 1, got 0"),
    ("ckpt_every", 0, "ckpt_every must be an int >= 1, got 0"),
    ("keep_last", 0, "keep_last must be an int >= 1, got 0"),
    ("best_metric", "", "best_metric must be a non-empty str"),
    ("best_mode", "lowest", "best_mode must be one of"),
    ("seed", -1, "seed must be an int >= 0, got -1"),
    ("seed", 2**64, r"seed \(--seed\) must be <= 2\*\*64 - 1 \(the seeds torch takes\), got 18446744073709551616"),
    ("device", "", "device must be a device string"),
    ("compile", 1, "compile must be a bool, got 1"),
    ("autocast", "fp8", r"autocast must be one of \[None, 'bf16', 'fp16'\], got 'fp8'"),
    ("fsdp", 1, "fsdp must be a bool, got 1"),
])
def test_bad_field_values(field, value, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{field: value})


def test_min_lr_above_lr():
    with pytest.raises(ValueError, match="min_lr must be <= lr = 0.001, got 0.01"):
        TrainConfig(lr=1e-3, min_lr=1e-2)


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(ValueError, match=r"unknown keys \['learning_rate'\]"):
        TrainConfig.from_dict({"learning_rate": 1.0})


def test_from_json_rejects_invalid_json():
    with pytest.raises(ValueError, match="invalid JSON"):
        TrainConfig.from_json("{steps: 3")


def test_replace_validates_and_rejects_unknown_fields():
    cfg = TrainConfig()
    assert cfg.replace(steps=5000).steps == 5000
    with pytest.raises(ValueError, match="no fields"):
        cfg.replace(stepz=1)
    with pytest.raises(ValueError, match="batch_size"):
        cfg.replace(batch_size=0)


def test_resume_differences_ignore_steps_and_max_time():
    a = TrainConfig(steps=100, max_time=None, lr=1e-3)
    b = TrainConfig(steps=300, max_time=5.0, lr=2e-3, batch_size=4)
    diffs = b.resume_differences(a)
    assert set(diffs) == {"lr", "batch_size"}
    assert diffs["lr"] == (1e-3, 2e-3)
    assert b.resume_differences(a.to_dict()) == diffs
    assert a.replace(steps=999).resume_differences(a) == {}


def test_time_budget_lives_in_the_config():
    timed = TrainConfig(steps=None, max_time=2.5, warmup_steps=1)
    assert timed.max_time_s == 150.0
    assert timed.budget_fraction(75.0) == 0.5
    assert TrainConfig(steps=100, max_time=2.5, warmup_steps=1).budget_fraction(75.0) is None  # spans the steps
    assert TrainConfig(steps=100, warmup_steps=1).max_time_s is None


def test_a_resumed_train_config_with_settings_unknown_here_is_named_as_the_runs():
    """Was: "TrainConfig.from_dict got unknown keys ['new_knob']; valid keys are [...]", with no word of the checkpoint:
    it read as a mistake in the command line."""
    from attnkit.training.config import resolve_train_config

    saved = TrainConfig(steps=10, warmup_steps=2).to_dict() | {"new_knob": 3}
    with pytest.raises(ValueError, match=r"^--resume: the run's train_config holds settings this attnkit does not "
                                         r"know: \['new_knob'\] \(written by a newer attnkit\?\)$"):
        resolve_train_config({}, saved, {"steps": 12})
    del saved["new_knob"], saved["cuda_graphs"]  # an older run's: a field it lacks takes its default
    assert resolve_train_config({}, saved, {"steps": 12}) == TrainConfig(steps=12, warmup_steps=2)


def test_resolve_train_config_precedence():
    from attnkit.training.config import resolve_train_config

    defaults = {"lr": 1e-3, "warmup_steps": 5, "seed": 1}
    assert resolve_train_config(defaults, None, {}).steps == 2000  # nothing given: 2000 steps
    only_steps = resolve_train_config(defaults, None, {"steps": 50, "lr": 2e-3})
    assert (only_steps.steps, only_steps.max_time, only_steps.lr) == (50, None, 2e-3)
    only_time = resolve_train_config(defaults, None, {"max_time": 3.0})
    assert (only_time.steps, only_time.max_time) == (None, 3.0)  # the schedule spans the time budget
    saved = {"lr": 5e-4, "steps": 80, "warmup_steps": 5, "seed": 7}
    resumed = resolve_train_config(defaults, saved, {"steps": 120})
    assert (resumed.steps, resumed.lr, resumed.seed) == (120, 5e-4, 7)  # the saved run's settings win over defaults
    assert resolve_train_config(defaults, None, {"grad_clip": 0}).grad_clip is None
    assert TrainConfig().steps == resolve_train_config(defaults, None, {}).steps  # one default length


def test_a_time_only_schedule_is_chosen_in_one_place():
    """``finetune``'s rule (a run limited by time only gets a constant schedule unless one is given) lives in
    resolve_train_config, not in the CLI."""
    from attnkit.training.config import resolve_train_config

    defaults = {"warmup_steps": 5, "schedule": "cosine"}
    timed = resolve_train_config(defaults, None, {"max_time": 2.0}, time_only_schedule="constant")
    assert (timed.schedule, timed.steps) == ("constant", None)
    assert resolve_train_config(defaults, None, {"steps": 40}, time_only_schedule="constant").schedule == "cosine"
    assert resolve_train_config(defaults, None, {"max_time": 2.0, "schedule": "cosine"},
                                time_only_schedule="constant").schedule == "cosine"  # a given schedule wins
    assert resolve_train_config(defaults, None, {"max_time": 2.0}).schedule == "cosine"  # none asked: the recipe's
    saved = {"warmup_steps": 5, "schedule": "cosine", "steps": None, "max_time": 1.0}
    assert resolve_train_config(defaults, saved, {"max_time": 3.0},
                                time_only_schedule="constant").schedule == "cosine"  # a resumed run keeps its own


def test_default_warmup_scales_with_a_short_run():
    from attnkit.training.config import default_warmup, resolve_train_config

    assert [default_warmup(50, n) for n in (1, 9, 30, 499, 500, 2000)] == [1, 1, 3, 49, 50, 50]
    assert default_warmup(0, 30) == 0  # a recipe without warmup keeps none
    defaults = {"warmup_steps": 50, "schedule": "cosine"}
    assert resolve_train_config(defaults, None, {"steps": 30}).warmup_steps == 3  # was: "must be <= steps = 30"
    assert resolve_train_config(defaults, None, {"steps": 30, "max_time": 1.0}).warmup_steps == 3
    assert resolve_train_config(defaults, None, {}).warmup_steps == 50  # the 2000-step default run
    assert resolve_train_config(defaults, None, {"max_time": 1.0}).warmup_steps == 50  # decays over the time budget
    inv = resolve_train_config({"warmup_steps": 50, "schedule": "inverse_sqrt", "d_model": 8}, None, {"steps": 5})
    assert inv.warmup_steps == 1  # inverse_sqrt needs >= 1
    assert resolve_train_config(defaults, None, {"steps": 30, "warmup_steps": 30}).warmup_steps == 30  # given: kept
    with pytest.raises(ValueError, match="warmup_steps must be <= steps = 30 for the cosine schedule, got 31"):
        resolve_train_config(defaults, None, {"steps": 30, "warmup_steps": 31})  # a given one is still refused
    # a resumed run keeps its own warmup, even when --steps changes
    saved = {"warmup_steps": 50, "steps": 1000, "schedule": "cosine"}
    assert resolve_train_config(defaults, saved, {"steps": 1200}).warmup_steps == 50


def test_a_time_limited_run_ends_its_default_warmup_by_a_tenth_of_the_budget():
    from attnkit.training.config import resolve_train_config

    defaults = {"warmup_steps": 50, "schedule": "cosine"}
    timed = resolve_train_config(defaults, None, {"max_time": 1.0})
    assert (timed.warmup_steps, timed.warmup_time_share) == (50, 0.1)
    assert TrainConfig.from_json(timed.to_json()) == timed
    assert resolve_train_config(defaults, None, {"max_time": 1.0, "warmup_steps": 80}).warmup_time_share is None
    assert resolve_train_config(defaults, None, {"steps": 30}).warmup_time_share is None  # the steps decide
    inv = resolve_train_config(dict(defaults, schedule="inverse_sqrt", d_model=8), None, {"max_time": 1.0})
    assert inv.warmup_time_share is None  # its warmup is part of the formula
    assert resolve_train_config(defaults, {"warmup_steps": 50, "steps": None, "max_time": 1.0},
                                {"max_time": 2.0}).warmup_time_share is None  # a resumed run keeps its own
    with pytest.raises(ValueError, match="warmup_time_share"):
        TrainConfig(warmup_time_share=1.5)


def test_a_micro_batch_past_torchs_index_range_is_refused():
    """Was: ``train lm --batch-size 9223372036854775808`` ended in a traceback from ``torch.randint`` ("Overflow
    when unpacking long long"), and 2**31 asked torch's allocator for 292 GB after 26 s."""
    assert TrainConfig(steps=1, warmup_steps=0, batch_size=2**31 - 1, block_size=1).batch_size == 2**31 - 1
    for batch, block in ((2**63, 128), (2**31, 1), (2**24, 2**8)):
        with pytest.raises(ValueError, match=r"^TrainConfig.batch_size x block_size must be at most 2\*\*31 - 1 = "
                                             rf"2,147,483,647 tokens per micro-batch, got {batch} x {block}$"):
            TrainConfig(steps=1, warmup_steps=0, batch_size=batch, block_size=block)


def test_the_micro_batch_bound_leaves_grad_accum_out():
    """grad_accum runs its micro-batches one after another: only batch_size x block_size meets torch's sizes."""
    cfg = TrainConfig(steps=1, warmup_steps=0, batch_size=2**31 - 1, block_size=1, grad_accum=4)
    assert (cfg.batch_size, cfg.grad_accum) == (2**31 - 1, 4)
