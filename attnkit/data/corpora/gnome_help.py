"""GNOME's help (Mallard pages) in German and English: sentence pairs aligned by page and text block.

Debian's ``gnome-user-docs`` ships the GNOME desktop help (CC-BY-SA 3.0), and the GNOME applications ship
their own help (evince, gedit, gnome-terminal …), as Mallard XML pages, the English originals under
``usr/share/help/C/<document>/`` and the translations under ``usr/share/help/<lang>/…``. The
translated pages are made by itstool from the English page and its ``.po`` file: the XML tree stays the same and
only the text of each translatable block (``<title>``, ``<desc>``, ``<p>``, table cells, list items, …) is
replaced. So a German page and the English page of the same name have the same sequence of text blocks, and
the n-th block of one translates the n-th block of the other. A page is aligned only when both sides have the
same sequence of block kinds (else it is counted as ``"unaligned page"``); the translators' credits, which only
the German page has, are left out. Inside a block pair, sentences pair when both sides have as many, else the
block stays whole. Every pair passes :func:`attnkit.data.corpora.pair_filters.admit_pair`.

A document is a help page (``gnome-help/files-copy``).

There are no tensor axes in this file.
"""

from __future__ import annotations

import collections
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterable

from attnkit.data.corpora.pair_filters import admit_blocks
from attnkit.data.corpora.parallel import normalize_text

__all__ = ["HELP_ROOT", "text_blocks", "gnome_documents"]

HELP_ROOT = "usr/share/help"  # then C/<document>/*.page (English) and de/<document>/*.page
_NS = "{http://projectmallard.org/1.0/}"
# Blocks whose whole text is one translation unit (itstool's "within text" elements stay inside them).
_BLOCKS = frozenset(("title", "subtitle", "desc", "p", "td", "th", "code", "screen"))
_SKIP = frozenset(("credit", "license", "revision"))  # metadata, never running text
_CODE = frozenset(("code", "screen"))

Pair = tuple[str, str]  # (german, english)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _text(elem: ET.Element) -> str:
    """An element's text with its inline markup removed; a key sequence reads ``Ctrl+C``."""
    if _local(elem.tag) == "keyseq":
        inner = "+".join(_text(k) for k in elem if _local(k.tag) == "key")
    else:
        inner = (elem.text or "") + "".join(_text(child) + (child.tail or "") for child in elem)
    return inner


def text_blocks(page: str) -> list[tuple[str, str]]:
    """``[(kind, text), …]`` of a Mallard page's text blocks in document order; ``kind`` is the block's tag and
    its parent's (``"item/p"``). Metadata (credits, licence, revisions) is left out; code blocks keep their
    kind (so the sequences still line up) with empty text."""
    root = ET.fromstring(page)
    out: list[tuple[str, str]] = []

    def walk(elem: ET.Element, parent: str) -> None:
        tag = _local(elem.tag)
        if tag in _SKIP:
            return
        if tag in _BLOCKS:
            text = "" if tag in _CODE else normalize_text(_text(elem))
            out.append((f"{parent}/{tag}", text))
            return
        for child in elem:
            walk(child, tag)

    walk(root, "")
    return out


def gnome_documents(help_roots: Iterable[str | Path]) -> tuple[dict[str, list[Pair]], collections.Counter]:
    """Aligned, filtered pairs of every page present in German and in English, grouped by page.

    ``help_roots`` are ``usr/share/help`` folders (one an unpacked package), each holding ``C/<document>/`` and
    ``de/<document>/``. Returns ``({"document/page": [(german, english), …]}, counter of kept and dropped
    reasons)``; a pair seen before on any page is dropped as ``"duplicate"``.
    """
    docs: dict[str, list[Pair]] = {}
    reasons: collections.Counter = collections.Counter()
    seen: set[Pair] = set()
    for root in map(Path, help_roots):
        for page in sorted((root / "de").glob("*/*.page")):
            rel = page.relative_to(root / "de")
            other = root / "C" / rel
            if not other.is_file():
                reasons["no english page"] += 1
                continue
            try:
                de_blocks, en_blocks = text_blocks(page.read_text("utf-8")), text_blocks(other.read_text("utf-8"))
            except ET.ParseError:
                reasons["unreadable page"] += 1
                continue
            if [k for k, _ in de_blocks] != [k for k, _ in en_blocks]:
                reasons["unaligned page"] += 1
                continue
            pairs = admit_blocks(((de, en) for (_, de), (_, en) in zip(de_blocks, en_blocks)), seen, reasons)
            if pairs:
                docs[rel.with_suffix("").as_posix()] = pairs
    return docs, reasons
