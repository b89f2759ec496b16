"""Logits processors: small functions that reshape the next-token distribution before a token is picked.

Axis legend: ``B`` batch (rows being decoded), ``V`` vocabulary, ``L`` length of the token history of a row.

Every function takes raw next-token logits ``(B, V)`` and returns new logits ``(B, V)`` (a new tensor; the
input is never modified). Tokens that must not be picked get ``-inf``; softmax turns them into probability 0.

* :func:`apply_repetition_penalty` -- CTRL (Keskar et al., 2019): make already-seen tokens less likely.
* :func:`no_repeat_ngram_filter`   -- forbid the tokens that would repeat an n-gram of the history (Paulus et al.,
  2017; transformers' ``no_repeat_ngram_size``).
* :func:`apply_temperature`        -- divide by ``temperature``: < 1 sharpens, > 1 flattens.
* :func:`top_k_filter`             -- keep the ``k`` most likely tokens.
* :func:`top_p_filter`             -- nucleus sampling (Holtzman et al., 2019): keep the smallest set of
  most likely tokens whose probabilities sum to at least ``p``.
* :func:`min_p_filter`             -- min-p sampling (Nguyen et al., 2024): keep the tokens at least ``min_p``
  times as likely as the most likely one.

:func:`process_logits` applies them in that order (the order of HF ``generate``), and the ``check_*``
functions validate the arguments (``ValueError`` naming the bad value) so that ``generate`` can fail
before doing any work.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from attnkit.checks import check_int, is_number

__all__ = [
    "check_temperature",
    "check_top_k",
    "check_top_p",
    "check_min_p",
    "check_repetition_penalty",
    "check_no_repeat_ngram_size",
    "apply_temperature",
    "top_k_filter",
    "top_p_filter",
    "min_p_filter",
    "apply_repetition_penalty",
    "no_repeat_ngram_filter",
    "process_logits",
]


# A logit no model produces: below it, z / temperature and z * penalty are checked for overflow only when the
# dtype's range divided by the factor comes under it (a tiny temperature, an extreme penalty, a float16 row).
_IMPLAUSIBLE_LOGIT = 1e30


# ----------------------------------------------------------------------------------------------------
# argument checks
# ----------------------------------------------------------------------------------------------------
def _check_number(name: str, value) -> None:
    """``value`` must be a Python ``int`` or ``float`` (a NumPy ``float32``, say, is refused by its type, not by a
    range it may well be in)."""
    if not is_number(value):
        raise ValueError(f"{name} must be an int or float, got {value!r} ({type(value).__name__})")


def check_temperature(temperature) -> float:
    """``temperature`` must be a finite number > 0 (use ``do_sample=False`` for the greedy limit ``-> 0``)."""
    _check_number("temperature", temperature)
    if not math.isfinite(temperature) or temperature <= 0:
        hint = " (for greedy decoding: do_sample=False, `attnkit sample --greedy`)" if temperature == 0 else ""
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}{hint}")
    return float(temperature)


def check_top_k(top_k) -> int:
    """``top_k`` must be an int >= 1 (``None`` = no top-k filter is handled by the caller)."""
    check_int("top_k", top_k, minimum=1)
    return top_k


def check_top_p(top_p) -> float:
    """``top_p`` must be a number with ``0 < top_p <= 1``."""
    _check_number("top_p", top_p)
    if not (0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must satisfy 0 < top_p <= 1, got {top_p!r}")
    return float(top_p)


def check_min_p(min_p) -> float:
    """``min_p`` must be a number with ``0 <= min_p <= 1`` (transformers' rule; ``0`` keeps every token)."""
    _check_number("min_p", min_p)
    if not (0.0 <= min_p <= 1.0):  # (NaN fails every comparison: refused too)
        raise ValueError(f"min_p must satisfy 0 <= min_p <= 1, got {min_p!r}")
    return float(min_p)


def check_repetition_penalty(penalty) -> float:
    """``repetition_penalty`` must be a finite number > 0 (1.0 = off, > 1 discourages repeats)."""
    _check_number("repetition_penalty", penalty)
    if not math.isfinite(penalty) or penalty <= 0:
        raise ValueError(f"repetition_penalty must be a finite number > 0, got {penalty!r}")
    return float(penalty)


def check_no_repeat_ngram_size(size) -> int:
    """``size``: an int >= 0 (0 = off)."""
    check_int("no_repeat_ngram_size", size, minimum=0)
    return size


def _check_logits(logits: torch.Tensor) -> None:
    if not isinstance(logits, torch.Tensor) or not torch.is_floating_point(logits):
        got = logits.dtype if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"logits must be a floating-point tensor (B, V), got {got}")
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape (B, V), got {tuple(logits.shape)}")


# ----------------------------------------------------------------------------------------------------
# the processors
# ----------------------------------------------------------------------------------------------------
def _check_history(logits: torch.Tensor, input_ids: Any, ignore_mask: Any) -> tuple[int, int]:
    """``(B, V)`` of ``logits`` after checking them, the history ``input_ids (B, L)`` and its ``ignore_mask``."""
    _check_logits(logits)
    B, V = logits.shape
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] != B:
        got = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"input_ids must have shape (B, L) with B = {B}, got {got}")
    if ignore_mask is not None and (ignore_mask.dtype != torch.bool or ignore_mask.shape != input_ids.shape):
        raise ValueError(f"ignore_mask must be a bool tensor of shape {tuple(input_ids.shape)}, "
                         f"got {ignore_mask.dtype} {tuple(ignore_mask.shape)}")
    return B, V


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Divide the logits by ``temperature``.

    ``softmax(z / t)``: ``t < 1`` sharpens the distribution, ``t > 1`` flattens it, ``t = 1`` changes
    nothing. The ranking of the tokens never changes, so greedy decoding is unaffected. A row that the
    division would overflow (a tiny temperature: ``z / t`` past the dtype's largest value, softmax then NaN) is
    first shifted by its largest logit, ``(z - max z) / t``: the same distribution, in range.

    Shape:
        logits: ``(B, V)`` -> ``(B, V)``.
    """
    _check_logits(logits)
    temperature = check_temperature(temperature)
    out = logits / temperature
    if temperature >= 1.0 or torch.finfo(logits.dtype).max * temperature > _IMPLAUSIBLE_LOGIT:
        return out  # no finite logit a model gives can overflow: skip the (B, V) checks of every step
    overflow = (~torch.isfinite(out) & torch.isfinite(logits)).any(dim=-1, keepdim=True)  # (B, 1)
    top = logits.amax(dim=-1, keepdim=True)  # (B, 1)
    diff = logits - torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # (B, V), <= 0
    shifted = torch.where(diff == 0, torch.zeros_like(diff), diff / temperature)  # (0 / a temperature 0 in float32)
    return torch.where(overflow, shifted, out)


def top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the ``top_k`` largest logits of each row; set the others to ``-inf``.

    ``top_k >= V`` keeps everything. Ties at the k-th value are all kept (a tie is not a reason to
    prefer one token id over another).

    Shape:
        logits: ``(B, V)`` -> ``(B, V)``.
    """
    _check_logits(logits)
    top_k = check_top_k(top_k)
    V = logits.shape[-1]
    if top_k >= V:
        return logits.clone()
    kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest value of each row
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter: keep the smallest set of most likely tokens whose probability sum reaches ``top_p``.

    Sort the probabilities in decreasing order and keep a token if the mass of the tokens *before* it
    is still ``< top_p`` (computed as transformers' TopPLogitsWarper does: the mass of the token and those after
    it, summed from the least likely up, must be ``> 1 - top_p``). The most likely token is therefore always kept,
    and ``top_p = 1`` keeps every token with nonzero probability.

    Ties: tokens of equal logit are ordered by token id, lowest first (a stable sort), so where the nucleus ends
    inside a run of equal tokens the ones with the lowest ids are kept. The set is the same on every device and
    vocabulary size (an unstable sort, CPU's above about 100 tokens, would pick arbitrary ones); transformers
    keeps as many, but which of the tied tokens it keeps follows its sort.

    Example: probabilities ``[0.5, 0.3, 0.15, 0.05]`` with ``top_p = 0.75`` keep the first two
    (mass before them: 0 and 0.5 < 0.75; before the third it is 0.8, not < 0.75).

    Shape:
        logits: ``(B, V)`` -> ``(B, V)``.
    """
    _check_logits(logits)
    top_p = check_top_p(top_p)
    if top_p >= 1.0:
        return logits.clone()  # (rounding in the cumulative sum must not drop the tiny tail)
    # ascending, as transformers' TopPLogitsWarper sums (the small probabilities first: fewer rounding errors than
    # a sum from the top, which kept or dropped a few tokens too many over 50,000); a stable sort of the row read
    # backwards puts equal logits in decreasing id order, so the lowest ids come last, where the nucleus is
    V = logits.shape[-1]
    sorted_logits, order = torch.sort(logits.flip(-1), dim=-1, stable=True)  # (B, V) each
    order = V - 1 - order  # (B, V): vocabulary ids
    probs = torch.softmax(sorted_logits.float(), dim=-1)  # (B, V), in float32 for a stable cumulative sum
    mass_up_to = torch.cumsum(probs, dim=-1)  # (B, V): the token's mass and that of every less likely one
    remove_sorted = mass_up_to <= 1.0 - top_p  # (B, V) in sorted order: the mass before the token is >= top_p
    remove_sorted[:, -1] = False  # the most likely token stays (also for a top_p that is 0 in float32, 1e-46)
    # scatter the decision back to vocabulary order
    remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)  # (B, V)
    return logits.masked_fill(remove, float("-inf"))


def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Min-p filter: keep the tokens whose probability is at least ``min_p`` times the most likely token's.

    With ``p = softmax(z)`` over a row, token ``i`` is kept if ``p_i >= min_p * max_j p_j`` and set to ``-inf``
    otherwise (Nguyen et al., 2024, "Turning Up the Heat: Min-p Sampling for Creative and Coherent LLM Outputs",
    arXiv:2407.01082; llama.cpp's default sampler). In logits the same rule reads ``z_i >= max_j z_j + log(min_p)``
    (up to rounding: it is computed on the probabilities). The cut-off moves with the model's confidence: a peaked
    distribution (one token at 0.9) keeps few tokens, a flat one (many near 0.01) keeps many, where top-p would
    keep a fixed mass. Values of 0.05-0.1 are common (llama.cpp's default is 0.05). Computed as
    transformers' MinPLogitsWarper does (softmax, row maximum, ``p < min_p * max p`` removed):

    * the most likely token is always kept (``min_p <= 1``), and ``min_p = 1`` keeps only it and its ties;
      ``min_p = 0`` keeps every token;
    * ties: tokens of equal logit have equal probability, so they are kept or dropped together (no order between
      them matters, unlike top-p's boundary);
    * ``-inf`` logits have probability 0 and stay ``-inf``;
    * a row with no finite distribution (every logit ``-inf``, or a NaN / ``+inf``) has NaN probabilities, fails
      every comparison and is returned as it is (``generate`` reports such a row as a broken model).

    Half precision: the probabilities are computed in float32 (``logits.float()``), so bfloat16 / float16 logits
    keep exactly the set their float32 values give, as in transformers' ``generate`` (which casts the next-token
    logits to float32 before any processor). MinPLogitsWarper called by hand on bfloat16 logits takes the softmax
    in bfloat16, whose rounded probabilities can move a token lying within rounding of the cut-off to the other
    side; on float32 logits (what ``generate`` passes) the two are the very same computation.

    Example: probabilities ``[0.5, 0.3, 0.15, 0.05]`` with ``min_p = 0.2``: the cut-off is ``0.2 * 0.5 = 0.1``, so
    the first three are kept and the ``0.05`` is dropped.

    Shape:
        logits: ``(B, V)`` -> ``(B, V)``.
    """
    _check_logits(logits)
    min_p = check_min_p(min_p)
    if min_p == 0.0:
        return logits.clone()  # (no probability is below 0)
    probs = torch.softmax(logits.float(), dim=-1)  # (B, V), in float32 whatever the logits' dtype
    top_probs = probs.amax(dim=-1, keepdim=True)  # (B, 1): the probability of each row's most likely token
    remove = probs < min_p * top_probs  # (B, V): below the row's cut-off (False everywhere in a NaN row)
    # (transformers then keeps the min_tokens_to_keep = 1 most likely tokens whatever the cut-off: with min_p <= 1
    # the most likely token is never below min_p times itself, so nothing is left to do)
    return logits.masked_fill(remove, float("-inf"))


def apply_repetition_penalty(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    penalty: float,
    *,
    ignore_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Penalise every token that already occurs in the row's history (CTRL's repetition penalty).

    A seen token's logit ``z`` becomes ``z / penalty`` if ``z > 0`` and ``z * penalty`` otherwise, so
    with ``penalty > 1`` it always moves *down* (the sign matters: dividing a negative logit would raise
    it). Each token is penalised once, however often it occurred. ``penalty = 1`` changes nothing;
    ``penalty < 1`` favours repetition. Where an extreme penalty would overflow a row (``z / penalty`` past the
    dtype's largest value, or every token at ``-inf``) the row is returned shifted by a constant, so that its
    distribution is still the penalised one: with a tiny ``penalty`` the seen token(s) with the largest positive
    logit, with a huge one the token(s) with the largest logit when every token was seen and negative.

    Args:
        logits: next-token logits.
        input_ids: the tokens seen so far (prompt and generated), int64.
        penalty: > 0.
        ignore_mask: bool, ``True`` = not a real token (left padding); those ids are not penalised.

    Shape:
        logits ``(B, V)``; input_ids ``(B, L)``; ignore_mask ``(B, L)`` -> ``(B, V)``.
    """
    penalty = check_repetition_penalty(penalty)
    B, V = _check_history(logits, input_ids, ignore_mask)
    if penalty == 1.0 or input_ids.shape[1] == 0:
        return logits.clone()
    # count every real occurrence of every token: counts[b, v] = #{l : input_ids[b, l] == v and not ignored}
    real = torch.ones_like(input_ids) if ignore_mask is None else (~ignore_mask).to(input_ids.dtype)
    counts = torch.zeros(B, V, dtype=input_ids.dtype, device=logits.device)
    counts.scatter_add_(1, input_ids.to(logits.device), real.to(logits.device))  # (B, V)
    seen = counts > 0  # (B, V)
    # (a zero logit stays as it is: 0 * penalty is 0, and NaN where the penalty overflows the dtype)
    penalised = torch.where(logits > 0, logits / penalty, torch.where(logits < 0, logits * penalty, logits))
    out = torch.where(seen, penalised, logits)  # (B, V)
    # Extreme penalties: the exact values overflow the dtype, so shift the row by a constant before scaling
    # (softmax is unchanged by it). penalty < 1: z / penalty -> inf for a seen positive z, and those dominate;
    # penalty > 1: z * penalty -> -inf for every seen negative z, and when every token is one, nothing is left.
    largest = torch.finfo(logits.dtype).max
    if (penalty * largest if penalty < 1.0 else largest / penalty) > _IMPLAUSIBLE_LOGIT:
        return out  # no finite logit a model gives can overflow: skip the (B, V) checks of every step
    finite = torch.isfinite(logits)  # (B, V)
    if penalty < 1.0:
        kept = seen & (logits > 0)  # (B, V)
        overflow = (torch.isinf(out) & finite).any(dim=-1, keepdim=True)  # (B, 1)
    else:
        kept = finite
        overflow = (out.amax(dim=-1, keepdim=True) == float("-inf")) & finite.any(dim=-1, keepdim=True)  # (B, 1)
    top = logits.masked_fill(~kept, float("-inf")).amax(dim=-1, keepdim=True)  # (B, 1)
    diff = torch.where(kept, logits - top, float("-inf"))  # (B, V), <= 0
    scaled = diff / penalty if penalty < 1.0 else diff * penalty
    shifted = torch.where(diff == 0, torch.zeros_like(diff), scaled)  # (B, V)
    return torch.where(overflow, shifted, out)


def no_repeat_ngram_filter(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    size: int,
    *,
    ignore_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Forbid (``-inf``) every token that would complete an n-gram of ``size`` tokens already in the row's history:
    the tokens that followed an earlier occurrence of its last ``size - 1`` tokens (``size = 1``: every token seen).
    transformers' ``NoRepeatNGramLogitsProcessor``, n-grams holding an ignored position (left padding) left out. A
    row where no token would be left keeps its logits (transformers would then pick id 0 or fail to sample).

    Args:
        logits: next-token logits.
        input_ids: the tokens seen so far (prompt and generated), int64.
        size: the n-gram length ``n`` (0 = off).
        ignore_mask: bool, ``True`` = not a real token (left padding).

    Shape:
        logits ``(B, V)``; input_ids ``(B, L)``; ignore_mask ``(B, L)`` -> ``(B, V)``.
    """
    n = check_no_repeat_ngram_size(size)
    B, V = _check_history(logits, input_ids, ignore_mask)
    L = input_ids.shape[1]
    if n == 0 or L < n:  # not one whole n-gram yet
        return logits.clone()
    ids = input_ids.to(logits.device)
    grams = ids.unfold(1, n, 1)  # (B, W, n), W = L - n + 1: every n-gram of the history
    follows = (grams[:, :, :-1] == ids[:, None, L - n + 1:]).all(dim=-1)  # (B, W): its first n - 1 are the last n - 1
    if ignore_mask is not None:  # an n-gram (or a tail) reaching into the padding is no n-gram of the text
        ignored = ignore_mask.to(logits.device)
        follows &= ~ignored.unfold(1, n, 1).any(dim=-1) & ~ignored[:, L - n + 1:].any(dim=-1, keepdim=True)
    counts = torch.zeros(B, V, dtype=torch.int64, device=logits.device)
    counts.scatter_add_(1, grams[:, :, -1], follows.to(torch.int64))  # (B, V): how often each id followed
    banned = counts > 0  # (B, V)
    left = (~banned & (logits > float("-inf"))).any(dim=-1, keepdim=True)  # (B, 1): a token still to pick
    return logits.masked_fill(banned & left, float("-inf"))


def process_logits(
    logits: torch.Tensor,
    *,
    input_ids: torch.Tensor | None = None,
    ignore_mask: torch.Tensor | None = None,
    repetition_penalty: float = 1.0,
    no_repeat_ngram_size: int = 0,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
) -> torch.Tensor:
    """Apply repetition penalty, the n-gram ban, temperature, top-k, top-p and min-p in that order (each only if it
    does something).

    The order is transformers' ``generate`` order (``GenerationMixin._get_logits_processor``). Min-p comes after
    temperature (as in llama.cpp), so ``temperature`` changes which tokens pass its cut-off. Its own cut-off does not
    depend on top-k and top-p having run first (a kept token's probability relative to the most likely one's is the
    same before and after they remove tokens), but the order still matters: top-p run after min-p would sum the
    mass of fewer tokens and could keep another set.

    Shape:
        logits ``(B, V)``; input_ids / ignore_mask ``(B, L)`` -> ``(B, V)``.
    """
    if repetition_penalty != 1.0:
        if input_ids is None:
            raise ValueError("process_logits: repetition_penalty != 1.0 needs input_ids (B, L), got None")
        logits = apply_repetition_penalty(logits, input_ids, repetition_penalty, ignore_mask=ignore_mask)
    if no_repeat_ngram_size:
        if input_ids is None:
            raise ValueError("process_logits: no_repeat_ngram_size > 0 needs input_ids (B, L), got None")
        logits = no_repeat_ngram_filter(logits, input_ids, no_repeat_ngram_size, ignore_mask=ignore_mask)
    if temperature != 1.0:
        logits = apply_temperature(logits, temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None and top_p < 1.0:
        logits = top_p_filter(logits, top_p)
    if min_p is not None:
        logits = min_p_filter(logits, min_p)
    return logits
