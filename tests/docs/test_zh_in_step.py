"""The Chinese pages keep in step with their English originals: the same code blocks, the same outputs.

docs/zh/ translates the prose of English pages; the code it shows must stay the English page's code. The table
``PAGES`` says, for every page of docs/zh/, which English page it follows and how:

* ``"translation"`` (translation, language modelling, viz, fine-tuning): its fenced blocks are the English page's,
  one for one and in order;
* ``"summary"`` (the Chinese README): each of its blocks is a block of the English page, in the English order, and
  it keeps every Python block of the English page (the README's runnable examples, the Python API);
* ``"extension"`` (from-the-seeds: the same guide ordered by concept, with worked examples of its own): every block
  of the English page appears in it, in order, among its own;
* ``None``: a page of its own with no English original (the quickstart).

A page missing from the table fails, so a new translation has to say what it follows.

Two blocks are the same when they have the same language and the same docs-test marker (word and arguments) and:

* Python and shell code is the same once ``#`` comments are removed (a comment is what a translation translates;
  a ``#`` inside a string is code);
* an ``output-of`` block (what a command prints) is identical, line for line;
* any other block (a folder listing with notes, a sample) has the same number of lines; a line holding Chinese text
  matches the English line up to where the Chinese begins, and every other line is identical.
"""

from __future__ import annotations

import importlib.util
import io
import re
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ZH = ROOT / "docs" / "zh"

# the docs tests' own block reader, so that markers are read exactly as the docs tests read them
_spec = importlib.util.spec_from_file_location("_docs_code_blocks", Path(__file__).with_name("test_docs_code.py"))
_docs_code = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(_docs_code)
blocks_of = _docs_code.blocks_of
SHELL = _docs_code.SHELL

# docs/zh page -> (English page, relation)
PAGES: dict[str, tuple[str, str] | None] = {
    "README.md": ("README.md", "summary"),
    "quickstart.md": None,
    "from-the-seeds.md": ("docs/from-the-seeds.md", "extension"),
    "translation.md": ("docs/translation.md", "translation"),
    "language-modelling.md": ("docs/language-modelling.md", "translation"),
    "viz.md": ("docs/viz.md", "translation"),
    "finetune.md": ("docs/finetune.md", "translation"),
}
RELATIONS = ("translation", "summary", "extension")
CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")


def python_code(code: str) -> list[str]:
    """The lines of Python source without comments (found by the tokenizer); a comment-only line is dropped."""
    cut = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            cut[tok.start[0] - 1] = tok.start[1]
    out = []
    for i, line in enumerate(code.splitlines()):
        if i in cut:
            line = line[:cut[i]]
            if not line.strip():
                continue
        out.append(line.rstrip())
    return out


def shell_code(code: str) -> list[str]:
    """The lines of a shell script without comments: a ``#`` that starts a word outside quotes to the end of the
    line; a comment-only line is dropped."""
    out = []
    for line in code.splitlines():
        quote, end = None, len(line)
        for i, ch in enumerate(line):
            if quote:
                if ch == quote:
                    quote = None
            elif ch in "'\"":
                quote = ch
            elif ch == "#" and (i == 0 or line[i - 1].isspace()):
                end = i
                break
        if end < len(line) and not line[:end].strip():
            continue
        out.append(line[:end].rstrip())
    return out


def differences(en, zh) -> str | None:
    """Why block ``zh`` is not the same as block ``en`` (None when it is)."""
    if (en.lang, en.marker, en.arg) != (zh.lang, zh.marker, zh.arg):
        return (f"language/marker {zh.lang!r} {zh.marker!r} {zh.arg!r}, "
                f"expected {en.lang!r} {en.marker!r} {en.arg!r}")
    if en.marker == "output-of":
        a, b = ([line.rstrip() for line in x.code.rstrip("\n").splitlines()] for x in (en, zh))
        return None if a == b else _first_difference(a, b, "output")
    if en.lang == "python":
        a, b = python_code(en.code), python_code(zh.code)
        return None if a == b else _first_difference(a, b, "code (comments removed)")
    if en.lang in SHELL:
        a, b = shell_code(en.code), shell_code(zh.code)
        return None if a == b else _first_difference(a, b, "commands (comments removed)")
    a, b = en.code.rstrip("\n").splitlines(), zh.code.rstrip("\n").splitlines()
    if len(a) != len(b):
        return f"{len(b)} lines, expected {len(a)}"
    for i, (x, y) in enumerate(zip(a, b)):
        m = CJK.search(y)
        kept = y[:m.start()].strip() if m else y.rstrip()
        if (m and not x.strip().startswith(kept)) or (not m and kept != x.rstrip()):
            return f"line {i + 1}: {y!r}, expected {x!r}"
    return None


def _first_difference(a: list[str], b: list[str], what: str) -> str:
    for i in range(max(len(a), len(b))):
        x, y = (a[i] if i < len(a) else "<none>"), (b[i] if i < len(b) else "<none>")
        if x != y:
            return f"{what}, line {i + 1}: {y!r}, expected {x!r}"
    raise AssertionError("no difference")  # pragma: no cover


def _where(b) -> str:
    return f"{b.path.name}:{b.line - 1}"


def check(en_path: Path, zh_path: Path, relation: str) -> list[str]:
    """The ways ``zh_path``'s blocks break ``relation`` to ``en_path``'s (empty when in step)."""
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    en, zh = blocks_of(en_path), blocks_of(zh_path)
    if relation == "translation":
        problems = [f"zh {_where(z)} vs en {_where(e)}: {why}"
                    for e, z in zip(en, zh) if (why := differences(e, z))]
        if len(en) != len(zh):
            problems.append(f"{len(zh)} blocks, the English page has {len(en)}")
        return problems
    # summary: zh is a subsequence of en (and keeps en's Python); extension: en is a subsequence of zh
    short, long_ = (zh, en) if relation == "summary" else (en, zh)
    matched, j, problems = set(), 0, []
    for s in short:
        k = next((k for k in range(j, len(long_)) if differences(*((long_[k], s) if relation == "summary"
                                                                     else (s, long_[k]))) is None), None)
        if k is None:
            side = "zh" if relation == "summary" else "en"
            problems.append(f"{side} {_where(s)} has no same block after the previous match on the other page")
            continue
        matched.add(k)
        j = k + 1
    if relation == "summary":
        problems += [f"en {_where(e)}: a Python block the summary leaves out"
                     for k, e in enumerate(en) if e.lang == "python" and k not in matched]
    return problems


def zh_pages() -> list[Path]:
    return sorted(ZH.glob("*.md"))


@pytest.mark.parametrize("name", sorted(n for n, v in PAGES.items() if v), ids=str)
def test_zh_page_is_in_step_with_its_english_original(name):
    en_name, relation = PAGES[name]
    problems = check(ROOT / en_name, ZH / name, relation)
    assert not problems, (f"docs/zh/{name} ({relation} of {en_name}) has drifted from it; copy the English "
                          f"blocks (translate only their # comments):\n  " + "\n  ".join(problems))


def test_every_zh_page_says_what_it_follows():
    names = {p.name for p in zh_pages()}
    assert names == set(PAGES), (f"pages of docs/zh/ not in PAGES: {sorted(names - set(PAGES))}; "
                                 f"in PAGES but missing: {sorted(set(PAGES) - names)}")
    for name, v in PAGES.items():
        if v:
            assert (ROOT / v[0]).is_file() and v[1] in RELATIONS, (name, v)


def test_zh_pages_with_blocks_are_checked():
    """A page of its own (None) is one with no English original; the translated ones do carry code."""
    for name, v in PAGES.items():
        if v and v[1] == "translation":
            assert blocks_of(ZH / name), f"docs/zh/{name} has no code blocks to check"


# ------------------------------------------------------------------------------------------------------
# the checker itself
# ------------------------------------------------------------------------------------------------------

EN_PAGE = """# Page

Run it:

```python
import torch  # the library
x = torch.ones(2)
# a note on its own line
print("#", x.sum())  # prints 2
```

<!-- docs-test: output-of echo hi -->
```text
hi
```

<!-- docs-test: run --steps=2 -->
```bash
attnkit train lm --steps 300 --out runs/x   # train
echo '# not a comment' "a # b"
```

```
run.json        the configuration
checkpoints/best/
```
"""


def _pages(tmp_path, zh_text: str, en_text: str = EN_PAGE) -> tuple[Path, Path]:
    en, zh = tmp_path / "en.md", tmp_path / "zh.md"
    en.write_text(en_text, encoding="utf-8")
    zh.write_text(zh_text, encoding="utf-8")
    return en, zh


def _translated() -> str:
    return (EN_PAGE.replace("Run it:", "运行：").replace("# the library", "# 这个库")
            .replace("# a note on its own line", "# 单独一行的说明").replace("# prints 2", "# 打印 2")
            .replace("# train\n", "# 训练\n").replace("the configuration", "配置"))


def test_checker_accepts_translated_prose_and_comments(tmp_path):
    en, zh = _pages(tmp_path, _translated())
    assert check(en, zh, "translation") == []


@pytest.mark.parametrize("change, expect", [
    (("x = torch.ones(2)", "x = torch.ones(3)"), "code (comments removed), line 2"),
    (('print("#", x.sum())', 'print("＃", x.sum())'), "code (comments removed), line 3"),  # a # in a string is code
    (("\nhi\n", "\nhello\n"), "output, line 1"),
    (("output-of echo hi", "output-of echo ho"), "language/marker"),
    (("run --steps=2", "run --steps=3"), "language/marker"),
    (("echo '# not a comment'", "echo '# kein Kommentar'"), "commands (comments removed), line 2"),
    (("--out runs/x", "--out runs/y"), "commands (comments removed), line 1"),
    (("checkpoints/best/", "checkpoints/last/"), "line 2: 'checkpoints/last/'"),
    (("run.json        配置", "model.json      配置"), "line 1: 'model.json"),
])
def test_checker_finds_a_changed_block(tmp_path, change, expect):
    en, zh = _pages(tmp_path, _translated().replace(*change))
    problems = check(en, zh, "translation")
    assert len(problems) == 1 and expect in problems[0], problems


def test_checker_finds_a_missing_or_extra_block(tmp_path):
    text = _translated()
    en, zh = _pages(tmp_path, text[:text.index("<!-- docs-test: run")])
    problems = check(en, zh, "translation")
    assert problems == ["2 blocks, the English page has 4"]
    en, zh = _pages(tmp_path, text + "\n```python\nprint(1)\n```\n")
    assert check(en, zh, "translation") == ["5 blocks, the English page has 4"]
    assert check(en, zh, "extension") == []  # an extension may add blocks of its own ...
    en, zh = _pages(tmp_path, text.replace("x = torch.ones(2)", "x = torch.zeros(2)") + "\n```python\nprint(1)\n```\n")
    assert len(check(en, zh, "extension")) == 1  # ... but keeps the English ones unchanged


def test_checker_summary_keeps_order_and_python(tmp_path):
    text = _translated()
    python_block = text[text.index("```python"):text.index("<!-- docs-test: output-of")]
    listing = text[text.index("```\nrun.json"):]
    en, zh = _pages(tmp_path, "# 摘要\n\n" + python_block + listing)
    assert check(en, zh, "summary") == []  # the output and the bash block may be left out
    en, zh = _pages(tmp_path, "# 摘要\n\n" + listing + python_block)
    problems = check(en, zh, "summary")  # out of order: the Python block has no match after the listing
    assert any("has no same block" in p for p in problems) and any("leaves out" in p for p in problems), problems
    en, zh = _pages(tmp_path, "# 摘要\n\n" + listing)
    assert [p for p in check(en, zh, "summary")] == ["en en.md:5: a Python block the summary leaves out"]


def test_checker_refuses_an_unknown_relation(tmp_path):
    en, zh = _pages(tmp_path, EN_PAGE)
    with pytest.raises(ValueError, match="relation must be one of"):
        check(en, zh, "copy")


def test_comment_removal():
    assert python_code("a = '#x'  # c\n# only\n\nb = 1\n") == ["a = '#x'", "", "b = 1"]
    assert shell_code('echo "a # b" # c\n# only\ngrep -E "x#y" f#g\n') == ['echo "a # b"', 'grep -E "x#y" f#g']
