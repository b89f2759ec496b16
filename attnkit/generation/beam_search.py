"""Batched beam search for encoder-decoder models.

Axis legend: ``B`` batch (source sentences still being searched), ``k`` beam size, ``N = B * k`` decoder rows
(row ``b * k + j`` is beam ``j`` of sentence ``b``), ``S`` source length, ``t`` target prefix length,
``C`` model width, ``V`` target vocabulary.

Greedy search keeps one prefix per sentence; beam search keeps the ``k`` best *live* prefixes ("beams") by
their total log-probability ``log p(y_1..y_t | x) = sum_i log p(y_i | y_<i, x)``. One step:

1. every beam proposes every token: ``score(beam) + log_softmax(logits)`` -> ``(B, k * V)`` candidates;
2. the best ``2k`` candidates of each sentence are read in order (equal scores: lowest beam first, then, as
   greedy search's argmax, the higher logit and the lowest token; a sum can round two log-probabilities to one
   value, the logits keep them apart). A candidate ending in EOS becomes a
   *finished hypothesis* if it ranks among the top ``k`` (so with ``k = 1`` beam search is exactly greedy
   search); the first ``k`` candidates that do not end in EOS become the next beams (``2k`` candidates
   always contain ``k`` of them, since at most ``k`` end in EOS);
3. the decoder's state follows the beams: ``cache.reorder(index)`` with ``index[n]`` = the row that the new
   row ``n`` extends.

Finished hypotheses are ranked by a length-normalised score, because a sum of log-probabilities only falls
as a sentence grows and would otherwise favour short outputs::

    score = log_prob / lp(length)        length = target tokens after BOS, EOS included
    lp(length) = ((5 + length) / 6) ** alpha     length_penalty_style="gnmt"   (Wu et al., 2016; default)
    lp(length) = length ** alpha                 length_penalty_style="simple" (fairseq / HF)

``alpha = length_penalty``: 0 ranks by raw log-probability, larger values favour longer outputs.

A sentence keeps its ``k`` best finished hypotheses. It is done when it has ``k`` finished hypotheses and
the best live beam, scored ``log_prob / lp(t)`` with ``t`` its current length (the tokens after BOS it has, no
EOS added), is no better than the worst of them (the criterion of HF's default ``early_stopping=False``), when
it reaches its length limit (live beams are then finished as they stand, without EOS, and scored the same way),
or when no live beam is left. For ``alpha <= 0`` that criterion is exact (a longer hypothesis never scores
higher than its prefix does); for ``alpha > 0`` it is HF's heuristic: a live beam that would have gone on to beat
the finished ones can be dropped (HF's ``early_stopping="never"`` searches on and may return a better hypothesis).
Finished sentences leave the batch, so the rest runs on fewer rows.

Against Hugging Face transformers (``generate(num_beams=k, length_penalty=alpha, early_stopping=False,
num_return_sequences=k)``; tests/generation/test_beam_search_hf_parity.py): with ``length_penalty_style="simple"``
the ``k`` hypotheses, their order and their scores (HF's ``sequences_scores``) are the same, HF's
``max_new_tokens`` being ``max_len`` here (with ``max_len_a * src_len + max_len_b`` not below it). Differences:
attnkit's limit can differ per sentence of a batch (HF has one for the batch); equal candidate scores are
ordered as step 2 says (HF's ``topk`` orders them arbitrarily); fewer than ``k`` hypotheses are returned when
fewer exist (a beam wider than the vocabulary allows; HF fills up with ``-1e9``-scored placeholders); scores are
divided by ``lp`` in float64 (HF: float32, a difference in the last float32 digits); and ``"gnmt"`` (the
default) has no HF counterpart.

The encoder runs once per batch; its memory is expanded to the beams with ``index_select``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnkit.checks import check_choice, check_int, is_number
from .generate import eval_mode
from .seq2seq import IncrementalDecoder, encode_source, start_search

__all__ = ["Hypothesis", "length_penalty_factor", "beam_search", "beam_search_hypotheses", "LENGTH_PENALTY_STYLES"]

LENGTH_PENALTY_STYLES = ("gnmt", "simple")


@dataclass(frozen=True)
class Hypothesis:
    """A finished beam-search output.

    Attributes:
        tokens: target ids without BOS and EOS.
        score: ``log_prob / lp(length)``, what hypotheses are ranked by.
        log_prob: total log-probability of the tokens (and of the EOS, when there is one).
        length: ``len(tokens) + 1`` if it ended with EOS, else ``len(tokens)`` (it hit the length limit).
        ended_with_eos: whether the model chose to stop.
    """

    tokens: list[int]
    score: float
    log_prob: float
    length: int
    ended_with_eos: bool


def length_penalty_factor(length: int, alpha: float, style: str = "gnmt") -> float:
    """The divisor ``lp(length)`` of the log-probability (see the module docstring).

    Shape:
        scalars.
    """
    if style == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if style == "simple":
        return float(length) ** alpha
    raise ValueError(f"length_penalty_style must be one of {LENGTH_PENALTY_STYLES}, got {style!r}")


def _check_beam_args(beam_size, length_penalty, length_penalty_style) -> None:
    check_int("beam_size", beam_size, minimum=1)
    if not is_number(length_penalty) or not math.isfinite(length_penalty):
        raise ValueError(f"length_penalty must be a finite number, got {length_penalty!r}")
    check_choice("length_penalty_style", length_penalty_style, LENGTH_PENALTY_STYLES)


def _add_finished(pool: list[Hypothesis], hyp: Hypothesis, k: int) -> None:
    """Insert ``hyp`` into ``pool`` (best first, ties keep the earlier one) and keep the best ``k``."""
    pool.append(hyp)
    pool.sort(key=lambda h: -h.score)  # stable sort
    del pool[k:]


def _top_candidates(scores: torch.Tensor, logp: torch.Tensor, k: int,
                    logits: torch.Tensor) -> tuple[list, list, list]:
    """The ``2k`` best one-token extensions of each sentence's ``k`` beams, best first (dead beams stay dead).

    ``logits`` (``logp`` before ``log_softmax``) break ties within a beam as greedy search's argmax does.

    Shape:
        scores ``(n, k)`` total log-probs, logp and logits ``(n*k, V)`` -> scores, beams, tokens: ``n`` lists
        of ``2k``.
    """
    n, V = scores.shape[0], logp.shape[-1]
    flat_scores = scores.view(n * k, 1)  # (n*k, 1)
    cand = (flat_scores + logp).masked_fill(flat_scores == float("-inf"), float("-inf"))  # dead stay dead
    cand = cand.view(n, k * V)  # (n, k*V): candidate c is token c % V appended to beam c // V
    m = min(2 * k, k * V)
    top_scores, top_index = cand.topk(min(m + 1, k * V), dim=1)  # (n, m + 1), best first
    if bool((top_scores[:, 1:] == top_scores[:, :-1]).any()):
        # topk orders equal scores arbitrarily: take them lowest beam first, then the higher logit, then the lowest
        # token, as greedy search's argmax does (so beam 1 stays exactly greedy: score + log-prob can round two
        # log-probabilities to one sum). The r best of each row hold all that reach its m-th score.
        r = int((cand >= top_scores[:, m - 1:m]).sum(dim=1).max())
        top_index = cand.topk(r, dim=1).indices.sort(dim=1).values  # (n, r), by candidate index
        order = logits.reshape(n, k * V).gather(1, top_index).sort(dim=1, descending=True, stable=True).indices
        top_index = top_index.gather(1, order)  # (n, r): higher logit, then lower token first
        top_index = top_index.gather(1, (top_index // V).sort(dim=1, stable=True).indices)  # lowest beam first
        top_scores, order = cand.gather(1, top_index).sort(dim=1, descending=True, stable=True)  # (n, r)
        top_index = top_index.gather(1, order)
    top_scores, top_index = top_scores[:, :m], top_index[:, :m]  # (n, 2k), best first
    return top_scores.tolist(), (top_index // V).tolist(), (top_index % V).tolist()


def _advance_sentence(pool: list[Hypothesis], candidates, prefixes: list[list[int]], *, k: int, length: int,
                      lp: float, limit: int, eos_id: int) -> list[tuple[float, int, int]]:
    """One decoding step of one sentence: finished hypotheses go into ``pool``; its ``k`` next beams.

    ``candidates`` are ``(score, beam, token)`` best first; ``prefixes`` the ``k`` beams' tokens after BOS.
    Returns ``k`` ``(score, beam, token)`` (dead placeholders copy the best beam with score ``-inf``), or
    ``[]`` when the sentence is done: at its length ``limit``, with no live beam, or when the best live beam,
    scored as it stands, does not beat the worst of ``k`` finished hypotheses (see the module docstring).
    """
    live: list[tuple[float, int, int]] = []  # (score, beam, token), best first
    for rank, (s, beam, tok) in enumerate(candidates):
        if s == float("-inf"):
            break  # the rest are dead too
        if tok == eos_id:
            if rank < k:  # EOS only counts if it is among the k best candidates
                _add_finished(pool, Hypothesis(prefixes[beam], s / lp, s, length, True), k)
        elif len(live) < k:
            live.append((s, beam, tok))
    if length >= limit:  # the length limit: live beams end here, without EOS
        for s, beam, tok in live:
            _add_finished(pool, Hypothesis(prefixes[beam] + [tok], s / lp, s, length, False), k)
        return []
    if not live or (len(pool) >= k and live[0][0] / lp <= pool[-1].score):
        return []
    return live + [(float("-inf"), live[0][1], live[0][2])] * (k - len(live))


def beam_search_hypotheses(
    model: nn.Module,
    src: torch.Tensor,
    src_key_padding_mask: torch.Tensor | None = None,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    beam_size: int = 4,
    length_penalty: float = 1.0,
    length_penalty_style: str = "gnmt",
    max_len: int | None = None,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
    use_cache: bool = True,
    vocab_size: int | None = None,
) -> list[list[Hypothesis]]:
    """Beam search returning up to ``beam_size`` finished hypotheses per sentence, best first.

    Args:
        model: an encoder-decoder like :func:`~attnkit.generation.seq2seq.greedy_search` needs.
        src: source ids; src_key_padding_mask: ``True`` = padding (default ``src == pad_id``).
        bos_id, eos_id, pad_id: as in greedy search (EOS is not returned).
        beam_size: ``k`` beams per sentence; 1 gives greedy search's output.
        length_penalty: ``alpha`` of the length normalisation (0 = none).
        length_penalty_style: ``"gnmt"`` (``((5 + len) / 6) ** alpha``, default) or ``"simple"`` (``len ** alpha``).
        max_len, max_len_a, max_len_b: the length limit ``min(max_len, floor(a * src_len + b))``.
        use_cache: reorder a KV cache with the beams (default) or recompute every prefix.
        vocab_size: only target ids below it are proposed (a padded output layer); ``None``: any.

    Shape:
        src ``(B, S)``; src_key_padding_mask ``(B, S)`` -> ``B`` lists of :class:`Hypothesis`.
    """
    _check_beam_args(beam_size, length_penalty, length_penalty_style)
    src, mask, limits = start_search(model, src, src_key_padding_mask, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id,
                                     max_len=max_len, max_len_a=max_len_a, max_len_b=max_len_b, use_cache=use_cache,
                                     vocab_size=vocab_size)
    device = src.device
    B, k = src.shape[0], beam_size
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]

    with eval_mode(model):
        memory, memory_mask = encode_source(model, src, mask)  # (B, S, C): the encoder runs once
        to_beams = torch.arange(B, device=device).repeat_interleave(k)  # (B*k,): [0,0,..,1,1,..]
        memory = memory.index_select(0, to_beams)  # (B*k, S, C)
        memory_mask = None if memory_mask is None else memory_mask.index_select(0, to_beams)  # (B*k, S)
        dec = IncrementalDecoder(model, memory, memory_mask, use_cache=use_cache, max_len=max(limits),
                                 vocab_size=vocab_size)

        tgt = torch.full((B * k, 1), bos_id, dtype=torch.long, device=device)  # (N, t) with t = 1
        # All beams start as the same prefix [BOS]; only beam 0 is alive, or the first step would pick
        # the same candidate k times.
        scores = torch.full((B, k), float("-inf"), device=device)  # (B, k) total log-prob of each beam
        scores[:, 0] = 0.0
        active = list(range(B))  # active[i] = the sentence that beam group i belongs to
        length = 0
        while active:
            length += 1  # the candidates of this step have `length` tokens after BOS
            logits = dec.next_logits(tgt)  # (n*k, V)
            logp = torch.log_softmax(logits, dim=-1)  # (n*k, V)
            top_scores, top_beams, top_tokens = _top_candidates(scores, logp, k, logits)
            lp = length_penalty_factor(length, length_penalty, length_penalty_style)
            prefixes = tgt[:, 1:].tolist()  # (n*k) lists: the beams' tokens after BOS
            next_rows, next_tokens, next_scores, still_active = [], [], [], []
            for i, sent in enumerate(active):
                beams = _advance_sentence(finished[sent], zip(top_scores[i], top_beams[i], top_tokens[i]),
                                          prefixes[i * k:(i + 1) * k], k=k, length=length, lp=lp,
                                          limit=limits[sent], eos_id=eos_id)
                for s, beam, tok in beams:
                    next_rows.append(i * k + beam)
                    next_tokens.append(tok)
                    next_scores.append(s)
                if beams:
                    still_active.append(sent)

            if not still_active:
                break
            # ---- the decoder follows the surviving beams: one index for reorder and drop ----
            index = torch.tensor(next_rows, dtype=torch.long, device=device)  # (n'*k,)
            tgt = torch.cat([tgt.index_select(0, index),
                             torch.tensor(next_tokens, dtype=torch.long, device=device)[:, None]], dim=1)  # (n'*k, t+1)
            scores = torch.tensor(next_scores, dtype=scores.dtype, device=device).view(len(still_active), k)
            dec.select(index)
            active = still_active
    return finished


def beam_search(model: nn.Module, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None,
                **options: Any) -> list[list[int]]:
    """Translate each source sentence with beam search; return the best hypothesis of each.

    ``options`` are :func:`beam_search_hypotheses`'s (``bos_id``, ``eos_id``, ``pad_id``, ``beam_size``,
    ``length_penalty``, ``length_penalty_style``, ``max_len``, ``max_len_a``, ``max_len_b``, ``use_cache``,
    ``vocab_size``).

    Returns:
        ``B`` lists of target ids (no BOS, no EOS).

    Shape:
        src ``(B, S)``; src_key_padding_mask ``(B, S)`` -> ``B`` lists.
    """
    return [h[0].tokens for h in beam_search_hypotheses(model, src, src_key_padding_mask, **options)]
