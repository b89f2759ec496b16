"""Debian's manuals in German and English (HTML made from DocBook or Sphinx): pairs aligned by section and block.

The Debian reference (``debian-reference-de``/``-en``), the New Maintainers' Guide (``maint-guide-de``/
``maint-guide``) and the Developer's Reference (``developers-reference-de``/``developers-reference``) are
translated with po4a or Sphinx's gettext: the German HTML is generated from the same source as the English one,
with each paragraph, heading, list item and table cell replaced by its translation. So both versions of a page
have the same sections, identified by the same ids (``<a id="_package_configuration">``,
``<section id="new-maintainer">``), and inside a section the same sequence of text blocks. A page is cut into
sections at every element with an ``id``; a German section is aligned with the English section of the same id
when both have the same sequence of block kinds (else counted as ``"unaligned section"``), and then block by
block. Code (``<pre>``) is skipped. Inside a block pair, sentences pair when both sides have as many, else the
block stays whole. Every pair passes :func:`attnkit.data.corpora.pair_filters.admit_pair`.

A document is a manual page (``debian-reference/ch02``).

There are no tensor axes in this file.
"""

from __future__ import annotations

import collections
import html.parser
from pathlib import Path
from typing import Iterable

from attnkit.data.corpora.pair_filters import admit_blocks
from attnkit.data.corpora.parallel import normalize_text

__all__ = ["page_sections", "manual_documents"]

_BLOCKS = frozenset(("p", "h1", "h2", "h3", "h4", "h5", "h6", "td", "th", "dt", "li", "title", "caption", "pre"))
_VOID = frozenset(("br", "img", "hr", "meta", "link", "input", "col", "area", "base", "wbr"))

Pair = tuple[str, str]  # (german, english)


class _Sections(html.parser.HTMLParser):
    """Cuts a page into sections at each element with an id; each section is a list of ``(kind, text)`` blocks.
    A block's text is its own text and that of its inline elements; a block inside a block is a block of its own."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: dict[str, list[tuple[str, str]]] = {"": []}
        self.current = ""
        self.blocks: list[tuple[str, list[str]]] = []  # open blocks: (tag, text parts)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        ident = dict(attrs).get("id")
        if ident and ident not in self.sections:
            self.current = ident
            self.sections[ident] = []
        if tag in _BLOCKS:
            self.blocks.append((tag, []))
        elif tag == "br" and self.blocks:  # a line break separates words
            self.blocks[-1][1].append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _BLOCKS and self.blocks and self.blocks[-1][0] == tag:
            kind, parts = self.blocks.pop()
            in_code = kind == "pre" or any(k == "pre" for k, _ in self.blocks)
            text = "" if in_code else normalize_text("".join(parts).replace("¶", ""))  # Sphinx heading anchors
            self.sections[self.current].append((kind, text))

    def handle_data(self, data: str) -> None:
        if self.blocks:
            self.blocks[-1][1].append(data)


def page_sections(page: str) -> dict[str, list[tuple[str, str]]]:
    """``{section id: [(block kind, text), …]}`` of one HTML page (``""`` for what precedes the first id)."""
    parser = _Sections()
    parser.feed(page)
    parser.close()
    return {k: v for k, v in parser.sections.items() if v}


def manual_documents(pages: Iterable[tuple[str, str | Path, str | Path]]) -> tuple[dict[str, list[Pair]],
                                                                                 collections.Counter]:
    """Aligned, filtered pairs of manual pages, grouped by page.

    ``pages`` holds ``(name, german_html_path, english_html_path)`` triples. Returns
    ``({name: [(german, english), …]}, counter of kept and dropped reasons)``; a pair seen before on any page is
    dropped as ``"duplicate"``.
    """
    docs: dict[str, list[Pair]] = {}
    reasons: collections.Counter = collections.Counter()
    seen: set[Pair] = set()
    for name, de_path, en_path in pages:
        de_sections = page_sections(Path(de_path).read_text(encoding="utf-8"))
        en_sections = page_sections(Path(en_path).read_text(encoding="utf-8"))
        pairs: list[Pair] = []
        for ident, de_blocks in de_sections.items():
            en_blocks = en_sections.get(ident)
            if en_blocks is None or [k for k, _ in de_blocks] != [k for k, _ in en_blocks]:
                reasons["unaligned section"] += 1
                continue
            pairs += admit_blocks(((de, en) for (_, de), (_, en) in zip(de_blocks, en_blocks)), seen, reasons)
        if pairs:
            docs[name] = pairs
    return docs, reasons
