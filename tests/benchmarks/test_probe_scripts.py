"""The small probe scripts of benchmarks/: warm-up kept out of the timed rounds, medians, bad arguments refused, and
figures printed or recorded with their command, date and machine (no timing assertions)."""

from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path

import pytest
import torch

from benchmarks import (ab_seq2seq_step, finetune_fortunes, int8_gptq, long_sampling, matvec_layouts, mt_batch_build,
                        mt_peer, mt_profile, mt_split_loss, reliability, shakespeare_char)
from benchmarks.harness import machine_info, run_header

ROOT = Path(__file__).resolve().parents[2]


def _cpu() -> str:
    import platform

    return machine_info().get("cpu_model", platform.machine())


def _fake_clock(durations):
    """A ``time`` stand-in whose ``perf_counter`` makes the n-th timed interval last ``durations[n]`` seconds."""
    def ticks():
        now = 0.0
        for d in durations:
            yield now
            now += d
            yield now

    it = ticks()
    return types.SimpleNamespace(perf_counter=lambda: next(it))


def test_run_header_names_command_date_machine_and_versions():
    line = run_header("python -m benchmarks.x", ["--y", "1", "a b"])
    assert line.startswith("`python -m benchmarks.x --y 1 'a b'`, ") and " UTC; " in line
    assert _cpu() in line and f"torch {torch.__version__}" in line and f"{torch.get_num_threads()} thread" in line


@pytest.fixture
def ab_fakes(monkeypatch, tmp_path):
    """ab_seq2seq_step with stand-in step functions that log which dropout module is live at each call."""
    import attnkit.modules.dropout as dropout_module
    import benchmarks.breakdown

    events = []

    def fake_impls(bench, steps):
        return [("attnkit", lambda: events.append(("attnkit", dropout_module.dropout.__module__))),
                ("torch.nn.Transformer", lambda: events.append(("torch", None)))]

    monkeypatch.setattr(benchmarks.breakdown, "_impls", fake_impls)
    old = tmp_path / "old_dropout.py"
    shutil.copy(ROOT / "attnkit" / "modules" / "dropout.py", old)
    yield events, f"attnkit/modules/dropout.py={old}"
    sys.modules.pop("attnkit.modules._old_dropout", None)


def test_ab_seq2seq_step_warms_every_variant_up_before_the_timed_rounds(ab_fakes, monkeypatch, capsys):
    events, old = ab_fakes
    clock = _fake_clock([1.0] * 6)

    def perf_counter():
        events.append("clock")
        return clock.perf_counter()

    monkeypatch.setattr(ab_seq2seq_step, "time", types.SimpleNamespace(perf_counter=perf_counter))
    assert ab_seq2seq_step.main(["--old", old, "--rounds", "2", "--threads", "1"]) == 0
    old_fn, new_fn = "attnkit.modules._old_dropout", "attnkit.modules.dropout"
    warm = [("attnkit", old_fn), ("attnkit", new_fn), ("torch", None)]
    timed = [x for call in warm for x in ("clock", call, "clock")]
    assert events == warm + timed * 2  # the warm-up calls come first and are not timed
    out = capsys.readouterr().out
    assert "median 1.0000 s per 5 steps" in out and _cpu() in out and "ab_seq2seq_step.py --old" in out


@pytest.mark.parametrize("flag", ["--rounds", "--threads"])
def test_ab_seq2seq_step_refuses_a_count_below_one(ab_fakes, flag, capsys):
    _, old = ab_fakes
    with pytest.raises(SystemExit) as exc:
        ab_seq2seq_step.main(["--old", old, flag, "0"])
    assert exc.value.code == 2 and "--rounds and --threads must be >= 1" in capsys.readouterr().err


def test_matvec_layouts_reports_the_median_of_the_timed_rounds(monkeypatch):
    monkeypatch.setattr(matvec_layouts, "SHAPES", ((48, 16, True),))  # 12 copies per timed call
    # per layout and round (row-major, transposed): a warm-up round, then two timed rounds
    monkeypatch.setattr(matvec_layouts, "time", _fake_clock([1200, 1200, 12, 24, 36, 48]))
    (row,) = matvec_layouts.measure(rounds=2)
    assert row["row-major"]["us"] == pytest.approx(2e6)  # median of 1 s and 3 s per matrix; the warm-up is dropped
    assert row["transposed"]["us"] == pytest.approx(3e6)


def test_matvec_layouts_prints_its_command_and_machine(monkeypatch, capsys):
    monkeypatch.setattr(matvec_layouts, "SHAPES", ((48, 16, True),))
    matvec_layouts.main(["--rounds", "1"])
    first = capsys.readouterr().out.splitlines()[0]
    assert "`python -m benchmarks.matvec_layouts --rounds 1`" in first and _cpu() in first


def test_long_sampling_prints_its_command_and_cpu_model(capsys):
    assert long_sampling.main(["--new", "2", "--rounds", "1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "`python -m benchmarks.long_sampling --new 2 --rounds 1`" in first and _cpu() in first


@pytest.mark.parametrize("argv", [["--new", "0"], ["--rounds", "0"]])
def test_long_sampling_refuses_a_count_below_one(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        long_sampling.main(argv)
    assert exc.value.code == 2 and "--new and --rounds must be >= 1" in capsys.readouterr().err


def test_shakespeare_char_records_command_date_and_machine(tmp_path, capsys):
    text = tmp_path / "tiny.txt"
    text.write_text("To be, or not to be: that is the question.\n" * 40, encoding="utf-8")
    record = tmp_path / "record.jsonl"
    argv = [str(text), "--steps", "2", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
            "--batch-size", "2", "--warmup-steps", "1", "--record", str(record), "--out", str(tmp_path / "run")]
    assert shakespeare_char.main(argv) == 0
    result = json.loads(record.read_text(encoding="utf-8"))
    assert result["command"] == "python benchmarks/shakespeare_char.py " + " ".join(argv)
    assert result["date"].endswith(" UTC")
    assert result["machine"]["torch"] == torch.__version__ and result["machine"]["cpu_count"] >= 1
    assert result == json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_mt_profile_names_its_command_and_the_sentences_it_decoded(tiny_run, capsys):
    _, run = tiny_run
    assert mt_profile.main([str(run), "--batches", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"`python benchmarks/mt_profile.py {run} --batches 2`, ") and _cpu() in out
    assert "greedy decoding of 24 sentences for BLEU" in out  # the whole valid split: the recipe asks for 150


def test_mt_profile_refuses_zero_batches(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        mt_profile.main([str(tmp_path), "--batches", "0"])
    assert exc.value.code == 2 and "--batches must be >= 1, got 0" in capsys.readouterr().err


def test_mt_batch_build_refuses_zero_batches(tmp_path, capsys):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"a b {i}\tA B {i}\n" for i in range(40)), encoding="utf-8")
    with pytest.raises(SystemExit) as exc:  # was: statistics.StatisticsError after building the task
        mt_batch_build.main(["--data", str(pairs), "--vocab-size", "300", "--tokens", "64", "--batches", "0"])
    assert exc.value.code == 2 and "--batches must be >= 1, got 0" in capsys.readouterr().err


def test_reliability_with_k_leaves_the_full_table_alone(monkeypatch, tmp_path, capsys):
    from attnkit.cli.main import build_parser

    doc = tmp_path / "reliability.md"
    doc.write_text("the full table\n", encoding="utf-8")
    monkeypatch.setattr(reliability, "DOC", doc)
    monkeypatch.setattr(reliability, "BUILD_PARSER", build_parser)  # the commands from the parser, not --help
    assert reliability.main(["-k", "attn-all-masked"]) == 0  # was: the table rewritten with this one row
    assert doc.read_text(encoding="utf-8") == "the full table\n"
    assert "1 of 1 rows as expected" in capsys.readouterr().out


def test_reliability_k_matching_no_row_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:  # was: "0 of 0 rows as expected", exit 0
        reliability.main(["-k", "no-such-row", "--write", ""])
    assert exc.value.code == 2 and "-k 'no-such-row' matches no row" in capsys.readouterr().err


def test_int8_gptq_prints_its_command_date_and_machine(monkeypatch, tmp_path, capsys):
    from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
    from attnkit.models.configs import GPTConfig
    from attnkit.models.gpt import GPT
    from benchmarks.bench_generate import QUALITY_TEXT

    calibration = tmp_path / "calibration.txt"
    calibration.write_text(QUALITY_TEXT, encoding="utf-8")
    tok = CharTokenizer.train(QUALITY_TEXT)
    torch.manual_seed(0)
    tiny = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=1024, n_layer=1, n_head=2, n_embd=32)).eval()
    monkeypatch.setattr(int8_gptq, "load_quality_model", lambda path: (tiny, tok, "tiny"))  # not SmolLM2
    argv = ["--calibration", str(calibration), "--sequences", "2", "--length", "16", "--new-tokens", "2"]
    int8_gptq.main(argv)
    out = json.loads(capsys.readouterr().out)
    assert out["command"] == "python -m benchmarks.int8_gptq " + " ".join(argv) and out["date"].endswith(" UTC")
    assert out["machine"]["torch"] == torch.__version__ and out["calibration_tokens"] == 32


def test_finetune_fortunes_records_date_and_machine(monkeypatch, tmp_path):
    import attnkit.api
    import attnkit.checkpoints
    import attnkit.data.pipeline.documents as documents
    import attnkit.interop.pretrained as pretrained
    from attnkit.models.configs import GPTConfig
    from attnkit.models.gpt import GPT

    # a tiny random GPT and stand-ins for the downloads and the 20-minute run: only the record is under test
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()
    tok = types.SimpleNamespace(eos_id=0, bos_id=None, decode=lambda ids, skip_special_tokens=True: "x" * len(ids))
    monkeypatch.setattr(pretrained, "load_pretrained", lambda name: (model, tok, types.SimpleNamespace(
        stop_token_ids=[0])))
    ids = torch.randint(1, 16, (400,), generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(documents, "prepare_finetune_data", lambda data, t, mode: (ids, ids[:100], None))

    def finetune(options):
        options.out.mkdir(parents=True)
        (options.out / "summary.json").write_text(json.dumps(
            {"valid_loss": 2.0, "valid_ppl": 7.4, "steps": 3, "elapsed": 1.0, "tokens": 48, "train_loss": 2.1}))

    state = {"train_config": {"lr": 1e-3, "schedule": "cosine", "warmup_steps": 5}, "extra": {}}
    monkeypatch.setattr(attnkit.api, "finetune", finetune)
    monkeypatch.setattr(attnkit.checkpoints, "load", lambda out: types.SimpleNamespace(model=model, tokenizer=tok,
                                                                                      state=state))
    out, md = tmp_path / "run", tmp_path / "finetune.md"
    assert finetune_fortunes.main(["--minutes", "0.1", "--out", str(out), "--batch-size", "2", "--block-size", "8",
                                   "--eval-batches", "2", "--max-new-tokens", "3", "--results", str(md)]) == 0
    record = json.loads((out / "benchmark.json").read_text())
    assert record["date"].endswith(" UTC") and record["machine"]["torch"] == torch.__version__
    assert f"Date: {record['date']}. Machine: {_cpu()}, " in md.read_text()


@pytest.mark.parametrize("script, words", [
    (mt_split_loss, "on pairs it trained on against held-out pairs of the same domain."),
    (ab_seq2seq_step, "against attnkit as it is and torch.nn.Transformer, in alternating rounds of 5 steps."),
    (mt_peer, "BLEU and chrF of both on the test set(s)."),
])
def test_help_shows_the_whole_first_paragraph(script, words, capsys):
    with pytest.raises(SystemExit):
        script.main(["--help"])
    assert words in " ".join(capsys.readouterr().out.split())


def test_mt_profile_refuses_a_run_record_without_its_train_config(tiny_run, tmp_path, capsys):
    _, run = tiny_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (copy / "run.json").write_text("{}")  # a hand-made record: was a KeyError traceback
    with pytest.raises(SystemExit) as exc:
        mt_profile.main([str(copy)])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and line.endswith(
        f"error: {copy}: not a finished `attnkit train mt` run (its records have no 'train_config')"), line
