"""Smoke test of the benchmark suite: every code path at tiny sizes (no timing assertions)."""

from __future__ import annotations

import datetime
import json

import pytest
import torch

from benchmarks.__main__ import main
from benchmarks.harness import Impl, PeakMemory, alternate
from benchmarks.report import BEGIN, END, write_results_md


def test_alternate_runs_in_rounds_and_counts_work():
    calls = []
    impls = [Impl("a", lambda: calls.append("a") or 3.0), Impl("b", lambda: calls.append("b") or 5.0)]
    res = alternate(impls, rounds=3, warmup=1)
    # warm-up of each, then A B A B A B, then two untimed memory passes (A B A B)
    assert calls == ["a", "b"] + ["a", "b"] * 3 + ["a", "b"] * 2
    assert res["a"].work == [3.0, 3.0, 3.0] and res["b"].work == [5.0, 5.0, 5.0]
    summ = res["b"].summary()
    tp = summ["throughput"]
    assert summ["rounds"] == 3 and tp["min"] <= tp["median"] <= tp["max"]


def test_min_time_repeats_short_calls_and_sums_their_work():
    calls = []
    impls = [Impl("a", lambda: calls.append("a") or 1.0, unit="calls")]
    res = alternate(impls, rounds=2, warmup=0, min_time=0.02, measure_memory=False)
    assert len(calls) >= 4 and sum(res["a"].work) == len(calls)  # several calls per sample, all counted
    assert all(s >= 0.02 for s in res["a"].seconds)
    summ = res["a"].summary()
    assert abs(summ["seconds_per_unit"]["median"] * summ["throughput"]["median"] - 1.0) < 1e-9


def test_memory_pass_sees_a_temporary_the_allocator_could_reuse():
    def work():
        t = torch.ones(8 * 2**20 // 4)  # 8 MiB temporary: below glibc's usual mmap threshold once warmed up
        return float(t.sum() > 0)

    res = alternate([Impl("a", work, unit="calls")], rounds=2, warmup=2)
    peak = res["a"].summary()["peak_bytes"]
    if peak is not None:  # Linux /proc (and glibc) available
        assert peak >= 7 * 2**20


def test_peak_memory_sees_a_large_allocation():
    # The peak is measured against the resident memory at the start, so memory another thread of the test process
    # frees meanwhile comes off it (57.7 MB were seen for 64 MiB once, under xdist): 256 MiB, 32 MiB of slack.
    with PeakMemory() as mem:
        t = torch.ones(256 * 2**20 // 4)  # 256 MiB, pages touched
        del t
    if mem.peak_bytes is not None:  # Linux /proc available
        assert mem.peak_bytes >= 224 * 2**20


def test_results_md_keeps_other_sections(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text("# results\n\n## Quality\nBLEU 30\n")
    write_results_md(path, f"{BEGIN}\n## Speed\nfirst\n{END}\n")
    write_results_md(path, f"{BEGIN}\n## Speed\nsecond\n{END}\n")
    text = path.read_text()
    assert "BLEU 30" in text and "second" in text and "first" not in text
    assert text.count(BEGIN) == 1


def test_quick_run_covers_every_benchmark(tmp_path):
    md, js = tmp_path / "RESULTS.md", tmp_path / "r.json"
    run = main(["--quick", "--rounds", "1", "--warmup", "0", "--only", "lm,seq2seq,generate,attention",
                "--gen-tokens", "3", "--attn-lengths", "32,64", "--attn-ref-max", "32",
                "--out-md", str(md), "--out-json", str(js)])
    names = [b["name"] for b in run["benchmarks"]]
    assert names == ["lm_train", "seq2seq_train", "generate", "attention"]
    lm = run["benchmarks"][0]
    assert {"attnkit", "hf-gpt2-sdpa"} <= set(lm["results"])
    assert lm["results"]["attnkit"]["mfu_measured_peak"] > 0
    floor = "matmul floor (Linear GEMMs only)"
    assert floor in lm["results"] and floor in run["benchmarks"][1]["results"]
    gen = run["benchmarks"][2]
    assert {"attnkit+cache", "hf+cache", "attnkit-int8+cache", "attnkit no-cache", "hf no-cache",
            "matvec floor (Linear weights only)"} == set(gen["results"])
    attn = run["benchmarks"][3]
    assert "T=32 attnkit reference" in attn["results"] and "T=64 attnkit reference" not in attn["results"]
    saved = json.loads(js.read_text())
    assert saved["command"].startswith("python -m benchmarks --quick")
    assert datetime.datetime.fromisoformat(saved["date"]).utcoffset() is not None  # the date names its time zone
    text = md.read_text()
    assert "## Speed" in text and "attnkit / hf-gpt2-sdpa" in text and "Load average" in text


@pytest.mark.parametrize("argv, message", [
    (["--rounds", "0"], "--rounds must be >= 1, got 0"),  # was taken for "not given": the default rounds ran
    (["--warmup", "-1"], "--warmup must be >= 0, got -1"),
    (["--gen-tokens", "0"], "--gen-tokens must be >= 1, got 0"),
    (["--attn-lengths", "32,x"], "--attn-lengths: expected comma-separated integers >= 1, got '32,x'"),
    (["--levers", "thread"], "--levers: unknown lever(s) ['thread']; choose from fused_qkv,"),  # was: nothing ran
    (["--threads", "0"], "--threads must be >= 1, got 0"),  # these two exited 1, as a failed run does
    (["--only", "atention"], "--only: unknown benchmark(s) ['atention']; choose from "),
])
def test_bad_counts_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--quick", "--no-write", "--only", "attention", "--attn-ref-max", "0", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_every_lever_runs_at_tiny_sizes():
    from benchmarks.bench_levers import LEVERS, run_levers

    out = run_levers(quick=True, rounds=1, warmup=0, compile=False)
    assert [r.name for r in out] == [f"lever_{name}" for name in LEVERS if name != "compile"]
    assert all(r.ratios and all(v is not None and v > 0 for v in r.ratios.values()) for r in out)


def test_unknown_lever_is_refused_by_name():
    from benchmarks.bench_levers import run_levers

    with pytest.raises(ValueError, match=r"unknown lever\(s\) \['thread'\]; choose from fused_qkv, "):
        run_levers(quick=True, rounds=1, warmup=0, only=("threads", "thread"))


def test_breakdown_categories_and_table():
    from benchmarks.breakdown import CATEGORIES, breakdown_markdown, categorize, profile_breakdown

    assert categorize("aten::addmm") == "matmul" and categorize("aten::bernoulli_") == "dropout RNG"
    assert categorize("aten::_log_softmax_backward_data") == "softmax / cross-entropy"
    assert categorize("aten::_fused_adamw_") == "optimizer" and categorize("aten::gelu") == "other"
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    cats = profile_breakdown(lambda: [torch.mm(a, b) for _ in range(20)], warmup=1)
    assert cats["matmul"] > 0 and set(cats) <= set(CATEGORIES)
    table = breakdown_markdown("x", {"impl": cats})
    assert table.count("\n") == 2 and "| impl |" in table


def test_matvec_layouts_reports_both_layouts_per_shape(monkeypatch, capsys):
    from benchmarks import matvec_layouts

    monkeypatch.setattr(matvec_layouts, "SHAPES", ((48, 16, True), (16, 48, False)))
    matvec_layouts.main(["--rounds", "2"])
    table = capsys.readouterr().out
    assert "| 48 x 16 |" in table and "| 16 x 48 |" in table and table.count("| row-major |") + table.count(
        "| transposed |") == 2


def test_a_quick_run_writes_no_record_unless_asked(tmp_path, monkeypatch, capsys):
    import benchmarks.__main__ as suite

    monkeypatch.setattr(suite, "HERE", tmp_path)  # where the records would go
    argv = ["--quick", "--rounds", "1", "--warmup", "0", "--only", "attention", "--attn-lengths", "32",
            "--attn-ref-max", "32"]
    main(argv)
    assert not (tmp_path / "records").exists()  # a smoke run's figures do not replace the suite's record
    assert "a --quick run is a smoke run: no record written" in capsys.readouterr().err
    main(argv + ["--out-json", str(tmp_path / "r.json")])
    assert json.loads((tmp_path / "r.json").read_text())["benchmarks"][0]["name"] == "attention"
    assert not (tmp_path / "records").exists()
