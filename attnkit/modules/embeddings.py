"""Input embeddings: token lookup, plus a position signal, plus dropout (seed 004's TransformerEmbedding).

Axis legend: ``B`` batch, ``T`` sequence length, ``V`` vocabulary size, ``C`` model width (``dim``).

    x = dropout(tok(ids) * (sqrt(C) if scale else 1) + pos(positions))

The paper multiplies the token embeddings by ``sqrt(d_model)`` (section 3.4) so they are not drowned
by the unit-scale sinusoidal signal; GPT-style models do not (``scale=False``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.checks import check_choice, check_int, check_lookup_ids, check_probability

from .dropout import Dropout
from .learned_positions import LearnedPositionalEmbedding
from .sinusoidal import SinusoidalPositionalEncoding

POSITION_KINDS = ("sinusoidal", "learned", "none")


class TokenEmbedding(nn.Module):
    """A ``(V, C)`` lookup table with range checking.

    Args:
        vocab_size: ``V``.
        dim: ``C``.
        padding_idx: a token id whose row starts at zero and receives no gradient (as ``nn.Embedding``).

    Shape:
        weight: ``(V, C)``, initialised N(0, 1) as ``nn.Embedding``.
    """

    def __init__(self, vocab_size: int, dim: int, *, padding_idx: int | None = None):
        super().__init__()
        check_int("TokenEmbedding vocab_size", vocab_size, minimum=1)
        check_int("TokenEmbedding dim", dim, minimum=1)
        check_int("TokenEmbedding padding_idx", padding_idx, minimum=0, allow_none=True)
        if padding_idx is not None and padding_idx >= vocab_size:
            raise ValueError(f"padding_idx must be in [0, vocab_size) = [0, {vocab_size}), got {padding_idx}")
        self.vocab_size = vocab_size
        self.dim = dim
        self.padding_idx = padding_idx
        self.weight = nn.Parameter(torch.randn(vocab_size, dim))
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].zero_()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Look up token vectors.

        Shape:
            ids: ``(*)`` integer in ``[0, V)`` -> ``(*, C)``.
        """
        check_lookup_ids(ids, what="token ids", upper=self.vocab_size, upper_name="vocab_size")
        return F.embedding(ids, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.vocab_size}, {self.dim}, padding_idx={self.padding_idx}"


class TransformerEmbedding(nn.Module):
    """Token embedding (optionally × sqrt(C)) + position embedding, then dropout.

    Args:
        vocab_size: ``V``.
        dim: ``C``.
        max_len: initial (sinusoidal, grows) or maximum (learned) number of positions.
        position: ``"sinusoidal"``, ``"learned"`` or ``"none"`` (e.g. when attention uses RoPE).
        dropout: dropout probability on the sum.
        scale: multiply token vectors by ``sqrt(dim)`` (the paper's choice).
        padding_idx: passed to :class:`TokenEmbedding`.

    Submodules: ``tok`` (:class:`TokenEmbedding`), ``pos`` (positions or ``None``), ``dropout``.
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        *,
        max_len: int,
        position: str = "sinusoidal",
        dropout: float = 0.0,
        scale: bool = False,
        padding_idx: int | None = None,
    ):
        super().__init__()
        check_choice("position", position, POSITION_KINDS)
        check_probability("dropout", dropout)
        self.dim = dim
        self.position = position
        self.scale = scale
        self.tok = TokenEmbedding(vocab_size, dim, padding_idx=padding_idx)
        if position == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(dim, max_len=max_len)
        elif position == "learned":
            self.pos = LearnedPositionalEmbedding(max_len, dim)
        else:
            self.pos = None
        self.dropout = Dropout(dropout)

    def forward(self, ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Embed a batch of token ids.

        The sequence length is ``ids.shape[-1]`` (not the batch size, a seed-004 slip); ``position_ids``
        default to ``0 .. T-1`` and may be given per row (left padding, decoding with a cache).

        Shape:
            ids: ``(B, T)`` (or ``(T,)``); position_ids: ``(B, T)`` or ``(T,)`` -> ``(B, T, C)`` (or ``(T, C)``).
        """
        x = self.tok(ids)  # (B, T, C)
        if self.scale:
            x = x * math.sqrt(self.dim)
        if self.pos is not None:
            T = ids.shape[-1]
            if position_ids is None:
                pos = self.pos.forward_len(T)  # (T, C), broadcasts over B
            else:
                if tuple(position_ids.shape) not in ((T,), tuple(ids.shape)):
                    raise ValueError(f"position_ids must have shape (T,) = ({T},) or the ids' shape "
                                     f"{tuple(ids.shape)}, got {tuple(position_ids.shape)}")
                pos = self.pos(position_ids.to(ids.device))  # (B, T, C) or (T, C)
            x = x + pos.to(x.dtype)
        return self.dropout(x)
