"""``attnkit.training.bleu.score_translations``: sacreBLEU's corpus BLEU and chrF, and its input checks.

Axis legend: none (lists of sentences only).
"""

from __future__ import annotations

import pytest
import sacrebleu

from attnkit.training.bleu import score_translations

HYPS = ["Das Haus ist groß.", "Er ging nach Hause, oder?", "", "naïve café « Zitat »"]
REFS = ["Das Haus ist sehr groß.", "Er ging nach Hause.", "Ein Satz.", "naïve café « Zitat »"]


def test_the_figures_are_sacrebleus_corpus_scores():
    scores = score_translations(HYPS, REFS)
    assert scores["bleu"] == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert scores["chrf"] == sacrebleu.corpus_chrf(HYPS, [REFS]).score
    assert "tok:13a" in scores["bleu_signature"] and "nrefs:1" in scores["bleu_signature"]


@pytest.mark.parametrize("hyps, refs, message", [
    ("Das Haus", "Das Haus", r"hyps must be a list of strings, got str"),  # was: scored letter by letter
    (["Das Haus"], [None], r"refs\[0\] must be a string, got NoneType"),  # was: TypeError inside sacrebleu
    ([], [], r"need at least one hypothesis and reference, got none"),  # was: IndexError inside sacrebleu
    (["a"], ["a", "b"], r"need one hypothesis per reference, got 1 hypotheses and 2 references"),
])
def test_bad_input_is_refused_with_what_was_expected(hyps, refs, message):
    with pytest.raises(ValueError, match=message):
        score_translations(hyps, refs)


def test_bleu_is_case_sensitive_as_sacrebleus_default():
    """The published figures are case-sensitive: a hypothesis that differs only in case is not a perfect match."""
    scores = score_translations(["the house is big ."], ["The House is big ."])
    assert scores["bleu"] == sacrebleu.corpus_bleu(["the house is big ."], [["The House is big ."]]).score < 100
    assert "case:mixed" in scores["bleu_signature"]
