"""Exact resume: SIGKILL a training run mid-way, resume it, and get the uninterrupted run's losses bit for bit.

A small script (written to tmp_path) trains a tiny GPT with dropout (so the RNG state matters) and gradient
accumulation on synthetic text. It runs three times:

* "killed":   a subprocess that blocks before update 26 (after checkpoint 20, with steps 21..25 already
              logged); the test SIGKILLs it there and plants a half-written ``.tmp`` checkpoint folder;
* "straight": meanwhile, the same 40 steps without interruption (in the test process, with the same
              thread count and determinism settings, to save one torch start-up on a busy machine);
* "resumed":  a subprocess that continues "killed" from its latest checkpoint to step 40.

The per-step training losses (logged as exact floats), the evaluation results and the final weights of
"resumed" must equal those of "straight" exactly, and the log must not hold any step twice.
"""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

import attnkit
from attnkit.checkpoints.checkpoint import latest_checkpoint
from attnkit.training.metrics import read_metrics

SCRIPT = r'''
import sys, time
from pathlib import Path

import torch
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from attnkit.training import LMTask, TrainConfig, Trainer, seed_everything

out_dir, mode, hang_at, marker = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
GRAD_ACCUM = 2


class HangingTrainer(Trainer):
    """Blocks before optimizer update `hang_at + 1` (in the main thread, after update `hang_at` was logged; the
    batches themselves are built one update ahead in another thread), so the test can kill the run there."""

    def _update(self, train_model):
        if hang_at >= 0 and self.step == hang_at:
            Path(marker).write_text(str(self.step))
            time.sleep(600)
        return super()._update(train_model)


# synthetic text: a repeating pattern with 20% noise (something to learn, nothing to download)
g = torch.Generator().manual_seed(0)
tokens = torch.arange(4000) % 23
noise = torch.randint(0, 40, (4000,), generator=g)
tokens = torch.where(torch.rand(4000, generator=g) < 0.2, noise, tokens)

gcfg = GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.1)
cfg = TrainConfig(steps=40, batch_size=4, block_size=16, grad_accum=GRAD_ACCUM, lr=3e-3, min_lr=3e-4,
                  warmup_steps=5, eval_every=15, eval_batches=2, log_every=1, ckpt_every=10, keep_last=2, seed=5)
seed_everything(cfg.seed)
model = GPT(gcfg)
task = LMTask(tokens[:3500], tokens[3500:], cfg.block_size, cfg.batch_size, seed=11)
HangingTrainer(model, task, cfg, out_dir, model_config=gcfg, extra={"tokenizer": "synthetic"},
        resume=(mode == "resume"), progress=False).fit()
'''


def _launch(script: Path, out_dir: Path, mode: str, hang_at: int, marker: Path, log: Path) -> subprocess.Popen:
    env = dict(os.environ)
    repo = str(Path(attnkit.__file__).resolve().parents[1])
    env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen([sys.executable, str(script), str(out_dir), mode, str(hang_at), str(marker)],
                            env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))


def _wait(proc: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, f"training script failed ({proc.returncode}):\n{log.read_text()[-3000:]}"


def _run_in_process(script: Path, out_dir: Path) -> None:
    """Run the script here (argv patched); restores the global torch settings it changes."""
    argv, threads = sys.argv, torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    sys.argv = [str(script), str(out_dir), "fresh", "-1", "unused"]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = argv
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def test_sigkill_then_resume_equals_uninterrupted_run_bit_for_bit(tmp_path):
    script = tmp_path / "train_tiny_gpt.py"
    script.write_text(SCRIPT)
    killed_dir, straight_dir = tmp_path / "killed", tmp_path / "straight"
    marker = tmp_path / "hanging.txt"

    killed = _launch(script, killed_dir, "fresh", 25, marker, tmp_path / "killed.log")
    try:
        _run_in_process(script, straight_dir)
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert killed.poll() is None, f"run ended early:\n{(tmp_path / 'killed.log').read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the run never reached step 25"
            time.sleep(0.05)
        # the metrics show steps past the last checkpoint: the kill loses work that resume must redo
        logged = [r["step"] for r in read_metrics(killed_dir) if "loss" in r]
        assert max(logged) == 25
        assert latest_checkpoint(killed_dir / "checkpoints").name == "step_00000020"
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
        assert killed.returncode == -signal.SIGKILL
    finally:
        if killed.poll() is None:
            killed.kill()

    # a crash in the middle of a save would leave this behind; resume must ignore and remove it
    half = killed_dir / "checkpoints" / "step_00000030.tmp"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"\x00" * 100)

    resumed = _launch(script, killed_dir, "resume", -1, tmp_path / "unused.txt", tmp_path / "resumed.log")
    _wait(resumed, tmp_path / "resumed.log")
    assert not half.exists()

    rows_resumed, rows_straight = read_metrics(killed_dir), read_metrics(straight_dir)
    train_resumed = [(r["step"], r["loss"]) for r in rows_resumed if "loss" in r]
    train_straight = [(r["step"], r["loss"]) for r in rows_straight if "loss" in r]
    assert [s for s, _ in train_resumed] == list(range(1, 41))  # no duplicated or missing steps
    assert train_resumed == train_straight  # exact float equality, step by step
    assert len({loss for _, loss in train_straight}) > 30  # (the losses really change from step to step)

    evals_resumed = [(r["step"], r["valid_loss"]) for r in rows_resumed if "valid_loss" in r]
    evals_straight = [(r["step"], r["valid_loss"]) for r in rows_straight if "valid_loss" in r]
    assert [s for s, _ in evals_straight] == [15, 30, 40]
    assert evals_resumed == evals_straight

    w_resumed = load_file(str(killed_dir / "checkpoints" / "step_00000040" / "model.safetensors"))
    w_straight = load_file(str(straight_dir / "checkpoints" / "step_00000040" / "model.safetensors"))
    assert w_resumed.keys() == w_straight.keys()
    assert all(torch.equal(w_resumed[k], w_straight[k]) for k in w_straight)
    assert sorted(p.name for p in (killed_dir / "checkpoints").iterdir()) == \
        ["best", "step_00000030", "step_00000040"]
