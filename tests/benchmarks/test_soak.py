"""benchmarks/soak.py at tiny sizes: it samples a process, judges growth between windows, and reports (no timing
assertions: the numbers a real soak produces are judged by the script itself)."""

from __future__ import annotations

import json
import os

import pytest

import benchmarks.soak as soak


def _samples(rss, fds, cpu_per_step, n=100):
    """``n`` samples a second apart, one step each, with these (constant or callable) values."""
    value = lambda v, i: v(i) if callable(v) else v  # noqa: E731
    out, cpu = [], 0.0
    for i in range(n):
        cpu += value(cpu_per_step, i)
        out.append({"t": float(i), "step": i, "rss_mb": value(rss, i), "hwm_mb": 500.0, "fds": value(fds, i),
                    "threads": 1, "cpu_s": cpu, "load": 1.0})
    return out


def test_a_flat_run_passes_and_a_leak_fails():
    flat = soak.judge({"samples": _samples(400.0, 6, 0.1)})
    assert all(r["pass"] for r in flat["rows"].values() if r["judged"]) and flat["steps"] == 99
    leak = soak.judge({"samples": _samples(lambda i: 400.0 + 2 * i, lambda i: 6 + i // 10, 0.1)})
    assert leak["rows"]["rss_mb"]["pass"] is False and leak["rows"]["fds"]["pass"] is False
    slower = soak.judge({"samples": _samples(400.0, 6, lambda i: 0.1 + 0.001 * i)})
    assert slower["rows"]["cpu_s_per_step"]["pass"] is False and slower["rows"]["rss_mb"]["pass"] is True
    # one descriptor more while a checkpoint is being written is not a leak
    assert soak.judge({"samples": _samples(400.0, lambda i: 7 if i > 90 else 6, 0.1)})["rows"]["fds"]["pass"]


def test_the_rate_of_a_run_that_logs_its_step_in_jumps():
    """A run logs its step every 10 updates and is sampled every 15 s at 1.7 s an update: the window's rate is
    the true 0.8 CPU s per update, however the jumps fall."""
    samples = [{"t": 15.0 * i, "step": int(15.0 * i / 1.7) // 10 * 10, "rss_mb": 400.0, "hwm_mb": 500.0, "fds": 6,
                "threads": 1, "cpu_s": 15.0 * i * 0.8 / 1.7, "load": 1.0} for i in range(240)]
    rows = soak.judge({"samples": samples})["rows"]
    assert rows["cpu_s_per_step"]["first"] == pytest.approx(0.8, rel=0.03)
    assert rows["cpu_s_per_step"]["last"] == pytest.approx(0.8, rel=0.03) and rows["cpu_s_per_step"]["pass"]


def test_too_short_a_run_is_refused():
    with pytest.raises(ValueError, match="too few samples"):
        soak.judge({"samples": _samples(400.0, 6, 0.1, n=3)})


def test_this_process_is_sampled():
    s = soak.proc_sample(os.getpid())
    assert s["rss_mb"] > 10 and s["fds"] >= 3 and s["cpu_s"] > 0 and s["hwm_mb"] >= s["rss_mb"]
    assert soak.proc_sample(2 ** 22 + 12345) is None  # no such process


class _Clock:
    """A clock that moves 10 ms each time it is read: the test's samples fall evenly, whatever the machine's load
    (real time made the 10% windows of a one-second soak hold a single sample now and then, and judge refused)."""

    def __init__(self):
        self.now = 0.0

    def _tick(self) -> float:
        self.now += 0.01
        return self.now

    monotonic = process_time = _tick


def test_generate_soak_and_report(tmp_path, monkeypatch):
    monkeypatch.setattr(soak, "RECORDS", tmp_path)
    monkeypatch.setattr(soak, "time", _Clock())
    record = soak.soak_generate(calls=60, every=5, new_tokens=3, seed=0)
    assert "--sample-every 5 " in record["command"]  # the flag that reruns it (was --every: the lm/mt flag)
    assert [s["step"] for s in record["samples"]] == list(range(5, 61, 5))
    record.update(date="2026-11-28", machine="test", judgement=soak.judge(record))
    (tmp_path / "generate.json").write_text(json.dumps(record))
    soak.report(["lm", "mt", "generate"])  # the missing lm / mt records are left out
    table = (tmp_path / "soak.md").read_text()
    assert "| generate | " in table and "| lm |" not in table
    assert (tmp_path / "soak.png").read_bytes()[:4] == b"\x89PNG"


def test_a_soak_too_short_to_judge_keeps_its_samples_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(soak, "RECORDS", tmp_path)  # two samples: no window after the warm-up holds one
    assert soak.main(["generate", "--calls", "2", "--sample-every", "1", "--new-tokens", "1", "--name", "short"]) == 1
    assert "soak: not judged: too few samples" in capsys.readouterr().err  # was the judge's traceback
    record = json.loads((tmp_path / "short.json").read_text())
    assert len(record["samples"]) == 2 and record["judgement"] is None
    with pytest.raises(SystemExit, match="short.json: too few samples"):
        soak.report(["short"])


def test_no_samples_is_refused_by_name():
    with pytest.raises(ValueError, match="no samples to judge"):  # was an IndexError
        soak.judge({"samples": []})
