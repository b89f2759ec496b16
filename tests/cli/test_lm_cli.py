"""The language-modelling workflow from the command line: train lm → sample → eval, resume, bad input.

Runs ``attnkit.cli.main.main([...])`` in-process on a tiny model and a small generated corpus, so the
whole CLI path (argument parsing, data, tokenizer, trainer, checkpoint, loading, generation) is exercised.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnkit.cli.main import join_text_values, main
from attnkit.checkpoints import load

TINY = ["--preset", "char-small", "--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=32",
        "--block-size", "16", "--batch-size", "8", "--warmup-steps", "2", "--eval-every", "10",
        "--eval-batches", "2", "--ckpt-every", "10", "--log-every", "5", "--no-progress"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """About 20 kB of speeches in the Tiny-Shakespeare layout, from a seeded generator."""
    rng = random.Random(0)
    speakers = ["ROMEO", "JULIET", "NURSE", "FRIAR"]
    words = "love night day sweet death fair light moon star heart hand kiss name rose dream".split()
    lines = []
    for _ in range(300):
        lines.append(rng.choice(speakers) + ":")
        for _ in range(rng.randint(1, 3)):
            lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 9))).capitalize() + ".")
        lines.append("")
    path = tmp_path_factory.mktemp("corpus") / "plays.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _train(corpus: Path, out: Path, *extra: str) -> int:
    return main(["train", "lm", "--data", str(corpus), "--out", str(out), *TINY, *extra])


def test_train_sample_eval(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(corpus, out, "--steps", "40", "--lr", "1e-2") == 0
    for name in ("run.json", "metrics.jsonl", "metrics.csv", "loss.png", "summary.json"):
        assert (out / name).is_file(), name
    assert (out / "checkpoints" / "best" / "model.safetensors").is_file()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert losses[-1] < losses[0] - 0.5  # it learned something

    loaded = load(out)
    model, tok, state = loaded.model, loaded.tokenizer, loaded.state
    assert state["extra"]["kind"] == "lm" and tok.vocab_size == model.config.vocab_size

    capsys.readouterr()
    assert main(["sample", "--ckpt", str(out), "--prompt", "ROMEO:", "--max-new-tokens", "30", "--seed", "3"]) == 0
    first, err = capsys.readouterr()
    assert first.startswith("ROMEO:") and len(first) > len("ROMEO:") + 10
    assert "its older half is dropped and the kept keys are shifted" in err  # 6 + 30 > block 16; char-small is RoPE
    # same seed, same text; within the context the KV cache does not change the sampled tokens
    within = ["sample", "--ckpt", str(out), "--prompt", "ROMEO:", "--max-new-tokens", "11", "--seed", "3"]
    assert main(within) == 0
    cached = capsys.readouterr().out
    assert main(within + ["--no-cache", "--no-stream"]) == 0
    assert capsys.readouterr().out == cached and len(cached) > len("ROMEO:") + 5
    # nor does the compiled decoding step (within the context: past it, sampling slides a window, uncached)
    block = model.config.block_size
    short = ["sample", "--ckpt", str(out), "--prompt", "ROMEO:", "--max-new-tokens", str(block - 6), "--seed", "3"]
    assert main(short) == 0
    eager = capsys.readouterr().out
    assert main(short + ["--compile"]) == 0
    assert capsys.readouterr().out == eager and len(eager) > len("ROMEO:") + 5
    assert main(["sample", "--ckpt", str(out), "--prompt", "RO", "--max-new-tokens", "3", "--compile",
                 "--no-cache"]) == 2
    assert "needs use_cache=True" in capsys.readouterr().err
    assert main(["sample", "--ckpt", str(out), "--prompt", "ROMEO:", "--max-new-tokens", str(block), "--compile"]) == 0
    assert "--compile runs on a fixed cache" in capsys.readouterr().err

    assert main(["eval", "lm", "--ckpt", str(out), "--data", str(corpus)]) == 0
    printed = capsys.readouterr().out
    assert "loss" in printed and "perplexity" in printed


def _losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "loss" in r}


def test_sigkill_then_resume_matches_uninterrupted_run(corpus, tmp_path):
    """`attnkit train lm` killed with SIGKILL mid-run, then `--resume`d: every per-step loss equals an
    uninterrupted run's, bit for bit (dropout on, so the RNG state must be restored exactly)."""
    args = ["--data", str(corpus), *TINY, "--steps", "60", "--ckpt-every", "10", "--log-every", "1",
            "--set", "dropout=0.1"]
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert main(["train", "lm", "--out", str(straight), *args]) == 0

    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "attnkit", "train", "lm", "--out", str(killed), *args],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        # wait until the run is past its second checkpoint, then kill it without warning
        while not (killed / "checkpoints" / "step_00000020").is_dir():
            assert proc.poll() is None, "the training process ended before it could be killed"
            assert time.monotonic() < deadline, "no checkpoint appeared in time"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (killed / "summary.json").exists()  # really interrupted

    assert main(["train", "lm", "--out", str(killed), "--resume", "--no-progress"]) == 0
    assert _losses(killed) == _losses(straight)
    assert sorted(_losses(killed)) == list(range(1, 61))


def test_refuses_existing_run_without_resume(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(corpus, out, "--steps", "10") == 0
    before = (out / "metrics.jsonl").read_bytes()
    assert _train(corpus, out, "--steps", "10") == 2
    assert "resume" in capsys.readouterr().err
    assert (out / "metrics.jsonl").read_bytes() == before  # nothing overwritten


def test_resume_with_changed_config_is_refused(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(corpus, out, "--steps", "10") == 0
    capsys.readouterr()
    assert main(["train", "lm", "--out", str(out), "--resume", "--steps", "20", "--lr", "0.5", "--no-progress"]) == 2
    assert "lr" in capsys.readouterr().err
    assert main(["train", "lm", "--out", str(out), "--resume", "--steps", "20", "--set", "n_layer=2",
                 "--no-progress"]) == 2
    assert "n_layer" in capsys.readouterr().err


def test_a_resume_with_nothing_to_train_or_a_changed_flag_is_one_line_before_any_work(corpus, tmp_path, capsys):
    """Was: a finished run resumed silently (the final evaluation again, "done: 10 steps"), and --batch-size was
    refused by its config field after the data was read and the model built."""
    out = tmp_path / "run"
    assert _train(corpus, out, "--steps", "10") == 0
    capsys.readouterr()
    for extra, message in (([], f"attnkit train: error: {out} already ran its 10 steps (--steps 10): nothing to "
                                f"resume; pass --steps N > 10 (or --max-time MIN without --steps) to train more\n"),
                           (["--steps", "20", "--batch-size", "4"], "attnkit train: error: --resume: the run was "
                            "trained with --batch-size 8, got 4 (a resumed run keeps its settings; only --steps, "
                            "--max-time, --stop-at-loss, --device, --activation-checkpointing and --loss-chunks may "
                            "change)\n")):
        assert main(["train", "lm", "--out", str(out), "--resume", "--no-progress", *extra]) == 2
        captured = capsys.readouterr()
        assert captured.err == message and captured.out == ""  # no data, model or evaluation lines first


def test_a_short_run_with_the_default_warmup(corpus, tmp_path, capsys):
    """The recipe's warmup (50) is longer than a 30-step run: the default shrinks to a tenth of the run, a given
    --warmup-steps larger than --steps is still refused, and a short run's other mistakes are the ones reported."""
    at = TINY.index("--warmup-steps")
    no_warmup = TINY[:at] + TINY[at + 2:]
    out = tmp_path / "run"
    assert main(["train", "lm", "--data", str(corpus), "--out", str(out), *no_warmup, "--steps", "30"]) == 0
    assert json.loads((out / "run.json").read_text())["train_config"]["warmup_steps"] == 3
    timed = tmp_path / "timed"  # by time alone: the recipe's 50 steps, or a tenth of the budget if that comes first
    assert main(["train", "lm", "--data", str(corpus), "--out", str(timed), *no_warmup, "--max-time", "0.01"]) == 0
    cfg = json.loads((timed / "run.json").read_text())["train_config"]
    assert (cfg["warmup_steps"], cfg["warmup_time_share"], cfg["steps"]) == (50, 0.1, None)
    capsys.readouterr()
    short = ["train", "lm", "--out", str(tmp_path / "other"), *no_warmup, "--steps", "30"]
    for extra, message in (
            (["--data", str(corpus), "--warmup-steps", "31"],  # named by its flag (was TrainConfig.warmup_steps)
             "--warmup-steps must be <= steps = 30 for the cosine schedule, got 31"),
            (["--data", str(corpus), "--preset", "no-such-preset"], "no-such-preset"),
            (["--data", str(corpus), "--set", "foo=1"], "foo"),
            (["--data", str(corpus), "--set", "n_layer"], "--set expects FIELD=VALUE, got 'n_layer'"),
            (["--data", str(tmp_path / "missing.txt")], "missing.txt")):
        assert main([*short, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert message in err and ("warmup" not in err or "--warmup-steps" in extra), (extra, err)
    assert not (tmp_path / "other").exists()


def test_resume_without_checkpoint(tmp_path, capsys):
    assert main(["train", "lm", "--out", str(tmp_path / "nothing"), "--resume", "--no-progress"]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_bad_data_files(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert _train(empty, tmp_path / "r1", "--steps", "2") == 2
    assert "empty" in capsys.readouterr().err

    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"hello world\n" * 10 + "caf\u00e9 au lait\n".encode("latin-1") * 50)
    assert _train(latin1, tmp_path / "r2", "--steps", "2") == 2
    err = capsys.readouterr().err
    assert "UTF-8" in err and "123" in err  # names the byte offset of the first bad byte

    binary = tmp_path / "bin.dat"
    binary.write_bytes(bytes(range(256)) * 40)
    assert _train(binary, tmp_path / "r4", "--steps", "2") == 2
    assert "binary" in capsys.readouterr().err

    short = tmp_path / "short.txt"
    short.write_text("To be, or not to be.\n")
    assert _train(short, tmp_path / "r3", "--steps", "2") == 2
    assert "block" in capsys.readouterr().err
    assert not (tmp_path / "r1").exists() or not any((tmp_path / "r1").iterdir())


def test_prompt_outside_char_vocabulary(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(corpus, out, "--steps", "5") == 0
    capsys.readouterr()
    assert main(["sample", "--ckpt", str(out), "--prompt", "ROMEO: ☃ ünïcode", "--max-new-tokens", "5"]) == 2
    err = capsys.readouterr().err
    assert "☃" in err



def test_text_values_that_start_with_a_dash(corpus, tmp_path, capsys):
    """Was: argparse's usage message, "argument --prompt: expected one argument", for a prompt starting with "-"
    (benchmarks/fuzz_loaders.py, sample-cli #9798). A free-text option takes the next argument as it is."""
    out = tmp_path / "run"
    assert _train(corpus, out, "--steps", "2") == 0
    capsys.readouterr()
    assert main(["sample", "--ckpt", str(out), "--prompt", "ROMEO:", "--stop", "-x-", "--max-new-tokens", "3",
                 "--seed", "0", "--no-stream"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")
    assert main(["sample", "--ckpt", str(out), "--prompt", "-5 degrees", "--max-new-tokens", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnkit sample: error: ") and "'-'" in err[0], err


def test_join_text_values():
    assert join_text_values(["sample", "--prompt", "-x", "--stop", "--", "--seed", "1"]) == \
        ["sample", "--prompt=-x", "--stop=--", "--seed", "1"]
    assert join_text_values(["trace", "--text", "plain", "--src", "-"]) == ["trace", "--text", "plain", "--src=-"]
    assert join_text_values(["sample", "--", "--prompt", "-x"]) == ["sample", "--", "--prompt", "-x"]
    assert join_text_values(["sample", "--prompt"]) == ["sample", "--prompt"]  # argparse says what is missing

def test_checkpoint_missing_or_corrupt_file(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(corpus, out, "--steps", "10") == 0
    ckpt = out / "checkpoints" / "step_00000010"
    (ckpt / "model.safetensors").write_bytes((ckpt / "model.safetensors").read_bytes()[:100])
    capsys.readouterr()
    assert main(["sample", "--ckpt", str(ckpt), "--prompt", "RO", "--max-new-tokens", "3"]) == 2
    assert "model.safetensors" in capsys.readouterr().err
    (ckpt / "state.json").unlink()
    assert main(["sample", "--ckpt", str(ckpt), "--prompt", "RO", "--max-new-tokens", "3"]) == 2
    assert "state.json" in capsys.readouterr().err or "no checkpoint" in capsys.readouterr().err


def test_help_on_every_command(capsys):
    for argv in (["--help"], ["train", "--help"], ["train", "lm", "--help"], ["sample", "--help"],
                 ["params", "--help"], ["data", "--help"], ["data", "prepare", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
        assert "usage:" in capsys.readouterr().out


def test_ctrl_c_while_torch_is_still_importing_exits_130(monkeypatch, capsys):
    """Ctrl-C in a command's first seconds cuts its imports short: the exit is 130 and one line, not a traceback of
    the process-group cleanup importing the half-loaded torch again (here: a module that cannot be imported)."""
    import attnkit.cli.params

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(attnkit.cli.params, "run", interrupted)
    monkeypatch.setitem(sys.modules, "attnkit.training.distributed", None)  # `import` of it raises ImportError
    assert main(["params", "gpt2"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_ctrl_c_while_the_command_starts_ends_it_quietly():
    """Ctrl-C while the parser is built or torch loads ends the process at once, by SIGINT's default action (a
    shell shows 130): no traceback of half-done imports, no abort inside a C extension's initialisation."""
    script = ("import os, signal, sys\n"
              "import attnkit.cli.main as m\n"
              "build = m.build_parser\n"
              "def interrupted():\n"
              "    os.kill(os.getpid(), signal.SIGINT)\n"
              "    return build()\n"
              "m.build_parser = interrupted\n"
              "sys.exit(m.main(['params', 'gpt2']))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (-signal.SIGINT, b"")


def test_the_command_runs_under_the_sigint_handler_it_was_started_with(monkeypatch, capsys):
    """Only the start is quiet: the command itself gets Ctrl-C as KeyboardInterrupt (a training run checkpoints
    then), and a SIGINT the process ignores (a background job) is never turned back on."""
    import attnkit.cli.params

    seen = []
    monkeypatch.setattr(attnkit.cli.params, "run", lambda args: seen.append(signal.getsignal(signal.SIGINT)) or 0)
    previous = signal.getsignal(signal.SIGINT)
    try:
        for handler in (signal.default_int_handler, signal.SIG_IGN):
            signal.signal(signal.SIGINT, handler)
            assert main(["params", "gpt2"]) == 0
            assert seen[-1] is handler and signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_reader_going_away_stops_quietly_with_141():
    """``attnkit sample ... | head``: when the reader of stdout closes the pipe, the command stops at once with exit
    code 141 (128 + SIGPIPE, as a Unix filter) and nothing on stderr, not "error: [Errno 32] Broken pipe" (2)."""
    script = ("import sys, attnkit.cli.params as p\n"
              "from attnkit.cli.main import main\n"
              "def flood(args):\n"
              "    while True:\n"
              "        print('x' * 99, flush=True)\n"
              "p.run = flood\n"
              "sys.exit(main(['params']))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"x" * 99 + b"\n"
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""


def test_an_empty_out_is_refused_not_the_working_directory(corpus, tmp_path, monkeypatch, capsys):
    """``--out ""`` is no folder: it was read as ``Path("")``, the working directory, and a run was written there."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", "lm", "--data", str(corpus), "--out", "", "--steps", "1", *TINY]) == 2
    assert "out must not be empty, got ''" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, error", [
    (["sample", "--ckpt", "x", "--temprature", "0.8"],
     "attnkit sample: error: unrecognized arguments: --temprature 0.8; did you mean --temperature?"),
    (["train", "lm", "--max_time", "1"], "attnkit train lm: error: unrecognized arguments: --max_time 1; did you mean "
                                         "--max-time?"),
    (["data", "list", "--bogus"], "attnkit data list: error: unrecognized arguments: --bogus"),
])
def test_a_misspelt_flag_is_the_commands_error_with_the_closest_flag(argv, error, capsys):
    """The command that got the flag says so, with its own usage and the flag meant (it was the top-level parser's
    bare "attnkit: error: unrecognized arguments", with the usage of `attnkit COMMAND`)."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.splitlines()[-1] == error
    assert err.startswith(f"usage: attnkit {' '.join(argv[:2 if argv[0] in ('train', 'data') else 1])} ")


def test_params_command(capsys):
    assert main(["params", "gpt2"]) == 0
    assert "124,439,808" in capsys.readouterr().out
    assert main(["params", "gpt2-seed002"]) == 0
    out = capsys.readouterr().out
    for line in ("38,633,472", "786,432", "85,054,464", "1,536", "163,109,376"):
        assert line in out


@pytest.mark.network
def test_train_with_gpt2_tokenizer(corpus, tmp_path, monkeypatch, capsys):
    """`--tokenizer gpt2`: GPT-2's BPE (from the openai-whisper sdist, cached) drives an LM run end to end."""
    home = Path(os.environ.get("ATTNKIT_TEST_HOME") or Path.home() / ".cache" / "attnkit-tests").expanduser()
    monkeypatch.setenv("ATTNKIT_HOME", str(home))
    out = tmp_path / "run"
    assert _train(corpus, out, "--tokenizer", "gpt2", "--steps", "3") == 0
    loaded = load(out)
    model, tok = loaded.model, loaded.tokenizer
    assert tok.vocab_size == 50257 == model.config.vocab_size
    assert tok.encode("Hello world") == [15496, 995]
    capsys.readouterr()
    assert main(["sample", "--ckpt", str(out), "--prompt", "ROMEO:", "--max-new-tokens", "3", "--seed", "0"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")


@pytest.mark.parametrize("flags, message", [
    (["--preset", "nope"], "unknown preset 'nope'; expected one of"),
    (["--preset", "transformer-small"], "train lm needs a decoder-only (GPT) preset"),
    (["--set", "no_such_field=1"], "no_such_field"),
    (["--recipe", "shakespeare-char-gpu", "--device", "cpu"], "--cuda-graphs needs a CUDA device"),  # a GPU recipe
])
def test_a_bad_model_choice_fails_before_the_corpus_is_read(corpus, tmp_path, capsys, monkeypatch, flags, message):
    import attnkit.data.pipeline.lm_dataset as lm_dataset

    def read(*args, **kwargs):
        raise AssertionError("the corpus was read before the model flags were checked")

    monkeypatch.setattr(lm_dataset, "prepare_lm_data", read)
    assert _train(corpus, tmp_path / "run", "--steps", "2", *flags) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
