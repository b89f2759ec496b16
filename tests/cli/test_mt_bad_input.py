"""Bad input to `attnkit train mt`, `translate` and `eval mt`: one test per rule.

Every failure is one clear line on stderr and exit code 2 (``attnkit.cli.main``), and nothing already on disk
is overwritten.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from attnkit.cli.main import main

# The tiny model of test_mt_end_to_end.py (pytest's importlib mode keeps test files from importing each other).
TINY_MT = ["--preset", "transformer-small", "--set", "d_model=64", "--set", "num_heads=4",
           "--set", "num_encoder_layers=1", "--set", "num_decoder_layers=1", "--set", "dim_feedforward=128",
           "--set", "dropout=0.0", "--set", "norm_first=true", "--vocab-size", "300", "--max-tokens", "384",
           "--max-len", "24", "--schedule", "inverse_sqrt", "--lr", "1.0", "--warmup-steps", "40", "--log-every", "20",
           "--no-progress"]


@pytest.fixture(scope="module")
def copy_data(tmp_path_factory, make_copy_task) -> Path:
    return make_copy_task(tmp_path_factory.mktemp("data") / "copy", sizes=(("train", 200), ("valid", 20), ("test", 20)))


@pytest.fixture(scope="module")
def trained(copy_data, tmp_path_factory) -> Path:
    """A translation run of a few steps (enough to load and decode; quality does not matter here)."""
    run = tmp_path_factory.mktemp("runs") / "mt"
    assert main(["train", "mt", "--data", str(copy_data), "--out", str(run), *TINY_MT, "--steps", "3"]) == 0
    return run


def _train(data: str, out: Path, *extra: str) -> int:
    return main(["train", "mt", "--data", data, "--out", str(out), *TINY_MT, "--steps", "2", *extra])


def _bad_tsv(tmp_path: Path, copy_data: Path) -> Path:
    good = (copy_data / "train.tsv").read_text().splitlines()[:50]
    lines = good[:2] + ["no tab on this line", "\tempty source", "empty target\t", "a\tb\tc"] + good[2:]
    path = tmp_path / "bad.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_malformed_tsv_lines_are_skipped_and_counted(tmp_path, copy_data, capsys):
    bad = _bad_tsv(tmp_path, copy_data)
    assert _train(str(bad), tmp_path / "run", "--valid", str(copy_data / "valid.tsv")) == 0
    err = capsys.readouterr().err
    assert "skipped malformed lines: train 4, valid 0" in err, err
    state = json.loads(next((tmp_path / "run" / "checkpoints").glob("step_*/state.json")).read_text())
    assert state["extra"]["data_stats"]["train_pairs"] == 50
    # eval mt never scores a model on its own training file by default
    assert main(["eval", "mt", "--ckpt", str(tmp_path / "run")]) == 2
    assert "has no test split; pass --data" in capsys.readouterr().err


def test_malformed_tsv_line_refused_with_line_number_under_strict(tmp_path, copy_data, capsys):
    bad = _bad_tsv(tmp_path, copy_data)
    assert _train(str(bad), tmp_path / "run", "--valid", str(copy_data / "valid.tsv"), "--strict") == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: expected exactly one tab" in err, err
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_overlong_sentences_truncated_and_counted(tmp_path, copy_data, capsys):
    long_pair = " ".join(["a b c d e f g h"] * 8)
    data = tmp_path / "long.tsv"
    data.write_text((copy_data / "train.tsv").read_text() + f"{long_pair}\t{long_pair.upper()}\n", encoding="utf-8")
    assert _train(str(data), tmp_path / "run", "--valid", str(copy_data / "valid.tsv")) == 0
    assert "truncated to 24 tokens: train 2, valid 0" in capsys.readouterr().err  # source and target side


def test_overlong_sentences_refused_under_strict(tmp_path, copy_data, capsys):
    long_pair = " ".join(["a b c d e f g h"] * 8)
    data = tmp_path / "long.tsv"
    data.write_text((copy_data / "train.tsv").read_text() + f"{long_pair}\t{long_pair.upper()}\n", encoding="utf-8")
    assert _train(str(data), tmp_path / "run", "--valid", str(copy_data / "valid.tsv"), "--strict") == 2
    err = capsys.readouterr().err
    assert "pair 200" in err and "longer than max_src_len = 24" in err, err


def test_translate_truncates_overlong_input_and_counts_it(trained, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("a b c\n" + " ".join(["a b c d"] * 20) + "\n"))
    assert main(["translate", "--ckpt", str(trained), "--beam", "1"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2
    assert "1 of 2 sentences were longer than max_len = 24 tokens and were truncated" in captured.err


def test_translate_refuses_overlong_input_under_strict(trained, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("a b c\n" + " ".join(["a b c d"] * 20) + "\n"))
    assert main(["translate", "--ckpt", str(trained), "--strict"]) == 2
    assert "line 2: the sentence is" in capsys.readouterr().err


def test_parallel_files_of_different_lengths_are_refused(tmp_path, capsys):
    src, tgt = tmp_path / "train.de", tmp_path / "train.en"
    src.write_text("a b\nc d\ne f\n", encoding="utf-8")
    tgt.write_text("A B\nC D\n", encoding="utf-8")
    assert _train(f"{src},{tgt}", tmp_path / "run", "--valid", f"{src},{src}") == 2
    err = capsys.readouterr().err
    assert "same number of lines" in err and "has 3" in err and "has 2" in err, err
    assert not (tmp_path / "run").exists()


def test_lm_checkpoint_passed_to_translate_and_eval_mt(tmp_path, capsys, monkeypatch):
    from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
    from attnkit.models.builders import build_model
    from attnkit.models.configs import GPTConfig
    from attnkit.checkpoints.checkpoint import save_checkpoint

    tok = CharTokenizer.train(["hello world"])
    config = GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=16)
    ckpt = save_checkpoint(tmp_path / "lm_ckpt", build_model(config), state={"model_config": config.to_dict()},
                           extra={"kind": "lm", "tokenizer": tok.to_dict()})
    monkeypatch.setattr("sys.stdin", io.StringIO("hallo\n"))
    assert main(["translate", "--ckpt", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert "holds a language model" in err and "needs a translation model" in err, err
    assert main(["eval", "mt", "--ckpt", str(ckpt), "--data", str(tmp_path)]) == 2
    assert "holds a language model" in capsys.readouterr().err


def test_mt_checkpoint_passed_to_eval_lm(trained, copy_data, capsys):
    assert main(["eval", "lm", "--ckpt", str(trained), "--data", str(copy_data / "train.tsv")]) == 2
    assert "holds a translation model" in capsys.readouterr().err


def test_unknown_recipe_name(tmp_path, capsys):
    assert _train("no-such-corpus", tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "unknown data recipe 'no-such-corpus'" in err and "de-en" in err, err
    assert not (tmp_path / "run").exists()


def test_language_modelling_recipe_is_not_a_parallel_corpus(tmp_path, capsys):
    assert _train("shakespeare", tmp_path / "run") == 2
    assert "is a lm recipe; translation needs a parallel corpus" in capsys.readouterr().err


def test_a_missing_valid_file_is_named_as_valid(tmp_path, copy_data, capsys):
    assert _train(str(copy_data / "train.tsv"), tmp_path / "run", "--valid", str(tmp_path / "nonexist.tsv")) == 2
    assert "error: --valid: no such file or folder" in capsys.readouterr().err


def test_one_tsv_without_valid_splits_off_a_validation_part(tmp_path, copy_data, capsys):
    # the recipe's warmup (150) is longer than this 2-step run: the default warmup shrinks to fit it
    args = [a for i, a in enumerate(TINY_MT) if not {a, TINY_MT[i - 1]} & {"--warmup-steps", "--schedule", "--lr"}]
    run = tmp_path / "run"
    assert main(["train", "mt", "--data", str(copy_data / "train.tsv"), "--out", str(run), *args, "--steps", "2"]) == 0
    err = capsys.readouterr().err
    assert "no --valid: split off 20 of 200 pairs" in err and "180 train pairs remain" in err, err
    assert "180 train / 20 valid pairs" in err, err
    state = json.loads((run / "run.json").read_text())
    assert state["train_config"]["warmup_steps"] == 1
    from attnkit.checkpoints.checkpoint import latest_checkpoint, read_checkpoint_state
    split = read_checkpoint_state(latest_checkpoint(run / "checkpoints"))["extra"]["data_stats"]["valid_split"]
    assert (split["pairs"], split["valid"], split["train"], split["seed"]) == (200, 20, 180, 0)  # recorded
    assert main(["train", "mt", "--data", str(copy_data / "train.tsv"), "--out", str(run), *args, "--steps", "3",
                 "--resume"]) == 0  # the same split again: the resumed run's data fingerprints match


def test_one_tsv_too_small_to_split_is_refused(tmp_path, copy_data, capsys):
    small = tmp_path / "small.tsv"
    small.write_text("\n".join((copy_data / "train.tsv").read_text().splitlines()[:6]) + "\n", encoding="utf-8")
    assert _train(str(small), tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "holds 6 usable pairs (0 malformed lines skipped): too few to split off a validation part" in err, err
    assert "pass validation pairs (--valid FILE)" in err and not (tmp_path / "run").exists()


def test_existing_run_is_not_overwritten(trained, copy_data, capsys):
    before = {p: p.read_bytes() for p in trained.rglob("*") if p.is_file()}
    assert _train(str(copy_data), trained) == 2
    assert "already holds a training run" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in trained.rglob("*") if p.is_file()} == before


def test_average_last_needs_enough_checkpoints_kept(tmp_path, copy_data, capsys):
    assert _train(str(copy_data), tmp_path / "run", "--average-last", "4", "--keep-last", "2") == 2
    assert "--average-last 4 needs that many step checkpoints" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_average_last_beyond_the_checkpoints_the_steps_write_is_refused_before_training(tmp_path, copy_data, capsys):
    for flags, hint in ((("--ckpt-every", "1"), "raise --steps"), (("--steps", "8", "--ckpt-every", "4"),
                                                                     "lower --ckpt-every to 2")):
        assert _train(str(copy_data), tmp_path / "run", "--average-last", "3", *flags) == 2
        steps, every, written = (2, 1, 2) if hint == "raise --steps" else (8, 4, 2)
        assert (f"--average-last 3 needs that many step checkpoints, but --steps {steps} with --ckpt-every {every} "
                f"writes {written}; {hint}") in capsys.readouterr().err
        assert not (tmp_path / "run").exists()


def test_too_few_checkpoints_to_average_keep_the_final_scores(tmp_path, copy_data, capsys):
    run = tmp_path / "run"  # stopped by the target at step 2 of 4, --ckpt-every 1: two step checkpoints, three asked for
    assert _train(str(copy_data), run, "--average-last", "3", "--ckpt-every", "1", "--bleu-sentences", "2",
                  "--steps", "4", "--eval-every", "2", "--stop-at-loss", "1000") == 2
    assert "cannot average the last 3 checkpoints" in capsys.readouterr().err
    final = json.loads((run / "summary.json").read_text())["final_valid"]  # best/ was scored all the same
    assert final["sentences"] == 20 and final["step"] in (1, 2)
    assert not (run / "checkpoints" / "averaged").exists()


def test_eval_mt_counts_or_refuses_malformed_reference_lines(trained, tmp_path, copy_data, capsys):
    bad = _bad_tsv(tmp_path, copy_data)
    assert main(["eval", "mt", "--ckpt", str(trained), "--data", str(bad), "--beam", "1",
                 "--json", str(tmp_path / "r.json")]) == 0
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["skipped_lines"] == 4
    assert result["split"] is None and f"sentences, {bad}, beam 1" in capsys.readouterr().out  # a file has no split
    assert main(["eval", "mt", "--ckpt", str(trained), "--data", str(bad), "--strict"]) == 2
    assert f"{bad}:3:" in capsys.readouterr().err


def test_translate_missing_input_file(trained, tmp_path, capsys):
    assert main(["translate", "--ckpt", str(trained), "--input", str(tmp_path / "nope.txt")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_unknown_optimizer_is_one_line_and_writes_nothing(tmp_path, copy_data, capsys):
    assert _train(str(copy_data), tmp_path / "run", "--optimizer", "sgd") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--optimizer must be one of ['adamw', 'muon'], got 'sgd'" in err, err
    assert not (tmp_path / "run").exists()


def test_batch_size_is_no_flag_of_train_mt(tmp_path, copy_data, capsys):
    """train mt sizes its batches by --max-tokens: a --batch-size (accepted and ignored before) is a usage error."""
    with pytest.raises(SystemExit) as stop:
        _train(str(copy_data), tmp_path / "run", "--batch-size", "8")
    assert stop.value.code == 2 and "unrecognized arguments: --batch-size 8" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    with pytest.raises(SystemExit):
        main(["train", "mt", "--help"])
    usage = capsys.readouterr().out
    assert "--batch-size" not in usage and "--max-tokens" in usage


def test_muon_run_trains_and_keeps_its_optimizer_state(tmp_path, copy_data):
    from attnkit.checkpoints.checkpoint import read_checkpoint_state

    assert _train(str(copy_data), tmp_path / "run", "--optimizer", "muon", "--muon-ns-steps", "2") == 0
    step = next((tmp_path / "run" / "checkpoints").glob("step_*"))
    state = read_checkpoint_state(step)
    assert state["train_config"]["optimizer"] == "muon" and state["train_config"]["muon_ns_steps"] == 2
    names = [g["name"] for g in state["optimizer"]["param_groups"]]
    assert names == ["muon", "decay", "no_decay"], names


@pytest.mark.parametrize("flags, message", [
    (["--preset", "nope"], "unknown preset 'nope'; expected one of"),
    (["--preset", "gpt2"], "train mt needs an encoder-decoder preset"),
    (["--set", "no_such_field=1"], "no_such_field"),
    (["--set", "dropout=2"], "dropout"),
])
def test_a_bad_model_choice_fails_before_the_data_is_read(tmp_path, copy_data, capsys, monkeypatch, flags, message):
    from attnkit.training import MTTask

    def read(*args, **kwargs):
        raise AssertionError("the data was read before the model flags were checked")

    monkeypatch.setattr(MTTask, "from_data", read)
    assert _train(str(copy_data), tmp_path / "run", *flags) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
