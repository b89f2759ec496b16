"""The GPU proof script's CPU side: commands, FLOPs and MFU arithmetic, recording, and a --smoke run.

The real figures need a CUDA GPU (``python -m benchmarks.gpu_proof all --record`` there); everything around
them is checked here, so the script is known to run when a GPU is lent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_proof as G

ROOT = Path(__file__).resolve().parents[2]


def test_peak_lookup_by_device_name():
    assert G.peak_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert G.peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert G.peak_tflops("NVIDIA H200") == 989.4
    assert G.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert G.peak_tflops("Intel(R) Xeon(R) Processor") is None


def test_gpt2_small_count_and_flops_match_nanogpt():
    """nanoGPT reports 123.69M parameters (position table excluded) for GPT-2 small with vocabulary 50304."""
    n = G.gpt2_params_without_positions(G.GPT2_SMALL)
    assert abs(n - 123.69e6) < 0.005e6
    f = G.flops_per_token(n, 12, 1024, 768)
    assert f == pytest.approx(6 * n + 12 * 12 * 1024 * 768)
    # nanoGPT's estimate_mfu: 6N + 12 L H Q T with H Q = C (the same number)
    assert f == pytest.approx(6 * n + 12 * 12 * 12 * 64 * 1024)


def test_mfu_arithmetic():
    assert G.mfu(100_000.0, 1e9, 1000.0) == pytest.approx(0.1)  # 1e14 FLOP/s of 1e15
    assert G.mfu(0.0, 1e9, 1000.0) == 0.0
    with pytest.raises(ValueError, match="mfu needs"):
        G.mfu(1.0, 1e9, 0.0)


def test_steady_tokens_per_s_skips_the_warm_up(tmp_path):
    rows = [{"step": 5, "tokens_per_s": 10.0}, {"step": 10, "tokens_per_s": 50.0}, {"step": 10, "valid_loss": 2.0},
            {"step": 15, "tokens_per_s": 100.0}, {"step": 20, "tokens_per_s": 120.0}, {"step": 25, "tokens_per_s": 110.0}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert G.steady_tokens_per_s(path) == 110.0
    path.write_text(json.dumps({"step": 1, "valid_loss": 1.0}) + "\n")
    with pytest.raises(ValueError, match="no tokens_per_s"):
        G.steady_tokens_per_s(path)


def test_commands_carry_nanogpts_config(tmp_path):
    cmd = G.shakespeare_command(Path("t.txt"), tmp_path, device="cuda", minutes=2.0, smoke=False)
    text = " ".join(cmd)
    for piece in ("--set n_layer=6", "--set n_head=6", "--set n_embd=384", "--set dropout=0.2", "--set bias=false",
                  "--block-size 256", "--batch-size 64", "--lr 0.001", "--min-lr 0.0001", "--warmup-steps 100",
                  "--max-time 2.0", "--device cuda", "--autocast bf16", "--compile"):
        assert piece in text, piece
    mfu_cmd = " ".join(G.mfu_command(Path("t.txt"), tmp_path, device="cuda", steps=60, smoke=False))
    for piece in ("--set n_layer=12", "--set n_embd=768", "--set vocab_size=50304", "--block-size 1024",
                  "--autocast bf16", "--compile", "--steps 60"):
        assert piece in mfu_cmd, piece


def test_record_replaces_its_own_section(tmp_path):
    md, js = tmp_path / "RESULTS.md", tmp_path / "gpu.json"
    md.write_text("# results\n\nother section\n")
    results = {"date": "d", "device": "NVIDIA H100", "load": "0.1 / 0.1 / 0.1", "runs": [
        {"name": "shakespeare", "command": "-m attnkit train lm", "valid_loss": 1.46, "seconds": 110.0, "steps": 4000,
         "tokens": 65_536_000, "goal": "valid loss <= 1.47 in <= 2 min", "met": True},
        {"name": "gpt2", "command": "-m attnkit train lm", "tokens_per_s": 400_000.0, "flops_per_token": 8.55e8,
         "peak_tflops": 989.4, "mfu": 0.3457}]}
    G.record(results, md, js)
    G.record(results, md, js)  # idempotent: one section
    text = md.read_text()
    assert text.count(G.BEGIN) == 1 and "other section" in text
    assert "valid loss **1.4600**" in text and "**met**" in text and "MFU **34.6%**" in text
    assert json.loads(js.read_text())["device"] == "NVIDIA H100"


def _proof(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "benchmarks.gpu_proof", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_bad_arguments_are_one_line(tmp_path):
    proc = _proof("all", "--smoke", "--record", "--device", "cpu", "--data", str(tmp_path / "none.txt"))
    assert proc.returncode == 2 and "no such file" in proc.stderr
    text = tmp_path / "t.txt"
    text.write_text("abc\n" * 100)
    proc = _proof("all", "--smoke", "--record", "--device", "cpu", "--data", str(text))
    assert proc.returncode == 2 and "cannot be combined with --smoke" in proc.stderr
    if not torch.cuda.is_available():
        proc = _proof("mfu", "--data", str(text))
        assert proc.returncode == 2 and proc.stderr.strip().endswith("use --device cpu or --device auto")


def test_smoke_run_on_the_cpu(tmp_path):
    """The whole path (both trainings through ``attnkit train lm``, reading their results) with tiny models."""
    text = tmp_path / "shakespeare.txt"
    text.write_text("".join(f"LINE {i}: to be or not to be, that is the question.\n" for i in range(400)))
    proc = _proof("all", "--smoke", "--device", "cpu", "--minutes", "0.02", "--steps", "6", "--data", str(text),
                  "--work", str(tmp_path / "work"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    char, gpt2 = results["runs"]
    assert char["valid_loss"] > 0 and char["steps"] >= 1
    # "met" is the goal's rule applied to the run's own figures (this repetitive text can reach it)
    assert char["met"] is (char["valid_loss"] <= G.GOAL_LOSS and char["seconds"] <= G.GOAL_MINUTES * 60 + 1)
    assert gpt2["tokens_per_s"] > 0 and gpt2["mfu"] is None  # no known peak for a CPU
