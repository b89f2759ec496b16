"""Man pages (attnkit.data.corpora.man_pages): roff to sections and paragraphs, pages aligned, sentences paired."""

from __future__ import annotations

import gzip

from attnkit.data.corpora.man_pages import man_documents, page_pairs, roff_sections

ENGLISH = r""".\" Copyright comment, never text
.TH signal 7 2023-02-05 "Linux man-pages 6.03"
.SH NAME
signal \- overview of signals
.SH DESCRIPTION
Linux supports both POSIX reliable signals and POSIX real-time signals.
.SS Signal dispositions
Each signal has a current
.IR disposition ,
which determines how the process behaves.
It is set with
.BR sigaction (2).
.PP
The table below lists the signals:
.nf
int main(void) { return 0; }
.fi
.TP
Term
Default action is to terminate the process.
"""

GERMAN = r""".\" This file was generated with po4a. Translate the source file.
.TH signal 7 "5. Februar 2023" "Linux man\-pages 6.03"
.SH BEZEICHNUNG
signal \- Überblick über Signale
.SH BESCHREIBUNG
Linux unterstützt sowohl zuverlässige POSIX\-Signale und POSIX\-Echtzeit\-Signale.
.SS "Signalzuordnung (disposition)"
Jedes Signal hat eine aktuelle \fIZuordnung\fP, die festlegt, wie sich der Prozess verhält.
Sie wird mit
.BR sigaction (2)
festgelegt.
.PP
Die folgende Tabelle führt die Signale auf:
.nf
int main(void) { return 0; }
.fi
.TP
Term
Standardaktion ist der Abbruch des Prozesses.
.SH ÜBERSETZUNG
Die deutsche Übersetzung dieser Handbuchseite wurde von Martin Schulze erstellt.
"""


def test_roff_sections_drop_comments_title_and_code_and_keep_font_macro_text():
    assert roff_sections(ENGLISH) == [
        ["signal - overview of signals"],
        ["Linux supports both POSIX reliable signals and POSIX real-time signals."],
        ["Each signal has a current disposition, which determines how the process behaves. "
         "It is set with sigaction(2).",
         "The table below lists the signals:",
         "Term Default action is to terminate the process."],
    ]


def test_page_pairs_align_sections_paragraphs_and_sentences_and_drop_the_translators_section():
    pairs = page_pairs(GERMAN, ENGLISH)
    assert pairs[0] == ("signal - Überblick über Signale", "signal - overview of signals")
    assert ("Jedes Signal hat eine aktuelle Zuordnung, die festlegt, wie sich der Prozess verhält.",
            "Each signal has a current disposition, which determines how the process behaves.") in pairs
    assert ("Sie wird mit sigaction(2) festgelegt.", "It is set with sigaction(2).") in pairs
    assert pairs[-1] == ("Term Standardaktion ist der Abbruch des Prozesses.",
                         "Term Default action is to terminate the process.")
    assert not any("Übersetzung" in de for de, _ in pairs)
    assert len(pairs) == 6


def test_pages_with_a_different_structure_give_nothing():
    assert page_pairs(GERMAN, ENGLISH.replace(".SS Signal dispositions\n", "")) == []


def test_man_documents_pairs_pages_present_in_both_languages(tmp_path):
    de_root, en_root = tmp_path / "de" / "usr/share/man/de", tmp_path / "en" / "usr/share/man"
    for root, text in ((de_root, GERMAN), (en_root, ENGLISH)):
        (root / "man7").mkdir(parents=True)
        (root / "man7" / "signal.7.gz").write_bytes(gzip.compress(text.encode()))
    (de_root / "man7" / "only-german.7.gz").write_bytes(gzip.compress(GERMAN.encode()))
    (en_root / "man7" / "link.7.gz").write_bytes(gzip.compress(b".so man7/signal.7\n"))
    (de_root / "man7" / "link.7.gz").write_bytes(gzip.compress(b".so man7/signal.7\n"))
    docs, reasons = man_documents([de_root], [en_root])
    assert list(docs) == ["man7/signal.7"] and len(docs["man7/signal.7"]) == 6
    assert reasons["ok"] == 6


# Excerpts of real pages: dpkg-genchanges(1) as Debian's German team writes it (umlauts as groff escapes) and
# systemd.exec(5) as DocBook renders it (escaped spaces inside a .B argument).
DPKG_GERMAN = r""".TH dpkg\-genchanges 1 2022-11-03 1.21.23 dpkg-Programmsammlung
.SH BESCHREIBUNG
Standardm\(:a\(ssig wird die Datei \fBdebian/control\fP gelesen.
L\(:oscht einen Benutzer aus der Liste\&. Gro\[ss]e Dateien werden \[:u]bersprungen.
"""
SYSTEMD_ENGLISH = r""".SH "PROCESS EXIT CODES"
.B Table\ \&9.\ \&systemd\-specific exit codes
.PP
.BR open (2)
.I "two words"
"""


def test_roff_named_characters_become_letters_and_font_macros_keep_their_spaces():
    assert roff_sections(DPKG_GERMAN) == [[
        "Standardmäßig wird die Datei debian/control gelesen. "
        "Löscht einen Benutzer aus der Liste. Große Dateien werden übersprungen."]]
    assert roff_sections(SYSTEMD_ENGLISH) == [["Table 9. systemd-specific exit codes", "open(2) two words"]]


def test_roff_strings_colours_footnote_marks_and_literal_backslashes():
    # systemd.exec(5) and devscripts(1) as DocBook and pod2man write them; grep's "\ed" is a literal "\d"
    source = ("This process is named \\(lq(sd-pam)\\(rq, a child of the unit\\*(Aqs main process.\n"
              "See \\m[blue]\\fBBoot Loader Interface\\fR\\m[]\\&\\s-2\\u[3]\\d\\s+2 for details.\n"
              "Test if it is a \\*(C+ symbol, with \\*(L\"#\\*(R\" and (?:\\ed+).\n")
    assert roff_sections(source) == [[
        "This process is named \"(sd-pam)\", a child of the unit's main process. "
        "See Boot Loader Interface for details. Test if it is a C++ symbol, with \"#\" and (?:\\d+)."]]


def test_roff_escapes_with_a_quoted_argument_leave_no_text_and_unicode_names_are_characters():
    """\\h'2n' (motion), \\w'...' (width), \\v, \\N used to leave their argument in the text ("word'2n'next");
    \\C'name' and groff's Unicode names (\\[u00F6]) are characters."""
    source = "Gr\\[u00F6]\\[u00DF]e word\\h'2n'next \\v'-1'up \\w'abc'x \\N'65'y \\C'dq'q\\C'dq' it\\'s"
    assert roff_sections(source) == [["Größe wordnext up x y \"q\" it's"]]
    assert roff_sections("a\\[uD800]b \\[u110000]c") == [["ab c"]]  # a surrogate or past U+10FFFF: no character
