"""The run option ``loss_chunks`` (``--loss-chunks K``) from Python and the command line: ``train_lm`` and
``finetune`` (full and LoRA) log the same losses with it as without, up to float rounding; a resumed run runs with
it as given now (off when not given); the flag reaches the options of every training command; bad values are
refused by name.

Axis legend: none (runs and files only).
"""

from __future__ import annotations

import pytest

from attnkit import api
from attnkit.checkpoints.checkpoint import latest_checkpoint, read_checkpoint_state
from attnkit.cli.flags import options_from
from attnkit.cli.main import build_parser

from helpers import run_losses

TINY_LM = dict(preset="char-small", overrides={"n_layer": 2, "n_head": 2, "n_embd": 32, "dropout": 0.2},
               block_size=16, batch_size=8, warmup_steps=1, schedule_steps=4, eval_every=2, eval_batches=1,
               ckpt_every=2, log_every=1, progress=False, device="cpu")
CLOSE = dict(rel=2e-5, abs=1e-6)


def quiet(line: str) -> None:
    pass


def test_train_lm_logs_the_same_losses_and_a_resume_takes_it_as_given(corpus, tmp_path, chunk_calls):
    api.train_lm(data=str(corpus), out=tmp_path / "plain", steps=4, log=quiet, **TINY_LM)
    assert chunk_calls == []
    api.train_lm(data=str(corpus), out=tmp_path / "chunked", steps=4, log=quiet, loss_chunks=3, **TINY_LM)
    assert len(chunk_calls) == 4 * 3
    assert run_losses(tmp_path / "chunked") == pytest.approx(run_losses(tmp_path / "plain"), **CLOSE)
    state = read_checkpoint_state(latest_checkpoint(tmp_path / "chunked" / "checkpoints"))
    assert state["train_config"]["loss_chunks"] == 3
    chunk_calls.clear()
    api.train_lm(out=tmp_path / "chunked", resume=True, steps=6, progress=False, log=quiet)
    assert chunk_calls == []  # as told now (off), not as the run was started (like --device)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_finetune_logs_the_same_losses_with_it(corpus, tmp_path, chunk_calls, lora):
    source = tmp_path / "source"
    api.train_lm(data=str(corpus), out=source, steps=2, log=quiet, **TINY_LM)
    flags = dict(source=str(source), data=str(corpus), steps=3, block_size=16, batch_size=4, eval_every=3,
                 eval_batches=1, log_every=1, overrides={"dropout": 0.2}, progress=False, log=quiet, device="cpu")
    if lora:
        flags |= dict(lora=True, lora_rank=2)
    api.finetune(out=tmp_path / "plain", **flags)
    api.finetune(out=tmp_path / "chunked", loss_chunks=2, **flags)
    assert len(chunk_calls) == 3 * 2
    assert run_losses(tmp_path / "chunked") == pytest.approx(run_losses(tmp_path / "plain"), **CLOSE)


@pytest.mark.parametrize("command, options", [(["train", "lm"], api.TrainLMOptions),
                                              (["train", "mt"], api.TrainMTOptions),
                                              (["finetune"], api.FinetuneOptions)], ids=["lm", "mt", "finetune"])
def test_the_flag_reaches_the_option(command, options):
    parser = build_parser()
    assert options_from(options, parser.parse_args([*command, "--loss-chunks", "4"])).loss_chunks == 4
    assert options_from(options, parser.parse_args(command)).loss_chunks is None


@pytest.mark.parametrize("bad", [1.5, "2", True])
def test_a_value_that_is_not_an_int_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=r"TrainLMOptions.loss_chunks must be an int or None"):
        api.TrainLMOptions(loss_chunks=bad)


@pytest.mark.parametrize("bad, match", [(-1, r"--loss-chunks must be an int >= 0, got -1"),
                                        (5000, r"--loss-chunks must be at most 4096 \(0 = the plain loss\), got 5000")])
def test_a_count_out_of_range_is_refused_by_its_flag_before_training(corpus, tmp_path, bad, match):
    with pytest.raises(ValueError, match=match):
        api.train_lm(data=str(corpus), out=tmp_path / "bad", steps=1, log=quiet, loss_chunks=bad, **TINY_LM)
    assert not (tmp_path / "bad").exists()
