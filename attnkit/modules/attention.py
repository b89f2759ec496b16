"""Scaled dot-product attention: a readable reference path and a fast path through PyTorch's fused kernel.

Axis legend: ``B`` batch, ``H`` query heads, ``K`` key/value heads (``K < H``: grouped-query attention),
``T`` query length, ``S`` key length, ``D`` head dim of queries/keys, ``Dv`` head dim of values.

    Attention(Q, K, V) = softmax(Q K^T * scale + mask) V,     scale = 1 / sqrt(D) by default

Mask rules (as torch.nn): a boolean mask is ``True`` where a query may *not* attend a key; a float
mask is added to the scores. ``attn_mask`` is ``(T, S)``, ``(B, T, S)`` or ``(B, H, T, S)`` (a 4-D mask
may use size 1 for ``B`` or ``H`` to broadcast); ``key_padding_mask`` is ``(B, S)`` (``True`` = padding).
``is_causal`` forbids keys ``j > i + (S - T)``: aligned to the bottom-right corner so that the newest
``T`` queries after a KV cache of ``S - T`` keys see the whole past.

A query row whose keys are *all* masked has no well-defined softmax (``0 / 0``). We never compute that
NaN: such rows are unmasked before the softmax (so the arithmetic stays finite, gradients too) and their
output and weights are then set to zero.

NaN *values* are not a mask matter: they propagate as in torch's math path, so a diverging model shows
its NaN instead of losing it inside attention. A row whose query is NaN, or that attends (unmasked) a
NaN value, comes out NaN from both paths (the fused CPU kernel alone would turn a NaN query into finite
numbers, so the fast path marks those rows itself: no host sync, one pass over ``q``). A NaN key that a
row attends makes the row NaN too, except in the fast path when *every* key the row attends is NaN (the
kernel drops them); in a model a NaN key comes with the NaN query and value of its position, which are
caught. All-masked rows stay zero whatever their inputs. A NaN only in *masked* keys/values may still
reach a row through ``0 * NaN`` (it does in torch too): nothing is promised there.

Dropout on the weights (training): both paths keep each weight with probability ``1 - p`` and scale it by
``1 / (1 - p)``. On the CPU a call with dropout takes the reference path (torch has no fused CPU kernel with
dropout, and its math fallback is slower than the reference path with attnkit's cheaper mask, ``dropout.py``).

Grouped-query attention (Ainslie et al., 2023): with ``K < H`` key/value head ``g`` serves query heads
``g * (H // K) ... (g + 1) * (H // K) - 1`` (query head ``h`` uses kv head ``h // (H // K)``, as Llama).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnkit.checks import check_probability, is_number, no_host_reads

from .dropout import dropout
from .masks import causal_mask


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, enable_gqa: bool) -> tuple[int, int, int, int, int, int]:
    """Validate q/k/v and return ``(B, H, K, T, S, D)``."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, heads, length, head_dim), got shape {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype: expected {q.dtype} (q), got k {k.dtype}, v {v.dtype}")
    if not q.is_floating_point():
        raise ValueError(f"q, k, v must be floating point, got {q.dtype}")
    B, H, T, D = q.shape
    Bk, K, S, Dk = k.shape
    if Bk != B or v.shape[0] != B:
        raise ValueError(f"q, k, v must share the batch size B = {B} (q), got k {Bk}, v {v.shape[0]}")
    if Dk != D:
        raise ValueError(f"k head dim must equal q head dim D = {D}, got {Dk}")
    if v.shape[1] != K or v.shape[2] != S:
        raise ValueError(f"v must have shape (B, K, S, Dv) = ({B}, {K}, {S}, Dv), got {tuple(v.shape)}")
    if K != H:
        if not enable_gqa:
            raise ValueError(f"k/v have K = {K} heads but q has H = {H}; pass enable_gqa=True for grouped-query "
                             f"attention (or give k/v {H} heads)")
        if K == 0 or H % K != 0:
            raise ValueError(f"grouped-query attention needs H % K == 0, got H = {H}, K = {K}")
    return B, H, K, T, S, D


def check_options(is_causal: bool, dropout_p: float, scale: float | None) -> None:
    """``is_causal`` a bool, ``dropout_p`` in [0, 1), ``scale`` None or a finite number (plain comparisons only, so
    that ``torch.compile`` traces it without a graph break; NaN fails them)."""
    if not isinstance(is_causal, bool):
        raise ValueError(f"is_causal must be a bool, got {is_causal!r} ({type(is_causal).__name__})")
    check_probability("dropout_p", dropout_p)
    if scale is not None and not (is_number(scale) and -math.inf < scale < math.inf):
        raise ValueError(f"scale must be None (1 / sqrt(D)) or a finite number, got {scale!r}")


def _check_mask_dtype(mask: torch.Tensor, name: str) -> None:
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise ValueError(f"{name} must be bool (True = may not attend) or floating point (added), got {mask.dtype}")


def check_masks(
    attn_mask: torch.Tensor | None, key_padding_mask: torch.Tensor | None, B: int, H: int, T: int, S: int
) -> None:
    """Raise ``ValueError`` unless ``attn_mask`` and ``key_padding_mask`` (each may be ``None``) are bool or float
    masks of the shapes :func:`merge_masks` takes. (``MultiHeadAttention`` checks them before it writes a KV cache.)

    Shape:
        attn_mask: ``(T, S)``, ``(B, T, S)`` or ``(B|1, H|1, T, S)``; key_padding_mask: ``(B, S)``.
    """
    if attn_mask is not None:
        _check_mask_dtype(attn_mask, "attn_mask")
        shape = tuple(attn_mask.shape)
        if attn_mask.dim() == 2:
            if shape != (T, S):
                raise ValueError(f"2-D attn_mask must have shape (T, S) = {(T, S)}, got {shape}")
        elif attn_mask.dim() == 3:
            if shape != (B, T, S):
                raise ValueError(f"3-D attn_mask must have shape (B, T, S) = {(B, T, S)}, got {shape}")
        elif attn_mask.dim() == 4:
            ok = shape[0] in (1, B) and shape[1] in (1, H) and shape[2:] == (T, S)
            if not ok:
                raise ValueError(f"4-D attn_mask must have shape (B, H, T, S) = {(B, H, T, S)} "
                                 f"(B or H may be 1), got {shape}")
        else:
            raise ValueError(f"attn_mask must be 2-D (T, S), 3-D (B, T, S) or 4-D (B, H, T, S), "
                             f"got {attn_mask.dim()}-D shape {shape}")
    if key_padding_mask is not None:
        _check_mask_dtype(key_padding_mask, "key_padding_mask")
        if tuple(key_padding_mask.shape) != (B, S):
            raise ValueError(f"key_padding_mask must have shape (B, S) = {(B, S)}, got {tuple(key_padding_mask.shape)}")


def merge_masks(
    attn_mask: torch.Tensor | None,
    key_padding_mask: torch.Tensor | None,
    B: int,
    H: int,
    T: int,
    S: int,
    dtype: torch.dtype,
) -> torch.Tensor | None:
    """Validate ``attn_mask`` and ``key_padding_mask`` and merge them into one 4-D mask.

    The result broadcasts to ``(B, H, T, S)`` without being expanded (a padding mask stays
    ``(B, 1, 1, S)``). It is bool (``True`` = may not attend) when every input is bool, otherwise
    additive float in ``dtype`` (bool entries become ``-inf``). Returns ``None`` when both are ``None``.
    A float mask is used in ``dtype``, the query's, as torch's fused attention requires: in float16 a value below
    its range (e.g. ``-7e4``, or float32's ``finfo.min``) becomes ``-inf``, so a row of them is fully masked (zeros).

    Shape:
        attn_mask: ``(T, S)``, ``(B, T, S)`` or ``(B|1, H|1, T, S)``; key_padding_mask: ``(B, S)``;
        returns ``(B|1, H|1, T, S)``.
    """
    check_masks(attn_mask, key_padding_mask, B, H, T, S)
    masks = []
    if attn_mask is not None:
        if attn_mask.dim() == 2:
            attn_mask = attn_mask[None, None]  # (1, 1, T, S)
        elif attn_mask.dim() == 3:
            attn_mask = attn_mask[:, None]  # (B, 1, T, S)
        masks.append(attn_mask)
    if key_padding_mask is not None:
        masks.append(key_padding_mask[:, None, None, :])  # (B, 1, 1, S)
    if not masks:
        return None
    if all(m.dtype == torch.bool for m in masks):
        out = masks[0]
        for m in masks[1:]:
            out = out | m
        return out
    # At least one float mask: work additively (bool True -> -inf, float as given), summing the terms.
    out = None
    for m in masks:
        if m.dtype == torch.bool:
            add = torch.zeros(m.shape, dtype=dtype, device=m.device).masked_fill_(m, float("-inf"))
        else:
            add = m.to(dtype)
        out = add if out is None else out + add
    return out


def _build_mask(
    attn_mask: torch.Tensor | None,
    key_padding_mask: torch.Tensor | None,
    is_causal: bool,
    B: int,
    H: int,
    T: int,
    S: int,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Merge every mask (causal included) and find the fully masked query rows.

    Returns ``(mask, dead)``: ``mask`` as :func:`merge_masks` with the dead rows *unmasked*, and
    ``dead`` a bool ``(B|1, H|1, T, 1)`` marking those rows (``None`` when there are none).
    """
    mask = merge_masks(attn_mask, key_padding_mask, B, H, T, S, dtype)
    if is_causal:
        causal = causal_mask(T, S, device=device)[None, None]  # (1, 1, T, S)
        if mask is None:
            mask = causal
        elif mask.dtype == torch.bool:
            mask = mask | causal
        else:
            mask = mask.masked_fill(causal, float("-inf"))
    if mask is None:
        return None, None
    if mask.dtype == torch.bool:
        dead = mask.all(dim=-1, keepdim=True)  # (B|1, H|1, T, 1)
    else:
        dead = torch.isneginf(mask).all(dim=-1, keepdim=True)
    # (Under no_host_reads() the host-side test would break the graph or wait for the GPU: dead rows are always handled.)
    if not no_host_reads() and not bool(dead.any()):
        return mask, None
    # Unmask the dead rows so the softmax sees finite numbers; their result is zeroed afterwards.
    if mask.dtype == torch.bool:
        mask = mask & ~dead
    else:
        mask = mask.masked_fill(dead, 0.0)
    return mask, dead


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    key_padding_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention spelled out: scores, mask, softmax, (dropout), weighted sum. Returns the weights too.

    ``dropout_p`` is applied whenever it is > 0 (functional API: the caller passes 0 in eval mode).
    The returned weights are the ones actually used, i.e. after dropout.

    Shape:
        q ``(B, H, T, D)``, k ``(B, K, S, D)``, v ``(B, K, S, Dv)`` ->
        out ``(B, H, T, Dv)``, weights ``(B, H, T, S)``.
    """
    B, H, K, T, S, D = _check_qkv(q, k, v, enable_gqa)
    check_options(is_causal, dropout_p, scale)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    mask, dead = _build_mask(attn_mask, key_padding_mask, is_causal, B, H, T, S, q.dtype, q.device)

    if K != H:  # GQA: give every query head its (shared) kv head
        group = H // K
        k = k.repeat_interleave(group, dim=1)  # (B, H, S, D)
        v = v.repeat_interleave(group, dim=1)  # (B, H, S, Dv)

    # float16 scores above 65504 would be inf (then NaN) where the fused kernels, accumulating in float32, are
    # finite: made in float32 for float16 (bfloat16 has float32's range)
    wide = torch.float32 if q.dtype == torch.float16 else q.dtype
    scores = torch.matmul(q.to(wide), k.to(wide).transpose(-2, -1)) * scale  # (B, H, T, S)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(mask, float("-inf"))
        else:  # added in at least float32: float16 scores plus its finfo.min (HF's masks) would overflow to -inf
            scores = scores.to(torch.promote_types(scores.dtype, torch.float32)) + mask
    # softmax in at least float32 (half-precision scores lose too much), then back to the input dtype
    weights = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(q.dtype)
    if dead is not None:
        weights = weights.masked_fill(dead, 0.0)  # rows with no allowed key attend nothing
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)  # attnkit's cheaper mask (dropout.py), unbiased like F.dropout
    out = torch.matmul(weights, v)  # (B, H, T, Dv)
    if dead is not None:
        out = out.masked_fill(dead, 0.0)  # a NaN value times a zero weight must not revive a dead row
    return out, weights


def _propagate_nan_queries(out: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Rows of ``out`` whose query holds a NaN become NaN (the fused kernel may drop a NaN query).

    Adds ``0 * sum(q)`` per row: exactly zero for a finite query, NaN for a NaN one. Two small ops for
    float32 (a decoding step pays ~2 us per layer, not the ~0.5 ms of ``isnan(q).any(-1)``, whose boolean
    reduction is slow on CPU); half precision sums in float32 so a large finite query cannot overflow.

    Shape:
        out ``(B, H, T, Dv)``, q ``(B, H, T, D)`` -> ``(B, H, T, Dv)``.
    """
    if q.dtype == out.dtype == torch.float32:
        return out.add(q.sum(dim=-1, keepdim=True), alpha=0.0)  # (B, H, T, 1) broadcast over Dv
    return out + (q.sum(dim=-1, keepdim=True, dtype=torch.float32) * 0.0).to(out.dtype)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    key_padding_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
    enable_gqa: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scaled dot-product attention with torch.nn mask rules.

    With ``need_weights=True`` this is :func:`reference_attention`. Otherwise the fused
    ``torch.nn.functional.scaled_dot_product_attention`` does the work (its boolean masks mean
    "may attend", the opposite of ours, so they are inverted here) and the weights are ``None``.
    Both paths return zeros for query rows with no allowed key and propagate NaN alike (see the module doc).

    Shape:
        q ``(B, H, T, D)``, k ``(B, K, S, D)``, v ``(B, K, S, Dv)``;
        attn_mask ``(T, S)`` / ``(B, T, S)`` / ``(B, H, T, S)``; key_padding_mask ``(B, S)`` ->
        out ``(B, H, T, Dv)``, weights ``(B, H, T, S)`` or ``None``.
    """
    if need_weights:
        return reference_attention(q, k, v, attn_mask, key_padding_mask, is_causal, dropout_p, scale, enable_gqa)
    check_options(is_causal, dropout_p, scale)
    if dropout_p > 0.0 and q.device.type == "cpu":
        # torch has no fused CPU kernel with dropout: its math fallback draws the mask with bernoulli_ and scales
        # q and k separately; the reference path with attnkit's dropout made a translation training step ~5%
        # faster on an AMD EPYC (docs/experiments/cpu_speed.md, "Attention dropout on the CPU").
        out, _ = reference_attention(q, k, v, attn_mask, key_padding_mask, is_causal, dropout_p, scale, enable_gqa)
        return out, None
    B, H, K, T, S, D = _check_qkv(q, k, v, enable_gqa)
    gqa = K != H
    if is_causal and T == 1:
        is_causal = False  # one query (a decoding step): bottom-right alignment lets it see every key

    if attn_mask is None and key_padding_mask is None and (not is_causal or S == T):
        # Nothing to merge: let the kernel build the (square) causal mask itself, no O(T*S) tensor here.
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                                             enable_gqa=gqa)
        return _propagate_nan_queries(out, q), None

    mask, dead = _build_mask(attn_mask, key_padding_mask, is_causal, B, H, T, S, q.dtype, q.device)
    if mask.dtype == torch.bool:
        mask = ~mask  # torch's fused kernel: True = may attend
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale, enable_gqa=gqa)
    out = _propagate_nan_queries(out, q)
    if dead is not None:
        out = out.masked_fill(dead, 0.0)  # (B, H, T, Dv)
    return out, None
