"""Every axis letter a ``Shape:`` section uses in attnkit/modules and attnkit/models is named in its file's legend.

Axis legend: none (source files only). The contract (docs/design.md, "Conventions"): each file's module docstring
carries the legend of the axes it uses, so a reader meeting ``(B, K, S, D)`` in a docstring can look the letters up.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*ROOT.glob("attnkit/modules/*.py"), *ROOT.glob("attnkit/models/*.py")])
AXIS = r"[A-Z][a-z]?|[A-Z]_[a-z]+"  # B, T, Dv, C_in ...


def legend_axes(module_doc: str) -> set[str] | None:
    """Axis names of the docstring's ``Axis legend...:`` paragraph (``None`` when there is none)."""
    m = re.search(r"Axis legend[^:]*:(.*?)(?:\n\n|$)", module_doc, re.S)
    if m is None:
        return None
    text = m.group(1)
    quoted = re.findall(r"``([A-Za-z][A-Za-z_]*'?)``", text)  # ``B`` batch
    plain = re.findall(rf"(?:^|[\s,;:])({AXIS}|r)(?= [a-z(])", text)  # C model width
    return set(quoted) | set(plain)


def shape_axes(doc: str) -> set[str]:
    """Axis letters inside the parenthesised shapes of the docstring's ``Shape:`` sections."""
    found: set[str] = set()
    for section in re.findall(r"Shape:(.*?)(?:\n\s*\n|$)", doc, re.S):
        for inside in re.findall(r"\(([^()]*)\)", section):
            for token in re.split(r"[,\s|]+", inside):
                token = token.strip("`'*")
                if re.fullmatch(AXIS, token):
                    found.add(token)
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shape_axes_are_in_the_file_legend(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            used |= shape_axes(ast.get_docstring(node) or "")
    if not used:
        return
    legend = legend_axes(ast.get_docstring(tree) or "")
    assert legend is not None, f"{path.name} uses axes {sorted(used)} in Shape: sections but has no axis legend"
    assert used <= legend, f"{path.name}: axes {sorted(used - legend)} are not in its legend {sorted(legend)}"


def test_the_parsers_read_a_legend_and_a_shape():
    doc = 'Axis legend: ``B`` batch, ``Dv`` value dim; C width.\n\nmore'
    assert legend_axes(doc) == {"B", "Dv", "C"}
    assert shape_axes("Shape:\n    x ``(B, H|1, T, D)`` -> ``(*, C)``.\n") == {"B", "H", "T", "D", "C"}
