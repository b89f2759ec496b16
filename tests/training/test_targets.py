"""Time to target (issue #40, part 3): ``stop_at_loss`` stops a run at the first evaluation at or below it and the
summary says when; ``schedule_steps`` fixes the cosine's length in updates, which a time budget does not stretch.
Also through ``attnkit.api.train_lm`` / ``train_mt``'s options and the command line's flags.

Axis legend: none (configs, schedules and runs).
"""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.api import TrainLMOptions, TrainMTOptions, train_lm
from attnkit.cli.main import build_parser
from attnkit.cli.flags import options_from
from attnkit.models.gpt import GPT
from attnkit.training.config import TrainConfig, default_warmup, resolve_train_config
from attnkit.training.lm_task import LMTask
from attnkit.training.metrics import read_metrics
from attnkit.training.optim import LRScheduler, lr_at
from attnkit.training.trainer import Trainer
from helpers import tiny_gpt_config

RECIPE = dict(lr=1e-3, min_lr=1e-4, warmup_steps=100, schedule="cosine")


# --- the config ---------------------------------------------------------------------------------------------------------
def test_the_new_fields_are_checked_and_round_trip():
    cfg = TrainConfig(steps=100, stop_at_loss=1.47, schedule_steps=5000)
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg and cfg.schedule_horizon == 5000
    assert TrainConfig(steps=100).schedule_horizon == 100 and TrainConfig(steps=None, max_time=1).schedule_horizon is None
    with pytest.raises(ValueError, match=r"TrainConfig.stop_at_loss must be .*0.*got -1"):
        TrainConfig(stop_at_loss=-1.0)
    with pytest.raises(ValueError, match=r"TrainConfig.schedule_steps must be .*1.*got 0"):
        TrainConfig(schedule_steps=0)
    with pytest.raises(ValueError, match="schedule 'constant' has none"):
        TrainConfig(schedule="constant", schedule_steps=10)
    with pytest.raises(ValueError, match=r"warmup_steps must be <= schedule_steps = 50 .*got 100"):
        TrainConfig(steps=1000, schedule_steps=50, warmup_steps=100)
    TrainConfig(steps=10, schedule_steps=500, warmup_steps=100)  # a run shorter than its warmup is fine


def test_resolve_a_run_given_a_schedule_length():
    alone = resolve_train_config(RECIPE, None, {"schedule_steps": 300})
    assert (alone.steps, alone.max_time, alone.warmup_steps) == (300, None, default_warmup(100, 300))
    timed = resolve_train_config(RECIPE, None, {"max_time": 2.0, "schedule_steps": 5000})
    assert (timed.steps, timed.max_time, timed.schedule_steps) == (None, 2.0, 5000)
    assert timed.warmup_steps == 100 and timed.warmup_time_share is None  # warmup in updates, not by the clock
    assert timed.budget_fraction(60.0) is None  # the schedule does not follow the clock
    # finetune's constant schedule for time-only runs does not replace a cosine the user gave a length
    assert resolve_train_config(RECIPE, None, {"max_time": 1.0, "schedule_steps": 40},
                                time_only_schedule="constant").schedule == "cosine"
    # resuming may change the target, not the schedule
    saved = TrainConfig(steps=100, stop_at_loss=2.0, schedule_steps=200).to_dict()
    cfg = TrainConfig.from_dict(saved | {"stop_at_loss": 1.5})
    assert cfg.resume_differences(saved) == {}
    assert set(TrainConfig.from_dict(saved | {"schedule_steps": 300}).resume_differences(saved)) == {"schedule_steps"}


def test_a_time_budget_does_not_stretch_a_schedule_given_in_steps():
    model = torch.nn.Linear(2, 2)
    cfg = TrainConfig(steps=None, max_time=1.0, schedule_steps=50, warmup_steps=5, lr=1e-2, min_lr=1e-3)
    clock = {"now": 0.0}
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    schedule = LRScheduler(optimizer, cfg, clock=lambda: clock["now"])
    for step in (0, 10, 30, 49, 50, 400):
        by_steps = lr_at(step, schedule="cosine", lr=1e-2, min_lr=1e-3, warmup_steps=5, total_steps=50)
        for now in (0.0, 30.0, 59.0):  # the clock moves, the lr does not
            clock["now"] = now
            assert schedule.lr_at(step) == by_steps
    assert schedule.lr_at(400) == 1e-3  # past the horizon: min_lr
    clock["now"] = 30.0
    time_only = LRScheduler(optimizer, TrainConfig(steps=None, max_time=1.0, warmup_steps=5), clock=lambda: clock["now"])
    halfway = time_only.lr_at(10)
    clock["now"] = 45.0
    assert time_only.lr_at(10) < halfway  # without schedule_steps the cosine follows the clock


# --- the trainer --------------------------------------------------------------------------------------------------------
def _task() -> LMTask:
    # a pattern with a little noise: the validation loss falls fast from ln(61) = 4.11
    g = torch.Generator().manual_seed(0)
    tokens = torch.arange(4000) % 13
    tokens = torch.where(torch.rand(4000, generator=g) < 0.05, torch.randint(0, 61, (4000,), generator=g), tokens)
    return LMTask(tokens[:3500], tokens[3500:], block_size=16, batch_size=8, seed=1)


def _fit(out, stop_at_loss, resume=False, steps=40):
    cfg = TrainConfig(steps=steps, batch_size=8, block_size=16, lr=1e-2, min_lr=1e-3, warmup_steps=2, eval_every=4,
                      eval_batches=2, log_every=2, ckpt_every=8, seed=3, stop_at_loss=stop_at_loss)
    config = tiny_gpt_config(block_size=16)
    torch.manual_seed(0)
    return Trainer(GPT(config), _task(), cfg, out, model_config=config, resume=resume, progress=False,
                   log=False).fit()


def test_the_run_stops_at_the_first_evaluation_at_or_below_the_target(tmp_path):
    never = _fit(tmp_path / "never", stop_at_loss=0.0)
    evals = [(r["step"], r["valid_loss"]) for r in read_metrics(tmp_path / "never") if "valid_loss" in r]
    assert never["stopped_by"] == "steps" and never["target"] == {"loss": 0.0, "reached": False, "step": None,
                                                                 "elapsed": None, "valid_loss": None}
    target = evals[3][1] + 1e-9  # reached at the fourth evaluation, if not before
    step, value = next((s, v) for s, v in evals if v <= target)
    summary = _fit(tmp_path / "run", stop_at_loss=target)
    assert summary["stopped_by"] == "target" and summary["steps"] == step < 40
    assert summary["target"]["reached"] and summary["target"]["step"] == step
    assert summary["target"]["valid_loss"] == value == summary["valid_loss"]  # the same numbers, run for run
    assert 0 < summary["target"]["elapsed"] <= summary["elapsed"]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["target"] == summary["target"]
    assert (tmp_path / "run" / "checkpoints" / f"step_{step:08d}").is_dir()  # the run ends as any run does

    # resumed with the same target: already reached, nothing to do; with a lower one: it goes on
    again = _fit(tmp_path / "run", stop_at_loss=target, resume=True)
    assert again["stopped_by"] == "target" and again["steps"] == step and again["target"] == summary["target"]
    lower = _fit(tmp_path / "run", stop_at_loss=0.0, resume=True)
    assert lower["stopped_by"] == "steps" and lower["steps"] == 40 and not lower["target"]["reached"]


def test_first_update_seconds_and_peak_memory_in_the_summary(tmp_path):
    summary = _fit(tmp_path / "run", stop_at_loss=None, steps=4)
    assert "target" not in summary and summary["first_update_s"] > 0
    assert summary["peak_memory"] is None  # CUDA only


# --- the options and the flags --------------------------------------------------------------------------------------------
def test_train_lm_takes_the_target_and_the_schedule_length(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("to be or not to be, that is the question.\n" * 200, encoding="utf-8")
    run = train_lm(data=str(text), out=tmp_path / "run", steps=30, schedule_steps=400, stop_at_loss=100.0,
                   preset="char-small", overrides={"n_layer": 1, "n_head": 2, "n_embd": 32}, block_size=16,
                   batch_size=4, eval_every=10, eval_batches=1, ckpt_every=10, log_every=5, progress=False,
                   log=lambda line: None)
    assert run.summary["stopped_by"] == "target" and run.steps == 10  # any loss is <= 100: the first evaluation
    saved = json.loads((run.out / "run.json").read_text())["train_config"]
    assert saved["schedule_steps"] == 400 and saved["stop_at_loss"] == 100.0
    assert saved["warmup_steps"] == default_warmup(saved["warmup_steps"], 400)


def test_the_flags_reach_the_options_and_finetune_refuses_them(capsys):
    parser = build_parser()
    args = parser.parse_args(["train", "lm", "--stop-at-loss", "1.47", "--schedule-steps", "5000"])
    options = options_from(TrainLMOptions, args)
    assert (options.stop_at_loss, options.schedule_steps) == (1.47, 5000)
    args = parser.parse_args(["train", "mt", "--stop-at-loss", "3.1"])
    assert options_from(TrainMTOptions, args).stop_at_loss == 3.1
    from attnkit.api import FinetuneOptions

    args = parser.parse_args(["finetune", "--data", "x.txt", "--schedule-steps", "10"])
    with pytest.raises(ValueError, match="--schedule-steps is not an option of this command"):
        options_from(FinetuneOptions, args)
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "lm", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--stop-at-loss X" in shown and "--schedule-steps N" in shown and "does not stretch it" in shown
