"""Argument checks shared across the package: each raises ``ValueError`` naming the expected and the actual value.

Configs validate their own fields (``__post_init__`` in ``models/configs.py``, ``training/config.py``,
``generation/config.py``); this module holds the checks that several public entry points repeat on their inputs.

Axis legend: B batch, L sequence length (``T`` for a decoder-only model's tokens).
"""

from __future__ import annotations

import torch

__all__ = ["INDEX_DTYPES", "check_token_ids"]

INDEX_DTYPES = (torch.int64, torch.int32)


def check_token_ids(ids: torch.Tensor, *, name: str, vocab_size: int, length_axis: str = "L",
                    range_label: str | None = None, vocab_name: str = "vocab_size") -> None:
    """A ``(B, L)`` tensor of int64/int32 token ids, non-empty, every id in ``[0, vocab_size)``.

    ``name`` is the argument's name in messages (``idx``, ``src``); ``length_axis`` names the second axis
    (``T`` or ``L``); ``range_label`` starts the out-of-range message (default ``"<name> token ids"``). Under
    ``torch.compile`` the range check runs on the device (no host sync) instead.

    Shape: ids ``(B, L)``.
    """
    axes = f"(B, {length_axis})"
    if not isinstance(ids, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of token ids with shape {axes}, got {type(ids).__name__}")
    if ids.dtype not in INDEX_DTYPES:
        raise ValueError(f"{name} must have dtype torch.int64 or torch.int32, got {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape {axes}, got {ids.dim()}-D shape {tuple(ids.shape)}")
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"{name} must have B >= 1 and {length_axis} >= 1, got shape {tuple(ids.shape)}")
    label = range_label if range_label is not None else f"{name} token ids"
    if torch.compiler.is_compiling():  # no host sync (a graph break) under torch.compile: check on the fly
        torch._assert_async(((ids >= 0) & (ids < vocab_size)).all(),
                            f"{label} must be in [0, {vocab_name}) = [0, {vocab_size})")
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{label} must be in [0, {vocab_name}) = [0, {vocab_size}), got id {bad}")
