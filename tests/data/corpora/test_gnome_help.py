"""GNOME help (attnkit.data.corpora.gnome_help): Mallard pages aligned block by block; excerpts of gnome-user-docs 43."""

from __future__ import annotations

from attnkit.data.corpora.gnome_help import gnome_documents, text_blocks

ENGLISH = """<?xml version="1.0" encoding="utf-8"?>
<page xmlns="http://projectmallard.org/1.0/" type="topic" id="files-copy">
  <info>
    <credit type="author"><name>Cristopher Thomas</name></credit>
    <desc>Copy or move items to a new folder.</desc>
  </info>
<title>Copy or move files and folders</title>
 <p>These instructions apply to both files and folders. You copy and move files
 and folders in exactly the same way.</p>
<steps>
<item><p>Right-click and select <gui>Copy</gui>, or press
 <keyseq><key>Ctrl</key><key>C</key></keyseq>.</p></item>
</steps>
<screen>cp a b</screen>
</page>
"""

GERMAN = """<?xml version="1.0" encoding="utf-8"?>
<page xmlns="http://projectmallard.org/1.0/" xmlns:mal="http://projectmallard.org/1.0/" type="topic" id="files-copy" xml:lang="de">
  <info>
    <credit type="author"><name>Cristopher Thomas</name></credit>
    <desc>Objekte in einen neuen Ordner kopieren oder verschieben.</desc>
    <mal:credit type="translator copyright"><mal:name>Mario Blättermann</mal:name></mal:credit>
  </info>
<title>Dateien und Ordner kopieren oder verschieben</title>
 <p>Diese Anweisungen werden sowohl auf Dateien als auch auf Ordner angewendet. Sie können Dateien und Ordner exakt auf die gleiche Weise kopieren.</p>
<steps>
<item><p>Klicken Sie mit der rechten Maustaste und wählen Sie <gui>Kopieren</gui> oder drücken Sie <keyseq><key>Strg</key><key>C</key></keyseq>.</p></item>
</steps>
<screen>cp a b</screen>
</page>
"""


def test_text_blocks_skip_credits_keep_inline_text_and_read_key_sequences():
    assert text_blocks(ENGLISH) == [
        ("info/desc", "Copy or move items to a new folder."),
        ("page/title", "Copy or move files and folders"),
        ("page/p", "These instructions apply to both files and folders. You copy and move files and folders in "
                   "exactly the same way."),
        ("item/p", "Right-click and select Copy, or press Ctrl+C."),
        ("page/screen", ""),
    ]


def test_pages_align_block_by_block_and_sentence_by_sentence(tmp_path):
    for lang, text in (("de", GERMAN), ("C", ENGLISH)):
        (tmp_path / lang / "gnome-help").mkdir(parents=True)
        (tmp_path / lang / "gnome-help" / "files-copy.page").write_text(text, encoding="utf-8")
    docs, reasons = gnome_documents([tmp_path])
    assert docs == {"gnome-help/files-copy": [
        ("Objekte in einen neuen Ordner kopieren oder verschieben.", "Copy or move items to a new folder."),
        ("Dateien und Ordner kopieren oder verschieben", "Copy or move files and folders"),
        ("Diese Anweisungen werden sowohl auf Dateien als auch auf Ordner angewendet.",
         "These instructions apply to both files and folders."),
        ("Sie können Dateien und Ordner exakt auf die gleiche Weise kopieren.",
         "You copy and move files and folders in exactly the same way."),
        ("Klicken Sie mit der rechten Maustaste und wählen Sie Kopieren oder drücken Sie Strg+C.",
         "Right-click and select Copy, or press Ctrl+C."),
    ]}
    assert reasons["ok"] == 5


def test_a_page_whose_blocks_differ_is_not_aligned(tmp_path):
    for lang, text in (("de", GERMAN.replace("<screen>cp a b</screen>", "")), ("C", ENGLISH)):
        (tmp_path / lang / "gnome-help").mkdir(parents=True)
        (tmp_path / lang / "gnome-help" / "files-copy.page").write_text(text, encoding="utf-8")
    (tmp_path / "de" / "gnome-help" / "only-german.page").write_text(GERMAN, encoding="utf-8")
    docs, reasons = gnome_documents([tmp_path])
    assert docs == {} and reasons["unaligned page"] == 1 and reasons["no english page"] == 1
