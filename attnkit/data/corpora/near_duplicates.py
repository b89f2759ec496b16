"""Near-duplicate keys: what two sentences share when they are the same sentence up to its surface.

The recipes remove *exact* duplicates (and de-en compares its split's strings casefolded), but the same sentence
also comes back with other case, punctuation or spacing, with a GUI accelerator mark (``_Open``, ``~Öffnen``,
``Ö&ffnen``), or with another number or placeholder (``Deleted %d files.`` / ``Deleted 3 files.``).
:func:`near_duplicate_key` maps all of these to one key, so that a held-out sentence can be looked up among the
training sentences (``benchmarks/split_overlap.py`` measures how many are; docs/data.md, "Overlap between splits").
No recipe uses it yet: removing near-duplicates changes a recipe's output and so needs a version bump.

Examples::

    >>> near_duplicate_key("  Open the _File…  ")
    'open the file'
    >>> near_duplicate_key("OPEN THE FILE!") == near_duplicate_key("open the ~file")
    True
    >>> near_duplicate_key("Deleted %d files.") == near_duplicate_key("Deleted 12 files") == "deleted 0 files"
    True
    >>> near_duplicate_key("Die Straße ist 1,5 km lang.")
    'die strasse ist 0 km lang'
    >>> near_duplicate_key("He is 5 years old.", fold_numbers=False)
    'he is 5 years old'

Numbers are folded by default: two sentences that differ only in a number (or in a placeholder standing for one)
are the same sentence template, which is what a model that trained on one of them has seen. That makes the
counts an upper bound for sentences where the number matters; ``fold_numbers=False`` keeps the digits
(placeholders still become ``"0"``).

There are no tensor axes in this file.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["NUMBER", "near_duplicate_key"]

NUMBER = "0"  # what every placeholder (and, with fold_numbers, every number) becomes in a key

# Menu accelerator ("mnemonic") marks, as the de-en recipe understands them (de_en._MNEMONIC): GTK "_File",
# LibreOffice "~File", Qt "&File" -- a mark right before a letter or digit. The key drops every such mark (the
# recipe drops the one it allows); a mark before anything else is punctuation and goes with it.
_ACCELERATOR = re.compile(r"[_~&](?=[^\W_])")
# printf conversions (%s, %d, %1$s, %-10.3f, %lu, %qs of GCC, %(name)s of Python), brace fields ({0}, {name},
# {0:.2f}) and LibreOffice/shell variables ($1, $(ARG1), $name$). "%%" and a "%" before a space are percent signs.
_PLACEHOLDER = re.compile(
    r"%(?:\d+\$)?(?:\([^()\s]*\))?[-+#0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?[a-zA-Z]"
    r"|\{\w*(?:[:!][^{}]*)?\}"
    r"|\$\(\w+\)|\$\w+\$?")
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")  # 12, 1.5, 1,000, 10:30 -- one number each
_NOT_WORD = re.compile(r"[\W_]+")  # punctuation, symbols, whitespace; "_" too (left over from identifiers)


def near_duplicate_key(text: str, *, fold_numbers: bool = True) -> str:
    """The near-duplicate key of ``text``: equal keys mean "the same sentence up to its surface".

    In order: Unicode NFKC (full-width forms, ligatures, superscripts to plain characters); accelerator marks
    (``_``, ``~``, ``&`` right before a letter or digit) removed; printf/format placeholders replaced by ``"0"``;
    with ``fold_numbers`` (the default) each number too (a digit run, with ``.``/``,``/``:`` between digit runs);
    casefolded (``ß`` -> ``ss``); every run of characters that are not letters or digits (punctuation, symbols,
    whitespace) made one space; stripped. A text of punctuation only has the key ``""``, which callers should not
    count as a match.
    """
    if not isinstance(text, str):
        raise ValueError(f"near_duplicate_key expects a str, got {type(text).__name__}")
    text = unicodedata.normalize("NFKC", text)
    text = _ACCELERATOR.sub("", text)
    text = _PLACEHOLDER.sub(NUMBER, text)
    if fold_numbers:
        text = _NUMBER.sub(NUMBER, text)
    return " ".join(_NOT_WORD.sub(" ", text.casefold()).split())
