"""Learned absolute position embeddings (BERT, GPT-2, ViT): one trained vector per position.

Axis legend: ``T`` sequence length, ``C`` model width (``dim``).

Unlike the sinusoidal table, a learned table cannot be extended: positions ``>= max_len`` were never
trained, so asking for them is an error.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.checks import check_int, check_lookup_ids


class LearnedPositionalEmbedding(nn.Module):
    """A ``(max_len, dim)`` trainable table indexed by position.

    Args:
        max_len: number of positions (GPT-2's ``n_positions`` / ``block_size``).
        dim: model width ``C``.

    Shape:
        weight: ``(max_len, C)``, initialised N(0, 0.02^2) as GPT-2.
    """

    def __init__(self, max_len: int, dim: int):
        super().__init__()
        check_int("LearnedPositionalEmbedding max_len", max_len, minimum=1)
        check_int("LearnedPositionalEmbedding dim", dim, minimum=1)
        self.max_len = max_len
        self.dim = dim
        self.weight = nn.Parameter(torch.empty(max_len, dim))
        nn.init.normal_(self.weight, mean=0.0, std=0.02)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        """Embeddings of the given positions.

        Shape:
            position_ids: ``(*)`` integer in ``[0, max_len)`` -> ``(*, C)``.
        """
        check_lookup_ids(position_ids, what="position_ids", upper=self.max_len, upper_name="max_len")
        return F.embedding(position_ids, self.weight)

    def forward_len(self, T: int) -> torch.Tensor:
        """Embeddings of positions ``0 .. T-1``.

        Shape:
            returns ``(T, C)``.
        """
        if not 0 <= T <= self.max_len:
            raise ValueError(f"sequence length must be <= max_len = {self.max_len}, got {T}")
        return self.weight[:T]

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, dim={self.dim}"
