"""SIGINT / SIGTERM during ``Trainer.fit``: finish the update, checkpoint at that step, raise ``Interrupted``; resume
is exact. In-process: the test process sends itself the signal from inside an update (or a checkpoint write), so
the step it arrives at is known. Also the handlers' own rules and the resume command of ``attnkit.api``.

The command line, a second signal during a slow checkpoint write, ``train mt`` and ``finetune`` are in
test_preemption_cli.py; torchrun in test_preemption_torchrun.py.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest
import torch
from safetensors.torch import load_file

from attnkit.api import interruption
from attnkit.api.interruption import resume_command
from attnkit.checkpoints import checkpoint
from attnkit.training import LMTask, TrainConfig, Trainer
from attnkit.training.metrics import read_metrics
from attnkit.training import preemption
from attnkit.training.preemption import Interrupted, StopOnSignal

STEPS = 12


@pytest.fixture
def trainer(tiny_lm, token_streams):
    """``trainer(out, resume=False)``: a tiny LM with dropout and gradient accumulation (RNG and optimizer state
    matter), evaluated and checkpointed every 4 steps."""
    cfg = TrainConfig(steps=STEPS, batch_size=4, block_size=8, grad_accum=2, lr=3e-3, min_lr=3e-4, warmup_steps=2,
                      eval_every=4, eval_batches=1, log_every=1, ckpt_every=4, keep_last=3, seed=5)

    def make(out, resume: bool = False) -> Trainer:
        task = LMTask(*token_streams, block_size=cfg.block_size, batch_size=cfg.batch_size, seed=11)
        return Trainer(tiny_lm(3, dropout=0.1), task, cfg, out, model_config={"kind": "tiny"}, resume=resume,
                       progress=False, log=False)

    return make


@pytest.fixture
def straight(tmp_path, trainer):
    out = tmp_path / "straight"
    trainer(out).fit()
    return out


@pytest.fixture
def signal_at(monkeypatch):
    """``signal_at(sig, update)``: this process receives ``sig`` when update ``update`` starts (once)."""

    def arm(sig: int, update: int) -> None:
        original = Trainer._update
        sent = []

        def _update(self, train_model):
            if self.step + 1 == update and not sent:
                sent.append(sig)
                os.kill(os.getpid(), sig)
            return original(self, train_model)

        monkeypatch.setattr(Trainer, "_update", _update)

    return arm


def _losses(out) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in read_metrics(out) if "loss" in r]


def _assert_same_weights(a, b, step: int = STEPS) -> None:
    name = f"step_{step:08d}"
    wa = load_file(str(a / "checkpoints" / name / "model.safetensors"))
    wb = load_file(str(b / "checkpoints" / name / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("sig, update", [(signal.SIGINT, 6), (signal.SIGTERM, 8)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_after_the_update_with_a_checkpoint_and_the_resume_is_exact(tmp_path, straight, trainer,
                                                                                    signal_at, sig, update, capfd):
    out = tmp_path / "stopped"
    before = signal.getsignal(sig)
    signal_at(sig, update)
    with pytest.raises(Interrupted) as caught:
        trainer(out).fit()
    stop = caught.value
    assert (stop.signal, stop.step, stop.immediate) == (sig, update, False)
    assert stop.exit_code == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig]
    assert stop.checkpoint == out / "checkpoints" / f"step_{update:08d}"
    assert isinstance(stop, KeyboardInterrupt)
    assert signal.getsignal(sig) == before  # the handlers of fit() are gone
    assert "stopping after the current update" in capfd.readouterr().err
    # a checkpoint at the step, the metrics tables written; no evaluation added, no summary
    assert (stop.checkpoint / "model.safetensors").is_file()
    assert _losses(out)[-1][0] == update
    assert f"\n{update}," in (out / "metrics.csv").read_text()
    assert [r["step"] for r in read_metrics(out) if "valid_loss" in r] == [s for s in (4, 8) if s <= update]
    assert not (out / "summary.json").exists()

    summary = trainer(out, resume=True).fit()
    assert summary["steps"] == STEPS and summary["resumed_from"] == str(stop.checkpoint)
    assert _losses(out) == _losses(straight)
    _assert_same_weights(out, straight)


def test_a_stopped_resume_leaves_no_summary_of_the_segment_before(tmp_path, tiny_lm, token_streams, signal_at):
    """The summary.json of the finished first segment stayed: it said the run had stopped at step 4 by "steps"
    while its checkpoints and metrics went on to step 6."""
    out = tmp_path / "run"

    def make(steps: int, resume: bool) -> Trainer:
        cfg = TrainConfig(steps=steps, schedule_steps=8, batch_size=4, block_size=8, lr=3e-3, warmup_steps=1,
                          eval_every=4, eval_batches=1, log_every=1, ckpt_every=4, seed=5)
        task = LMTask(*token_streams, block_size=cfg.block_size, batch_size=cfg.batch_size, seed=11)
        return Trainer(tiny_lm(3), task, cfg, out, model_config={"kind": "tiny"}, resume=resume, progress=False,
                       log=False)

    make(4, False).fit()
    assert json.loads((out / "summary.json").read_text())["steps"] == 4
    signal_at(signal.SIGTERM, 6)
    with pytest.raises(Interrupted) as caught:
        make(8, True).fit()
    assert caught.value.step == 6 and _losses(out)[-1][0] == 6
    assert not (out / "summary.json").exists()
    assert make(8, True).fit()["steps"] == json.loads((out / "summary.json").read_text())["steps"] == 8


def test_a_second_signal_stops_at_once_inside_the_checkpoint_write(tmp_path, straight, trainer, signal_at,
                                                                   monkeypatch):
    """The second SIGTERM arrives while the stop's checkpoint is being written: the write is abandoned as a .tmp
    folder, the last published checkpoint is reported, and the resume from it (which removes the .tmp) is exact.
    (It arrives milliseconds after the first: no window for copies here.)"""
    out = tmp_path / "stopped"
    monkeypatch.setattr(preemption, "REPEAT_WINDOW_S", 0.0)
    signal_at(signal.SIGTERM, 6)
    original_fsync = checkpoint.fsync_file

    def fsync_file(path):
        original_fsync(path)
        if "step_00000006.tmp" in str(path):
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(checkpoint, "fsync_file", fsync_file)
    with pytest.raises(Interrupted) as caught:
        trainer(out).fit()
    stop = caught.value
    assert stop.immediate and stop.step == 6 and stop.exit_code == 143
    assert stop.checkpoint == out / "checkpoints" / "step_00000004"
    assert "again: stopped at once after step 6; last checkpoint" in str(stop)
    assert (out / "checkpoints" / "step_00000006.tmp").is_dir() and not (out / "checkpoints" / "step_00000006").exists()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

    monkeypatch.setattr(checkpoint, "fsync_file", original_fsync)
    trainer(out, resume=True).fit()
    assert not (out / "checkpoints" / "step_00000006.tmp").exists()
    assert _losses(out) == _losses(straight)
    _assert_same_weights(out, straight)


def test_a_signal_during_the_final_evaluation_is_raised_after_the_run_ends(tmp_path, trainer, monkeypatch):
    out = tmp_path / "run"
    original = Trainer._finish_fit

    def _finish_fit(self):
        os.kill(os.getpid(), signal.SIGINT)
        return original(self)

    monkeypatch.setattr(Trainer, "_finish_fit", _finish_fit)
    with pytest.raises(Interrupted) as caught:
        trainer(out).fit()
    assert caught.value.step == STEPS and not caught.value.immediate
    assert (out / "summary.json").is_file()  # the run itself was complete


def test_stop_on_signal_records_the_first_raises_on_the_second_and_restores_the_handlers(capfd):
    """A repeat within the window is a copy of the first signal (a launcher passing on what the scheduler also
    sent); one after it stops at once."""
    before = signal.getsignal(signal.SIGTERM)
    now = [100.0]
    guard = StopOnSignal(announce=True, repeat_window_s=1.0, clock=lambda: now[0])
    with pytest.raises(Interrupted) as caught:
        with guard:
            assert guard.requested is None
            os.kill(os.getpid(), signal.SIGTERM)
            assert guard.requested == signal.SIGTERM
            assert signal.getsignal(signal.SIGINT) == guard._handle
            now[0] += 0.5
            os.kill(os.getpid(), signal.SIGTERM)  # a copy: nothing happens
            now[0] += 0.5
            os.kill(os.getpid(), signal.SIGINT)
            pytest.fail("the second signal did not stop at once")
    assert caught.value.immediate and caught.value.signal == signal.SIGINT and caught.value.exit_code == 130
    assert signal.getsignal(signal.SIGTERM) == before
    assert capfd.readouterr().err.count("attnkit: SIGTERM: stopping after the current update") == 1
    with StopOnSignal(announce=False) as again:  # entered again: a fresh request
        assert again.requested is None


def test_an_ignored_signal_stays_ignored_and_other_threads_change_nothing():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopOnSignal() as guard:
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            assert guard.requested is None
    finally:
        signal.signal(signal.SIGINT, previous)

    seen = []

    def in_a_thread():
        with StopOnSignal():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == [before]


def test_interrupted_checks_its_signal_and_words_its_message():
    with pytest.raises(ValueError, match="SIGINT .* or SIGTERM .*, got 9"):
        Interrupted(9)
    stop = Interrupted(signal.SIGTERM, step=1234, checkpoint="runs/x/checkpoints/step_00001234",
                       resume_command="attnkit train lm --out runs/x --resume")
    assert str(stop) == ("SIGTERM: stopped after step 1234; checkpoint runs/x/checkpoints/step_00001234; resume with: "
                         "attnkit train lm --out runs/x --resume")
    assert str(Interrupted(signal.SIGINT, step=0, immediate=True)) == "SIGINT again: stopped at once after step 0; " \
                                                                      "no checkpoint yet"


def test_the_resume_command_names_the_command_and_torchrun_with_its_flags(monkeypatch):
    for key in ("TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert resume_command("train lm", "runs/my run") == "attnkit train lm --out 'runs/my run' --resume"

    # under torchrun: the launcher's flags, read from its command line (python -m or the torchrun script)
    own = ["/src/attnkit/__main__.py", "train", "mt", "--out", "r"]
    parent = ["/venv/bin/python", "/venv/bin/torchrun", "--nnodes=2", "--node-rank", "0", "-m", "attnkit", *own[1:]]
    assert interruption._launcher_flags(parent, own) == ["--nnodes=2", "--node-rank", "0"]
    parent = ["python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "child.py", "-x"]
    assert interruption._launcher_flags(parent, ["child.py", "-x"]) == ["--standalone", "--nproc_per_node=2"]
    assert interruption._launcher_flags(["bash", "-c", "x"], own) is None  # not started by torchrun

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("GROUP_WORLD_SIZE", "1")
    monkeypatch.setattr(interruption, "_parent_command", lambda: [])  # unreadable: from the environment
    assert resume_command("finetune", "r") == "torchrun --standalone --nproc_per_node=2 -m attnkit finetune --out r " \
                                              "--resume"
    monkeypatch.setenv("GROUP_WORLD_SIZE", "3")
    assert resume_command("train lm", "r").startswith("torchrun --nnodes=3 --nproc_per_node=2 -m attnkit train lm")


def test_a_resumed_run_keeps_the_same_step_checkpoints_as_the_uninterrupted_one(tmp_path, straight, trainer,
                                                                                   signal_at):
    """The checkpoint a signal wrote off the ``ckpt_every`` cadence (step 6) is dropped once a later one is written:
    it used to count as one of ``keep_last`` and push out step 4, so ``--average-last 3`` averaged steps 6, 8, 12 of
    the resumed run but 4, 8, 12 of the uninterrupted one."""
    out = tmp_path / "stopped"
    signal_at(signal.SIGTERM, 6)
    with pytest.raises(Interrupted):
        trainer(out).fit()
    assert (out / "checkpoints" / "step_00000006").is_dir()  # kept while it is the newest: the resume needs it
    trainer(out, resume=True).fit()
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == sorted(p.name for p in (straight / "checkpoints").iterdir())
    assert names == ["best", "step_00000004", "step_00000008", "step_00000012"]
    for step in (4, 8):
        _assert_same_weights(out, straight, step)
