"""`attnkit train mt --resume`: a stopped translation run continues exactly (same losses as a straight run),
reusing its tokenizer and translation options; a different --data is refused."""

from __future__ import annotations

import json
from pathlib import Path

from attnkit.cli.main import main

TINY_MT = ["--preset", "transformer-small", "--set", "d_model=32", "--set", "num_heads=2",
           "--set", "num_encoder_layers=1", "--set", "num_decoder_layers=1", "--set", "dim_feedforward=64",
           "--set", "dropout=0.1", "--vocab-size", "300", "--max-tokens", "128", "--max-len", "24",
           "--schedule", "inverse_sqrt", "--lr", "0.5", "--warmup-steps", "4", "--log-every", "1", "--ckpt-every", "3",
           "--eval-every", "3",
           "--eval-batches", "2", "--no-progress"]


def _losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "loss" in r}


def test_resume_continues_exactly(tmp_path, capsys, make_copy_task):
    data = make_copy_task(tmp_path / "data", seed=3, sizes=(("train", 120), ("valid", 10)), letters="abcdef",
                          lengths=(2, 6), target="reversed")
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    assert main(["train", "mt", "--data", str(data), "--out", str(straight), *TINY_MT, "--steps", "9"]) == 0
    assert main(["train", "mt", "--data", str(data), "--out", str(stopped), *TINY_MT, "--steps", "6"]) == 0
    # resume with only --out/--steps: data, tokenizer, model and options come from the checkpoint
    assert main(["train", "mt", "--out", str(stopped), "--resume", "--steps", "9", "--no-progress"]) == 0
    assert _losses(stopped) == _losses(straight)
    capsys.readouterr()
    assert main(["train", "mt", "--out", str(stopped), "--resume", "--steps", "12", "--data", "de-en"]) == 2
    assert "the run was trained on --data" in capsys.readouterr().err
