"""Plain-text corpora for language modelling: a registry recipe name or a local file/folder → (train, valid) text.

``load_text_corpus("shakespeare")`` runs the recipe (fetching and converting once, then from the cache) and reads
its ``train.txt`` / ``valid.txt``. ``load_text_corpus("my_novel.txt")`` or ``load_text_corpus("texts/")`` reads
local UTF-8 text (``--data PATH`` on the command line):

- a file: its text;
- a folder: every ``*.txt`` file below it (recursively, hidden files and folders skipped), sorted by relative
  path and concatenated, each file ending with a newline;
- the split: the last 10% of characters become the validation text, cut at a line boundary (just after the first
  newline at or after the 90% mark, or else the last newline before it).

The text is kept exactly as written (no newline or Unicode normalisation); a leading byte-order mark is dropped.
Bad input raises ``ValueError``: an empty file, a binary file (a NUL byte) or bytes that are not UTF-8 (the
message names the file and the byte offset of the first bad byte), a folder without ``.txt`` files, a path that
does not exist and is not a recipe name. Whether each split is long enough for one training block is checked after
tokenization (:func:`attnkit.data.pipeline.lm_dataset.check_block_length`).

Axes: none (this module works on text, not tensors).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

from attnkit.data.corpora.registry import get_recipe, is_recipe, prepare, recipe_names

__all__ = ["load_text_corpus", "read_text_file", "read_text_source", "split_text", "split_point", "text_source_files",
           "lm_recipe_folder", "DEFAULT_VALID_FRACTION"]

DEFAULT_VALID_FRACTION = 0.1


def read_text_file(path: str | os.PathLike) -> str:
    """Read one file as strict UTF-8 text.

    Raises:
        ValueError: the file is empty, contains a NUL byte (binary), or is not valid UTF-8; the message names the
            file and the byte offset of the first offending byte.
    """
    path = Path(path)
    data = path.read_bytes()
    if not data:
        raise ValueError(f"{str(path)!r} is empty (0 bytes); expected UTF-8 text")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ValueError(f"{str(path)!r} looks binary: NUL byte at byte offset {nul}; expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{str(path)!r} is not UTF-8 text: invalid byte 0x{data[e.start]:02x} at byte offset "
                         f"{e.start} ({e.reason})") from None
    if text.startswith("\ufeff"):  # byte-order mark
        text = text[1:]
    if not text:
        raise ValueError(f"{str(path)!r} holds no text (only a byte-order mark)")
    return text


def _txt_files(folder: Path) -> list[Path]:
    files = []
    for p in sorted(folder.rglob("*.txt"), key=lambda q: q.relative_to(folder).as_posix()):
        rel = p.relative_to(folder)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            files.append(p)
    return files


def text_source_files(path: str | os.PathLike) -> tuple[list[Path], str]:
    """The files a local ``--data PATH`` names, in reading order, and ``"file"`` or ``"folder"`` (a folder's
    files each end with a newline when joined). Raises ``ValueError`` for a folder without ``.txt`` files or a
    path that does not exist."""
    path = Path(path).expanduser()
    if path.is_dir():
        files = _txt_files(path)
        if not files:
            raise ValueError(f"folder {str(path)!r} has no .txt files (found 0; other files are ignored)")
        return files, "folder"
    if path.is_file():
        return [path], "file"
    raise ValueError(f"{str(path)!r} is neither an existing file or folder nor a data recipe "
                     f"(known recipes: {', '.join(recipe_names('lm')) or '(none)'})")


def lm_recipe_folder(name_or_path: str | os.PathLike, *, home: str | os.PathLike | None = None,
                     force: bool = False) -> Path | None:
    """The prepared folder (``train.txt``, ``valid.txt``, ``SOURCE.json``) when ``name_or_path`` is a string
    naming a registered recipe (run once, then cached), else None (a local path). A recipe of another kind
    than ``"lm"`` raises ``ValueError``."""
    if not is_recipe(name_or_path):
        return None
    recipe = get_recipe(name_or_path)
    if recipe.kind != "lm":
        raise ValueError(f"data recipe {name_or_path!r} is of kind {recipe.kind!r}, a language model needs "
                         f"kind 'lm' (one of: {', '.join(recipe_names('lm'))})")
    return prepare(name_or_path, force=force, home=None if home is None else Path(home))


def read_text_source(path: str | os.PathLike) -> tuple[str, dict[str, Any]]:
    """Read a file or a folder of ``.txt`` files into one string; returns ``(text, info)``.

    ``info`` has ``kind`` (``"file"``/``"folder"``), ``path``, ``files`` (names, in order), ``bytes`` and ``sha256``
    of the concatenated UTF-8 text.
    """
    path = Path(path).expanduser()
    files, kind = text_source_files(path)
    if kind == "folder":
        parts = []
        for f in files:
            t = read_text_file(f)
            parts.append(t if t.endswith("\n") else t + "\n")
        text = "".join(parts)
    else:
        text = read_text_file(path)
    names = [f.relative_to(path).as_posix() for f in files] if kind == "folder" else [path.name]
    raw = text.encode("utf-8")
    return text, {"kind": kind, "path": str(path.resolve()), "files": names, "bytes": len(raw),
                  "sha256": hashlib.sha256(raw).hexdigest()}


def split_text(text: str, valid_fraction: float = DEFAULT_VALID_FRACTION) -> tuple[str, str]:
    """Split into (train, valid) with ``valid`` ≈ the last ``valid_fraction`` of the characters, cut at a line
    boundary: just after the first ``"\\n"`` at or after the mark, else just after the last one before it when
    that leaves the validation text at most twice its share, else (a text ending in one long line, or without
    newlines) exactly at the mark."""
    cut = split_point(len(text), valid_fraction, lambda i: text.find("\n", i), lambda i: text.rfind("\n", 0, i))
    return text[:cut], text[cut:]


def split_point(n_chars: int, valid_fraction: float, find_after: Callable[[int], int],
                find_before: Callable[[int], int]) -> int:
    """The character offset where :func:`split_text` cuts a text of ``n_chars`` characters, from two searches:
    ``find_after(i)`` (the first ``"\\n"`` at or after ``i``, or -1) and ``find_before(i)`` (the last one before
    ``i``, or -1). The text need not be in memory: a streaming reader answers the two searches from the file."""
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
    mark = int(n_chars * (1.0 - valid_fraction))
    nl = find_after(max(mark - 1, 0))
    if nl < 0 or nl + 1 >= n_chars:  # no newline after the mark (or only the final one): look before it
        nl = find_before(max(mark - 1, 0))
        if nl >= 0 and n_chars - (nl + 1) > 2 * (n_chars - mark):  # so far back that valid would take the text
            nl = -1
    return nl + 1 if nl >= 0 else mark


def load_text_corpus(name_or_path: str | os.PathLike, *, valid_fraction: float = DEFAULT_VALID_FRACTION,
                     home: str | os.PathLike | None = None, force: bool = False) -> tuple[str, str, dict[str, Any]]:
    """Resolve a recipe name (``"shakespeare"``) or a local path and return ``(train_text, valid_text, source_info)``.

    A string that names a registered recipe is the recipe (write ``./shakespeare`` for a local folder of that
    name); a ``Path`` object or any other string is a local path. Recipes must be of kind ``"lm"``.

    Args:
        valid_fraction: share of characters for validation, local paths only (recipes fix their own split).
        home: cache folder for recipes (default ``$ATTNKIT_HOME``).
        force: re-run the recipe's conversion even if cached.

    ``source_info`` for a recipe is its ``SOURCE.json`` plus ``recipe`` and ``folder``; for a path it is the
    :func:`read_text_source` info plus ``train_chars``/``valid_chars``.
    """
    folder = lm_recipe_folder(name_or_path, home=home, force=force)
    if folder is not None:
        train = read_text_file(folder / "train.txt")
        valid = read_text_file(folder / "valid.txt")
        info = json.loads((folder / "SOURCE.json").read_text(encoding="utf-8"))
        info.update(recipe=name_or_path, folder=str(folder))
        return train, valid, info
    text, info = read_text_source(name_or_path)
    train, valid = split_text(text, valid_fraction)
    info.update(valid_fraction=valid_fraction, train_chars=len(train), valid_chars=len(valid))
    return train, valid, info
