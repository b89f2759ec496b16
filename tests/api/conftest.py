"""Fixtures of the attnkit.api tests: a small text corpus to train on."""

from __future__ import annotations

import random
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """About 15 kB of speeches, from a seeded generator."""
    rng = random.Random(0)
    words = "love night day sweet death fair light moon star heart hand kiss name rose dream".split()
    lines = []
    for _ in range(250):
        lines.append(rng.choice(["ROMEO", "JULIET", "NURSE"]) + ":")
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 9))).capitalize() + ".")
        lines.append("")
    path = tmp_path_factory.mktemp("corpus") / "plays.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
