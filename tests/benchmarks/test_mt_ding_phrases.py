"""benchmarks/mt_ding_phrases.py: the word and phrase pairs of the Ding dictionary (the probe's training data)."""

from __future__ import annotations

from benchmarks.mt_ding_phrases import ding_phrases

LINES = [
    "# comment",
    "Planungsprozess {m}; Planungsverfahren {n} | Planungsprozesse {pl}; Planungsverfahren {pl} :: "
    "planning process; planning procedure | planning processes; planning procedures",
    # 5 German alternatives, 4 English ones: only the first with the first; <…> and […] dropped
    "blank; pur; rein; schier [geh.]; bar {adj} | blanker Hohn | Es war purer Zufall. :: "
    "sheer; pure; plain; arrant [dated] <purer> <purest> | sheer/pure mockery | It was sheer coincidence.",
    "(im Gedränge) aneinanderstoßen {vi} :: to jostle against each other",  # (usage note) dropped
    "Lüftungsgerät {n} :: air handling unit /AHU/",  # /ABBR/ dropped
    # this entry holds a held-out sentence: none of its parts is used
    "herumeiern {vi} | Die Regierung eiert in dieser Frage herum. :: to dither | The government dithers on this issue.",
    "Planungsprozess {m} :: planning process",  # a duplicate
    "Weg | Wege :: way",  # not aligned
]
HELD = [("Die Regierung eiert in dieser Frage herum.", "The government dithers on this issue.")]


def test_headwords_are_paired_and_the_entries_of_held_out_sentences_skipped():
    assert ding_phrases(LINES, HELD) == [
        ("Planungsprozess", "planning process"), ("Planungsverfahren", "planning procedure"),
        ("Planungsprozesse", "planning processes"), ("Planungsverfahren", "planning procedures"),
        ("blank", "sheer"),  # "sheer/pure mockery" keeps a slash: skipped; the sentence pair is not a phrase
        ("aneinanderstoßen", "to jostle against each other"), ("Lüftungsgerät", "air handling unit"),
    ]


def test_without_held_out_pairs_every_entry_is_used():
    assert ("herumeiern", "to dither") in ding_phrases(LINES)
    assert ("herumeiern", "to dither") not in ding_phrases(LINES, HELD)
