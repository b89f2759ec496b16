"""Scoring translations: corpus BLEU and chrF with sacreBLEU, used by ``attnkit eval mt`` and by the BLEU that
``attnkit train mt`` reports at each evaluation (:meth:`attnkit.training.MTTask.translation_scores`).

BLEU uses sacreBLEU's standard ``13a`` tokenizer on detokenized text, so the figures are comparable with
published ones (the signature is returned with the scores).

There are no tensor axes in this file.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["score_translations"]


def _check_texts(name: str, texts: Any) -> None:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise ValueError(f"{name} must be a list of strings, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"{name}[{i}] must be a string, got {type(text).__name__}")


def score_translations(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, Any]:
    """sacreBLEU corpus BLEU (13a tokenizer, detokenized input) and chrF of ``hyps`` against ``refs`` (one each, in
    the same order): ``{"bleu", "chrf", "bleu_detail", "bleu_signature", "chrf_signature", "bp", "sys_len",
    "ref_len"}``."""
    import sacrebleu

    _check_texts("hyps", hyps)
    _check_texts("refs", refs)
    if not hyps:
        raise ValueError("need at least one hypothesis and reference, got none")
    if len(hyps) != len(refs):
        raise ValueError(f"need one hypothesis per reference, got {len(hyps)} hypotheses and {len(refs)} references")
    bleu = sacrebleu.metrics.BLEU()  # tokenize="13a", the default
    chrf = sacrebleu.metrics.CHRF()
    b = bleu.corpus_score(hyps, [refs])
    c = chrf.corpus_score(hyps, [refs])
    return {"bleu": float(b.score), "chrf": float(c.score), "bleu_detail": str(b),
            "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature()),
            "bp": float(b.bp), "sys_len": int(b.sys_len), "ref_len": int(b.ref_len)}
