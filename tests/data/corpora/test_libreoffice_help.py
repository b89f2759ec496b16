"""LibreOffice help pages (attnkit.data.corpora.libreoffice_help): paragraphs by id, pages aligned, sentences paired."""

from __future__ import annotations

from attnkit.data.corpora.libreoffice_help import help_documents, paragraphs

GERMAN_PAGE = """<html><body>
<h1 id="hd_id3150713" dir="auto"><a name="x"></a>Funktion MITTELWERT</h1>
<p id="par_id3146060" class="paragraph" dir="auto"><a href="de/text/a.html">AutoKorrektur</a> hat doppelte
Anführungszeichen durch <span class="emph">typografische</span> Anführungszeichen ersetzt. Das geht schnell.</p>
<p id="par_id1" class="paragraph">Gibt den Mittelwert der Argumente zurück.</p>
<p id="par_id2" class="paragraph">MITTELWERT</p>
<p class="howtogetheader">So greifen Sie auf diesen Befehl zu:</p>
<p id="par_id3" class="paragraph">Nur auf Deutsch vorhanden.</p>
<table><tr><td id="par_id4"><p>Wählen Sie die Zelle aus, in der das Ergebnis stehen soll.</p></td></tr></table>
</body></html>"""

ENGLISH_PAGE = """<html><body>
<h1 id="hd_id3150713" dir="auto"><a name="x"></a>AVERAGE function</h1>
<p id="par_id3146060" class="paragraph" dir="auto"><a href="en-US/text/a.html">AutoCorrect</a> has replaced
double quotation marks with <span class="emph">typographic</span> quotation marks. That is quick.</p>
<p id="par_id1" class="paragraph">Returns the average of the arguments.</p>
<p id="par_id2" class="paragraph">MITTELWERT</p>
<p class="howtogetheader">To access this command:</p>
<table><tr><td id="par_id4"><p>Select the cell in which the result should appear.</p></td></tr></table>
</body></html>"""


def test_paragraphs_by_id_with_markup_removed_and_nested_blocks_joined():
    found = paragraphs(GERMAN_PAGE)
    assert found["hd_id3150713"] == "Funktion MITTELWERT"
    assert found["par_id3146060"] == ("AutoKorrektur hat doppelte Anführungszeichen durch typografische "
                                      "Anführungszeichen ersetzt. Das geht schnell.")
    assert found["par_id4"] == "Wählen Sie die Zelle aus, in der das Ergebnis stehen soll."
    assert "So greifen Sie auf diesen Befehl zu:" not in found.values()  # no id: not translatable text


def test_help_documents_pairs_pages_paragraphs_and_sentences(tmp_path):
    for lang, page in (("de", GERMAN_PAGE), ("en-US", ENGLISH_PAGE)):
        f = tmp_path / lang / "text" / "scalc" / "01" / "func_average.html"
        f.parent.mkdir(parents=True)
        f.write_text(page, encoding="utf-8")
    only_german = tmp_path / "de" / "text" / "only.html"
    only_german.write_text(GERMAN_PAGE, encoding="utf-8")
    docs, reasons = help_documents(tmp_path / "de", tmp_path / "en-US")
    assert list(docs) == ["text/scalc/01/func_average.html"]
    assert docs["text/scalc/01/func_average.html"] == [
        ("Funktion MITTELWERT", "AVERAGE function"),
        ("AutoKorrektur hat doppelte Anführungszeichen durch typografische Anführungszeichen ersetzt.",
         "AutoCorrect has replaced double quotation marks with typographic quotation marks."),
        ("Das geht schnell.", "That is quick."),
        ("Gibt den Mittelwert der Argumente zurück.", "Returns the average of the arguments."),
        ("Wählen Sie die Zelle aus, in der das Ergebnis stehen soll.",
         "Select the cell in which the result should appear."),
    ]
    assert reasons["identical"] == 1 and reasons["no english"] == 1 and reasons["no english page"] == 1
