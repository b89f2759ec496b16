"""The scripts' own flags: an empty ``--out`` / ``--results`` / ``--record`` is a usage error, as in ``attnkit``
(``Path("")`` is the current folder: a run would be written into the folder the script was started in), and
``finetune_fortunes`` refuses its bad flags before it loads and evaluates the pretrained model. The other scripts
refuse a bad count, a non-number, a missing input and an unwritable ``--json`` with one usage line (exit 2) before
their work: each test below replaces that work with a function that fails the test if it is reached."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks import (finetune_fortunes, gpu_proof, int8_gptq, masked_rows, mt_backtranslation, mt_batch_build,
                        mt_de_en, mt_ding_phrases, mt_domain_tags, mt_peer, mt_profile, mt_split_loss,
                        mt_step_scaling, shakespeare_char, soak, token_store)


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


def _unreached(what):
    def fail(*args, **kwargs):
        pytest.fail(f"{what} ran before the flags were checked")
    return fail


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("ein haus\ta house\n" * 50, encoding="utf-8")
    return path


@pytest.mark.parametrize("flags, message", [
    (["--tokens", "abc"], "--tokens: expected comma-separated integers >= 1, got 'abc'"),
    (["--tokens", "0"], "--tokens: expected comma-separated integers >= 1, got '0'"),
    (["--multiples", "x"], "--multiples: expected comma-separated integers >= 1, got 'x'"),
    (["--max-len", "0"], "--max-len must be >= 2 (one token plus <bos>/<eos>), got 0"),
    (["--json", ""], "argument --json: expected a file or folder name, got ''"),
    (["--json", "nodir/batches.json"], "argument --json: no such folder 'nodir' to write 'batches.json' in"),
])
def test_mt_batch_build_refuses_bad_flags_before_encoding(flags, message, pairs_file, monkeypatch, tmp_path, capsys):
    import attnkit.training.mt_task as mt_task

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(mt_task.MTTask, "from_data", _unreached("MTTask.from_data"))
    line = _usage_error(lambda: mt_batch_build.main(["--data", str(pairs_file), *flags]), capsys)
    assert line.endswith(f"error: {message}"), line


def test_mt_batch_build_and_step_scaling_refuse_a_missing_data_file(tmp_path, capsys):
    missing = str(tmp_path / "none.tsv")
    line = _usage_error(lambda: mt_batch_build.main(["--data", missing]), capsys)
    assert line.endswith(f"error: --data: no such file or folder: {missing}"), line
    line = _usage_error(lambda: mt_step_scaling.main(["--data", missing, "--device", "cpu"]), capsys)
    assert line.endswith(f"error: --data: no such file or folder: {missing}"), line


@pytest.mark.parametrize("flags, message", [
    (["--device", "nosuch"], "error: device must be one of ['auto', 'cpu', 'cuda', 'cuda:N', 'mps'], got 'nosuch'"),
    (["--json", ""], "error: argument --json: expected a file or folder name, got ''"),
])
def test_mt_step_scaling_refuses_a_bad_device_or_json_before_encoding(flags, message, pairs_file, monkeypatch,
                                                                    capsys):
    import attnkit.training.mt_task as mt_task

    monkeypatch.setattr(mt_task.MTTask, "from_data", _unreached("MTTask.from_data"))
    line = _usage_error(lambda: mt_step_scaling.main(["--data", str(pairs_file), *flags]), capsys)
    assert line.endswith(message), line


def test_mt_profile_refuses_a_missing_run_or_checkpoint(tmp_path, capsys):
    line = _usage_error(lambda: mt_profile.main([str(tmp_path / "none")]), capsys)
    assert line.endswith(f"error: run: no such run folder {str(tmp_path / 'none')!r}"), line
    run = tmp_path / "run"  # the logs of a run, but no checkpoint
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 5, "elapsed": 1.0, "tokens": 100, "tokens_per_s": 100.0})
                                       + "\n")
    (run / "run.json").write_text(json.dumps({"train_config": {"seed": 0}}))
    line = _usage_error(lambda: mt_profile.main([str(run)]), capsys)
    assert "mt_profile" in line and "error:" in line and "checkpoint" in line, line


def test_mt_split_loss_refuses_a_missing_checkpoint_and_bad_counts(pairs_file, tmp_path, capsys):
    missing = tmp_path / "none"
    line = _usage_error(lambda: mt_split_loss.main(["--ckpt", str(missing), "--pairs", f"a={pairs_file}"]), capsys)
    assert line.endswith(f"error: --ckpt: no such checkpoint or run folder: {missing}"), line
    line = _usage_error(lambda: mt_split_loss.main(["--ckpt", str(missing), "--pairs", f"a={pairs_file}",
                                                    "--threads", "0"]), capsys)
    assert line.endswith("error: --threads must be >= 1, got 0"), line


def test_int8_gptq_refuses_a_missing_calibration_file_before_loading(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(int8_gptq, "load_quality_model", _unreached("the model load"))
    line = _usage_error(lambda: int8_gptq.main(["--calibration", str(tmp_path / "none.txt")]), capsys)
    assert "error: --calibration: [Errno 2] No such file or directory" in line and "none.txt" in line, line
    line = _usage_error(lambda: int8_gptq.main(["--calibration", str(tmp_path), "--sequences", "0"]), capsys)
    assert line.endswith("error: --sequences must be >= 1, got 0"), line


# (script, its folder flag, the work it must not reach, flags, the usage line's message)
_FOLDER_SCRIPTS = [
    (token_store, "--work", "corpus_lines", ["--sizes", "abc"],
     "--sizes: a size is a number with K, M or G (decimal), got 'abc'"),
    (token_store, "--work", "corpus_lines", ["--hf-num-proc", "x"],
     "--hf-num-proc: expected comma-separated integers >= 0, got 'x'"),
    (token_store, "--work", "corpus_lines", ["--rounds", "0"], "--rounds must be >= 1, got 0"),
    (token_store, "--work", "corpus_lines", ["--vocab", "0"],
     "--vocab must be >= 257 (256 bytes + <|endoftext|>), got 0"),
    (token_store, "--work", "corpus_lines", ["--phases", "train,tokenise"],
     "--phases: unknown ['tokenise']; choose from train, baseline, tokenize"),
    (token_store, "--work", "corpus_lines", ["--record", ""],
     "argument --record: expected a file or folder name, got ''"),
    (mt_de_en, "--out", "LoadSampler", ["--minutes", "0"], "--minutes must be a number > 0, got 0"),
    (mt_de_en, "--out", "LoadSampler", ["--threads", "0"], "--threads must be >= 1, got 0"),
    (mt_de_en, "--out", "LoadSampler", ["--upsample-dictionary", "0"], "--upsample-dictionary must be >= 1, got 0"),
    (mt_de_en, "--out", "LoadSampler", ["--smoke", "0"], "--smoke must be >= 1, got 0"),
    (mt_peer, "--out", "LoadSampler", ["--minutes", "nan"], "--minutes must be a number > 0, got nan"),
    (mt_peer, "--out", "LoadSampler", ["--threads", "0"], "--threads must be >= 1, got 0"),
    (mt_peer, "--out", "LoadSampler", ["--smoke-steps", "0"], "--smoke-steps must be >= 1, got 0"),
    (mt_peer, "--out", "LoadSampler", ["--max-tokens", "0"], "--max-tokens must be >= 1, got 0"),
]


@pytest.mark.parametrize("script, folder_flag, work, flags, message", _FOLDER_SCRIPTS,
                         ids=[f"{case[0].__name__.split('.')[-1]}{case[3][0]}" for case in _FOLDER_SCRIPTS])
def test_bad_flags_are_refused_before_any_work_or_folder(script, folder_flag, work, flags, message, tmp_path,
                                                          monkeypatch, capsys):
    monkeypatch.setattr(script, work, _unreached(work))
    argv = [folder_flag, str(tmp_path / "work"), *flags]
    if script is mt_de_en:  # its main() reads sys.argv
        monkeypatch.setattr(sys, "argv", ["mt_de_en.py", *argv])
        line = _usage_error(script.main, capsys)
    else:
        line = _usage_error(lambda: script.main(argv), capsys)
    assert line.endswith(f"error: {message}"), line
    assert not (tmp_path / "work").exists()


def test_token_store_refuses_an_empty_work_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(token_store, "corpus_lines", _unreached("the corpus preparation"))
    line = _usage_error(lambda: token_store.main(["--work", "", "--sizes", "1K"]), capsys)
    assert line.endswith("error: argument --work: expected a file or folder name, got ''"), line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flags, message", [
    (["--device", "nosuch"], "--device: device must be one of ['auto', 'cpu', 'cuda', 'cuda:N', 'mps'], got 'nosuch'"),
    (["--json", ""], "argument --json: expected a file or folder name, got ''"),
])
def test_masked_rows_refuses_a_bad_device_or_json_before_the_cases(flags, message, monkeypatch, capsys):
    monkeypatch.setattr(masked_rows, "encoder_case", _unreached("a case"))
    line = _usage_error(lambda: masked_rows.main(flags), capsys)
    assert line.endswith(f"error: {message}"), line


@pytest.mark.parametrize("flags, message", [
    (["generate", "--calls", "0"], "--calls must be >= 1, got 0"),
    (["generate", "--calls", "50"], "--sample-every must be <= --calls, got 100 and 50"),
    (["generate", "--new-tokens", "0"], "--new-tokens must be >= 1, got 0"),
    (["lm", "--minutes", "0"], "--minutes must be a number > 0, got 0"),
    (["mt", "--every", "-1"], "--every must be a number > 0, got -1"),
    (["generate", "--name", ""], "--name: expected a file name stem, got ''"),
])
def test_soak_refuses_bad_flags_before_soaking(flags, message, monkeypatch, capsys):
    monkeypatch.setattr(soak, "soak_generate", _unreached("the generate soak"))
    monkeypatch.setattr(soak, "soak_training", _unreached("the training soak"))
    line = _usage_error(lambda: soak.main(flags), capsys)
    assert line.endswith(f"error: {message}"), line


@pytest.mark.parametrize("argv, message", [
    (["write", ""], "argument dest: expected a file or folder name, got ''"),
    (["evaluate", "", "v.tsv", "t.tsv", "d.tsv"], "argument run: expected a file or folder name, got ''"),
    (["evaluate", "none", "v.tsv", "t.tsv", "d.tsv"],
     "run: 'none' is no finished `attnkit train mt` run folder (no summary.json)"),
])
def test_mt_domain_tags_refuses_an_empty_path_or_a_missing_run(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(mt_domain_tags, "write_tagged", _unreached("write_tagged"))
    monkeypatch.setattr(mt_domain_tags, "evaluate", _unreached("the evaluation"))
    monkeypatch.setattr(sys, "argv", ["mt_domain_tags.py", *argv])
    line = _usage_error(mt_domain_tags.main, capsys)
    assert line.endswith(f"error: {message}"), line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    ([""], "argument out: expected a file or folder name, got ''"),
    (["nodir/ding.tsv"], "argument out: no such folder 'nodir' to write 'ding.tsv' in"),
])
def test_mt_ding_phrases_refuses_an_unwritable_out_before_the_data(argv, message, tmp_path, monkeypatch, capsys):
    import attnkit.data.corpora.registry as registry

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(registry, "prepare", _unreached("the recipe"))
    line = _usage_error(lambda: mt_ding_phrases.main(argv), capsys)
    assert line.endswith(f"error: {message}"), line


def test_gpu_proof_refuses_an_empty_work_folder_and_bad_numbers(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _usage_error(lambda: gpu_proof.main(["shakespeare", "--work", "", "--dry-run"]), capsys)
    assert line.endswith("error: argument --work: expected a folder name, got ''"), line
    monkeypatch.setattr(gpu_proof, "run_shakespeare", _unreached("the shakespeare run"))
    monkeypatch.setattr(gpu_proof, "run_mfu", _unreached("the mfu run"))
    for flags, message in ((["--minutes", "nan"], "--minutes must be > 0 and --steps >= 1, got nan and 60"),
                           (["--peak-tflops", "0"], "--peak-tflops must be a number > 0, got 0.0")):
        assert gpu_proof.main(["all", "--dry-run", *flags]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == f"gpu_proof: error: {message}"
    assert list(tmp_path.iterdir()) == []
