"""The ``fortunes`` data recipe: ~13.8k fortune-cookie texts (quotes, jokes, short poems) for language modelling.

Source: the Debian package ``fortunes`` (the data files of BSD ``fortune``; BSD license, see
``usr/share/doc/fortunes/copyright``), fetched with ``apt-get download`` and unpacked with ``dpkg -x`` -- nothing
is installed, no root needed. The package holds one text file per topic under ``usr/share/games/fortunes/``
(``computers``, ``literature``, ``science``, ``zippy``, ...) plus their ``.dat`` random-access indexes and ``.u8``
symbolic links, which we skip. In a fortune file the entries are separated by lines holding only ``%``::

    A day without sunshine is like night.
    %
    Everything should be made as simple as possible, but not simpler.
            -- Albert Einstein
    %

Cleaning (:func:`parse_fortunes`): the files ``art`` and ``ascii-art`` are dropped (pictures, not language);
teletype "overstriking" (``_\\bw`` underlines a ``w``, ``w\\bw`` makes it bold; some files use it for emphasis)
is resolved to the plain characters (:func:`strip_overstrike`); lines whose UTF-8 was decoded as Latin-1 once
too often (``donâ\x80\x99t`` for ``don’t``) are repaired (:func:`fix_mojibake`); other control characters (the
terminal bell ``\a`` of a few computer jokes) are removed; trailing spaces are removed from each line and blank
lines from the start and end of each entry; empty entries are dropped; duplicates (the same fortune in two files,
also when wrapped or indented differently: compared with every run of whitespace as one space) are kept once, so no
validation text is also in training.

Split (:func:`split_entries`): a seeded shuffle of the entries (``random.Random(1234)``), the first 5% to
``valid.txt``, the rest to ``train.txt``, each in shuffled order (topics mixed).

Output, in the recipe folder ``$ATTNKIT_HOME/data/fortunes``: ``train.txt`` and ``valid.txt`` in fortune-file
format -- every entry followed by a line holding only ``%`` (:data:`SEPARATOR`), which marks the end of each
document (a model trained on it learns to end a fortune with ``%``; :func:`read_entries` splits a file back
into entries) -- and ``SOURCE.json`` (package version, license, sha256 of the ``.deb`` and of each output, counts
per file and per split). The ``.deb`` stays in ``download/`` so a rebuild needs no network. A second call
returns the cached folder; ``force=True`` rebuilds.

Integrity: ``apt-get`` checks the ``.deb`` against the archive's signed package lists. Debian keeps only the
current version in the archive, so the version is not pinned; the one used, with its sha256, is recorded in
``SOURCE.json`` (:data:`KNOWN_DEBS` lists the versions this recipe was checked against).

There are no tensor axes in this file.
"""

from __future__ import annotations

import hashlib
import random
import re
import tempfile
from pathlib import Path
from typing import Iterable

from attnkit.data.fetch import (FetchError, apt_download, dpkg_extract, sha256_file, verified_record,
                                write_source_record)
from attnkit.files import write_text_atomic
from attnkit.data.corpora.registry import register

__all__ = [
    "PACKAGE",
    "LICENSE",
    "FORTUNE_DIR",
    "EXCLUDED_FILES",
    "SEPARATOR",
    "VALID_FRACTION",
    "SEED",
    "KNOWN_DEBS",
    "strip_overstrike",
    "fix_mojibake",
    "fortune_lines",
    "is_separator",
    "has_separators",
    "parse_fortunes",
    "fortune_files",
    "collect_entries",
    "split_entries",
    "format_entries",
    "read_entries",
    "build_fortunes",
    "prepare_fortunes",
]

PACKAGE = "fortunes"
LICENSE = "BSD-4-Clause-UC (BSD fortune data files; see usr/share/doc/fortunes/copyright)"
FORTUNE_DIR = "usr/share/games/fortunes"
EXCLUDED_FILES = ("art", "ascii-art")  # pictures drawn with characters, not language
SEPARATOR = "%"
VALID_FRACTION = 0.05
SEED = 1234
CONVERTER_VERSION = 4  # bump when the cleaning changes, so cached outputs are rebuilt
# Debian versions checked when this recipe was written (version -> sha256 of the .deb). Others are accepted
# (apt verifies them) and recorded; the counts may then differ slightly.
KNOWN_DEBS = {"1:1.99.1-7.3": "41d0551dc0ff52f875a2ecef7c39da2f672ab468c37e170119f7e0245a9d63c5"}


def strip_overstrike(line: str) -> str:
    """Resolve backspace overstriking the way a printer would show it, keeping the visible character.

    A backspace moves the "print head" one column back; the next character then lands on the same column.
    An underscore under a letter means underline (keep the letter); a letter over itself means bold.

    >>> strip_overstrike("_\\bw_\\bo_\\br_\\bd")
    'word'
    >>> strip_overstrike("*____\\b\\b\\b\\bonly*")
    '*only*'
    """
    if "\b" not in line:
        return line
    cells: list[str] = []
    col = 0
    for ch in line:
        if ch == "\b":
            col = max(0, col - 1)
            continue
        if col < len(cells):
            # overprint: a letter wins over an underscore or a space; otherwise the newer character wins
            if not (ch in "_ " and cells[col] not in "_ "):
                cells[col] = ch
        else:
            cells.append(ch)
        col += 1
    return "".join(cells)


# A UTF-8 multi-byte sequence seen through Latin-1: a lead byte (U+00C2..U+00F4) followed by the right number of
# continuation bytes (U+0080..U+00BF). Ordinary accented text almost never looks like this ("é" is followed by a
# letter or a space, not by a C1 control character).
_MOJIBAKE = re.compile("[\u00c2-\u00df][\u0080-\u00bf]|[\u00e0-\u00ef][\u0080-\u00bf]{2}"
                       "|[\u00f0-\u00f4][\u0080-\u00bf]{3}")


def _redecode(match: re.Match) -> str:
    try:
        return match.group().encode("latin-1").decode("utf-8")
    except UnicodeDecodeError:  # e.g. an overlong sequence: not mojibake after all
        return match.group()


def fix_mojibake(line: str) -> str:
    """Repair UTF-8 that was once decoded as Latin-1 (``"donâ\x80\x99t"`` -> ``"don’t"``).

    Only character runs that spell a valid UTF-8 multi-byte sequence are re-decoded, so genuine accented
    letters in the same line (``"café"``) stay as they are. Text mangled twice (``"donÃ¢Â\x80Â\x99t"``, which
    occurs) is repaired by repeating until nothing changes.
    """
    for _ in range(4):
        if all(ord(c) < 0x80 for c in line):
            return line
        fixed = _MOJIBAKE.sub(_redecode, line)
        if fixed == line:
            return line
        line = fixed
    return line


# C0 control characters other than tab and newline, and DEL (the backspace is consumed by strip_overstrike)
_CONTROL = {c: None for c in [*range(0, 9), *range(11, 32), 127]}


# A line ends at LF, CR LF or a lone CR (old Mac files), as in Python's universal newlines.
_LINE_END = re.compile(r"\r\n|\r|\n")
# Where a line may start with "%": the start of the text or after a line end; the line runs to the next CR or LF.
_PERCENT_LINE = re.compile(r"(?<![^\r\n])%[^\r\n]*")


def fortune_lines(text: str) -> list[str]:
    """The lines of ``text`` without their line ends (LF, CR LF or a lone CR)."""
    return _LINE_END.split(text)


def is_separator(line: str) -> bool:
    """Whether ``line`` (one of :func:`fortune_lines`) separates two entries: ``%`` followed by nothing but
    whitespace (``str.isspace``: spaces, tabs, a form feed, a no-break space, ...). The one rule of the format:
    :func:`parse_fortunes` and ``split_documents(text, "auto")`` both use it."""
    return line.rstrip() == SEPARATOR


def has_separators(text: str) -> bool:
    """Whether ``text`` holds at least one separator line (:func:`is_separator`), i.e. is in fortune-file format."""
    return any(is_separator(m.group()) for m in _PERCENT_LINE.finditer(text))


def parse_fortunes(text: str) -> list[str]:
    """Split the text of one fortune file into cleaned entries (see the module docstring).

    Args:
        text: the whole file, entries separated by lines holding only ``%`` (:func:`is_separator`); lines end
            at LF, CR LF or a lone CR.

    Returns:
        the non-empty entries, in file order, without the separators; lines keep their leading
        whitespace (indentation is part of poems and attributions), lose their trailing whitespace.
    """
    if not isinstance(text, str):
        raise ValueError(f"parse_fortunes expects the file's text as a str, got {type(text).__name__}")
    entries: list[str] = []
    current: list[str] = []

    def flush() -> None:
        lines = [fix_mojibake(strip_overstrike(line)).translate(_CONTROL).rstrip() for line in current]
        while lines and not lines[0]:
            lines.pop(0)
        while lines and not lines[-1]:
            lines.pop()
        if lines:
            entries.append("\n".join(lines))
        current.clear()

    for line in fortune_lines(text):
        if is_separator(line):
            flush()
        else:
            current.append(line)
    flush()
    return entries


def fortune_files(folder: str | Path) -> list[Path]:
    """The fortune text files in ``folder`` (sorted by name): not ``.dat`` indexes, not ``.u8`` links, not
    :data:`EXCLUDED_FILES`, not other symbolic links."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"expected a folder of fortune files, got {folder} (not a directory)")
    out = []
    for p in sorted(folder.iterdir()):
        if p.is_symlink() or not p.is_file() or p.suffix in (".dat", ".u8") or p.name in EXCLUDED_FILES:
            continue
        out.append(p)
    return out


def _duplicate_key(entry: str) -> str:
    """What two entries share when they are the same fortune: the words, whatever the wrapping and indentation."""
    return " ".join(entry.split())


def collect_entries(folder: str | Path) -> tuple[list[str], dict[str, int], int]:
    """Entries of every fortune file in ``folder``, duplicates kept once (first occurrence wins): entries that
    differ only in their whitespace (wrapped at other places, indented otherwise) count as the same.

    Returns:
        ``(entries, per_file_counts, duplicates_removed)``; per-file counts are before deduplication.
    """
    files = fortune_files(folder)
    if not files:
        raise ValueError(f"no fortune files in {folder}")
    seen: set[str] = set()
    entries: list[str] = []
    per_file: dict[str, int] = {}
    dups = 0
    for p in files:
        # The Debian files are UTF-8 (a few older ones are plain ASCII); anything else is a broken file.
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"fortune file {p} is not UTF-8: {err}") from None
        parsed = parse_fortunes(text)
        per_file[p.name] = len(parsed)
        for e in parsed:
            key = _duplicate_key(e)
            if key in seen:
                dups += 1
                continue
            seen.add(key)
            entries.append(e)
    return entries, per_file, dups


def split_entries(entries: list[str], *, valid_fraction: float = VALID_FRACTION, seed: int = SEED
                  ) -> tuple[list[str], list[str]]:
    """Seeded shuffle, then the first ``round(valid_fraction * n)`` entries (at least 1) are valid.

    Returns:
        ``(train, valid)``, both in shuffled order. Deterministic in ``(entries, valid_fraction, seed)``.
    """
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
    if len(entries) < 2:
        raise ValueError(f"need at least 2 entries to split into train and valid, got {len(entries)}")
    order = list(entries)
    random.Random(seed).shuffle(order)
    n_valid = min(len(order) - 1, max(1, round(valid_fraction * len(order))))
    return order[n_valid:], order[:n_valid]


def format_entries(entries: Iterable[str]) -> str:
    """Fortune-file text: each entry followed by a line holding only ``%``."""
    return "".join(f"{e}\n{SEPARATOR}\n" for e in entries)


def read_entries(path: str | Path) -> list[str]:
    """The entries of a ``train.txt``/``valid.txt`` written by this recipe (or of any fortune file)."""
    return parse_fortunes(Path(path).read_text(encoding="utf-8"))


def _write_text(path: Path, text: str) -> dict:
    write_text_atomic(path, text)
    return {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "bytes": len(text.encode("utf-8")),
            "chars": len(text)}


def build_fortunes(fortune_dir: str | Path, out_dir: str | Path, *, source: dict | None = None,
                   valid_fraction: float = VALID_FRACTION, seed: int = SEED) -> dict:
    """Clean, deduplicate and split the fortune files in ``fortune_dir``; write ``train.txt``, ``valid.txt``
    and ``SOURCE.json`` into ``out_dir``. Returns the record written to ``SOURCE.json``.

    Args:
        fortune_dir: a folder of fortune files (e.g. ``<extracted .deb>/usr/share/games/fortunes``).
        out_dir: where to write.
        source: package facts to include in the record (package, version, sha256 of the ``.deb``).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    entries, per_file, dups = collect_entries(fortune_dir)
    train, valid = split_entries(entries, valid_fraction=valid_fraction, seed=seed)
    outputs = {}
    for name, part in (("train.txt", train), ("valid.txt", valid)):
        outputs[name] = {**_write_text(out_dir / name, format_entries(part)), "entries": len(part)}
    record = {
        "name": "fortunes",
        **(source or {}),
        "license": LICENSE,
        "converter_version": CONVERTER_VERSION,
        "excluded_files": list(EXCLUDED_FILES),
        "format": f"entries in fortune-file format: each entry followed by a line holding only {SEPARATOR!r}",
        "split": f"seeded shuffle (random.Random({seed})) of the deduplicated entries; first "
                 f"{valid_fraction:.0%} to valid",
        "counts": {"files": len(per_file), "entries_parsed": sum(per_file.values()), "duplicates_removed": dups,
                   "entries": len(entries), "train": len(train), "valid": len(valid)},
        "entries_per_file": per_file,
        "outputs": outputs,
    }
    write_source_record(out_dir, record)
    return record


def _cached_ok(folder: Path) -> bool:
    """True when SOURCE.json is from this converter version and every output matches its recorded sha256."""
    return verified_record(folder, ("train.txt", "valid.txt"), converter_version=CONVERTER_VERSION) is not None


@register("fortunes", kind="lm",
          description="~13.8k fortune-cookie texts (Debian package 'fortunes', BSD), seeded 95/5 split, "
                      "entries separated by '%' lines, ~2.3 M characters")
def prepare_fortunes(home: Path, force: bool = False) -> Path:
    """Fetch the ``.deb`` (once), unpack it to a temporary folder, build the corpus into ``home``; return ``home``.

    ``home`` is the registry's folder for this recipe. To work offline, put a ``fortunes_*.deb`` into
    ``home/download/`` (or pass ``--data PATH`` to train on a local text file instead).
    """
    home = Path(home)
    if not force and _cached_ok(home):
        return home
    download = home / "download"
    try:
        deb, version = apt_download(PACKAGE, download)
        if version in KNOWN_DEBS and sha256_file(deb) != KNOWN_DEBS[version]:
            deb.unlink()  # a version this recipe knows, with other bytes: damaged or altered, fetched again
            deb, version = apt_download(PACKAGE, download, version=version, sha256=KNOWN_DEBS[version])
    except FetchError as e:
        raise FetchError(f"{e}\nOr copy a {PACKAGE}_*.deb into {download} and run again.") from None
    with tempfile.TemporaryDirectory(dir=home, prefix="extract.") as tmp:
        root = dpkg_extract(deb, tmp)
        folder = root / FORTUNE_DIR
        if not folder.is_dir():
            raise FetchError(f"{deb.name} has no {FORTUNE_DIR}/ folder; is it the right package?")
        digest = sha256_file(deb)
        build_fortunes(folder, home, source={
            "package": PACKAGE,
            "version": version,
            "registry": "Debian (apt-get download)",
            "file": deb.name,
            "sha256": digest,
            "known_version": KNOWN_DEBS.get(version) == digest,
        })
    return home
