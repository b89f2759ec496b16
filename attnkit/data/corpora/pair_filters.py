"""Filters shared by the parallel-text sources: length ratio, length cap, which language a side is in.

Every source of German→English pairs (the dictionary, program catalogs, package descriptions …) passes its
candidate pairs through :func:`check_pair`, so that one rule decides what counts as a usable sentence pair.
The language check is a light heuristic of our own, not a language-identification model: it counts the most
frequent function words of each language. It is meant to catch the common failure of translated metadata —
a "German" side that was left in English, or an English side that holds German — not to identify a language
in general; short sides without any function word pass.

There are no tensor axes in this file.
"""

from __future__ import annotations

import collections
import re
from typing import Iterable

__all__ = ["MIN_RATIO", "MAX_RATIO", "MAX_WORDS", "MAX_CHARS", "function_words", "looks_german", "looks_english",
           "check_pair", "admit_pair", "admit_blocks", "is_full_sentence", "split_sentences"]

MIN_RATIO = 0.5  # character-length ratio german / english allowed for a pair
MAX_RATIO = 2.0
MAX_WORDS = 80  # per side
MAX_CHARS = 1000  # per side: a side of a few very long "words" (a path, a hash, a run of symbols) is no sentence

# The most frequent function words, chosen so that none is a common word of the other language.
_GERMAN = frozenset("""der die das und ist nicht mit für ein eine einen einem einer sich auf werden wird
kann können sind oder auch von zu den dem des im zum zur bei dieses diese dieser wenn werden wurde ihre
sie wir ich nur noch über aus nach wie als einer dass daß""".split())
_ENGLISH = frozenset("""the and is are of to for with this that be can it on by from which you your
not or at as has have were should these those their its into when""".split())  # no "was", "will", "an": German words too
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")


def function_words(text: str) -> tuple[int, int]:
    """``(german, english)``: how many of the text's words are German and English function words."""
    words = [w.lower() for w in _WORD.findall(text)]
    return sum(w in _GERMAN for w in words), sum(w in _ENGLISH for w in words)


def looks_german(text: str) -> bool:
    """False when the text has more English than German function words (a side left in English)."""
    de, en = function_words(text)
    return en <= de


def looks_english(text: str) -> bool:
    """False when the text has more German than English function words."""
    de, en = function_words(text)
    return de <= en


def check_pair(german: str, english: str) -> str:
    """``"ok"`` or why the pair is not a usable sentence pair.

    Reasons: ``"empty"``, ``"identical"`` (untranslated), ``"too long"`` (more than ``MAX_WORDS`` words or
    ``MAX_CHARS`` characters on a side), ``"length ratio"`` (German/English character ratio outside
    ``[MIN_RATIO, MAX_RATIO]``, the usual sign of a misalignment), ``"language"`` (a side that looks like the other
    language).
    """
    if not german.strip() or not english.strip():
        return "empty"
    if german == english:
        return "identical"
    if (len(german.split()) > MAX_WORDS or len(english.split()) > MAX_WORDS
            or len(german) > MAX_CHARS or len(english) > MAX_CHARS):
        return "too long"
    ratio = len(german) / len(english)
    if not MIN_RATIO <= ratio <= MAX_RATIO:
        return "length ratio"
    if not looks_german(german) or not looks_english(english):
        return "language"
    return "ok"


def admit_pair(german: str, english: str, seen: set[tuple[str, str]], reasons: collections.Counter) -> bool:
    """Run :func:`check_pair`, count the outcome in ``reasons`` (a pair already in ``seen`` counts as
    ``"duplicate"``), add an admitted pair to ``seen``; True if the pair is admitted."""
    reason = check_pair(german, english)
    if reason == "ok" and (german, english) in seen:
        reason = "duplicate"
    reasons[reason] += 1
    if reason == "ok":
        seen.add((german, english))
    return reason == "ok"


def admit_blocks(blocks: Iterable[tuple[str, str]], seen: set[tuple[str, str]],
                 reasons: collections.Counter) -> list[tuple[str, str]]:
    """The admitted pairs of aligned text blocks (paragraphs, headings, cells), in order.

    Each ``(german, english)`` block pair with text on both sides is split into sentences
    (:func:`split_sentences`); the sentences pair up when both sides have as many, else the block stays whole.
    Every candidate goes through :func:`admit_pair` (counted in ``reasons``, recorded in ``seen``).
    """
    out = []
    for de, en in blocks:
        if not de or not en:
            continue
        de_s, en_s = split_sentences(de), split_sentences(en)
        for d, e in (zip(de_s, en_s) if len(de_s) == len(en_s) else [(de, en)]):
            if admit_pair(d, e, seen, reasons):
                out.append((d, e))
    return out


def is_full_sentence(text: str, min_words: int = 5) -> bool:
    """A natural full sentence: at least ``min_words`` words, starts with a capital letter or a digit and
    ends in ``.``, ``!`` or ``?``."""
    text = text.strip()
    return (len(text.split()) >= min_words and text[-1:] in (".", "!", "?")
            and (text[:1].isupper() or text[:1].isdigit()))


# Abbreviations after which a full stop does not end a sentence (German and English, as they occur in
# technical prose). Compared case-insensitively, without the final dot.
_ABBREVIATIONS = frozenset("""z.b d.h u.a bzw usw ca vgl etc e.g i.e eg ie vs dr nr no bzgl evtl ggf inkl
sog u.ä s mr mrs st ff""".split())
_BOUNDARY = re.compile(r"(?<=[.!?])\s+(?=[A-ZÄÖÜ0-9\"'„“(])")


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences at ``.``/``!``/``?`` followed by a space and a capital letter or digit,
    except after a known abbreviation (``z.B.``, ``e.g.``, ``usw.`` …) or a single letter."""
    pieces = _BOUNDARY.split(text.strip())
    out: list[str] = []
    for piece in pieces:
        if out:
            last = out[-1].rsplit(None, 1)[-1].rstrip(".").lower()
            if last in _ABBREVIATIONS or len(last) == 1:
                out[-1] = f"{out[-1]} {piece}"
                continue
        out.append(piece)
    return [p for p in out if p]
