"""The package's layers (docs/design.md, "What may import what"): a module imports only from its own layer or
from the layers below it, counting the imports inside functions too. Nothing outside ``attnkit/cli`` and
``attnkit/__main__.py`` imports the command line; benchmarks and examples use ``attnkit.api``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# lowest first; a module may import its own layer and any layer listed before it
LAYERS = [
    ("attnkit", "checks", "recipes", "files"),
    ("modules",),
    ("models",),
    ("data",),  # data/fetch.py and data/json_files.py, shared by the three parts
    ("data.tokenizers",),
    ("data.corpora",),
    ("data.pipeline",),
    ("checkpoints",),
    ("generation",),
    ("training",),
    ("interop",),
    ("viz",),
    ("api",),
    ("cli",),
    ("__main__",),
]
RANK = {part: i for i, parts in enumerate(LAYERS) for part in parts}


def part_of(module: str) -> str:
    """``attnkit.data.corpora.de_en`` -> ``data.corpora``; ``attnkit.models.gpt`` -> ``models``."""
    names = module.split(".")
    if len(names) == 1:
        return "attnkit"
    if names[1] == "data" and len(names) > 2 and names[2] in ("tokenizers", "corpora", "pipeline"):
        return "data." + names[2]
    return names[1]


def imports_of(path: Path, module: str) -> list[tuple[int, str]]:
    """``(line, imported attnkit module)`` of every import in ``path``, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                found.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
            elif node.module:
                found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name == "attnkit" or name.startswith("attnkit.")]


def modules(folder: str):
    for path in sorted((ROOT / folder).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts)
        yield path, name.removesuffix(".__init__")


def test_every_part_has_a_layer():
    parts = {part_of(name) for _, name in modules("attnkit")}
    assert parts <= set(RANK), f"parts without a layer: {sorted(parts - set(RANK))}"


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for path, name in modules("attnkit"):
        mine = RANK[part_of(name)]
        for line, imported in imports_of(path, name):
            if RANK.get(part_of(imported), -1) > mine:
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


@pytest.mark.parametrize("folder", ["attnkit", "benchmarks", "examples", "scripts"])
def test_only_the_entry_points_import_the_command_line(folder):
    offenders = []
    for path, name in modules(folder):
        if name.startswith(("attnkit.cli", "attnkit.__main__")):
            continue
        offenders += [f"{path.relative_to(ROOT)}:{line}" for line, imported in imports_of(path, name)
                      if imported == "attnkit.cli" or imported.startswith("attnkit.cli.")]
    assert not offenders, f"imports of attnkit.cli outside attnkit/cli and attnkit/__main__.py: {offenders}"


def test_the_checker_sees_upward_imports(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from attnkit.training.trainer import Trainer\n", encoding="utf-8")
    (line, imported), = imports_of(bad, "attnkit.models.bad")
    assert line == 2 and RANK[part_of(imported)] > RANK[part_of("attnkit.models.bad")]
    rel = tmp_path / "__init__.py"
    rel.write_text("from .pipeline import lm_dataset\nfrom ..checkpoints import load\n", encoding="utf-8")
    assert [n for _, n in imports_of(rel, "attnkit.data")] == ["attnkit.data.pipeline", "attnkit.checkpoints"]


def test_the_command_line_stays_thin():
    """The CLI only parses flags and prints what attnkit.api returns (issue #42: at most 900 lines)."""
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in (ROOT / "attnkit" / "cli").glob("*.py"))
    assert lines <= 900, f"attnkit/cli/ has {lines} lines; move logic into attnkit.api"
