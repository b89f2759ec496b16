"""The scripts' own flags: an empty ``--out`` / ``--results`` / ``--record`` is a usage error, as in ``attnkit``
(``Path("")`` is the current folder: a run would be written into the folder the script was started in), and
``finetune_fortunes`` refuses its bad flags before it loads and evaluates the pretrained model."""

from __future__ import annotations

import sys

import pytest

from benchmarks import (finetune_fortunes, mt_backtranslation, mt_de_en, mt_peer, shakespeare_char,
                        soak)


def _usage_error(run, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run()
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.fixture
def no_download(monkeypatch):
    import attnkit.interop.pretrained as pretrained

    def refuse(name):
        raise AssertionError("the pretrained model was loaded before the flags were checked")

    monkeypatch.setattr(pretrained, "load_pretrained", refuse)


@pytest.mark.parametrize("call", [
    lambda: shakespeare_char.main(["corpus.txt", "--steps", "2", "--out", ""]),
    lambda: shakespeare_char.main(["corpus.txt", "--steps", "2", "--record", ""]),
    lambda: finetune_fortunes.main(["--out", ""]),
    lambda: finetune_fortunes.main(["--results", " "]),
    lambda: mt_peer.main(["--out", ""]),
    lambda: mt_peer.main(["--results", ""]),
    lambda: soak.main(["lm", "--out", ""]),
], ids=["shakespeare-out", "shakespeare-record", "finetune-out", "finetune-results", "peer-out", "peer-results",
        "soak-out"])
def test_an_empty_path_is_a_usage_error(call, capsys, tmp_path, monkeypatch, no_download):
    monkeypatch.chdir(tmp_path)
    line = _usage_error(call, capsys)
    assert line.endswith("expected a file or folder name, got ''") or line.endswith("got ' '"), line
    assert list(tmp_path.iterdir()) == []  # nothing written in the current folder


@pytest.mark.parametrize("module", [mt_de_en, mt_backtranslation], ids=["mt_de_en", "mt_backtranslation"])
def test_an_empty_out_is_a_usage_error_before_any_data(module, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [module.__name__, "--out", ""])
    line = _usage_error(module.main, capsys)
    assert line.endswith("error: argument --out: expected a file or folder name, got ''"), line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flags, message", [
    (["--minutes", "0"], "--minutes must be a number > 0, got 0.0"),
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--eval-batches", "-1"], "--eval-batches must be >= 1, got -1"),
])
def test_finetune_fortunes_refuses_bad_counts_before_loading(flags, message, no_download, tmp_path, capsys):
    line = _usage_error(lambda: finetune_fortunes.main(["--out", str(tmp_path / "run"), *flags]), capsys)
    assert line.endswith(message), line


def test_finetune_fortunes_refuses_an_existing_run_before_loading(no_download, tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints" / "best").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    line = _usage_error(lambda: finetune_fortunes.main(["--out", str(run)]), capsys)
    assert "already holds a training run" in line, line
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "run.json"]


@pytest.mark.parametrize("flags, message", [
    (["--minutes", "0"], "--minutes must be a number > 0, got 0"),
    (["--reverse-minutes", "-1"], "--reverse-minutes must be a number > 0, got -1"),
    (["--budget", "total", "--reverse-share", "1"], "--reverse-share must be in (0, 1), got 1"),
    (["--threads", "0"], "--threads must be >= 1, got 0"),
    (["--smoke", "0"], "--smoke must be >= 1, got 0"),
])
def test_mt_backtranslation_refuses_a_bad_budget_before_the_reverse_run(flags, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["mt_backtranslation.py", "--out", str(tmp_path / "bt"), *flags])
    monkeypatch.setattr(mt_backtranslation, "attnkit", lambda *a, **k: pytest.fail("a command was run"))
    line = _usage_error(mt_backtranslation.main, capsys)
    assert line.endswith(message), line
    assert not (tmp_path / "bt").exists()


@pytest.mark.parametrize("flags, message", [
    (["--steps", "0"], "TrainConfig.steps must be an int >= 1, got 0"),
    (["--max-time", "0"], "TrainConfig.max_time must be a finite number in (0.0, 1000000000.0], got 0.0"),
    (["--steps", "2", "--warmup-steps", "1", "--n-head", "3"],
     "GPTConfig.n_embd must be divisible by n_head when head_dim is None, got n_embd=128, n_head=3"),
    (["--steps", "2", "--warmup-steps", "1", "--threads", "0"], "--threads must be >= 1, got 0"),
])
def test_shakespeare_char_bad_flags_are_one_line(flags, message, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("To be, or not to be, that is the question.\n" * 200)
    line = _usage_error(lambda: shakespeare_char.main([str(corpus), *flags]), capsys)
    assert line.endswith(f"error: {message}"), line


def test_shakespeare_char_refuses_a_missing_file_and_an_existing_run(tmp_path, capsys):
    line = _usage_error(lambda: shakespeare_char.main([str(tmp_path / "none.txt"), "--steps", "2",
                                                       "--warmup-steps", "1"]), capsys)
    assert "No such file or directory" in line and "none.txt" in line, line
    corpus, run = tmp_path / "corpus.txt", tmp_path / "run"
    corpus.write_text("To be, or not to be, that is the question.\n" * 200)
    (run / "checkpoints").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    line = _usage_error(lambda: shakespeare_char.main([str(corpus), "--steps", "2", "--warmup-steps", "1",
                                                       "--out", str(run)]), capsys)
    assert "already holds a training run" in line, line
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "run.json"]
