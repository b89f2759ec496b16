"""SIGTERM to the torchrun launcher (what a scheduler sends): torchrun passes it to its two workers (gloo, CPU), both
stop at the same step, one checkpoint is written, the job says once how to resume (with torchrun and its flags),
each worker exits with 143, and the printed command, run under torchrun, ends where an uninterrupted two-process
run does, bit for bit (dropout 0: two processes sum their gradients in the same order every time).

The interrupted job runs ``preemption_child.py`` (the command line plus a record of each rank's stop); the
uninterrupted one and the resume run ``python -m torch.distributed.run ... -m attnkit train lm``.
"""

from __future__ import annotations

import json
import os
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

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("preemption_child.py")
STEPS = 60
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
FLAGS = ["--standalone", "--nproc_per_node=2"]
pytestmark = pytest.mark.slow  # end-to-end: torchrun jobs of the command line


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        env.pop(key, None)
    return env


def _args(corpus: Path, out: Path) -> list[str]:
    return ["train", "lm", "--data", str(corpus), "--out", str(out), "--preset", "char-small", "--set", "n_layer=1",
            "--set", "n_head=2", "--set", "n_embd=32", "--set", "dropout=0", "--block-size", "16", "--batch-size",
            "8", "--warmup-steps", "2", "--eval-every", "10", "--eval-batches", "2", "--ckpt-every", "10",
            "--log-every", "1", "--steps", str(STEPS), "--no-progress"]


def _steps_logged(out: Path) -> int:
    if not (out / "metrics.jsonl").is_file():
        return 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.endswith("}")]
    return sum("loss" in r for r in rows)


def _final(out: Path) -> tuple[list[float], dict[str, torch.Tensor]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    weights = load_file(str(out / "checkpoints" / f"step_{STEPS:08d}" / "model.safetensors"))
    return [(r["step"], r["loss"]) for r in rows if "loss" in r], weights


def _stopped_job(corpus: Path, out: Path, record: Path, targets) -> tuple[str, dict]:
    """Start the two-process job, SIGTERM the processes ``targets(launcher)`` once five steps are logged; check
    that both ranks stopped at one step with a checkpoint there and exited with 143. Returns the launcher's
    stderr and the stop."""
    launcher = subprocess.Popen([*TORCHRUN, *FLAGS, str(CHILD), str(record), "--", *_args(corpus, out)], env=_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while _steps_logged(out) < 5:
            assert launcher.poll() is None, launcher.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the job logged no fifth step in 120 s"
            time.sleep(0.002)
        for pid in targets(launcher):
            os.kill(pid, signal.SIGTERM)
        err = launcher.communicate(timeout=240)[1]
    finally:
        launcher.kill()
    ranks = [json.loads((record / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["exit_code"] for r in ranks] == [143, 143], err[-3000:]
    stops = [r["stop"] for r in ranks]
    assert stops[0] == stops[1] and stops[0]["signal"] == "SIGTERM" and not stops[0]["immediate"]
    step = stops[0]["step"]
    assert 5 <= step < STEPS and Path(stops[0]["checkpoint"]) == out / "checkpoints" / f"step_{step:08d}"
    assert _steps_logged(out) == step
    return err, stops[0]


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "text.txt"
    path.write_text("".join(f"line {i % 37} of {i % 11} words and {i % 5} more\n" for i in range(600)))
    return path


def test_sigterm_to_the_launcher_stops_both_ranks_at_one_step_and_the_printed_resume_is_exact(corpus, tmp_path):
    straight, out, record = tmp_path / "straight", tmp_path / "stopped", tmp_path / "record"
    record.mkdir()
    done = subprocess.run([*TORCHRUN, *FLAGS, "-m", "attnkit", *_args(corpus, straight)], env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    err, stop = _stopped_job(corpus, out, record, lambda launcher: [launcher.pid])
    step = stop["step"]
    said = re.findall(r"attnkit: SIGTERM: stopped after step (\d+); checkpoint (\S+); resume with: (.+)", err)
    assert len(said) == 1 and said[0][:2] == (str(step), stop["checkpoint"]), err[-3000:]
    command = shlex.split(said[0][2])
    assert command == ["torchrun", *FLAGS, "-m", "attnkit", "train", "lm", "--out", str(out), "--resume"]

    resumed = subprocess.run([*TORCHRUN, *command[1:], "--no-progress"], env=_env(), capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (losses, weights), (losses_s, weights_s) = _final(out), _final(straight)
    assert losses == losses_s
    assert weights.keys() == weights_s.keys() and all(torch.equal(weights[k], weights_s[k]) for k in weights)


def test_sigterm_to_one_worker_stops_the_other_at_the_same_step(corpus, tmp_path):
    """Only rank 1 receives the signal: rank 0 learns it at the next step boundary and stops there too."""
    record = tmp_path / "record"
    record.mkdir()
    _stopped_job(corpus, tmp_path / "stopped", record, lambda launcher: [_pid(record, 1)])


def test_sigterm_to_every_process_of_the_job_still_stops_with_a_checkpoint(corpus, tmp_path):
    """What SLURM does to a job step: the launcher and both workers receive SIGTERM, and the launcher passes its
    copy on. A worker's second SIGTERM, milliseconds after the first, is a copy, not a "stop at once"."""
    record = tmp_path / "record"
    record.mkdir()
    _stopped_job(corpus, tmp_path / "stopped", record,
                 lambda launcher: [_pid(record, 0), _pid(record, 1), launcher.pid])


def _pid(record: Path, rank: int) -> int:
    return int((record / f"rank{rank}.pid").read_text())
