"""near_duplicate_key: the same sentence up to case, Unicode form, accelerator marks, punctuation, spacing,
placeholders and numbers gets one key; another content word (or, with ``fold_numbers=False``, another number)
gets another."""

from __future__ import annotations

import doctest

import pytest

from attnkit.data.corpora import de_en, near_duplicates
from attnkit.data.corpora.near_duplicates import near_duplicate_key


@pytest.mark.parametrize("a, b", [
    ("Ich glaube, du schuldest mir eine Erklärung.", "Ich glaube, du schuldest mir eine Erklärung!"),  # de-en valid
    ("OPEN THE FILE", "open   the file."),
    ("Die Straße", "DIE STRASSE"),  # casefold: ß -> ss
    ("ﬁle ＡＢＣ", "file ABC"),  # NFKC: ligature, full-width letters
    ("u\u0308ber", "über"),  # combining diaeresis
    ("_Datei öffnen", "Datei öffnen"),  # GTK accelerator
    ("~Benachrichtigen", "Benachrichtigen"),  # LibreOffice
    ("Ö&ffnen", "Öffnen"),  # Qt
    ("It's such a shame", "It’s such a shame"),  # either apostrophe
    ("Deleted %d files.", "Deleted 12 files"),  # printf placeholder = a number
    ("%1$s of %2$s", "{0} of {name}"),
    ("Copied %(count)s items", "Copied $(ARG1) items"),
    ("Version 3.1.20", "version 3.1.04"),  # one number, dots inside
    ("Version %d.%d", "Version 2.6"),  # placeholders become numbers first, then fold as one number
    ("Drag&&Drop", "Drag & Drop"),  # Qt "&&" is a literal ampersand, not an accelerator
    ("Replace $name$ with $1", "Replace {0} with %s"),  # LibreOffice/shell variables
    ("Size: %12$.1f MB", "Size: 3.5 MB"),  # a printf position of two digits, with a precision
    ("Error %X", "Error 255"),  # an upper-case conversion
])
def test_near_duplicates_share_a_key(a, b):
    assert near_duplicate_key(a) == near_duplicate_key(b)


@pytest.mark.parametrize("a, b", [
    ("Ich habe keine Ahnung.", "Ich habe eine Ahnung."),  # a content word
    ("Open the file.", "Close the file."),
    ("Tom & Jerry", "TomJerry"),  # "&" before a space is no accelerator: the words stay apart
    ("50% of all", "50 of all files"),
    ("Das geht zu weit.", "Das geht auf keine Kuhhaut."),
])
def test_different_sentences_get_different_keys(a, b):
    assert near_duplicate_key(a) != near_duplicate_key(b)


def test_numbers_are_folded_unless_asked_not_to():
    a, b = "He is 5 years old.", "He is 6 years old."
    assert near_duplicate_key(a) == near_duplicate_key(b) == "he is 0 years old"
    assert near_duplicate_key(a, fold_numbers=False) == "he is 5 years old"
    assert near_duplicate_key(b, fold_numbers=False) == "he is 6 years old"
    assert near_duplicate_key("Deleted %d files", fold_numbers=False) == "deleted 0 files"  # placeholders still fold


def test_the_key_is_words_in_lower_case_and_single_spaces():
    assert near_duplicate_key("  «Hallo»,\tWelt!!  \n") == "hallo welt"
    assert near_duplicate_key("… -- !") == ""  # punctuation only: an empty key, never a match for callers
    assert near_duplicate_key("Name: ___") == "name"  # underscores that mark no accelerator are punctuation


def test_the_key_removes_what_the_de_en_recipe_removes():
    """A catalog message keeps its one accelerator mark only until the recipe strips it: both forms, one key."""
    for raw in ("Ü_berspringen", "~Benachrichtigen", "Ö&ffnen", "_Datei"):
        stripped = de_en._strip_mnemonic(raw)
        assert stripped is not None and stripped != raw
        assert near_duplicate_key(raw) == near_duplicate_key(stripped)


def test_the_docstring_examples_hold():
    result = doctest.testmod(near_duplicates)
    assert result.attempted >= 5 and result.failed == 0


def test_a_non_string_is_refused():
    with pytest.raises(ValueError, match="expects a str"):
        near_duplicate_key(None)
    with pytest.raises(ValueError, match="expects a str, got bytes"):
        near_duplicate_key(b"Open the file")
