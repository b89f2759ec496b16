"""Package descriptions (attnkit.data.corpora.debian_descriptions) and the shared pair filters (attnkit.data.corpora.pair_filters),
on hand-written excerpts in the format of apt's indexes."""

from __future__ import annotations

import pytest

from attnkit.data.corpora.debian_descriptions import (align_description, description_documents, description_units,
                                              read_index, source_packages)
from attnkit.data.corpora.pair_filters import check_pair, function_words, is_full_sentence, split_sentences

GERMAN = """\
Package: fooview
Description-md5: 1111
Description-de: Betrachter für Foo-Dateien
 Fooview ist ein schneller Betrachter für Foo-Dateien. Er läuft auf der
 Konsole und braucht keinen X-Server.
 .
 Funktionen:
  * Anzeige von großen Dateien
  * Suche mit regulären Ausdrücken
 .
 Dieses Paket enthält das Programm.

Package: fooview-doc
Description-md5: 2222
Description-de: Dokumentation für Fooview
 Dieses Paket enthält die Dokumentation im HTML-Format.

Package: fooview-data
Description-md5: 1111
Description-de: Betrachter für Foo-Dateien
 Duplikat, das nur einmal gelesen wird.

Package: barlib1
Description-md5: 3333
Description-de: Bibliothek für Bar
 Zwei Sätze hier. Und noch einer, der anders aufgeteilt ist.

Package: orphan
Description-md5: 9999
Description-de: Ohne englisches Original
"""

ENGLISH = """\
Package: fooview
Description-md5: 1111
Description-en: viewer for foo files
 Fooview is a fast viewer for foo files. It runs on the console and
 needs no X server.
 .
 Features:
  * display of large files
  * search with regular expressions
 .
 This package contains the program.

Package: fooview-doc
Description-md5: 2222
Description-en: documentation for fooview
 This package contains the documentation in HTML format.

Package: barlib1
Description-md5: 3333
Description-en: library for bar
 Two sentences, one in English that is split otherwise and reads longer here.
"""

PACKAGES = """\
Package: fooview
Version: 1.0-1

Package: fooview-doc
Source: fooview (1.0-1)
Version: 1.0-1

Package: barlib1
Source: bar
Version: 2.0-3
"""


def _stanza_value(text: str, package: str, field: str) -> str:
    return next(st[field] for st in read_index(text.splitlines(True)) if st["Package"] == package)


def test_read_index_keeps_continuation_lines():
    stanzas = list(read_index(GERMAN.splitlines(True)))
    assert [s["Package"] for s in stanzas] == ["fooview", "fooview-doc", "fooview-data", "barlib1", "orphan"]
    assert stanzas[0]["Description-de"].startswith("Betrachter für Foo-Dateien\n Fooview ist")
    assert stanzas[4] == {"Package": "orphan", "Description-md5": "9999", "Description-de": "Ohne englisches Original"}


def test_source_packages_reads_the_source_field_without_version():
    assert source_packages(PACKAGES.splitlines(True)) == {"fooview": "fooview", "fooview-doc": "fooview",
                                                          "barlib1": "bar"}


def test_description_units_paragraphs_and_list_items():
    short, paragraphs = description_units(_stanza_value(GERMAN, "fooview", "Description-de"))
    assert short == "Betrachter für Foo-Dateien"
    assert paragraphs == [
        ["Fooview ist ein schneller Betrachter für Foo-Dateien. Er läuft auf der Konsole und braucht keinen X-Server."],
        ["Funktionen:", "Anzeige von großen Dateien", "Suche mit regulären Ausdrücken"],
        ["Dieses Paket enthält das Programm."],
    ]


def test_align_description_pairs_short_paragraphs_items_and_sentences():
    pairs = align_description(_stanza_value(GERMAN, "fooview", "Description-de"),
                              _stanza_value(ENGLISH, "fooview", "Description-en"))
    assert pairs == [
        ("Betrachter für Foo-Dateien", "viewer for foo files"),
        ("Fooview ist ein schneller Betrachter für Foo-Dateien.", "Fooview is a fast viewer for foo files."),
        ("Er läuft auf der Konsole und braucht keinen X-Server.", "It runs on the console and needs no X server."),
        ("Funktionen:", "Features:"),
        ("Anzeige von großen Dateien", "display of large files"),
        ("Suche mit regulären Ausdrücken", "search with regular expressions"),
        ("Dieses Paket enthält das Programm.", "This package contains the program."),
    ]


def test_align_description_keeps_a_short_unit_whole_when_sentence_counts_differ():
    pairs = align_description(_stanza_value(GERMAN, "barlib1", "Description-de"),
                              _stanza_value(ENGLISH, "barlib1", "Description-en"))
    assert pairs[1] == ("Zwei Sätze hier. Und noch einer, der anders aufgeteilt ist.",
                        "Two sentences, one in English that is split otherwise and reads longer here.")


def test_align_description_drops_the_long_part_when_paragraph_counts_differ():
    german = "kurz\n Ein Absatz.\n .\n Noch ein Absatz."
    english = "short\n One paragraph only."
    assert align_description(german, english) == [("kurz", "short")]


def test_description_documents_groups_by_source_package_and_uses_each_md5_once():
    docs, reasons = description_documents(GERMAN.splitlines(True), ENGLISH.splitlines(True),
                                          source_packages(PACKAGES.splitlines(True)))
    assert set(docs) == {"fooview", "bar"}
    assert ("Dieses Paket enthält die Dokumentation im HTML-Format.",
            "This package contains the documentation in HTML format.") in docs["fooview"]
    assert not any("Duplikat" in de for de, _ in docs["fooview"])  # fooview-data repeats md5 1111
    assert reasons["no english"] == 1  # orphan
    assert reasons["ok"] == sum(len(v) for v in docs.values())


def test_split_sentences_respects_abbreviations():
    assert split_sentences("Das geht z.B. so. Dann weiter! Oder? 3 Fälle.") == [
        "Das geht z.B. so.", "Dann weiter!", "Oder?", "3 Fälle."]
    assert split_sentences("Use e.g. Vim. It works.") == ["Use e.g. Vim.", "It works."]


@pytest.mark.parametrize("german, english, reason", [
    ("Das ist gut.", "That is good.", "ok"),
    ("", "Something.", "empty"),
    ("GNU Emacs", "GNU Emacs", "identical"),
    ("Ja.", "This is a much much longer English sentence than the German one.", "length ratio"),
    ("This is the English text left untranslated.", "This is the English text, left untranslated here.", "language"),
    ("Das ist der deutsche Text.", "Das ist der deutsche Text, nicht englisch.", "language"),
    (" ".join(["Wort"] * 81), " ".join(["word"] * 81), "too long"),
    ("Pfad /" + "x" * 1000 + ".", "Path /" + "x" * 1000 + ".", "too long"),  # two words, but no sentence
])
def test_check_pair(german, english, reason):
    assert check_pair(german, english) == reason


def test_function_words_and_full_sentences():
    assert function_words("Der Hund und die Katze sind nicht hier.") == (5, 0)
    assert function_words("The dog and the cat are not here.") == (0, 5)
    assert is_full_sentence("Dieses Paket enthält das Programm.")
    assert not is_full_sentence("Dieses Paket enthält es.")  # four words
    assert not is_full_sentence("viewer for foo files and more")  # no final punctuation
    assert not is_full_sentence("dieses Paket enthält das Programm.")  # lower-case start
