"""``attnkit trace``: presets with random weights, run folders (LM and translation), --depth, --json, bad input."""

from __future__ import annotations

import json

import pytest

from attnkit.cli.main import main


def _run(capsys, *argv):
    code = main(["trace", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["trace", "--help"])
    assert e.value.code == 0
    assert "--depth" in capsys.readouterr().out


def test_seed000_preset(capsys):
    code, out, err = _run(capsys, "--preset", "transformer-seed000", "--batch", "3", "--src-len", "12", "--len", "7")
    assert code == 0 and err == ""
    assert out.splitlines()[0] == "Transformer: 1,279,616 parameters; axes B=3 S=12 T=7 C=128 H=4 D=32 F=512 V=256"
    assert "heads: q (B, T, C) -> (B, H, T, D)  B=3 T=7 C=128 H=4 D=32; k, v (B, S, C) -> (B, H, S, D)  S=12" in out
    assert out.count("(DecoderLayer)") == 3 and out.count("(EncoderLayer)") == 2
    lines = out.splitlines()
    pos = next(line for line in lines if "src_embed.pos (SinusoidalPositionalEncoding.forward_len)" in line)
    assert pos.split()[2:4] == ["S=12", "S=12"] and "C=128" in pos  # the (S, C) table
    assert any(line.startswith("  (S, C), (T, C): position tables") for line in lines)
    assert lines[-9] == "Total params:            1,279,616" and lines[-7] == "Frozen params:           0"
    assert lines[-6].startswith("Total mult-adds:") and lines[-1].startswith("Estimated total size:")


def test_gpt_preset_depth_and_json(capsys):
    code, out, _ = _run(capsys, "--preset", "char-small", "--len", "5", "--depth", "1", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["axes"]["T"] == 5 and max(r["depth"] for r in data["rows"]) == 1
    assert [r["name"] for r in data["rows"]][:3] == ["", "wte", "blocks.0"]
    assert data["totals"]["params"] == data["total_params"] == 1_082_496
    assert data["totals"]["mult_adds"] == data["rows"][0]["mult_adds"] > 0
    assert data["legend"][0].startswith("B batch; T text / target positions")


def test_table_and_json_agree(capsys):
    _, table, _ = _run(capsys, "--preset", "char-small", "--len", "5")
    _, text, _ = _run(capsys, "--preset", "char-small", "--len", "5", "--json")
    data = json.loads(text)
    assert "3C = 384: q | k | v packed" in table and any(x.startswith("3C = 384") for x in data["legend"])
    qkv = next(r for r in data["rows"] if r["name"] == "blocks.0.attn.qkv_proj")
    assert qkv["output"] == "B=2 T=5 3C=384" and qkv["mult_adds"] == 2 * 5 * 128 * 384
    assert f"Total mult-adds:         {data['totals']['mult_adds'] / 1e6:.2f} M" in table


def test_language_model_checkpoint(lm_checkpoint, capsys):
    code, out, _ = _run(capsys, "--ckpt", str(lm_checkpoint), "--text", "ROMEO: hi")
    assert code == 0
    assert "(model) (GPT)" in out and "B=1 T=9" in out and "mask: causal" in out


def test_translation_checkpoint(mt_checkpoint, capsys):
    code, out, _ = _run(capsys, "--ckpt", str(mt_checkpoint), "--src", "das haus ist gross", "--tgt", "the house")
    assert code == 0
    assert "cross_attn (MultiHeadAttention)" in out and "k, v (B, S, C) -> (B, H, S, D)" in out


@pytest.mark.parametrize("argv, message", [
    (("--preset", "char-small", "--text", "hi"), "--text needs a tokenizer"),
    (("--preset", "char-small", "--src-len", "4"), "--src-len is for encoder-decoder presets"),
    (("--preset", "char-small", "--len", "0"), "--len must be a positive integer, got 0"),
    (("--preset", "char-small", "--len", "500"), "block_size = 128, got 500"),
    (("--preset", "char-small", "--depth", "-1"), "--depth must be >= 0, got -1"),
    (("--preset", "nope"), "unknown preset 'nope'"),
    (("--preset", "char-small", "--seed", str(2**64)), "--seed must be an int in [-2**63, 2**64 - 1]"),
])
def test_bad_input_one_line(argv, message, capsys):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("flag, value", [("--batch", "3"), ("--len", "4"), ("--src-len", "4"), ("--vocab-size", "9"),
                                         ("--seed", "0")])
def test_preset_flags_with_a_run_folder_are_refused(lm_checkpoint, capsys, flag, value):
    # a run folder traces its text (B = 1): a --batch or --len given with it would be silently ignored
    code, out, err = _run(capsys, "--ckpt", str(lm_checkpoint), "--text", "ROMEO", flag, value)
    assert code == 2 and out == ""
    assert f"{flag} is for --preset's random ids" in err and len(err.strip().splitlines()) == 1


def test_missing_checkpoint(tmp_path, capsys):
    code, _, err = _run(capsys, "--ckpt", str(tmp_path / "nothing"), "--text", "x")
    assert code == 2 and len(err.strip().splitlines()) == 1
    (tmp_path / "file").write_text("x")
    code, _, err = _run(capsys, "--ckpt", str(tmp_path / "file"), "--text", "x")
    assert code == 2 and "is a file, not a checkpoint folder" in err


@pytest.mark.network
def test_named_pretrained_model(monkeypatch, capsys):
    """`--model smollm2-135m-instruct`: the real Llama-architecture model (fetched once into the test cache)."""
    import os
    from pathlib import Path

    home = Path(os.environ.get("ATTNKIT_TEST_HOME") or Path.home() / ".cache" / "attnkit-tests").expanduser()
    monkeypatch.setenv("ATTNKIT_HOME", str(home))
    code, out, _ = _run(capsys, "--model", "smollm2-135m-instruct", "--text", "The capital of France is", "--depth", "2")
    assert code == 0
    assert out.splitlines()[0] == ("GPT: 134,515,008 parameters; axes B=1 T=5 C=576 H=9 K=3 D=64 F=1536 V=49152")
    assert out.count("(Block)") == 30 and "K=3 (3 query heads share each key/value head)" in out


def test_shared_embeddings_preset_names_tgt_embed_and_counts_it_once(capsys):
    # transformer-cpu has share_embeddings=True: the decoder-side call of the one embedding is tgt_embed, on T
    code, out, err = _run(capsys, "--preset", "transformer-cpu", "--src-len", "9", "--len", "6", "--depth", "1")
    assert code == 0 and err == ""
    rows = [line for line in out.splitlines() if "(TransformerEmbedding)" in line]
    assert [r.split()[0] for r in rows] == ["src_embed", "tgt_embed"]
    assert rows[0].split()[2] == "B=2" and rows[0].split()[3] == "S=9"
    assert rows[1].split()[3] == "T=6" and "0 tied" in rows[1] and " 0.0% " in rows[1]
    shares = [float(line.split("%")[0].split()[-1]) for line in out.splitlines()
              if line.startswith("  ") and not line.startswith("   ") and "%" in line]
    assert sum(shares) == pytest.approx(100.0, abs=0.5)
