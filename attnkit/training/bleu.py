"""Scoring translations: corpus BLEU and chrF with sacreBLEU, used by ``attnkit eval mt`` and by the BLEU that
``attnkit train mt`` reports at each evaluation (:meth:`attnkit.training.MTTask.translation_scores`).

BLEU uses sacreBLEU's standard ``13a`` tokenizer on detokenized text, so the figures are comparable with
published ones (the signature is returned with the scores).

There are no tensor axes in this file.
"""

from __future__ import annotations

from typing import Any

__all__ = ["score_translations"]


def score_translations(hyps: list[str], refs: list[str]) -> dict[str, Any]:
    """sacreBLEU corpus BLEU (13a tokenizer, detokenized input) and chrF; ``{"bleu", "chrf", "signature"...}``."""
    import sacrebleu

    if len(hyps) != len(refs):
        raise ValueError(f"need one hypothesis per reference, got {len(hyps)} hypotheses and {len(refs)} references")
    bleu = sacrebleu.metrics.BLEU()  # tokenize="13a", the default
    chrf = sacrebleu.metrics.CHRF()
    b = bleu.corpus_score(hyps, [refs])
    c = chrf.corpus_score(hyps, [refs])
    return {"bleu": float(b.score), "chrf": float(c.score), "bleu_detail": str(b),
            "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature()),
            "bp": float(b.bp), "sys_len": int(b.sys_len), "ref_len": int(b.ref_len)}
