"""Docs that run: every fenced code block of README.md and docs/**/*.md that is meant to run, runs.

The convention (also in docs/design.md, "Code blocks in the docs"):

* every `````python`` block runs, standalone (in a fresh namespace, ``$ATTNKIT_HOME`` = the test cache), and
  must be fast (seconds) and offline;
* the blocks of one file run in order in one temporary working folder (as a reader following the page would),
  so a shell block may use the run folder an earlier shell block of the same file trained;
* a `````bash`` block that trains (``attnkit train``, ``attnkit finetune``, ``torchrun``) must be marked ``run`` (with
  tiny settings) or ``skip REASON``; any other `````bash`` block is *not* run unless the line just before it is
  ``<!-- docs-test: run ... -->``; then each
  command runs in one bash script (``set -e``) in the temporary folder, with ``attnkit`` being this checkout's
  ``python -m attnkit``. ``--flag=value`` words after ``run`` replace that flag's value in every command that
  has it (how a training block gets tiny settings: ``<!-- docs-test: run --max-time=0.05 --data=tiny-lm.txt -->``).
  The folder holds two tiny corpora for that: ``tiny-lm.txt`` (a text) and ``tiny-mt/`` (German-English pairs
  as ``train.tsv``, ``valid.tsv``, ``test.tsv``);
* a `````python`` block after ``<!-- docs-test: run -->`` uses what earlier ``run`` blocks of its file made (a
  trained run folder): it runs in the same folder after them and is ``slow`` like them;
* a `````text`` block after ``<!-- docs-test: output-of COMMAND -->`` must equal what ``COMMAND`` prints
  (trailing spaces ignored), so printed outputs in the docs cannot go stale;
* ``<!-- docs-test: skip REASON -->`` before a block skips it (the reason is required and shown); a Python block
  cannot be skipped: every one runs;
  ``<!-- docs-test: network -->`` marks a block that needs the package registries once (pytest marker
  ``network``; later runs use the cache).

Each block is one test, named ``FILE:LINE``; a failure's traceback points at the line in the Markdown file.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,})(?P<lang>[\w+-]*)[^`]*$")
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<what>[\w-]+)\s*(?P<rest>.*?)\s*-->\s*$")
KNOWN = {"run", "output-of", "skip", "network"}
SHELL = ("bash", "sh", "shell")
TRAINS = re.compile(r"\battnkit\s+(train|finetune)\b|\btorchrun\b|-m attnkit\s+(train|finetune)\b")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the first code line
    lang: str
    code: str
    marker: str | None  # run | output-of | skip | network
    arg: str  # what follows the marker word

    @property
    def id(self) -> str:
        name = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path.name
        return f"{name}:{self.line}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    """Fenced blocks with the docs-test marker on the last non-blank line before them (if any)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m["indent"]), m["fence"], m["lang"].lower()
        j = i + 1
        while j < len(lines) and not re.match(rf"^ *{fence}\s*$", lines[j]):
            j += 1
        body = "\n".join(line[indent:] if line[:indent].strip() == "" else line for line in lines[i + 1:j])
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = MARKER.match(lines[k]) if k >= 0 else None
        if marker and marker["what"] not in KNOWN:
            raise ValueError(f"{path}:{k + 1}: unknown docs-test marker {marker['what']!r}; expected one of "
                             f"{sorted(KNOWN)}")
        out.append(Block(path, i + 2, lang, body + "\n", marker["what"] if marker else None,
                         marker["rest"] if marker else ""))
        i = j + 1
    return out


def _collect():
    params = []
    for path in doc_files():
        for b in blocks_of(path):
            if b.lang in SHELL and TRAINS.search(b.code) and b.marker not in ("run", "skip"):
                raise ValueError(f"{b.id}: a shell block that trains must be marked <!-- docs-test: run --flag=value "
                                 f"... --> (tiny settings) or <!-- docs-test: skip REASON -->")
            runs = (b.lang == "python" or (b.lang in SHELL and b.marker == "run")
                    or b.marker == "output-of")
            if not runs:
                continue
            marks = [pytest.mark.network] if b.marker == "network" else []
            if b.marker in ("run", "output-of"):
                marks.append(pytest.mark.slow)  # command-line runs: seconds to tens of seconds each
            if b.marker == "skip":
                if b.lang == "python":
                    raise ValueError(f"{b.id}: every python block runs; one that needs a trained run folder "
                                     f"follows the <!-- docs-test: run --> block that trains it and is marked "
                                     f"<!-- docs-test: run --> itself")
                if not b.arg:
                    raise ValueError(f"{b.id}: <!-- docs-test: skip --> needs a reason")
                marks.append(pytest.mark.skip(reason=f"{b.id}: {b.arg}"))
            params.append(pytest.param(b, id=b.id, marks=marks))
    return params


BLOCKS = _collect()

TINY_LM = "\n".join(
    f"{who}: {line}" for who, line in [
        ("ROMEO", "But soft, what light through yonder window breaks?"),
        ("JULIET", "O Romeo, Romeo, wherefore art thou Romeo?"),
        ("ROMEO", "I take thee at thy word."),
        ("JULIET", "Good night, good night! Parting is such sweet sorrow."),
    ] * 40
) + "\n"
TINY_MT = "".join(f"{de}\t{en}\n" for de, en in [
    ("Das Haus ist groß.", "The house is big."), ("Der Hund ist klein.", "The dog is small."),
    ("Die Katze schläft.", "The cat sleeps."), ("Ich habe Hunger.", "I am hungry."),
    ("Wo ist der Bahnhof?", "Where is the station?"), ("Das Wetter ist schön.", "The weather is nice."),
] * 30)


_FOLDERS: dict[Path, Path] = {}


@pytest.fixture
def docs_dir(request, tmp_path_factory, monkeypatch):
    """The working folder of the block's file (made on its first block): the tiny corpora, ``attnkit`` on PATH,
    the test cache as ATTNKIT_HOME."""
    doc = request.node.callspec.params["block"].path
    if doc not in _FOLDERS:
        folder = tmp_path_factory.mktemp("docs")
        (folder / "tiny-lm.txt").write_text(TINY_LM, encoding="utf-8")
        pairs = TINY_MT.splitlines(keepends=True)
        (folder / "tiny-mt").mkdir()
        for split, part in (("train", pairs[:-24]), ("valid", pairs[-24:-12]), ("test", pairs[-12:])):
            (folder / "tiny-mt" / f"{split}.tsv").write_text("".join(part), encoding="utf-8")
        _FOLDERS[doc] = folder
    tmp_path = _FOLDERS[doc]
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "attnkit"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m attnkit "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    home = Path(os.environ.get("ATTNKIT_TEST_HOME") or Path.home() / ".cache" / "attnkit-tests").expanduser()
    monkeypatch.setenv("ATTNKIT_HOME", str(home))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def with_settings(command: str, settings: str) -> str:
    """Replace the value of every ``--flag`` named in ``settings`` (``--a=1 --b=x``) in ``command``."""
    for item in settings.split():
        if not item.startswith("--") or "=" not in item:
            raise ValueError(f"docs-test run settings must be --flag=value words, got {item!r}")
        flag, value = item.split("=", 1)
        command = re.sub(rf"(?<!\S){re.escape(flag)}(?:=|\s+)(\"[^\"]*\"|'[^']*'|\S+)",
                         lambda m: f"{flag} {shlex.quote(value)}", command)
    return command


def _bash(script: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _run_python(block: Block) -> None:
    # pad with newlines so that line numbers in a traceback are the Markdown file's
    # (under a name pytest cannot open, so a failure shows the traceback's lines, not the whole document)
    source = "\n" * (block.line - 1) + block.code
    code = compile(source, f"<{block.id.rsplit(':', 1)[0]}>", "exec")
    try:
        exec(code, {"__name__": "__docs__"})
    except BaseException as e:
        tb = e.__traceback__
        lines = []
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == code.co_filename:
                lines.append(tb.tb_lineno)
            tb = tb.tb_next
        if lines:
            text = source.splitlines()[lines[-1] - 1]
            e.add_note(f"at {block.path.name}:{lines[-1]} (code block starting at line {block.line}): {text.strip()}")
        raise


@pytest.mark.parametrize("block", BLOCKS)
def test_doc_block_runs(block: Block, docs_dir: Path):
    if block.marker == "output-of":
        result = _bash(block.arg, docs_dir)
        assert result.returncode == 0, f"{block.id}: `{block.arg}` failed:\n{result.stderr[-3000:]}"
        got = [line.rstrip() for line in result.stdout.rstrip("\n").splitlines()]
        want = [line.rstrip() for line in block.code.rstrip("\n").splitlines()]
        assert got == want, f"{block.id}: the block is not what `{block.arg}` prints now; its output is:\n" \
                            + "\n".join(got)
    elif block.lang == "python":
        _run_python(block)
    else:
        script = "set -euo pipefail\n" + with_settings(block.code, block.arg)
        result = _bash(script, docs_dir)
        assert result.returncode == 0, (f"{block.id}: the commands failed (exit {result.returncode}):\n{script}\n"
                                        f"--- stderr ---\n{result.stderr[-4000:]}")


# ------------------------------------------------------------------------------------------------------
# the collector itself
# ------------------------------------------------------------------------------------------------------

def test_collector_finds_blocks_and_markers(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("text\n\n```python\nx = 1\n```\n\n<!-- docs-test: run --steps=2 -->\n```bash\n"
                   "attnkit train lm --steps 300 --out r\n```\n\n```bash\nnot run\n```\n"
                   "<!-- docs-test: skip needs a GPU -->\n\n  ```python\n  y = 2\n  ```\n", encoding="utf-8")
    bs = blocks_of(doc)
    assert [(b.lang, b.line, b.marker, b.arg) for b in bs] == [
        ("python", 4, None, ""), ("bash", 9, "run", "--steps=2"), ("bash", 13, None, ""),
        ("python", 18, "skip", "needs a GPU")]
    assert bs[3].code == "y = 2\n"
    doc.write_text("<!-- docs-test: runn -->\n```bash\nx\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown docs-test marker 'runn'"):
        blocks_of(doc)


def test_a_training_shell_block_must_be_run_or_skipped(tmp_path, monkeypatch):
    doc = tmp_path / "x.md"
    monkeypatch.setattr(sys.modules[__name__], "doc_files", lambda: [doc])
    for code in ("attnkit train lm --data x --out r", "torchrun --nproc_per_node=2 -m attnkit train lm",
                 "attnkit finetune --from m --data d --out r"):
        doc.write_text(f"```bash\n{code}\n```\n", encoding="utf-8")
        with pytest.raises(ValueError, match="a shell block that trains must be marked"):
            _collect()
    doc.write_text("<!-- docs-test: skip needs a GPU -->\n```bash\nattnkit train lm --device cuda\n```\n"
                   "```bash\nattnkit params gpt2\n```\n", encoding="utf-8")
    assert _collect() == []  # marked skip (with its reason) and a block that trains nothing: neither runs, no error


def test_a_python_block_cannot_be_skipped(tmp_path, monkeypatch):
    doc = tmp_path / "x.md"
    doc.write_text("<!-- docs-test: skip needs a run -->\n```python\nx = 1\n```\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "doc_files", lambda: [doc])
    with pytest.raises(ValueError, match="every python block runs"):
        _collect()


def test_settings_replace_flag_values():
    cmd = "attnkit train lm --data shakespeare --max-time 3 --out runs/char\nattnkit sample --ckpt runs/char\n"
    assert with_settings(cmd, "--max-time=0.05 --data=tiny-lm.txt") == (
        "attnkit train lm --data tiny-lm.txt --max-time 0.05 --out runs/char\nattnkit sample --ckpt runs/char\n")
    assert with_settings("a --max-time=3 --steps 9", "--max-time=1") == "a --max-time 1 --steps 9"
    with pytest.raises(ValueError, match="--flag=value"):
        with_settings(cmd, "steps=3")


def test_every_doc_with_python_is_collected():
    ids = {p.values[0].path for p in BLOCKS}
    assert ROOT / "README.md" in ids
    python_docs = {p for p in doc_files() if any(b.lang == "python" for b in blocks_of(p))}
    assert python_docs <= ids


def test_a_broken_block_fails(tmp_path):
    doc = tmp_path / "bad.md"
    doc.write_text("# t\n\n```python\nx = 1\nraise RuntimeError('boom')\n```\n", encoding="utf-8")
    (b,) = blocks_of(doc)
    with pytest.raises(RuntimeError, match="boom") as info:
        _run_python(b)
    assert info.traceback[-1].lineno + 1 == 5  # the Markdown line of the raise
