"""Every walkthrough in examples/ is a notebook in the percent format with bilingual headings, says how to run
it, links to docs/from-the-seeds.md, and is linked from there."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WALKTHROUGHS = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
CJK = re.compile(r"[\u4e00-\u9fff]")


def cells(source: str) -> list[tuple[str, list[str]]]:
    """``(kind, lines)`` of each ``# %%`` cell (kind ``"markdown"`` or ``"code"``); what precedes the first marker
    (the module docstring) is left out."""
    out: list[tuple[str, list[str]]] = []
    for line in source.splitlines():
        if line.startswith("# %%"):
            out.append(("markdown" if "[markdown]" in line else "code", []))
        elif out:
            out[-1][1].append(line)
    return out


def test_there_is_a_walkthrough_per_seed():
    names = [p.name for p in WALKTHROUGHS]
    for seed in range(5):
        assert any(n.startswith(f"seed00{seed}_") for n in names), names


@pytest.mark.parametrize("path", WALKTHROUGHS, ids=lambda p: p.name)
def test_percent_format_with_bilingual_headings(path):
    source = path.read_text(encoding="utf-8")
    parsed = cells(source)
    kinds = [kind for kind, _ in parsed]
    assert kinds.count("code") >= 3 and kinds.count("markdown") >= 2, kinds
    for kind, lines in parsed:
        if kind != "markdown":
            continue
        body = [line for line in lines if line.strip()]
        assert all(line.startswith("#") for line in body), body  # markdown cells are comment lines only
        heading = body[0]
        assert heading.startswith("# ## ") and " / " in heading, heading
        english, chinese = heading[len("# ## "):].split(" / ", 1)
        assert re.search("[A-Za-z]", english) and CJK.search(chinese), heading
    ast.parse(source)  # and it is one Python file


@pytest.mark.parametrize("path", WALKTHROUGHS, ids=lambda p: p.name)
def test_docstring_says_how_to_run_and_links_the_guide(path):
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert f"python examples/{path.name}" in doc
    assert "docs/from-the-seeds.md" in doc


def test_the_guide_links_every_walkthrough():
    guide = (ROOT / "docs" / "from-the-seeds.md").read_text(encoding="utf-8")
    missing = [p.name for p in WALKTHROUGHS if f"examples/{p.name}" not in guide]
    assert not missing, missing


NOTEBOOK_DRIVER = """
import sys
source = open(sys.argv[1], encoding="utf-8").read()
sys.argv = ["ipykernel_launcher.py", "-f", "kernel-1.json"]  # what a Jupyter kernel's argv looks like
namespace = {"__name__": "__main__"}
for i, cell in enumerate(source.split("\\n# %%")[1:]):
    if cell.startswith(" [markdown]"):
        continue
    exec(compile(cell, f"<cell {i}>", "exec"), namespace)
print("cells run:", i + 1)
"""


def test_cells_run_one_by_one_like_a_notebook(tmp_path):
    """Jupyter runs the cells one at a time, in the file's folder, with the kernel's own arguments: the cells of
    a walkthrough work that way too (seed 003's, the quickest with no network)."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               ATTNKIT_EXAMPLES_OUT=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", NOTEBOOK_DRIVER, "seed003_encoder_decoder.py"], env=env,
                            cwd=ROOT / "examples", capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "attnkit EncoderDecoder output" in result.stdout and "cells run:" in result.stdout
