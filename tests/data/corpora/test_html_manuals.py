"""Debian's HTML manuals (attnkit.data.corpora.html_manuals): sections by id, blocks by position; excerpts of
debian-reference 2.100 (DocBook) and developers-reference 12.18 (Sphinx)."""

from __future__ import annotations

from attnkit.data.corpora.html_manuals import manual_documents, page_sections

ENGLISH = """<html><head><title>Chapter 2. Debian package management</title></head><body>
<div class="section"><h3 class="title"><a id="_package_configuration"></a>2.1.1. Package configuration</h3>
<p>Here are some key points for package configuration on the Debian system.</p>
<div class="itemizedlist"><ul class="itemizedlist"><li class="listitem"><p>The manual configuration by the
system administrator is respected. In other words, the package configuration system makes no intrusive
configuration for convenience.</p></li></ul></div>
<pre class="screen">$ sudo apt-get update</pre>
</div>
<section id="new-maintainer"><h1>Applying to Become a Member<a class="headerlink" href="#new-maintainer">¶</a></h1>
<p>Debian mentors and sponsors</p></section>
</body></html>"""

GERMAN = """<html><head><title>Kapitel 2. Debian-Paketmanagement</title></head><body>
<div class="section"><h3 class="title"><a id="_package_configuration"></a>2.1.1. Paketkonfiguration</h3>
<p>Hier einige Schlüsselpunkte für die Paketkonfiguration auf einem Debian-System.</p>
<div class="itemizedlist"><ul class="itemizedlist"><li class="listitem"><p>Die manuelle Konfiguration durch den
Systemadministrator wird respektiert. Mit anderen Worten: das Paketkonfigurationssystem nimmt keine
störenden Konfigurationsänderungen aus Bequemlichkeitsgründen vor.</p></li></ul></div>
<pre class="screen">$ sudo apt-get update</pre>
</div>
<section id="new-maintainer"><h1>Bewerbung als Mitglied<a class="headerlink" href="#new-maintainer">¶</a></h1>
<p>Debian-Mentoren und -Sponsoren</p><p>Ein zusätzlicher Absatz.</p></section>
</body></html>"""


def test_page_sections_cut_at_ids_and_keep_block_kinds_code_without_text():
    sections = page_sections(ENGLISH)
    assert list(sections) == ["", "_package_configuration", "new-maintainer"]
    assert sections[""] == [("title", "Chapter 2. Debian package management")]
    assert sections["_package_configuration"] == [
        ("h3", "2.1.1. Package configuration"),
        ("p", "Here are some key points for package configuration on the Debian system."),
        ("p", "The manual configuration by the system administrator is respected. In other words, the package "
              "configuration system makes no intrusive configuration for convenience."),
        ("li", ""), ("pre", "")]
    assert sections["new-maintainer"][0] == ("h1", "Applying to Become a Member")  # Sphinx's ¶ anchor dropped


def test_manual_documents_align_sections_of_equal_shape_only(tmp_path):
    (tmp_path / "de.html").write_text(GERMAN, encoding="utf-8")
    (tmp_path / "en.html").write_text(ENGLISH, encoding="utf-8")
    docs, reasons = manual_documents([("debian-reference/ch02", tmp_path / "de.html", tmp_path / "en.html")])
    assert docs == {"debian-reference/ch02": [
        ("Kapitel 2. Debian-Paketmanagement", "Chapter 2. Debian package management"),
        ("Paketkonfiguration", "Package configuration"),  # the number splits off as a "sentence" of its own
        ("Hier einige Schlüsselpunkte für die Paketkonfiguration auf einem Debian-System.",
         "Here are some key points for package configuration on the Debian system."),
        ("Die manuelle Konfiguration durch den Systemadministrator wird respektiert.",
         "The manual configuration by the system administrator is respected."),
        ("Mit anderen Worten: das Paketkonfigurationssystem nimmt keine störenden Konfigurationsänderungen aus "
         "Bequemlichkeitsgründen vor.",
         "In other words, the package configuration system makes no intrusive configuration for convenience."),
    ]}
    assert reasons["unaligned section"] == 1  # the German section with one paragraph more
    assert reasons["identical"] == 1  # "2.1.1." on both sides


def test_a_line_break_inside_a_block_separates_words():
    """``<br>`` used to glue the words on either side together (``One.Two.``)."""
    assert page_sections('<div id="s"><p>One.<br>Two.</p><td>a<br/>b</td></div>') == {
        "s": [("p", "One. Two."), ("td", "a b")]}
