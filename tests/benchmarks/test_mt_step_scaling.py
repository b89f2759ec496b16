"""benchmarks/mt_step_scaling.py: the rates it reads off a run's metrics, and a whole tiny run on the CPU."""

from __future__ import annotations

import json
import random

import pytest

from benchmarks import mt_step_scaling


def test_update_rates_leave_out_the_warm_up_interval():
    rows = [{"step": 10, "tokens": 1000, "tokens_per_s": 10.0},   # warm-up: 100 s, not counted
            {"step": 10, "valid_loss": 3.0},                       # an evaluation row: ignored
            {"step": 20, "tokens": 3000, "tokens_per_s": 1000.0},  # 2000 tokens in 2 s
            {"step": 30, "tokens": 5000, "tokens_per_s": 500.0}]   # 2000 tokens in 4 s
    rates = mt_step_scaling.update_rates(rows)
    assert rates["timed_updates"] == 20 and rates["timed_seconds"] == pytest.approx(6.0)
    assert rates["updates_per_s"] == pytest.approx(20 / 6) and rates["target_tokens_per_s"] == pytest.approx(4000 / 6)
    with pytest.raises(ValueError, match="at least two logged intervals"):
        mt_step_scaling.update_rates(rows[:2])


def test_update_rates_leave_out_the_intervals_that_recorded_a_cuda_graph():
    rows = [{"step": 10, "tokens": 1000, "tokens_per_s": 10.0, "cuda_graphs": 3},
            {"step": 20, "tokens": 3000, "tokens_per_s": 100.0, "cuda_graphs": 4},   # recorded one: left out
            {"step": 30, "tokens": 5000, "tokens_per_s": 1000.0, "cuda_graphs": 4},  # 2000 tokens in 2 s
            {"step": 40, "tokens": 7000, "tokens_per_s": 500.0, "cuda_graphs": 4}]   # 2000 tokens in 4 s
    rates = mt_step_scaling.update_rates(rows)
    assert rates["timed_updates"] == 20 and rates["timed_seconds"] == pytest.approx(6.0)
    with pytest.raises(ValueError, match="every logged interval recorded a CUDA graph"):
        mt_step_scaling.update_rates(rows[:2])


def test_a_tiny_run_reports_each_budget(tmp_path):
    rng = random.Random(0)
    lines = []
    for _ in range(300):
        words = rng.choices("abcdefgh", k=rng.randint(2, 6))
        lines.append(f"{' '.join(words)}\t{' '.join(words[::-1]).upper()}\n")
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(lines), encoding="utf-8")
    out = tmp_path / "r.json"
    assert mt_step_scaling.main(["--data", str(data), "--vocab-size", "300", "--preset", "transformer-small",
                                 "--set", "d_model=32", "--set", "dim_feedforward=64", "--set", "num_heads=2",
                                 "--set", "num_encoder_layers=1", "--set", "num_decoder_layers=1",
                                 "--tokens", "64,128", "--steps", "6", "--log-every", "2", "--device", "cpu",
                                 "--modes", "eager,fixed", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert [(r["mode"], r["max_tokens"]) for r in record["results"]] == [("eager", 64), ("eager", 128),
                                                                           ("fixed", 64), ("fixed", 128)]
    # fixed shapes pad more and so pack fewer pairs into a batch of the same budget
    assert record["results"][2]["padding"] > record["results"][0]["padding"]
    for r in record["results"]:
        assert r["timed_updates"] == 4 and r["updates_per_s"] > 0 and r["gpu_busy_percent"] is None
    # a larger budget packs more pairs into each batch
    assert record["results"][1]["pairs_per_batch"] > record["results"][0]["pairs_per_batch"]
    assert all(len(r["losses"]) == 3 for r in record["results"])
    assert record["machine"].startswith("CPU") and record["parameters"] > 0


def test_the_utilization_sampler_samples_until_stopped(monkeypatch):
    import time

    import torch

    monkeypatch.setattr(torch.cuda, "utilization", lambda device=None: 42)
    sampler = mt_step_scaling.UtilizationSampler("cuda:0", every=0.01)
    sampler.start()
    time.sleep(0.05)
    samples = sampler.stop()
    assert samples and set(samples) == {42.0} and not sampler.is_alive()

    def no_nvml(device=None):
        raise ModuleNotFoundError("pynvml")

    monkeypatch.setattr(torch.cuda, "utilization", no_nvml)
    sampler = mt_step_scaling.UtilizationSampler("cuda:0", every=0.01)
    sampler.start()
    assert sampler.stop() == []


@pytest.mark.parametrize("flags, message", [
    (["--tokens", "abc"], "--tokens: expected comma-separated integers >= 1, got 'abc'"),
    (["--tokens", "64,0"], "--tokens: expected comma-separated integers >= 1, got '64,0'"),
    (["--steps", "0"], "--steps must be >= 1, got 0"),
    (["--set", "max_len=64"], "--set max_len=64: the model's max_len is --max-len's; use --max-len 64"),
    (["--set", "foo=1"], "TransformerConfig has no fields ['foo']"),
])
def test_bad_flags_are_one_line_before_the_data_is_read(flags, message, tmp_path, capsys):
    # --data names no file: each flag is refused before the data would be read (and found missing)
    with pytest.raises(SystemExit) as exit_info:
        mt_step_scaling.main(["--data", str(tmp_path / "none.tsv"), *flags])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2 and message in line, line
