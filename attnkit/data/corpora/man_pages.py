"""Linux man pages in German and English: sentence pairs aligned by page, section and paragraph.

Debian's ``manpages-de`` and ``manpages-de-dev`` hold the German translations (made with po4a, GPL-3+ for the
translations) of the pages in ``manpages`` and ``manpages-dev`` (the Linux man-pages project, mostly under the
"Linux man-pages copyleft" licence). po4a translates a page paragraph by paragraph and keeps its roff
structure, so when both versions of a page come from the same upstream text they have the same sections
(``.SH``/``.SS``) with the same number of paragraphs, in the same order (the German page adds one last
section, ÜBERSETZUNG, naming its translators, which is dropped). Pages are paired by name
(``de/man7/signal.7.gz`` with ``man7/signal.7.gz``), sections by position when both pages have as many, and
paragraphs by position inside two sections of equal paragraph count; inside a paragraph pair, sentences are
paired when both sides have as many, else the paragraph is kept whole (if short enough). Code examples
(``.nf``/``.EX`` blocks) and tables (``.TS``) are skipped. Every pair passes
:func:`attnkit.data.corpora.pair_filters.admit_pair`.

A document is a man page (section and name).

There are no tensor axes in this file.
"""

from __future__ import annotations

import collections
import gzip
import re
from pathlib import Path
from typing import Iterable

from attnkit.data.corpora.pair_filters import MAX_WORDS, admit_pair, split_sentences
from attnkit.data.corpora.parallel import normalize_text

__all__ = ["MAN_ROOT", "roff_sections", "page_pairs", "man_documents"]

MAN_ROOT = "usr/share/man"  # English pages in man1..man8, German ones in de/man1..man8

Pair = tuple[str, str]  # (german, english)

# Requests that end a paragraph; .SH/.SS start a section.
_BREAK = frozenset("PP P LP TP IP HP sp br TQ RS RE in ti".split())
_SKIP_START = {"nf": "fi", "EX": "EE", "TS": "TE", "EQ": "EN"}
_ALTERNATING = frozenset("BI BR IB IR RB RI".split())
_FONT_MACROS = _ALTERNATING | {"B", "I", "SM", "SB"}
# groff's named characters that running text uses (German umlauts are written \(:a or \[:a] by po4a/DocBook
# tools); any other named character is dropped.
_NAMED = {":a": "ä", ":o": "ö", ":u": "ü", ":A": "Ä", ":O": "Ö", ":U": "Ü", "ss": "ß", "aq": "'", "cq": "'",
          "oq": "'", "dq": '"', "lq": '"', "rq": '"', "em": "–", "en": "–", "hy": "-", "bu": "•", "Fo": "«",
          "Fc": "»", "fo": "‹", "fc": "›", "co": "©", "rg": "®", "de": "°", "mu": "×", "->": "→", "<-": "←",
          "'e": "é", "`e": "è", "'a": "á", "`a": "à", "^o": "ô", ",c": "ç", "Eu": "€", "eu": "€", "ti": "~",
          "ga": "`", "ha": "^", "rs": "\\", "sl": "/", "at": "@", "sh": "#", "Do": "$", "lB": "[", "rB": "]",
          "lC": "{", "rC": "}", "la": "⟨", "ra": "⟩", ">=": "≥", "<=": "≤", "!=": "≠", "+-": "±", "12": "½"}
# Predefined strings (``\*(Aq``, ``\*[Aq]``): man's and pod2man's quotes, C++ and the like; others are dropped.
_STRINGS = {"Aq": "'", "aq": "'", "lq": '"', "rq": '"', "Lq": '"', "Rq": '"', 'L"': '"', 'R"': '"', "C+": "C++",
            "C`": '"', "C'": '"', "Tm": "™", "R": "®", "PI": "π"}
# Single-character escapes that stand for a character; every other one is dropped (\& \c \u \d \% …).
_CHARS = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "t": " ", ".": ".", "'": "'", "`": "`"}
# One pass over all escapes, so that the text an escape produces (a backslash from \e) is never read again.
_ESCAPE = re.compile(r"""\\(?:
    u\[\d+\]\\d                          # DocBook's footnote mark: \u[3]\d
   |[ABCDhHlLNoRSvwxXZ]'[^']*'           # an escape with a quoted argument: \h'2n', \w'text', \C'dq'
   |[fFmMn](?:\[[^\]]*\]|\(..|.)         # font, colour, number register
   |\*(?:\[[^\]]*\]|\(..|.)              # predefined string
   |\((..)                               # named character \(:a
   |\[([^\]]*)\]                         # named character \[:a]
   |s[-+]?\d                             # size
   |.)""", re.X)


def _named(name: str) -> str:
    """A named character: groff's name (``:a``) or its Unicode form (``u00E4``); any other is dropped."""
    code = int(name[1:], 16) if re.fullmatch(r"u[0-9A-F]{4,6}", name) else None
    if code is not None and code <= 0x10FFFF and not 0xD800 <= code < 0xE000:  # (a surrogate: UTF-8 cannot hold it)
        return chr(code)
    return _NAMED.get(name, "")


def _escape(m: re.Match) -> str:
    text = m.group(0)
    if m.group(1) is not None or m.group(2) is not None:
        return _named(m.group(1) or m.group(2))
    if text[2:3] == "'":  # quoted argument: a character by name (\C'dq'), else motion, width, drawing: no text
        return _named(text[3:-1]) if text[1] == "C" else ""
    if text[1] == "*":
        name = text[2:].removeprefix("(").removeprefix("[").removesuffix("]")
        return _STRINGS.get(name, "")
    if len(text) == 2:
        return _CHARS.get(text[1], "")
    return ""


def _plain(text: str) -> str:
    return _ESCAPE.sub(_escape, text)


def _macro_text(request: str, args: str) -> str:
    """The text of a font macro line: ``.BR open (2)`` joins its arguments (alternating fonts: ``open(2)``),
    ``.B two words`` keeps the spaces. An escaped space (``\\ ``) does not separate arguments."""
    parts = [p.strip('"') for p in re.findall(r'"[^"]*"|(?:\\.|\S)+', args)]
    return ("" if request in _ALTERNATING else " ").join(parts)


def roff_sections(source: str) -> list[list[str]]:
    """A man page's running text: a list of sections (``.SH``/``.SS``), each a list of paragraphs.

    Comments, the title, code/table blocks and unknown requests are skipped; font macros (``.B``, ``.BR`` …)
    contribute their text; ``.TP`` starts a paragraph that holds its tag and then its text (``-a Do not …``).
    Escapes are turned into plain text.
    """
    sections: list[list[str]] = [[]]
    current: list[str] = []
    skip_until: str | None = None

    def flush() -> None:
        text = normalize_text(_plain(" ".join(current)))
        if text:
            sections[-1].append(text)
        current.clear()

    for line in source.splitlines():
        if skip_until is not None:
            if re.match(r"^[.']\s*" + skip_until + r"\b", line):
                skip_until = None
            continue
        if line.startswith(('.\\"', "'\\\"", '\\"')):
            continue
        if line.startswith((".", "'")):
            request, _, args = line[1:].strip().partition(" ")
            if request in _SKIP_START:
                flush()
                skip_until = _SKIP_START[request]
            elif request in ("SH", "SS"):
                flush()
                sections.append([])
            elif request in _BREAK:
                flush()
            elif request in _FONT_MACROS:
                current.append(_macro_text(request, args))
            # any other request (.TH, .ad, .hy, .UR …) carries no running text
            continue
        if not line.strip():
            flush()
            continue
        current.append(line)
    flush()
    return [s for s in sections if s]


def page_pairs(german: str, english: str) -> list[Pair]:
    """Candidate pairs of one page (German and English roff sources); no filter applied."""
    de_sections, en_sections = roff_sections(german), roff_sections(english)
    if len(de_sections) == len(en_sections) + 1:
        de_sections = de_sections[:-1]  # the translation adds a last section naming its translators
    if len(de_sections) != len(en_sections):
        return []
    pairs: list[Pair] = []
    for de_pars, en_pars in zip(de_sections, en_sections):
        if len(de_pars) != len(en_pars):
            continue
        for de, en in zip(de_pars, en_pars):
            de_s, en_s = split_sentences(de), split_sentences(en)
            if len(de_s) == len(en_s):
                pairs.extend(zip(de_s, en_s))
            elif len(de.split()) <= MAX_WORDS and len(en.split()) <= MAX_WORDS:
                pairs.append((de, en))
    return pairs


def _read(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def man_documents(german_roots: Iterable[str | Path], english_roots: Iterable[str | Path]
                  ) -> tuple[dict[str, list[Pair]], collections.Counter]:
    """Aligned, filtered pairs of every page present in German and in English, grouped by page (``"man7/signal.7"``).

    ``german_roots`` are folders holding ``man1`` … ``man8`` of German pages (``usr/share/man/de`` of each
    unpacked package), ``english_roots`` the same for English (``usr/share/man``). Pages that are links
    (``.so``) are skipped. Returns ``({page: [(german, english), …]}, counter of kept/dropped reasons)``.
    """
    def pages(roots: Iterable[str | Path]) -> dict[str, Path]:
        return {p.relative_to(root).as_posix(): p for root in map(Path, roots)
                for p in sorted(root.glob("man[1-8]/*")) if p.is_file()}

    german, english = pages(german_roots), pages(english_roots)
    docs: dict[str, list[Pair]] = {}
    reasons: collections.Counter = collections.Counter()
    seen: set[Pair] = set()
    for name in sorted(german.keys() & english.keys()):
        de_source, en_source = _read(german[name]), _read(english[name])
        if de_source.lstrip().startswith(".so ") or en_source.lstrip().startswith(".so "):
            continue
        candidates = page_pairs(de_source, en_source)
        if not candidates:
            reasons["unaligned page"] += 1
        pairs = [(de, en) for de, en in candidates if admit_pair(de, en, seen, reasons)]
        if pairs:
            docs[name.removesuffix(".gz")] = pairs
    return docs, reasons
