"""Shared data for the CLI tests, handed out as fixtures (``--import-mode=importlib``: no conftest imports)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest


def _make_copy_task(folder: Path, *, seed: int = 0, sizes=(("train", 1500), ("valid", 60), ("test", 60))) -> Path:
    """A prepared data folder (train/valid/test.tsv) of letter sequences and their copies, upper-cased on the
    target side so that source and target are different strings (the model must map, not just echo ids)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in sizes:
        lines = []
        for _ in range(n):
            words = [rng.choice("abcdefgh") for _ in range(rng.randint(3, 7))]
            lines.append(" ".join(words) + "\t" + " ".join(w.upper() for w in words))
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def make_copy_task():
    """``make_copy_task(folder, *, seed=0, sizes=((split, n), ...)) -> folder``."""
    return _make_copy_task
