"""Every file, test and API name that docs/from-the-seeds.md, docs/viz.md and docs/zh/ cite in backticks exists.

Checked forms (inside backticks):
* ``attnkit/....py`` and ``tests/....py``: the file exists;
* ``tests/....py::name``: ``def name`` (or ``class name``) is defined in that file;
* ``Name`` (or ``Name(...)``) directly followed by `` in `attnkit/....py` ``: ``Name`` is defined in that file;
* any other backticked identifier (``RMSNorm``, ``generate_mask_mat(...)``, ``model.encode``): its last part occurs
  in attnkit's source, unless it is one of the few names that exist only in the seeds;
* ``attnkit viz FIGURE``: a sub-command of ``attnkit viz``.
The guide must also walk through the five seeds in their order.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / "from-the-seeds.md", ROOT / "docs" / "viz.md", ROOT / "docs" / "zh" / "from-the-seeds.md",
        ROOT / "docs" / "zh" / "quickstart.md"]
_ID = lambda p: str(p.relative_to(ROOT / "docs"))  # noqa: E731
# a backticked span, possibly holding several comma-separated references
CODE_SPAN = re.compile(r"`([^`\n]+)`")
PATH_REF = re.compile(r"^((?:attnkit|tests)/[\w/]+\.py)(?:::(\w+))?$")
VIZ_REF = re.compile(r"attnkit viz (\w+)")
NAME_IN_FILE = re.compile(r"`(\w+)(?:\([^`]*\))?`(?: and `(\w+)`)? in `(attnkit/[\w/]+\.py)`")
IDENTIFIER = re.compile(r"^([A-Za-z_][\w.]*)(?:\(.*\))?$")
SEED_ONLY = {"AddNorm", "PositionalEmbedding", "MultiHeadSelfAttention"}  # the seeds' own class names, named to say what replaces them


def _refs(doc: Path) -> list[tuple[str, str | None]]:
    out = []
    for span in CODE_SPAN.findall(doc.read_text(encoding="utf-8")):
        m = PATH_REF.match(span.strip())
        if m:
            out.append((m.group(1), m.group(2)))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=_ID)
def test_cited_files_and_tests_exist(doc):
    refs = _refs(doc)
    assert len(refs) >= {0: 60, 2: 40, 3: 0}.get(DOCS.index(doc), 1), f"too few references parsed from {doc}"
    missing, undefined = [], []
    for path, name in refs:
        file = ROOT / path
        if not file.is_file():
            missing.append(path)
            continue
        if name and not re.search(rf"^\s*(?:def|class) {re.escape(name)}\b", file.read_text(encoding="utf-8"),
                                  re.MULTILINE):
            undefined.append(f"{path}::{name}")
    assert not missing, f"{doc.name} cites files that do not exist: {missing}"
    assert not undefined, f"{doc.name} cites names not defined in their file: {undefined}"


@pytest.mark.parametrize("doc", DOCS, ids=_ID)
def test_names_said_to_be_in_a_file_are_defined_there(doc):
    pairs = [(n, path) for first, second, path in NAME_IN_FILE.findall(doc.read_text(encoding="utf-8"))
             for n in (first, second) if n]
    if doc == DOCS[0]:
        assert len(pairs) >= 20, f"too few `Name` in `attnkit/...py` references parsed from {doc}"
    wrong = []
    for name, path in pairs:
        source = (ROOT / path).read_text(encoding="utf-8")
        if not re.search(rf"^\s*(?:def|class) {name}\b|^{name}\b\s*[:=]", source, re.MULTILINE):
            wrong.append(f"{name} in {path}")
    assert not wrong, f"{doc.name}: not defined where the text says: {wrong}"


@pytest.mark.parametrize("doc", DOCS, ids=_ID)
def test_backticked_identifiers_exist_in_attnkit(doc):
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "attnkit").rglob("*.py"))
    names = set()
    for span in CODE_SPAN.findall(doc.read_text(encoding="utf-8")):
        m = IDENTIFIER.match(span.strip())
        if m:
            names.add(m.group(1).split(".")[-1])
    unknown = sorted(n for n in names - SEED_ONLY if not re.search(rf"\b{re.escape(n)}\b", source))
    assert not unknown, f"{doc.name} names identifiers found nowhere in attnkit: {unknown}"


@pytest.mark.parametrize("doc", DOCS, ids=_ID)
def test_cited_viz_commands_exist(doc):
    from attnkit.cli.main import build_parser

    parser = build_parser()
    viz = parser._subparsers._group_actions[0].choices["viz"]
    figures = set(viz._subparsers._group_actions[0].choices)
    cited = set(VIZ_REF.findall(doc.read_text(encoding="utf-8")))
    assert cited and cited <= figures, f"{doc.name} cites unknown viz figures {sorted(cited - figures)}"


def test_guide_walks_through_the_five_seeds_in_order():
    text = (ROOT / "docs" / "from-the-seeds.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \d\. Seed (\d{3})", text, re.MULTILINE)
    assert headings == ["000", "001", "002", "003", "004"]


def test_chinese_guide_walks_through_the_concepts_in_the_seeds_order():
    text = (ROOT / "docs" / "zh" / "from-the-seeds.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (\d+)\. (\S+)", text, re.MULTILINE)
    assert [int(n) for n, _ in headings] == list(range(1, 12))
    concepts = ["归一化", "前馈网络", "注意力", "多头注意力", "位置编码", "掩码", "编码器", "解码器", "翻译的训练与推理",
                "GPT-2", "微调"]
    assert [h.split("（")[0] for _, h in headings] == concepts


def test_parser_understands_a_cited_file_and_test():
    # guard against a regex that silently matches nothing
    assert PATH_REF.match("tests/modules/test_masks.py::test_causal_mask_bottom_right").groups() == (
        "tests/modules/test_masks.py", "test_causal_mask_bottom_right")
    assert PATH_REF.match("attnkit/modules/masks.py").groups() == ("attnkit/modules/masks.py", None)
    assert PATH_REF.match("attnkit viz mask") is None
