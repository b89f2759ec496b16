"""kill -9 at random moments (checkpoint writes included), resume each time, and end bit-exact; one process per folder.

``kill_resume_child.py`` trains a tiny GPT (dropout and gradient accumulation, so RNG and optimizer state
matter) for 30 steps with a checkpoint every 3. The test kills it 8 times: 5 times from inside at a
randomly drawn call of a hook (before an optimizer update, after a tensor file of a checkpoint, while
writing its state.json, at the rename that publishes it) and 3 times from outside with SIGKILL after a
random number of logged steps plus a random delay. After every kill the run folder must be readable
(run.json, metrics, every published checkpoint loads) and ``resume`` continues; the last resume runs to
the end. Losses per step, evaluations and final weights must equal an uninterrupted run's exactly (CPU,
one thread, deterministic algorithms: bit for bit, no tolerance).

Children start from a forkserver that has imported torch once, so each start costs a fork, not an import.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import runpy
import signal
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnkit.checkpoints.checkpoint import latest_checkpoint, list_checkpoints, read_checkpoint_state
from attnkit.training.metrics import read_metrics

CHILD = str(Path(__file__).with_name("kill_resume_child.py"))
STEPS = 30


@pytest.fixture(scope="module")
def ctx():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch._inductor", "matplotlib.pyplot", "attnkit.training",
                                     "attnkit.models.gpt"])
    return context


def _start(ctx, out: Path, *, resume: bool, kill=None, slow: float = 0.0, error_file: Path | None = None):
    globals_ = {"OUT": str(out), "RESUME": resume, "KILL": kill, "SLOW": slow,
                "ERROR_FILE": str(error_file or out.parent / "error.txt")}
    proc = ctx.Process(target=runpy.run_path, args=(CHILD,), kwargs={"init_globals": globals_, "run_name": "__main__"})
    proc.start()
    return proc


def _train_rows(out: Path) -> list[dict]:
    return [r for r in read_metrics(out) if "loss" in r]


def _assert_readable(out: Path) -> None:
    json.loads((out / "run.json").read_text())
    read_metrics(out)
    ckpts = list_checkpoints(out / "checkpoints")
    assert ckpts, "no published checkpoint survived"
    for _, path in ckpts + ([(0, out / "checkpoints" / "best")] if (out / "checkpoints" / "best").is_dir() else []):
        assert read_checkpoint_state(path)["format"] == "attnkit.checkpoint"
        load_file(str(path / "model.safetensors"))
        load_file(str(path / "optimizer.safetensors"))


def test_eight_kills_then_resume_equal_the_uninterrupted_run(ctx, tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    p = _start(ctx, straight, resume=False)
    p.join(120)
    assert p.exitcode == 0

    rng = random.Random(2026)
    moments = [("fsync", rng.randint(3, 4))]  # the first kill: inside the second checkpoint's write
    moments += [(point, rng.randint(1, hi)) for point, hi in (("update", 8), ("state", 2), ("rename", 2), ("fsync", 4))]
    moments += [("external", rng.randint(1, 6)) for _ in range(3)]
    rng.shuffle(moments[1:])
    moments = [moments[0]] + moments[1:]
    seen = []
    for i, (point, n) in enumerate(moments):
        if point == "external":
            start = len(_train_rows(killed))
            proc = _start(ctx, killed, resume=i > 0)
            deadline = time.monotonic() + 60
            while len(_train_rows(killed)) < min(start + n, STEPS - 5) and proc.is_alive():
                assert time.monotonic() < deadline
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.02))
            os.kill(proc.pid, signal.SIGKILL)
        else:
            proc = _start(ctx, killed, resume=i > 0, kill=(point, n))
        proc.join(60)
        assert proc.exitcode == -signal.SIGKILL, (point, n, proc.exitcode)
        seen.append((point, n, latest_checkpoint(killed / "checkpoints").name,
                     sorted(p.name for p in (killed / "checkpoints").iterdir() if p.suffix)))
        _assert_readable(killed)
    proc = _start(ctx, killed, resume=True)
    proc.join(120)
    assert proc.exitcode == 0, seen
    assert sum(bool(left) for *_, left in seen) >= 3, seen  # kills inside checkpoint writes left .tmp folders

    rows_k, rows_s = read_metrics(killed), read_metrics(straight)
    train_k = [(r["step"], r["loss"]) for r in rows_k if "loss" in r]
    assert [s for s, _ in train_k] == list(range(1, STEPS + 1))  # nothing missing, nothing twice
    assert train_k == [(r["step"], r["loss"]) for r in rows_s if "loss" in r]  # exact floats
    assert [(r["step"], r["valid_loss"]) for r in rows_k if "valid_loss" in r] == \
        [(r["step"], r["valid_loss"]) for r in rows_s if "valid_loss" in r]
    last = f"step_{STEPS:08d}"
    for name in (last, "best"):
        wk = load_file(str(killed / "checkpoints" / name / "model.safetensors"))
        ws = load_file(str(straight / "checkpoints" / name / "model.safetensors"))
        assert wk.keys() == ws.keys() and all(torch.equal(wk[k], ws[k]) for k in ws), name
    assert json.loads((killed / "summary.json").read_text())["train_loss"] == \
        json.loads((straight / "summary.json").read_text())["train_loss"]


def test_a_second_run_on_the_same_folder_is_refused_while_the_first_runs(ctx, tmp_path):
    out = tmp_path / "run"
    first = _start(ctx, out, resume=False, slow=0.3)
    try:
        deadline = time.monotonic() + 60
        while not (out / "checkpoints").is_dir() or latest_checkpoint(out / "checkpoints") is None:
            assert time.monotonic() < deadline and first.is_alive()
            time.sleep(0.01)
        for resume in (False, True):
            err = tmp_path / f"second_{resume}.txt"
            second = _start(ctx, out, resume=resume, error_file=err)
            second.join(60)
            assert second.exitcode == 3
            assert "in use by another training process" in err.read_text()
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.join(30)
    # the kernel dropped the dead process's lock: resuming works, and the log was never interleaved
    again = _start(ctx, out, resume=True)
    again.join(120)
    assert again.exitcode == 0
    assert [r["step"] for r in _train_rows(out)] == list(range(1, STEPS + 1))


def test_two_runs_started_at_once_one_trains_the_other_is_refused(ctx, tmp_path):
    out = tmp_path / "run"
    procs = [_start(ctx, out, resume=False, error_file=tmp_path / f"err{i}.txt") for i in range(2)]
    for p in procs:
        p.join(120)
    assert sorted(p.exitcode for p in procs) == [0, 3]
    message = next((tmp_path / f"err{i}.txt").read_text() for i in range(2) if procs[i].exitcode == 3)
    assert "in use by another training process" in message or "already holds a training run" in message
    assert [r["step"] for r in _train_rows(out)] == list(range(1, STEPS + 1))
