"""SIGINT / SIGTERM from the command line: ``attnkit train lm`` stops after the update under way with a checkpoint,
says how to resume, exits 130 / 143, and the printed resume command ends where an uninterrupted run does, bit for
bit. A second signal during the (slowed) checkpoint write exits at once and the run folder still resumes.
``train mt`` and ``finetune`` stop with a checkpoint too (in-process, the signal sent at a known update).

The runs: a tiny character GPT with dropout on a generated corpus; the uninterrupted runs and the resumes run
in-process (``attnkit.cli.main.main``, one thread), the signalled ones as ``python -m attnkit`` subprocesses (one
thread), the slow write through ``preemption_child.py``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnkit.checkpoints.checkpoint import read_checkpoint_state
from attnkit.cli.main import main
from attnkit.training.preemption import REPEAT_WINDOW_S
from attnkit.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("preemption_child.py")
STEPS = 120
LM = ["--preset", "char-small", "--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=32", "--set",
      "dropout=0.1", "--block-size", "16", "--batch-size", "8", "--warmup-steps", "2", "--eval-every", "10",
      "--eval-batches", "2", "--ckpt-every", "10", "--log-every", "1", "--no-progress"]
STOPPED = re.compile(r"attnkit: (SIG\w+): stopped after step (\d+); checkpoint (\S+); resume with: (.+)")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """About 15 kB of lines of seeded random words."""
    rng = random.Random(7)
    words = "the cat sat on a mat and saw one red dog run by his old house at night".split()
    lines = (" ".join(rng.choice(words) for _ in range(rng.randint(3, 10))) for _ in range(500))
    path = tmp_path_factory.mktemp("corpus") / "lines.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def straight(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("straight") / "run"
    assert main(["train", "lm", "--data", str(corpus), "--out", str(out), *LM, "--steps", str(STEPS)]) == 0
    return out


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


def _train_losses(out: Path) -> list[tuple[int, float]]:
    if not (out / "metrics.jsonl").is_file():
        return []
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.endswith("}")]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


def _weights(out: Path, step: int = STEPS) -> dict[str, torch.Tensor]:
    return load_file(str(out / "checkpoints" / f"step_{step:08d}" / "model.safetensors"))


def _wait_for(proc: subprocess.Popen, ready, what: str) -> None:
    deadline = time.monotonic() + 120
    while not ready():
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, f"no {what} in 120 s"
        time.sleep(0.002)


def _resume(command: str, out: Path) -> None:
    """Run the printed resume command (in-process) and check it names this run."""
    words = shlex.split(command)
    assert words[0] == "attnkit" and words[-3:] == ["--out", str(out), "--resume"], command
    assert main([*words[1:], "--no-progress"]) == 0


def _assert_same_run(out: Path, straight: Path) -> None:
    assert _train_losses(out) == _train_losses(straight)  # every step once, the same floats
    wa, wb = _weights(out), _weights(straight)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_train_lm_with_a_checkpoint_and_the_printed_resume_is_exact(corpus, straight, tmp_path, sig):
    out = tmp_path / "stopped"
    proc = subprocess.Popen([sys.executable, "-m", "attnkit", "train", "lm", "--data", str(corpus), "--out", str(out),
                             *LM, "--steps", str(STEPS)], env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(proc, lambda: len(_train_losses(out)) >= 5, "fifth step")
        os.kill(proc.pid, sig)
        err = proc.communicate(timeout=120)[1]
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err[-2000:]
    assert f"attnkit: {sig.name}: stopping after the current update" in err
    found = STOPPED.search(err)
    assert found, err[-2000:]
    name, step, ckpt, command = found.groups()
    step = int(step)
    assert name == sig.name and 5 <= step < STEPS and Path(ckpt) == out / "checkpoints" / f"step_{step:08d}"
    assert read_checkpoint_state(ckpt)["step"] == step and _train_losses(out)[-1][0] == step
    assert not (out / "summary.json").exists()
    _resume(command, out)
    _assert_same_run(out, straight)


def test_a_second_signal_during_the_checkpoint_write_exits_at_once_and_the_run_resumes(corpus, straight, tmp_path):
    """The child stops itself with SIGTERM at update 13 (checkpoints every 10); the write of step 13's checkpoint
    then pauses, and the second SIGTERM arrives inside it."""
    out, record = tmp_path / "stopped", tmp_path / "record"
    record.mkdir()
    proc = subprocess.Popen([sys.executable, str(CHILD), str(record), "--slow-save", "--signal-at", "13", "--",
                             "train", "lm", "--data", str(corpus), "--out", str(out), *LM, "--steps", str(STEPS)],
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(proc, (record / "saving").exists, "checkpoint write")
        time.sleep(REPEAT_WINDOW_S)  # a repeat sooner after the first signal would count as a copy of it
        os.kill(proc.pid, signal.SIGTERM)
        err = proc.communicate(timeout=120)[1]  # the write sleeps for 600 s unless the signal stops it
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-2000:]
    last = out / "checkpoints" / "step_00000010"
    assert f"attnkit: SIGTERM again: stopped at once after step 13; last checkpoint {last}; resume with: " in err
    assert json.loads((record / "rank0.json").read_text())["stop"]["immediate"] is True
    assert (out / "checkpoints" / "step_00000013.tmp").is_dir()
    assert not (out / "checkpoints" / "step_00000013").exists()
    _resume(err.rsplit("resume with: ", 1)[1].strip(), out)
    assert not (out / "checkpoints" / "step_00000013.tmp").exists()
    _assert_same_run(out, straight)


@pytest.fixture
def stop_at(monkeypatch):
    """``stop_at(update)``: SIGTERM to this process at the end of update ``update`` (once)."""

    def arm(update: int) -> None:
        original, sent = Trainer._train_step, []

        def _train_step(self, train_model):
            original(self, train_model)
            if self.step == update and not sent:
                sent.append(update)
                os.kill(os.getpid(), signal.SIGTERM)

        monkeypatch.setattr(Trainer, "_train_step", _train_step)

    return arm


def test_train_mt_stops_with_a_checkpoint_and_resumes_exactly(make_copy_task, tmp_path, stop_at, capsys):
    data = make_copy_task(tmp_path / "data", seed=1, sizes=(("train", 100), ("valid", 8)), letters="abcde",
                          lengths=(2, 5))
    args = ["--data", str(data), "--preset", "transformer-small", "--set", "d_model=32", "--set", "num_heads=2",
            "--set", "num_encoder_layers=1", "--set", "num_decoder_layers=1", "--set", "dim_feedforward=64",
            "--vocab-size", "280", "--max-tokens", "96", "--max-len", "16", "--steps", "8", "--warmup-steps", "2",
            "--eval-every", "4", "--eval-batches", "1", "--ckpt-every", "4", "--log-every", "1", "--no-bleu",
            "--no-progress"]
    straight, out = tmp_path / "straight", tmp_path / "stopped"
    assert main(["train", "mt", "--out", str(straight), *args]) == 0
    stop_at(6)
    capsys.readouterr()
    assert main(["train", "mt", "--out", str(out), *args]) == 143
    err = capsys.readouterr().err
    assert (f"attnkit: SIGTERM: stopped after step 6; checkpoint {out / 'checkpoints' / 'step_00000006'}; resume "
            f"with: attnkit train mt --out {out} --resume") in err
    _resume(err.rsplit("resume with: ", 1)[1].strip(), out)
    assert _train_losses(out) == _train_losses(straight)
    wa, wb = _weights(out, 8), _weights(straight, 8)
    assert all(torch.equal(wa[k], wb[k]) for k in wb)


def test_lora_finetune_stops_with_a_checkpoint_merges_best_and_resumes_exactly(corpus, tmp_path, stop_at, capsys):
    base = tmp_path / "base"
    assert main(["train", "lm", "--data", str(corpus), "--out", str(base), *LM, "--steps", "2"]) == 0
    args = ["--from", str(base), "--data", str(corpus), "--lora", "--lora-rank", "2", "--steps", "6",
            "--batch-size", "4", "--block-size", "16", "--warmup-steps", "1", "--eval-every", "2",
            "--eval-batches", "1", "--ckpt-every", "4", "--log-every", "1", "--no-progress"]
    straight, out = tmp_path / "straight", tmp_path / "stopped"
    assert main(["finetune", "--out", str(straight), *args]) == 0
    stop_at(3)
    capsys.readouterr()
    assert main(["finetune", "--out", str(out), *args]) == 143
    err = capsys.readouterr().err
    assert (f"attnkit: SIGTERM: stopped after step 3; checkpoint {out / 'checkpoints' / 'step_00000003'}; resume "
            f"with: attnkit finetune --out {out} --resume") in err
    assert read_checkpoint_state(out / "checkpoints" / "best")["extra"]["lora"]["merged"] is True  # on the way out
    assert read_checkpoint_state(out / "checkpoints" / "step_00000003")["extra"]["lora"]["merged"] is False
    _resume(err.rsplit("resume with: ", 1)[1].strip(), out)
    assert _train_losses(out) == _train_losses(straight)
    wa, wb = _weights(out, 6), _weights(straight, 6)
    assert all(torch.equal(wa[k], wb[k]) for k in wb)
