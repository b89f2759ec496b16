"""Decoding for encoder-decoder models (``attnkit.models.transformer.Transformer``): greedy search and the
pieces beam search shares with it.

Axis legend: ``B`` batch (source sentences), ``N`` decoder rows (``B``, or ``B * beam_size`` in beam search),
``S`` source length, ``t`` target prefix length so far, ``C`` model width, ``V`` target vocabulary.

Translation decodes in two halves::

    memory = model.encode(src, src_key_padding_mask)        # (B, S, C)   once per batch
    prefix = [BOS]
    repeat: logits = model.decode(prefix, memory, ...)[:, -1] # (N, V)     next-token logits
            prefix += argmax(logits)                         # until EOS or the length limit

With ``use_cache=True`` the decoder keeps a :class:`~attnkit.models.encoder_decoder.DecoderCache`: the keys
and values of earlier target positions, and the projected encoder memory (cross-attention keys/values,
computed on the first step only). Each step then feeds just the newest token. When rows leave the batch
(finished sentences) or beams are reordered, ``cache.reorder(index)`` follows them.

**Length limit** per sentence (fairseq's convention): at most ``floor(max_len_a * src_len + max_len_b)``
target tokens, where ``src_len`` counts the source's non-padding tokens; ``max_len`` (if given) caps it,
and so does the model's ``config.max_len`` (its positional table). The limit is at least 1. The count
excludes BOS and includes EOS: a sentence that reaches the limit without EOS simply ends there.

**Outputs** are lists of target ids without BOS and without EOS.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnkit.checks import check_bool, check_id, check_int, check_padding_mask, is_int, is_number
from .generate import eval_mode, model_device
from .stopping import StoppingCriteria

__all__ = ["greedy_search", "IncrementalDecoder", "prepare_source", "max_target_lengths", "start_search"]


# ----------------------------------------------------------------------------------------------------
# argument checks and source preparation
# ----------------------------------------------------------------------------------------------------
def check_length_args(max_len, max_len_a, max_len_b) -> None:
    """``max_len`` None or int >= 1; ``max_len_a``, ``max_len_b`` finite numbers >= 0."""
    if max_len is not None and (not is_int(max_len) or max_len < 1):
        raise ValueError(f"max_len must be None or an int >= 1, got {max_len!r}")
    for name, v in (("max_len_a", max_len_a), ("max_len_b", max_len_b)):
        if not is_number(v) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")


def prepare_source(
    model: nn.Module, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate the source batch and return it on the model's device with its padding mask, right-padded.

    Without ``src_key_padding_mask`` the padding is ``src == pad_id``. Padding on the left (or anywhere) is moved
    to the right, the real tokens keeping their order: the encoder numbers positions from column 0, so a sentence
    must start there to be encoded as it is on its own.

    Shape:
        src ``(B, S)`` int; src_key_padding_mask ``(B, S)`` bool -> the same two, mask never ``None``.
    """
    if not isinstance(src, torch.Tensor) or src.dtype not in (torch.int64, torch.int32) or src.dim() != 2:
        got = f"{src.dtype} {tuple(src.shape)}" if isinstance(src, torch.Tensor) else type(src).__name__
        raise ValueError(f"src must be an int64/int32 tensor of shape (B, S), got {got}")
    if src.shape[0] == 0 or src.shape[1] == 0:
        raise ValueError(f"src must have B >= 1 and S >= 1, got shape {tuple(src.shape)}")
    device = model_device(model)
    src = src.to(device)
    if src_key_padding_mask is None:
        mask = src == pad_id
    else:
        check_padding_mask("src_key_padding_mask", src_key_padding_mask, tuple(src.shape))
        mask = src_key_padding_mask.to(device)
    order = torch.sort(mask.to(torch.uint8), dim=1, stable=True).indices  # (B, S): real columns first, in order
    return src.gather(1, order), mask.gather(1, order)


def max_target_lengths(
    src_lengths: list[int], *, max_len: int | None, max_len_a: float, max_len_b: float, model_max_len: int | None
) -> list[int]:
    """Per-sentence limit on target tokens: ``floor(a * src_len + b)``, capped by ``max_len`` and the model; >= 1.

    Shape:
        ``B`` source lengths -> ``B`` limits.
    """
    limits = []
    for n in src_lengths:
        limit = math.floor(max_len_a * n + max_len_b)
        if max_len is not None:
            limit = min(limit, max_len)
        if model_max_len is not None:
            limit = min(limit, model_max_len)  # BOS + (limit - 1) fed tokens use positions 0 .. limit - 1
        limits.append(max(1, limit))
    return limits


def _real_target_mask(model: nn.Module, tgt: torch.Tensor) -> torch.Tensor | None:
    """An all-``False`` target padding mask when the model would mistake a real token for padding.

    ``Transformer.decode`` treats target ids equal to ``config.pad_id`` as padding when no mask is passed.
    Every target token we feed is real (a BOS that happens to equal ``pad_id``, or a generated pad id), so in
    that case we say so explicitly; otherwise ``None`` keeps the model's fast path.

    Shape:
        tgt ``(N, t)`` -> ``(N, t)`` bool or ``None``.
    """
    pad = getattr(getattr(model, "config", None), "pad_id", None)
    if pad is not None and bool((tgt == pad).any()):
        return torch.zeros_like(tgt, dtype=torch.bool)
    return None


# ----------------------------------------------------------------------------------------------------
# the decoder loop's one moving part
# ----------------------------------------------------------------------------------------------------
class IncrementalDecoder:
    """Next-token logits for a growing target prefix, with or without a KV cache.

    Holds the encoder memory (already expanded to the decoder rows) and, with ``use_cache``, a
    ``model.new_cache(N, max_len)``. Call :meth:`next_logits` with the whole prefix each step (it feeds only
    the newest token when caching) and :meth:`select` whenever rows are dropped or reordered.

    Shape:
        memory ``(N, S, C)``; memory_key_padding_mask ``(N, S)`` bool or ``None``.
    """

    def __init__(self, model: nn.Module, memory: torch.Tensor, memory_key_padding_mask: torch.Tensor | None, *,
                 use_cache: bool, max_len: int, vocab_size: int | None = None):
        self.model = model
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=1, allow_none=True)  # None: every output id
        self.memory = memory
        self.memory_key_padding_mask = memory_key_padding_mask
        self.cache = None
        if use_cache:
            if not callable(getattr(model, "new_cache", None)):
                raise ValueError(f"use_cache=True needs model.new_cache(batch_size, max_len); "
                                 f"{type(model).__name__} has none (pass use_cache=False)")
            self.cache = model.new_cache(memory.shape[0], max_len)

    def next_logits(self, tgt: torch.Tensor) -> torch.Tensor:
        """Logits of the token after ``tgt`` (float32); only of the ids below ``vocab_size`` when it is given (a
        padded output layer's padding ids have no text).

        Shape:
            tgt ``(N, t)`` -> ``(N, V)``.
        """
        if self.cache is not None:
            if self.cache.length != tgt.shape[1] - 1:
                raise ValueError(f"the cache holds {self.cache.length} positions, expected prefix length - 1 "
                                 f"= {tgt.shape[1] - 1}")
            tgt = tgt[:, -1:]  # (N, 1): everything before it is in the cache
        logits = self.model.decode(
            tgt, self.memory,
            memory_key_padding_mask=self.memory_key_padding_mask,
            tgt_key_padding_mask=_real_target_mask(self.model, tgt),
            cache=self.cache,
        )
        logits = logits[:, -1, :self.vocab_size].float()  # (N, V)
        # a NaN or +inf logit, or none above -inf: argmax / top-k would quietly pick id 0 or a NaN log-probability's
        # token, and a broken model must not look fine
        if not bool(torch.isfinite(logits.amax(dim=-1)).all()):
            raise FloatingPointError("the decoder's next-token logits hold NaN or +inf, or are -inf for every token: "
                                     "the model's weights or inputs are not finite")
        return logits

    def select(self, index: torch.Tensor) -> None:
        """Keep/reorder decoder rows: new row ``n`` is old row ``index[n]`` (memory, mask and cache).

        Shape:
            index ``(N',)`` int64.
        """
        self.memory = self.memory.index_select(0, index)  # (N', S, C)
        if self.memory_key_padding_mask is not None:
            self.memory_key_padding_mask = self.memory_key_padding_mask.index_select(0, index)  # (N', S)
        if self.cache is not None:
            self.cache.reorder(index)


def encode_source(model: nn.Module, src: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the encoder once; return the memory and the mask to attend with (``None`` if nothing is padded).

    Shape:
        src, mask ``(B, S)`` -> memory ``(B, S, C)``, mask ``(B, S)`` or ``None``.
    """
    memory = model.encode(src, mask)  # an explicit mask: the model must not guess padding from the ids
    return memory, (mask if bool(mask.any()) else None)


def start_search(
    model: nn.Module, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None, *, bos_id: int, eos_id: int,
    pad_id: int, max_len: int | None, max_len_a: float, max_len_b: float, use_cache: bool,
    vocab_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """What greedy and beam search do first: check the options they share, put the source on the model's device
    with its padding mask (:func:`prepare_source`) and give each sentence its target length limit.

    ``vocab_size`` (the ids that may be generated) must hold ``eos_id``, or no sentence could end before its
    length limit, and be at most the model's ``tgt_vocab_size``.

    Shape:
        src ``(B, S)``; src_key_padding_mask ``(B, S)`` -> src, mask ``(B, S)`` and ``B`` limits.
    """
    V = getattr(getattr(model, "config", None), "tgt_vocab_size", None)
    check_id("bos_id", bos_id, V)
    check_id("eos_id", eos_id, V)
    check_id("pad_id", pad_id, None)
    if vocab_size is not None:
        check_int("vocab_size", vocab_size, minimum=1)
        if V is not None and vocab_size > V:
            raise ValueError(f"vocab_size must be at most the model's tgt_vocab_size = {V}, got {vocab_size}")
        if eos_id >= vocab_size:
            raise ValueError(f"eos_id must be below vocab_size = {vocab_size} (ids past it are never generated, so no "
                             f"sentence could end), got {eos_id}")
    check_length_args(max_len, max_len_a, max_len_b)
    check_bool("use_cache", use_cache)
    src, mask = prepare_source(model, src, src_key_padding_mask, pad_id)
    lengths = (~mask).sum(dim=1).tolist()  # B real source tokens
    if 0 in lengths:
        raise ValueError(f"every source needs at least one real token (e.g. <eos>), got only padding in source row "
                         f"{lengths.index(0)}")
    model_max = getattr(getattr(model, "config", None), "max_len", None)
    limits = max_target_lengths(lengths, max_len=max_len, max_len_a=max_len_a, max_len_b=max_len_b,
                                model_max_len=model_max)
    return src, mask, limits


# ----------------------------------------------------------------------------------------------------
# greedy search
# ----------------------------------------------------------------------------------------------------
def greedy_search(
    model: nn.Module,
    src: torch.Tensor,
    src_key_padding_mask: torch.Tensor | None = None,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_len: int | None = None,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
    use_cache: bool = True,
    vocab_size: int | None = None,
) -> list[list[int]]:
    """Translate each source sentence by always taking the most likely next token.

    Args:
        model: an encoder-decoder with ``encode(src, mask)``, ``decode(tgt, memory, *, memory_key_padding_mask,
            tgt_key_padding_mask, cache)`` and (for ``use_cache``) ``new_cache(batch_size, max_len)``.
        src: source ids (at least one real token each), padded (on either side) with ``pad_id`` or described by
            ``src_key_padding_mask``.
        src_key_padding_mask: ``True`` = padding; default ``src == pad_id``.
        bos_id: the first target token fed to the decoder; eos_id: ends a sentence (not returned);
        pad_id: source padding id.
        max_len, max_len_a, max_len_b: the length limit (see the module docstring).
        use_cache: KV-cached incremental decoding (default) or recompute the whole prefix every step.
        vocab_size: only target ids below it are chosen (a model whose output layer is padded beyond its
            tokenizer's vocabulary); ``None``: any.

    Returns:
        ``B`` lists of target ids (no BOS, no EOS).

    Shape:
        src ``(B, S)``; src_key_padding_mask ``(B, S)`` -> ``B`` lists.
    """
    src, mask, limits = start_search(model, src, src_key_padding_mask, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id,
                                     max_len=max_len, max_len_a=max_len_a, max_len_b=max_len_b, use_cache=use_cache,
                                     vocab_size=vocab_size)
    B = src.shape[0]

    with eval_mode(model):
        memory, memory_mask = encode_source(model, src, mask)  # (B, S, C), once
        dec = IncrementalDecoder(model, memory, memory_mask, use_cache=use_cache, max_len=max(limits),
                                 vocab_size=vocab_size)
        stopper = StoppingCriteria(B, max_new_tokens=limits, eos_token_id=eos_id)
        tgt = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (b, t) with t = 1
        active = list(range(B))  # active[i] = the sentence that decoder row i belongs to
        while True:
            next_ids = dec.next_logits(tgt).argmax(dim=-1)  # (b,)
            for i, tok in enumerate(next_ids.tolist()):
                stopper.add(active[i], tok)
            if stopper.all_done:
                break
            tgt = torch.cat([tgt, next_ids[:, None]], dim=1)  # (b, t + 1)
            done = stopper.done
            keep = [i for i, s in enumerate(active) if not done[s]]
            if len(keep) < len(active):  # finished sentences leave the batch
                index = torch.tensor(keep, dtype=torch.long, device=src.device)
                tgt = tgt.index_select(0, index)
                dec.select(index)
                active = [active[i] for i in keep]
    return stopper.outputs
