"""What a checkpoint keeps for an exact resume beyond weights, optimizer and schedule: the fp16 gradient scaler's
state; and the one resume a run's warmup forbids (steps below it), refused by name.

fp16 autocast needs a GPU; torch's CPU autocast and ``GradScaler("cpu")`` accept float16 too, so the tests let the
trainer run it on the CPU (its device check patched out) to show the scaler's state surviving a resume.

Axis legend: B batch, T sequence length.
"""

from __future__ import annotations

import json
import shutil

import pytest

from attnkit.checkpoints.checkpoint import CheckpointError, read_checkpoint_state
from attnkit.training import device as device_module
from attnkit.training import trainer as trainer_module
from attnkit.training.config import TrainConfig, resolve_train_config
from attnkit.training.lm_task import LMTask
from attnkit.training.metrics import read_metrics
from attnkit.training.trainer import Trainer

FP16 = dict(steps=10, batch_size=4, block_size=8, lr=3e-2, min_lr=3e-3, warmup_steps=1, schedule="constant",
            eval_every=5, eval_batches=1, log_every=1, ckpt_every=5, keep_last=3, seed=3, autocast="fp16")


@pytest.fixture
def fp16_on_cpu(monkeypatch):
    for module in (trainer_module, device_module):
        monkeypatch.setattr(module, "check_autocast", lambda autocast, device: None)


def _fit(tmp_path, tiny_lm, token_streams, name, resume=False):
    cfg = TrainConfig(**FP16)
    task = LMTask(*token_streams, block_size=cfg.block_size, batch_size=cfg.batch_size, seed=1)
    trainer = Trainer(tiny_lm(0), task, cfg, tmp_path / name, model_config={"kind": "tiny"}, resume=resume,
                      progress=False, log=False)
    trainer.fit()
    return trainer


def test_an_fp16_resume_continues_with_the_saved_loss_scale(tmp_path, tiny_lm, token_streams, fp16_on_cpu):
    straight = _fit(tmp_path, tiny_lm, token_streams, "straight")
    # the run as it was after step 5: its step-5 checkpoint and nothing later
    cut = tmp_path / "cut"
    shutil.copytree(tmp_path / "straight", cut)
    for name in ("step_00000010", "best"):
        shutil.rmtree(cut / "checkpoints" / name)
    resumed = _fit(tmp_path, tiny_lm, token_streams, "cut", resume=True)
    losses = {name: {r["step"]: r["loss"] for r in read_metrics(tmp_path / name) if "loss" in r}
              for name in ("straight", "cut")}
    assert losses["cut"] == losses["straight"]  # a scale back at 2**16 skips updates after the resume
    assert resumed._scaler.state_dict() == straight._scaler.state_dict()
    saved = read_checkpoint_state(cut / "checkpoints" / "step_00000005")["grad_scaler"]
    assert saved["scale"] < 2.0 ** 16  # the first updates overflowed and lowered it: there was something to keep
    json.dumps(saved, allow_nan=False)


def test_a_checkpoint_without_scaler_state_still_resumes_and_a_bad_one_is_named(tmp_path, tiny_lm, token_streams,
                                                                               fp16_on_cpu):
    _fit(tmp_path, tiny_lm, token_streams, "run")
    state_file = tmp_path / "run" / "checkpoints" / "step_00000010" / "state.json"
    state = json.loads(state_file.read_text())
    del state["grad_scaler"]  # as written before the scaler was kept
    state_file.write_text(json.dumps(state))
    cfg = TrainConfig(**(FP16 | dict(steps=11)))
    task = LMTask(*token_streams, block_size=8, batch_size=4, seed=1)
    old = Trainer(tiny_lm(0), task, cfg, tmp_path / "run", model_config={"kind": "tiny"}, resume=True,
                  progress=False, log=False)
    assert old._scaler.get_scale() == 2.0 ** 16
    old._release_lock()
    state["grad_scaler"] = {"scale": "big"}
    state_file.write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match=r"'grad_scaler' must be .*got \{'scale': 'big'\}"):
        Trainer(tiny_lm(0), task, cfg, tmp_path / "run", model_config={"kind": "tiny"}, resume=True,
                progress=False, log=False)


def test_a_run_without_fp16_saves_no_scaler_state(tmp_path, tiny_lm, token_streams):
    cfg = TrainConfig(**(FP16 | dict(autocast=None, steps=5)))
    task = LMTask(*token_streams, block_size=8, batch_size=4, seed=1)
    Trainer(tiny_lm(0), task, cfg, tmp_path / "run", model_config={"kind": "tiny"}, progress=False,
            log=False).fit()
    assert "grad_scaler" not in read_checkpoint_state(tmp_path / "run" / "checkpoints" / "step_00000005")


def test_a_checkpoint_without_rng_states_is_refused_not_resumed_from_the_seed(tmp_path, tiny_lm, token_streams):
    """Was: the resumed run seeded its generators afresh, so its dropout masks (and losses) silently differed from
    those of the uninterrupted run."""
    cfg = TrainConfig(**(FP16 | dict(autocast=None, steps=5)))
    task = LMTask(*token_streams, block_size=8, batch_size=4, seed=1)
    Trainer(tiny_lm(0, dropout=0.1), task, cfg, tmp_path / "run", model_config={"kind": "tiny"}, progress=False,
            log=False).fit()
    state_file = tmp_path / "run" / "checkpoints" / "step_00000005" / "state.json"
    state = json.loads(state_file.read_text())
    del state["rng"]
    state_file.write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match=r"step_00000005/state.json lacks the RNG states \('rng'\)"):
        Trainer(tiny_lm(0, dropout=0.1), task, cfg.replace(steps=6), tmp_path / "run", model_config={"kind": "tiny"},
                resume=True, progress=False, log=False)


def test_resuming_a_time_limited_run_with_steps_below_its_warmup_names_the_warmup():
    recipe = dict(lr=1e-3, min_lr=1e-4, warmup_steps=50, schedule="cosine")
    saved = resolve_train_config(recipe, None, {"max_time": 1.0}).to_dict()
    assert saved["steps"] is None and saved["warmup_steps"] == 50
    with pytest.raises(ValueError, match=r"--resume: steps 30 is shorter than the run's warmup of 50 updates .*"
                                         r"resume with steps >= 50"):
        resolve_train_config(recipe, saved, {"steps": 30, "max_time": 1.0})
    assert resolve_train_config(recipe, saved, {"steps": 50, "max_time": 1.0}).warmup_steps == 50
    # a new run with such a warmup is still refused by the config, as before
    with pytest.raises(ValueError, match="warmup_steps must be <= steps = 30"):
        resolve_train_config(recipe, None, {"steps": 30, "warmup_steps": 50})
