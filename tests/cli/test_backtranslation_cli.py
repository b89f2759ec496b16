"""Back-translation through the command line, as docs/translation.md gives it, on a generated copy task:
``train mt --reverse`` → ``translate --input --output`` → ``train mt --synthetic --synthetic-ratio``, the flags in
``--help``, and an exact resume of a run with synthetic pairs."""

from __future__ import annotations

import json
import random
from pathlib import Path

from attnkit.checkpoints import load
from attnkit.cli.main import main

TINY_MT = ["--preset", "transformer-small", "--set", "d_model=64", "--set", "num_heads=4",
           "--set", "num_encoder_layers=1", "--set", "num_decoder_layers=1", "--set", "dim_feedforward=128",
           "--set", "dropout=0.0", "--set", "norm_first=true", "--vocab-size", "300", "--max-tokens", "384",
           "--max-len", "24", "--schedule", "inverse_sqrt", "--lr", "1.0", "--warmup-steps", "40", "--log-every", "20",
           "--no-progress", "--eval-every", "100", "--eval-batches", "2", "--bleu-sentences", "10"]


def _losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "loss" in r}


def _monolingual(path: Path, n: int, seed: int = 1) -> Path:
    """``n`` target-side sentences: upper-case letter sequences, as the copy task's targets."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice("ABCDEFGH") for _ in range(rng.randint(3, 7))) for _ in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_reverse_translate_forward(tmp_path, capsys, make_copy_task):
    data = make_copy_task(tmp_path / "copy", sizes=(("train", 1200), ("valid", 40), ("test", 40)))
    rev = tmp_path / "rev"
    assert main(["train", "mt", "--data", str(data), "--reverse", "--out", str(rev), *TINY_MT, "--steps", "240"]) == 0
    assert "direction: reversed" in capsys.readouterr().err
    assert load(rev, expect_kind="mt").state["extra"]["mt_options"]["reverse"] is True

    mono = _monolingual(tmp_path / "mono.txt", 60)
    synthetic = tmp_path / "synthetic.tsv"
    assert main(["translate", "--ckpt", str(rev), "--input", str(mono), "--output", str(synthetic), "--beam", "1",
                 "--batch-size", "16", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "translated 60 sentences" in err and "sentences/s" in err and "source tokens/s" in err
    rows = [line.split("\t") for line in synthetic.read_text(encoding="utf-8").splitlines()]
    assert [r[0] for r in rows] == mono.read_text().splitlines()
    exact = sum(r[1] == r[0].lower() for r in rows)
    assert exact >= 40, rows  # the reverse model translates target -> source (upper -> lower)

    fwd = tmp_path / "fwd"
    assert main(["train", "mt", "--data", str(data), "--synthetic", str(synthetic), "--synthetic-ratio", "0.05",
                 "--out", str(fwd), *TINY_MT, "--steps", "20"]) == 0
    err = capsys.readouterr().err
    assert "synthetic: 60 back-translated pairs of 60" in err and "tagged <bt> (id 4)" in err
    options = load(fwd, expect_kind="mt").state["extra"]["mt_options"]
    assert options["synthetic"] == str(synthetic) and options["synthetic_ratio"] == 0.05
    assert "reverse" not in options


def test_resume_with_synthetic_pairs_is_exact(tmp_path, capsys, make_copy_task):
    data = make_copy_task(tmp_path / "copy", seed=3, sizes=(("train", 120), ("valid", 10)), letters="abcdef",
                          lengths=(2, 6), target="reversed")
    synthetic = tmp_path / "synthetic.tsv"
    rng = random.Random(5)
    lines = []
    for _ in range(80):
        words = [rng.choice("abcdef") for _ in range(rng.randint(2, 6))]
        lines.append(" ".join(reversed(words)) + "\t" + " ".join(words))
    synthetic.write_text("\n".join(lines) + "\n", encoding="utf-8")
    flags = [*TINY_MT, "--synthetic", str(synthetic), "--synthetic-ratio", "0.5", "--ckpt-every", "3",
             "--log-every", "1", "--set", "dropout=0.1"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    assert main(["train", "mt", "--data", str(data), "--out", str(straight), *flags, "--steps", "9"]) == 0
    assert main(["train", "mt", "--data", str(data), "--out", str(stopped), *flags, "--steps", "6"]) == 0
    assert main(["train", "mt", "--out", str(stopped), "--resume", "--steps", "9", "--no-progress"]) == 0
    err = capsys.readouterr().err  # the same sample in the three runs, the resumed one too: 0.5 x 120 real pairs
    assert err.count("synthetic: 60 back-translated pairs of 80") == 3
    assert _losses(stopped) == _losses(straight) and len(_losses(straight)) == 9
    assert main(["train", "mt", "--out", str(stopped), "--resume", "--steps", "12", "--synthetic-ratio", "1"]) == 2
    assert "trained with synthetic_ratio 0.5" in capsys.readouterr().err


def test_the_flags_are_in_help(capsys):
    for command, flags in ((["train", "mt"], ("--reverse", "--synthetic", "--synthetic-ratio")),
                           (["translate"], ("--output", "--sort-batches", "--no-progress"))):
        try:
            main([*command, "--help"])
        except SystemExit as e:
            assert e.code == 0
        out = capsys.readouterr().out
        assert all(flag in out for flag in flags), (command, out)
