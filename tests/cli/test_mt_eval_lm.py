"""`attnkit eval lm` (attnkit.api.evaluate_lm, beside evaluate_mt in attnkit/api/evaluation.py): the reported loss is the
mean cross-entropy over every window of the validation split, and --max-batches evaluates a subset; --model scores a
pretrained model."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attnkit import api
from attnkit.cli.main import main
from attnkit.data.pipeline.lm_dataset import eval_batches, prepare_lm_data
from attnkit.checkpoints import load

from helpers import tiny_hf_folder


def _train_tiny_lm(tmp_path: Path, text: str, *, steps: int) -> tuple[Path, Path]:
    """``text`` written to a file and a 1-layer, 32-wide char model (block 16) trained on it for ``steps`` updates
    with ``attnkit train lm``: (the text file, the run folder)."""
    corpus = tmp_path / "text.txt"
    corpus.write_text(text, encoding="utf-8")
    run = tmp_path / "lm"
    assert main(["train", "lm", "--data", str(corpus), "--out", str(run), "--preset", "char-small",
                 "--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=32", "--block-size", "16",
                 "--batch-size", "8", "--steps", str(steps), "--warmup-steps", "1", "--eval-batches", "2",
                 "--no-progress"]) == 0
    return corpus, run


def test_eval_lm_matches_a_direct_computation(tmp_path, capsys):
    rng = random.Random(1)
    words = "the cat sat on a mat and dog ran far".split()
    text = "\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(400))
    corpus, run = _train_tiny_lm(tmp_path, text, steps=20)
    capsys.readouterr()

    out_json = tmp_path / "eval.json"
    assert main(["eval", "lm", "--ckpt", str(run), "--data", str(corpus), "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out_json.read_text())
    assert "perplexity" in printed and result["block_size"] == 16

    # the same number, computed by hand over every non-overlapping window of the valid split
    loaded = load(run, expect_kind="lm")
    model, tok = loaded.model, loaded.tokenizer
    valid = prepare_lm_data(str(corpus), tok, block_size=16).valid
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in eval_batches(valid, 16, 7):
            total += float(F.cross_entropy(model(x).reshape(-1, model.config.vocab_size), y.reshape(-1),
                                           reduction="sum"))
            count += y.numel()
    assert result["tokens"] == count == (valid.numel() - 1) // 16 * 16
    assert result["loss"] == pytest.approx(total / count, rel=1e-5)
    assert result["ppl"] == pytest.approx(torch.tensor(total / count).exp().item(), rel=1e-5)

    # a subset: fewer tokens, still a sane loss
    assert main(["eval", "lm", "--ckpt", str(run), "--data", str(corpus), "--max-batches", "1",
                 "--batch-size", "2", "--json", str(out_json)]) == 0
    small = json.loads(out_json.read_text())
    assert small["tokens"] == 2 * 16 and small["windows"] == 2
    assert abs(small["loss"] - result["loss"]) < 1.0


def test_eval_lm_bad_arguments(tmp_path, capsys):
    assert main(["eval", "lm", "--ckpt", str(tmp_path / "missing"), "--data", "x"]) == 2
    assert "no such checkpoint or run folder" in capsys.readouterr().err


def test_eval_lm_stride(tmp_path, capsys):
    """--stride N: overlapping windows N ids apart (the JSON record names the stride; without it, the block size);
    a stride outside 1 … the window length is one error line and exit status 2."""
    corpus, run = _train_tiny_lm(tmp_path, "the quick brown fox jumps over the lazy dog.\n" * 60, steps=2)
    capsys.readouterr()
    records = {}
    for stride in ([], ["--stride", "7"]):
        out_json = tmp_path / f"eval{len(stride)}.json"
        assert main(["eval", "lm", "--ckpt", str(run), "--data", str(corpus), "--json", str(out_json), *stride]) == 0
        records[tuple(stride)] = json.loads(out_json.read_text())
        assert f"stride {records[tuple(stride)]['stride']})" in capsys.readouterr().out
    plain, strided = records[()], records[("--stride", "7")]
    assert (plain["stride"], strided["stride"]) == (16, 7) and plain["tokens"] == strided["tokens"] == 16 * 16
    assert strided["windows"] == 35 + 1  # at 0, 7, …, 238, then at 240: the window ending on the last target
    for bad, expected in (("0", r"--stride must be an int from 1 to the window length, or None, got 0"),
                          ("17", r"--stride must be an int from 1 to the window length 16 \(the block size the model "
                                 r"was trained with\), got 17")):
        assert main(["eval", "lm", "--ckpt", str(run), "--data", str(corpus), "--stride", bad,
                     "--json", str(tmp_path / "bad.json")]) == 2
        err = capsys.readouterr().err
        assert re.fullmatch(rf"attnkit eval: error: {expected}\n", err), err
    assert not (tmp_path / "bad.json").exists()


def test_eval_lm_scores_a_pretrained_model_and_writes_only_with_json(tmp_path, capsys):
    """The line is the api's figures; without --json nothing is written (no checkpoint folder to write into), with
    it the record is; --ckpt and --model are one required choice."""
    folder = tiny_hf_folder(tmp_path / "hf", std=0.3)
    text = tmp_path / "notes.txt"
    text.write_text("".join(f"the cat sat on the mat {i} times.\n\n" for i in range(300)), encoding="utf-8")
    argv = ["eval", "lm", "--model", str(folder), "--data", str(text), "--block-size", "16", "--stride", "8"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    m = api.evaluate_lm(model=str(folder), data=str(text), block_size=16, stride=8).metrics
    assert out == (f"valid loss {m['loss']:.4f}, perplexity {m['ppl']:.3f}, {m['bits_per_byte']:.4f} bits per byte "
                   f"over {m['tokens']:,} tokens "
                   f"({m['windows']} windows of 16, stride 8)\n")
    assert main([*argv, "--json", str(tmp_path / "base.json")]) == 0
    assert capsys.readouterr().out.endswith(f"; written to {tmp_path / 'base.json'}\n")
    assert json.loads((tmp_path / "base.json").read_text())["model"] == str(folder)

    with pytest.raises(SystemExit) as exc:
        main(["eval", "lm", "--data", str(text)])
    assert exc.value.code == 2
    assert "error: one of the arguments --ckpt --model is required" in capsys.readouterr().err
    assert main(["eval", "lm", "--model", str(folder), "--data", str(text), "--block-size", "65"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"attnkit eval: error: --block-size must be <= the model's context length = 64, got 65\n", err)


def test_eval_lm_leaves_bits_per_byte_out_when_the_scored_text_has_no_bytes(tmp_path, capsys):
    """Targets that are all special tokens (no text): ``bytes`` is 0 and ``bits_per_byte`` None (neither a division
    by zero nor 0 bits), and the line has no bits per byte."""
    folder = tiny_hf_folder(tmp_path / "hf", std=0.3)
    text = tmp_path / "specials.txt"
    text.write_text("\n%\n".join(["<|im_start|>"] * 300) + "\n%\n", encoding="utf-8")
    assert main(["eval", "lm", "--model", str(folder), "--data", str(text), "--block-size", "8"]) == 0
    m = api.evaluate_lm(model=str(folder), data=str(text), block_size=8).metrics
    assert (m["bytes"], m["bits_per_byte"]) == (0, None) and m["tokens"] > 0
    assert capsys.readouterr().out == (f"valid loss {m['loss']:.4f}, perplexity {m['ppl']:.3f} over {m['tokens']:,} "
                                       f"tokens ({m['windows']} windows of 8, stride {m['stride']})\n")
