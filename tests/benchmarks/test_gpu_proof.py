"""The GPU proof scripts' CPU side: commands, FLOPs and MFU arithmetic, time to target, recording, and --smoke runs
of ``benchmarks.gpu_proof`` and of ``benchmarks.gpu`` (every measurement of issue #40 at tiny sizes).

The real figures need a CUDA GPU (``python -m benchmarks.gpu --record`` there); everything around them is checked
here, so the scripts are known to run when a GPU is lent.
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
                  "--max-time 2.0", "--device cuda", "--autocast bf16", "--compile",
                  # nanoGPT's cosine spans 5,000 iterations whatever the clock; stop at the first evaluation <= 1.47
                  "--steps 5000", "--schedule-steps 5000", "--stop-at-loss 1.47"):
        assert piece in text, piece
    mfu_cmd = " ".join(G.mfu_command(Path("t.txt"), tmp_path, device="cuda", steps=60, smoke=False))
    for piece in ("--set n_layer=12", "--set n_embd=768", "--set vocab_size=50304", "--block-size 1024",
                  "--autocast bf16", "--compile", "--steps 60"):
        assert piece in mfu_cmd, piece
    # the other ways and a changed recipe (the moonshot's candidates)
    graphs = G.shakespeare_command(Path("t.txt"), tmp_path, device="cuda", minutes=0.5, smoke=False, way="cuda-graphs",
                                   recipe=dict(lr=3e-3, batch_size=128), extra=("--optimizer", "muon"),
                                   schedule_steps=1200)
    text = " ".join(graphs)
    assert "--cuda-graphs" in graphs and "--compile" not in graphs and "--optimizer muon" in text
    assert "--lr 0.003" in text and "--batch-size 128" in text and "--schedule-steps 1200" in text
    assert "--compile" not in G.shakespeare_command(Path("t.txt"), tmp_path, device="cuda", minutes=1.0, smoke=False,
                                                    way="eager")
    with pytest.raises(ValueError, match="way must be auto, compile, cuda-graphs or eager, got 'fast'"):
        G.shakespeare_command(Path("t.txt"), tmp_path, device="cuda", minutes=1.0, smoke=False, way="fast")


def _run_folder(folder: Path, evals: list[tuple[int, float]], summary: dict) -> Path:
    """A run folder as train lm leaves it: a log row every 10 steps, the evaluations, summary.json."""
    folder.mkdir()
    last = evals[-1][0]
    rows = [{"step": s, "loss": 3.0, "tokens_per_s": 1000.0, "elapsed": s / 10} for s in range(10, last + 1, 10)]
    rows += [{"step": s, "valid_loss": v} for s, v in evals]
    rows.sort(key=lambda r: r["step"])
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps({"steps": last, "elapsed": last / 10 + 1, "first_update_s": 3.0,
                                                     "stopped_by": "steps", **summary}))
    return folder


def test_time_to_target_is_the_first_evaluation_at_the_target_not_the_last(tmp_path):
    """The issue's case: the target reached early, the run going on to overfit. "met" = reached within the budget."""
    overfit = _run_folder(tmp_path / "a", [(250, 2.0), (500, 1.6), (750, 1.46), (1000, 1.44), (1250, 1.71)], {})
    got = G.time_to_target(overfit, 1.47, budget_s=120.0)
    assert got["reached"] == {"step": 750, "seconds": 75.0, "valid_loss": 1.46}  # the log row's time at step 750
    assert (got["best_valid"], got["final_valid"], got["first_update_s"], got["met"]) == (1.44, 1.71, 3.0, True)
    assert G.time_to_target(overfit, 1.47, budget_s=60.0)["met"] is False  # reached, but after the budget
    assert G.time_to_target(overfit, 1.40, budget_s=120.0)["reached"] is None
    # with --stop-at-loss the summary has the seconds at the end of that evaluation
    stopped = _run_folder(tmp_path / "b", [(250, 2.0), (500, 1.47)],
                          {"target": {"loss": 1.47, "reached": True, "step": 500, "elapsed": 51.5, "valid_loss": 1.47}})
    assert G.time_to_target(stopped, 1.47, budget_s=120.0)["reached"]["seconds"] == 51.5


def test_record_replaces_its_own_section(tmp_path):
    md, js = tmp_path / "RESULTS.md", tmp_path / "gpu.json"
    md.write_text("# results\n\nother section\n")
    results = {"date": "d", "device": "NVIDIA H100", "load": "0.1 / 0.1 / 0.1", "runs": [
        {"name": "shakespeare", "command": "-m attnkit train lm", "reached": {"step": 1750, "seconds": 59.0,
                                                                            "valid_loss": 1.4638},
         "best_valid": 1.4638, "final_valid": 1.4638, "first_update_s": 21.0, "steps": 1750, "seconds": 59.5,
         "stopped_by": "target", "goal": "valid loss <= 1.47 within 2 min", "met": True},
        {"name": "gpt2", "command": "-m attnkit train lm", "tokens_per_s": 400_000.0, "flops_per_token": 8.55e8,
         "peak_tflops": 989.4, "mfu": 0.3457}]}
    G.record(results, md, js)
    G.record(results, md, js)  # idempotent: one section
    text = md.read_text()
    assert text.count(G.BEGIN) == 1 and "other section" in text
    assert "valid loss **1.4638** at step 1750, **59 s** after the start" in text and "**met**" in text
    assert "MFU **34.6%**" in text
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
    assert char["final_valid"] > 0 and char["steps"] >= 1 and char["best_valid"] <= char["final_valid"]
    # "met" is the goal's rule applied to the run's own figures (this repetitive text can reach it)
    assert char["met"] is (char["reached"] is not None and char["reached"]["seconds"] <= 0.02 * 60)
    assert gpt2["tokens_per_s"] > 0 and gpt2["mfu"] is None  # no known peak for a CPU
    assert results["date"].endswith("+00:00") and "torch " in results["device"]
    assert results["command"].startswith("python -m benchmarks.gpu_proof all --smoke --device cpu")


# --- benchmarks.gpu: every measurement of issue #40 in one call ---------------------------------------------------------
from benchmarks import gpu as GPU  # noqa: E402


def test_the_table_and_the_record(tmp_path):
    results = {"date": "2026-11-28T10:00:00+00:00", "command": "python -m benchmarks.gpu --record",
               "device": "NVIDIA H100 80GB HBM3 (torch 2.11.0+cu130, CUDA 13.0)", "host": "Intel Xeon",
               "load": "0.10 / 0.10 / 0.10", "pieces": {
                   "lm": {"attnkit": {"tokens_per_s": 520_000.0, "peak_memory": 8 * 2 ** 30, "mfu": 0.46},
                          "nanogpt": {"tokens_per_s": 455_000.0, "peak_memory": 11.4 * 2 ** 30}, "ratio": 520 / 455,
                          "shape": "16 x 1024, 12 x 768"},
                   "mt": {"error": "over its time limit of 50 s"}}}
    rows = GPU.table(results)
    assert rows[2].startswith("| `train lm` GPT-2 small 16 x 1024, 12 x 768, tokens/s, MFU 46.0%; peak memory | "
                              "520,000; 8.00 GiB | nanoGPT bench.py loop 455,000; 11.40 GiB | 1.143 |")
    assert rows[-1] == "| mt | over its time limit of 50 s | | | |"  # a piece that failed says why
    page = tmp_path / "RESULTS.md"
    page.write_text(f"# results\n\n## GPU speed\n\n{GPU.BEGIN}\nnot measured yet\n{GPU.END}\n\nafter\n")
    GPU.record(results, tmp_path / "r.json", tmp_path / "r.md", page)
    GPU.record(results, tmp_path / "r.json", tmp_path / "r.md", page)  # again: one table
    text = page.read_text()
    assert text.count(GPU.BEGIN) == 1 and "not measured yet" not in text and text.endswith("after\n")
    assert "Command: `python -m benchmarks.gpu --record`" in text and "520,000" in (tmp_path / "r.md").read_text()
    assert json.loads((tmp_path / "r.json").read_text())["pieces"]["lm"]["ratio"] == 520 / 455
    (tmp_path / "plain.md").write_text("# a page without the markers\n")
    with pytest.raises(ValueError, match="markers"):
        GPU.record(results, tmp_path / "other.json", tmp_path / "other.md", tmp_path / "plain.md")
    assert not (tmp_path / "other.json").exists()  # nothing written
    assert GPU.BEGIN in (ROOT / "benchmarks" / "RESULTS.md").read_text()  # the page has its place for the table


def test_record_from_the_json_a_gpu_call_brings_back(tmp_path, monkeypatch, capsys):
    results = {"date": "d", "command": "python -m benchmarks.gpu --json $OUT/r.json", "device": "NVIDIA H200",
               "host": "Intel Xeon", "load": "n/a", "pieces": {"mt": {
                   "max_tokens": 16384, "updates": 60, "ratio": 1.25, "attnkit": {"updates_per_s": 12.5, "gpu_busy": 0.91},
                   "torch_nn": {"updates_per_s": 10.0, "gpu_busy": 0.8}}}}
    brought = tmp_path / "brought.json"
    brought.write_text(json.dumps(results))
    page = tmp_path / "RESULTS.md"
    page.write_text(f"{GPU.BEGIN}\n{GPU.END}\n")
    for name, path in (("RECORD_JSON", tmp_path / "r.json"), ("RECORD_MD", tmp_path / "r.md"), ("RESULTS_MD", page)):
        monkeypatch.setattr(GPU, name, path)
    assert GPU.main(["--record-from", str(brought)]) == 0
    assert "| 12.50 | `torch.nn.Transformer` 10.00 | 1.250 | >= 1.2, busy >= 90% |" in page.read_text()
    assert "GPU busy 91% / 80%" in page.read_text() and json.loads((tmp_path / "r.json").read_text()) == results
    before = page.read_text()
    for content, message in ((json.dumps({**results, "smoke": True}), "a --smoke call"), ("[]", "not a results file"),
                             ("{}", "not a results file"), ("not json", "not a results file")):
        brought.write_text(content)
        assert GPU.main(["--record-from", str(brought)]) == 2  # one line, the record untouched
        assert message in capsys.readouterr().err
    assert page.read_text() == before


def test_the_gpu_busy_share_counts_the_steady_intervals_only():
    from benchmarks.mt_step_scaling import steady_windows, update_rates

    rows = [{"step": 20, "tokens": 2000, "tokens_per_s": 100.0, "elapsed": 20.0, "cuda_graphs": 3},
            {"step": 40, "tokens": 4000, "tokens_per_s": 1000.0, "elapsed": 22.0, "cuda_graphs": 3},
            {"step": 60, "tokens": 6000, "tokens_per_s": 500.0, "elapsed": 26.0, "cuda_graphs": 4},  # recorded one
            {"step": 80, "tokens": 8000, "tokens_per_s": 1000.0, "elapsed": 28.0, "cuda_graphs": 4}]
    assert steady_windows(rows) == [(20.0, 22.0), (26.0, 28.0)]
    assert update_rates(rows)["updates_per_s"] == 10.0  # 40 updates in 4 s
    samples = [(1.0, 5.0), (21.0, 90.0), (22.0, 94.0), (24.0, 10.0), (27.0, 98.0)]  # (seconds, percent)
    assert GPU.busy_in_windows(samples, steady_windows(rows)) == 0.94  # the median of 90, 94, 98
    assert GPU.busy_in_windows(samples[:1], steady_windows(rows)) is None


def test_a_record_keeps_the_pieces_a_later_call_did_not_measure(tmp_path):
    first = {"date": "d1", "command": "python -m benchmarks.gpu --budget 500", "device": "NVIDIA H200",
             "host": "Intel Xeon", "load": "n/a", "pieces": {
                 "lm": {"attnkit": {"tokens_per_s": 496_000.0}, "nanogpt": {"tokens_per_s": 490_000.0},
                        "ratio": 496 / 490, "shape": "16 x 1024, 12 x 768"},
                 "generate": {"error": "over its time limit of 150 s"}}}
    later = dict(first, date="d2", command="python -m benchmarks.gpu --only generate", pieces={"generate": {
        "bandwidth": 4e12, "weight_bytes": 2.5e8, "batches": {"1": {
            "attnkit_tokens_per_s": 600.0, "hf_error": "over its time limit of 75 s"}}}})
    page = tmp_path / "RESULTS.md"
    page.write_text(f"{GPU.BEGIN}\n{GPU.END}\n")
    paths = tmp_path / "r.json", tmp_path / "r.md", page
    GPU.record(first, *paths)
    GPU.record(later, *paths)
    kept = json.loads(paths[0].read_text())
    assert kept["date"] == "d2" and list(kept["pieces"]) == ["lm", "generate"]
    assert kept["pieces"]["lm"]["call"] == {"command": "python -m benchmarks.gpu --budget 500", "date": "d1",
                                            "device": "NVIDIA H200"}
    assert "call" not in kept["pieces"]["generate"]  # measured by this call
    text = page.read_text()
    assert "`lm` comes from an earlier call: `python -m benchmarks.gpu --budget 500`, d1." in text
    assert "| greedy GPT-2 small, batch 1, tokens/s | 600 | HF static cache + compile - (over its time limit of " \
           "75 s) | - | >= 1.3 |" in text
    GPU.record(later, *paths)  # again: the lm piece keeps its first call, not this one
    assert json.loads(paths[0].read_text())["pieces"]["lm"]["call"]["date"] == "d1"


def test_a_profile_summary_on_the_cpu_lists_the_operators():
    from torch.profiler import ProfilerActivity, profile

    a = torch.randn(512, 512)  # (a 64 x 64 product could fall behind relu's launch on a loaded machine)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            (a @ a).relu().sum()
    got = GPU.profile_summary(prof, steps=2, wall_s=0.01, top=3)
    assert got["wall_ms_per_step"] == 5.0 and got["device_ms_per_step"] is None and got["device_busy"] is None
    assert len(got["top"]) == 3 and abs(sum(k["share"] for k in got["top"])) <= 1.0 + 1e-9
    assert "aten::mm" in [k["name"] for k in got["top"]]
    assert got["top"][0]["ms_per_step"] >= got["top"][1]["ms_per_step"]


def _gpu(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "benchmarks.gpu", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)


def test_gpu_arguments_are_one_line(tmp_path):
    proc = _gpu("--smoke", "--device", "cpu", "--only", "lm,nothing")
    assert proc.returncode == 2 and "--only takes pieces out of" in proc.stderr
    proc = _gpu("--smoke", "--record", "--device", "cpu")
    assert proc.returncode == 2 and "cannot be combined with --smoke" in proc.stderr
    proc = _gpu("--char-ways", "compile,fast", "--only", "char", "--data", str(tmp_path / "none.txt"))
    assert proc.returncode == 2
    assert "--char-ways takes compile, cuda-graphs and eager, got 'compile,fast'" in proc.stderr
    proc = _gpu("--mt-ways", "attnkit:graphs,peer:eager", "--only", "mt", "--data", str(tmp_path / "none.txt"))
    assert proc.returncode == 2 and "--mt-ways takes SIDE:MODE ways" in proc.stderr and "'attnkit:graphs,peer:eager'" \
        in proc.stderr
    for flags, got in ((("--minutes", "-1"), "got -1 and 480"), (("--budget", "0"), "got 1.25 and 0")):
        proc = _gpu("--smoke", "--device", "cpu", "--only", "lm", *flags)  # refused before any piece runs
        assert proc.returncode == 2 and f"--minutes and --budget must be numbers > 0, {got}" in proc.stderr, proc.stderr
        assert '"pieces"' not in proc.stdout


def test_the_moonshot_runs_its_recipe_and_explores_on_request():
    from attnkit.recipes import LM_RECIPES

    args = GPU.build_parser().parse_args(["--device", "cuda"])
    name, recipe, extra, horizon = GPU._moonshot_candidates(args)[0]
    assert len(GPU._moonshot_candidates(args)) == 1 and "shakespeare-char-gpu" in name and extra == ()
    r = LM_RECIPES["shakespeare-char-gpu"]
    assert recipe == dict(lr=r["lr"], min_lr=r["min_lr"], warmup_steps=r["warmup_steps"], batch_size=r["batch_size"],
                          dropout=r["overrides"]["dropout"]) and horizon == r["schedule_steps"]
    explore = GPU.build_parser().parse_args(["--device", "cuda", "--explore"])
    assert GPU._moonshot_candidates(explore) == GPU.MOONSHOT and len(GPU.MOONSHOT) == 4
    assert GPU._limit("moonshot", explore) == 4 * GPU._limit("moonshot", args)
    assert sum("--optimizer" in c[2] for c in GPU.MOONSHOT) == 3  # Muon, tried and kept out of the recipe


@pytest.mark.slow  # a dozen child processes: about three minutes on a busy 2-core machine
def test_gpu_smoke_runs_every_piece_on_the_cpu(tmp_path):
    """Every piece at tiny sizes through the same code as on a GPU (no compilation), nanoGPT's side with its fetched
    model.py when ``peers/nanogpt/model.py`` is there, else skipped with the reason."""
    text = tmp_path / "shakespeare.txt"
    text.write_text("".join(f"LINE {i}: to be or not to be, that is the question.\n" for i in range(400)))
    proc = _gpu("--smoke", "--device", "cpu", "--data", str(text), "--work", str(tmp_path / "work"), "--minutes",
                "0.05", "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    pieces = json.loads(proc.stdout)["pieces"]
    assert json.loads((tmp_path / "r.json").read_text())["pieces"] == pieces
    assert list(pieces) == list(GPU.PIECES) and not any("error" in p for p in pieces.values())
    assert pieces["lm"]["attnkit"]["tokens_per_s"] > 0 and pieces["char"]["attnkit"]["best_valid"] > 0
    assert pieces["mt"]["attnkit"]["updates_per_s"] > 0 and pieces["mt"]["torch_nn"]["updates_per_s"] > 0
    assert set(pieces["mt"]["ways"]) == {"attnkit:fixed", "torch_nn:eager"}  # no CUDA graphs on a CPU
    assert list(pieces["char"]["ways"]) == ["eager"] and pieces["moonshot"]["way"] == "eager"
    assert list(pieces["moonshot"]["runs"]) == [GPU.MOONSHOT[0][0]]  # the recipe (--explore: every candidate)
    assert all(r["best_valid"] > 0 and "error" not in r for r in pieces["moonshot"]["runs"].values())
    for way, prof in pieces["profile"]["ways"].items():  # steps of training, or tokens of a decoding call
        steps = GPU.SMOKE["generate"]["new"] if way.startswith("generate") else GPU.PROFILE_STEPS
        assert prof["steps"] == steps and prof["wall_ms_per_step"] > 0 and prof["top"], way
    assert {"generate:attnkit", "generate:hf", "mt:attnkit", "lm:attnkit"} <= set(pieces["profile"]["ways"])
    for B in ("1", "2"):
        row = pieces["generate"]["batches"][B]
        assert row["attnkit_tokens_per_s"] > 0 and row["hf_tokens_per_s"] > 0
        assert row["attnkit_first_tokens"] == row["hf_first_tokens"]  # the same weights, float32, greedy
    assert set(pieces["memory"]["ways"]) == set(GPU.MEMORY_WAYS)
    assert all(w["peak_bytes"] > 0 for w in pieces["memory"]["ways"].values())
    if GPU.DEFAULT_NANOGPT.is_file():
        assert pieces["lm"]["nanogpt"]["tokens_per_s"] > 0 and pieces["char"]["nanogpt"]["best_valid"] > 0
    else:
        pytest.skip(f"nanoGPT's side not run: no {GPU.DEFAULT_NANOGPT} (fetch github:karpathy/nanoGPT's model.py there)")
