"""The run option ``activation_checkpointing`` (``--activation-checkpointing``) from Python and the command line:
``train_lm`` and ``finetune`` (full and LoRA) log the same losses with it as without; a resumed run runs with it as
given now (off when not given, whatever the run was started with); the flag reaches the options of every training
command; a value that is not a bool is refused by name.

Axis legend: none (runs and files only).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnkit import api
from attnkit.checkpoints.checkpoint import latest_checkpoint, read_checkpoint_state
from attnkit.cli.flags import options_from
from attnkit.cli.main import build_parser

from helpers import run_losses

TINY_LM = dict(preset="char-small", overrides={"n_layer": 2, "n_head": 2, "n_embd": 32, "dropout": 0.2},
               block_size=16, batch_size=8, warmup_steps=1, schedule_steps=6, eval_every=2, eval_batches=1,
               ckpt_every=2, log_every=1, progress=False, device="cpu")


def quiet(line: str) -> None:
    pass


@pytest.fixture(scope="module")
def source(corpus, tmp_path_factory) -> Path:
    """A 2-step language-model run to fine-tune."""
    out = tmp_path_factory.mktemp("lm") / "run"
    api.train_lm(data=str(corpus), out=out, steps=2, log=quiet, **TINY_LM)
    return out


def test_train_lm_logs_the_same_losses_with_it_and_a_resume_may_switch_it(corpus, tmp_path, checkpoint_calls):
    api.train_lm(data=str(corpus), out=tmp_path / "plain", steps=6, log=quiet, **TINY_LM)
    assert checkpoint_calls == []
    api.train_lm(data=str(corpus), out=tmp_path / "ckpt", steps=6, log=quiet, activation_checkpointing=True,
                 **TINY_LM)
    assert len(checkpoint_calls) == 6 * 2  # 2 blocks in each of the 6 updates
    assert len(run_losses(tmp_path / "plain")) == 6 + 3 and run_losses(tmp_path / "ckpt") == run_losses(tmp_path / "plain")
    state = read_checkpoint_state(latest_checkpoint(tmp_path / "ckpt" / "checkpoints"))
    assert state["train_config"]["activation_checkpointing"] is True  # a record of how it ran; nothing in the model

    run = tmp_path / "toggled"  # on for 2 updates, off when not given on resume, then on again
    api.train_lm(data=str(corpus), out=run, steps=2, log=quiet, activation_checkpointing=True, **TINY_LM)
    checkpoint_calls.clear()
    api.train_lm(out=run, resume=True, steps=4, progress=False, log=quiet)
    assert checkpoint_calls == []  # as told now, not as the run was started (like --device)
    api.train_lm(out=run, resume=True, steps=6, activation_checkpointing=True, progress=False, log=quiet)
    assert len(checkpoint_calls) == 2 * 2
    assert run_losses(run) == run_losses(tmp_path / "plain")


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_finetune_logs_the_same_losses_with_it(source, corpus, tmp_path, checkpoint_calls, lora):
    flags = dict(source=str(source), data=str(corpus), steps=3, block_size=16, batch_size=4, eval_every=3,
                 eval_batches=1, log_every=1, overrides={"dropout": 0.2}, progress=False, log=quiet, device="cpu")
    if lora:
        flags |= dict(lora=True, lora_rank=2)
    api.finetune(out=tmp_path / "plain", **flags)
    assert checkpoint_calls == []
    api.finetune(out=tmp_path / "ckpt", activation_checkpointing=True, **flags)
    assert len(checkpoint_calls) == 3 * 2
    assert len(run_losses(tmp_path / "plain")) == 3 + 1 and run_losses(tmp_path / "ckpt") == run_losses(tmp_path / "plain")


@pytest.mark.parametrize("command, options", [(["train", "lm"], api.TrainLMOptions),
                                              (["train", "mt"], api.TrainMTOptions),
                                              (["finetune"], api.FinetuneOptions)], ids=["lm", "mt", "finetune"])
def test_the_flag_reaches_the_option(command, options):
    parser = build_parser()
    assert options_from(options, parser.parse_args([*command, "--activation-checkpointing"])).activation_checkpointing
    assert options_from(options, parser.parse_args(command)).activation_checkpointing is None


@pytest.mark.parametrize("bad", [1, "yes"])
def test_a_value_that_is_not_a_bool_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=rf"TrainLMOptions.activation_checkpointing must be True or False or None, "
                                         rf"got {bad!r}"):
        api.TrainLMOptions(activation_checkpointing=bad)
