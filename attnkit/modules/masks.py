"""Attention masks: causal, padding, the seed-000 banded mask, and helpers to combine/convert them.

Axis legend: ``B`` batch, ``T`` query (target) length, ``S`` key (source) length.

Polarity is torch.nn's everywhere: a boolean mask is ``True`` where attention is *not* allowed;
a float mask is *added* to the attention scores (``-inf`` forbids, ``0`` allows).
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np
import torch

from attnkit.checks import check_int, is_int, no_host_reads


def causal_mask(T: int, S: int | None = None, *, device: torch.device | str | None = None) -> torch.Tensor:
    """Look-ahead mask, aligned to the bottom-right corner.

    Query ``i`` may attend keys ``j <= i + (S - T)``: with ``S == T`` this is the usual triangle; with
    ``S > T`` (the queries are the *last* ``T`` positions, e.g. new tokens after a KV cache) every query
    also sees the ``S - T`` earlier keys.

    Shape:
        returns ``(T, S)`` bool, ``True`` = may not attend.
    """
    S = T if S is None else S
    if T < 0 or S < 0:
        raise ValueError(f"causal_mask lengths must be >= 0, got T={T}, S={S}")
    ones = torch.ones(T, S, dtype=torch.bool, device=device)
    # triu(diagonal=k) keeps j - i >= k; we forbid j > i + (S - T), i.e. j - i >= S - T + 1.
    return torch.triu(ones, diagonal=S - T + 1)


def padding_mask(
    lengths: torch.Tensor | Sequence[int] | None = None,
    *,
    ids: torch.Tensor | None = None,
    pad_id: int | None = None,
    max_len: int | None = None,
) -> torch.Tensor:
    """Key-padding mask, from sequence lengths or from token ids.

    Give either ``lengths`` (right padding: positions ``>= lengths[b]`` are padding; ``max_len``
    defaults to ``max(lengths)``) or ``ids`` with ``pad_id`` (positions where ``ids == pad_id``).

    Shape:
        lengths: ``(B,)``; ids: ``(B, S)``; returns ``(B, S)`` bool, ``True`` = padding.
    """
    if (lengths is None) == (ids is None):
        raise ValueError("padding_mask needs exactly one of lengths= or ids=, got "
                         f"lengths={'set' if lengths is not None else None}, ids={'set' if ids is not None else None}")
    if ids is not None:
        if pad_id is None:
            raise ValueError("padding_mask(ids=...) needs pad_id, got None")
        if ids.dim() != 2:
            raise ValueError(f"ids must have shape (B, S), got {tuple(ids.shape)}")
        return ids == pad_id
    lengths_t = torch.as_tensor(lengths)
    if lengths_t.dim() != 1 or lengths_t.is_floating_point() or lengths_t.dtype == torch.bool:
        raise ValueError(f"lengths must be a 1-D integer tensor (B,), got shape {tuple(lengths_t.shape)} "
                         f"dtype {lengths_t.dtype}")
    if lengths_t.numel() and int(lengths_t.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got min {int(lengths_t.min())}")
    longest = int(lengths_t.max()) if lengths_t.numel() else 0
    S = longest if max_len is None else check_int("max_len", max_len, minimum=0)
    if S < longest:
        raise ValueError(f"max_len must be >= max(lengths) = {longest}, got {S}")
    positions = torch.arange(S, device=lengths_t.device)  # (S,)
    return positions[None, :] >= lengths_t[:, None]  # (B, S)


def pad_right(sequences: Sequence[Sequence[int]], pad_id: int, *, length: int | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists into one batch, with its padding mask (:func:`padding_mask` of their lengths).

    ``length`` defaults to the longest sequence; an empty list gives a row of padding only.

    Shape:
        ``B`` lists -> ``(ids (B, S) long, mask (B, S) bool)``, ``True`` = padding.
    """
    lengths = [len(seq) for seq in sequences]
    if not lengths:
        raise ValueError("pad_right needs at least one sequence, got none")
    S = max(lengths) if length is None else check_int("pad_right length", length, minimum=0)
    if S < max(lengths):
        raise ValueError(f"pad_right length must be >= the longest sequence ({max(lengths)}), got {S}")
    mask = padding_mask(lengths, max_len=S)  # (B, S) True = padding
    # One vectorised fill (a copy per row costs ~30 us, i.e. ~50 ms for a GPU-sized batch of 500 pairs x 3):
    # the concatenated ids go, in row-major order, exactly to the positions that are not padding.
    flat = np.fromiter(itertools.chain.from_iterable(map(_as_ids, sequences)), dtype=np.int64, count=sum(lengths))
    ids = np.full((len(lengths), S), pad_id, dtype=np.int64)
    ids[~mask.numpy()] = flat
    return torch.from_numpy(ids), mask


def _as_ids(seq: Sequence[int] | torch.Tensor) -> Sequence[int]:
    """A tensor of ids as a list of Python ints (np.fromiter takes ints, not 0-dim tensors); lists pass as they are."""
    return seq.tolist() if isinstance(seq, torch.Tensor) else seq


def generate_mask_mat(seq_len: int, masked_len: int) -> torch.Tensor:
    """Seed-000 banded mask: element ``[i, j]`` is ``True`` (masked) when ``seq_len - j + i <= masked_len``.

    The condition is ``j - i >= seq_len - masked_len``: with ``masked_len = seq_len - 1`` this is the usual
    look-ahead mask (``j > i``); smaller values mask only the keys at least ``seq_len - masked_len`` positions
    ahead of the query, so the nearest future keys become visible. Vectorised (the seed loops over every element).

    Shape:
        returns ``(seq_len, seq_len)`` bool.
    """
    check_int("seq_len", seq_len, minimum=0)
    if not is_int(masked_len):
        raise ValueError(f"masked_len must be an int, got {masked_len!r} ({type(masked_len).__name__})")
    i = torch.arange(seq_len)[:, None]  # (seq_len, 1) query index
    j = torch.arange(seq_len)[None, :]  # (1, seq_len) key index
    return (seq_len - j + i) <= masked_len  # (seq_len, seq_len)


def drop_if_unpadded(key_padding_mask: torch.Tensor | None) -> torch.Tensor | None:
    """``None`` when a boolean padding mask pads nothing (all ``False``), else the mask itself.

    Models call this once per forward: with no mask at all, attention keeps its fused fast path
    (``is_causal`` or no mask) instead of carrying an all-False mask through every layer.

    Shape:
        key_padding_mask ``(B, S)`` bool or None -> the same, or None.
    """
    if key_padding_mask is None or no_host_reads() or bool(key_padding_mask.any()):
        return key_padding_mask  # (under no_host_reads() the mask is kept: testing it would sync the host)
    return None


def to_additive(mask: torch.Tensor | None, dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    """Convert a mask to the additive (float) form.

    A bool mask becomes ``0`` where allowed and ``-inf`` where ``True``; a float mask is cast to ``dtype``.

    Shape:
        any shape -> same shape, ``dtype``.
    """
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        return out.masked_fill_(mask, float("-inf"))
    if mask.is_floating_point():
        return mask.to(dtype)
    raise ValueError(f"mask dtype must be bool or floating point, got {mask.dtype}")


def combine_masks(*masks: torch.Tensor | None, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """Combine masks that broadcast together. ``None`` entries are skipped.

    All bool -> logical or (bool result). Any float -> every mask is made additive and they are summed
    (float result, in ``dtype`` or the promoted float dtype of the inputs).

    Shape:
        inputs broadcastable to a common shape -> that shape.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    for m in present:
        if m.dtype != torch.bool and not m.is_floating_point():
            raise ValueError(f"mask dtype must be bool or floating point, got {m.dtype}")
    if all(m.dtype == torch.bool for m in present):
        out = present[0]
        for m in present[1:]:
            out = out | m
        return out
    if dtype is None:  # promote the float inputs' dtypes (bool masks take whatever the floats use)
        float_dtypes = [m.dtype for m in present if m.is_floating_point()]
        dtype = float_dtypes[0]
        for d in float_dtypes[1:]:
            dtype = torch.promote_types(dtype, d)
    out = to_additive(present[0], dtype)
    for m in present[1:]:
        out = out + to_additive(m, dtype)
    return out
