"""LibreOffice's help in German and English: sentence pairs aligned by page and paragraph id.

Debian ships LibreOffice's offline help as one package a language (``libreoffice-help-de``,
``libreoffice-help-en-us``, MPL-2.0). Each has the same tree of HTML pages under
``usr/share/libreoffice/help/<lang>/text/…``, and every translatable paragraph and heading carries the same id
in every language (``<p id="par_id3146060" …>``, ``<h1 id="hd_id3150713" …>``), because the pages are generated
from one source with its translations. So a page's German paragraph and the English paragraph with the same id
are translations of each other. Inside a pair of paragraphs, sentences are paired when both sides have as many;
otherwise the paragraph is kept whole. Every pair passes :func:`attnkit.data.corpora.pair_filters.check_pair`, which
drops the many untranslated names (identical sides) and misalignments (length ratio).

A document is a help page (its path below the language folder).

There are no tensor axes in this file.
"""

from __future__ import annotations

import collections
import html.parser
import re
from pathlib import Path

from attnkit.data.corpora.pair_filters import admit_blocks
from attnkit.data.corpora.parallel import normalize_text

__all__ = ["HELP_ROOT", "paragraphs", "help_documents"]

HELP_ROOT = "usr/share/libreoffice/help"  # inside the packages; then de/ or en-US/
_ID = re.compile(r"^(par_id|hd_id)")
_BLOCKS = frozenset(("p", "h1", "h2", "h3", "h4", "h5", "h6", "td", "li"))

Pair = tuple[str, str]  # (german, english)


class _Paragraphs(html.parser.HTMLParser):
    """Collects the text of every block element whose id starts with ``par_id``/``hd_id``; text of nested
    blocks without such an id belongs to the enclosing one."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str | None, list[str]]] = []
        self.found: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _BLOCKS:
            return
        ident = dict(attrs).get("id") or ""
        if _ID.match(ident):
            self.stack.append((tag, ident, []))
        elif self.stack:
            self.stack.append((tag, None, []))

    def handle_endtag(self, tag: str) -> None:
        if self.stack and self.stack[-1][0] == tag:
            _, ident, parts = self.stack.pop()
            if ident is not None:
                self.found.setdefault(ident, normalize_text("".join(parts)))
            elif self.stack:
                self.stack[-1][2].extend(parts)

    def handle_data(self, data: str) -> None:
        if self.stack:
            self.stack[-1][2].append(data)


def paragraphs(page: str) -> dict[str, str]:
    """``{id: text}`` of one help page's paragraphs and headings (markup removed, whitespace normalised)."""
    parser = _Paragraphs()
    parser.feed(page)
    parser.close()
    return parser.found


def help_documents(german_root: str | Path, english_root: str | Path) -> tuple[dict[str, list[Pair]],
                                                                                collections.Counter]:
    """Aligned, filtered pairs of every page present in both help trees, grouped by page.

    ``german_root``/``english_root`` are the language folders (``…/help/de`` and ``…/help/en-US``).
    Returns ``({page path: [(german, english), …]}, counter of kept/dropped reasons)``; a pair seen before on
    any page is dropped as ``"duplicate"``.
    """
    german_root, english_root = Path(german_root), Path(english_root)
    docs: dict[str, list[Pair]] = {}
    reasons: collections.Counter = collections.Counter()
    seen: set[Pair] = set()
    for page in sorted(german_root.rglob("*.html")):
        rel = page.relative_to(german_root)
        other = english_root / rel
        if not other.is_file():
            reasons["no english page"] += 1
            continue
        english = paragraphs(other.read_text(encoding="utf-8"))
        blocks = []
        for ident, de in paragraphs(page.read_text(encoding="utf-8")).items():
            en = english.get(ident)
            if not de or not en:
                reasons["no english"] += 1
                continue
            blocks.append((de, en))
        pairs = admit_blocks(blocks, seen, reasons)
        if pairs:
            docs[rel.as_posix()] = pairs
    return docs, reasons
