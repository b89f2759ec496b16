"""Rotary position embeddings (RoPE, Su et al. 2021) in the Hugging Face Llama convention.

Axis legend: ``B`` batch, ``H`` heads, ``T`` sequence length, ``D`` head dim (even); in :meth:`RotaryEmbedding.shift`
``K`` key/value heads and ``S`` cached key positions.

RoPE encodes a position by *rotating* query and key vectors: channel pairs are rotated by an angle
proportional to the position, so the dot product ``q_m . k_n`` depends only on ``m - n``.

Convention (HF Llama "rotate_half"): channel ``i`` is paired with channel ``i + D/2`` and the pair
``(x_i, x_{i+D/2})`` is rotated by ``pos * theta ** (-2i / D)``:

    out = x * cos + rotate_half(x) * sin,   rotate_half([a, b]) = [-b, a],
    cos = cos([f, f]), sin = sin([f, f]),   f_i = pos * theta ** (-2i / D),  i < D/2

(Meta's original code pairs *adjacent* channels instead; checkpoints convert by permuting q/k rows.)
"""

from __future__ import annotations

import torch
from torch import nn

from attnkit.checks import check_float, check_int, is_int, no_host_reads


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[a, b] -> [-b, a]`` on the last axis split in two halves.

    Shape:
        ``(*, D)`` -> ``(*, D)``.
    """
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat((-b, a), dim=-1)


class RotaryEmbedding(nn.Module):
    """Applies RoPE to a ``(B, H, T, D)`` tensor at the given positions.

    The cos/sin tables (non-persistent buffers ``cos_cached``/``sin_cached``, ``(length, D)``) are
    computed in float32 like HF Llama and grow on demand past ``max_len``.

    Args:
        head_dim: ``D`` (must be even).
        max_len: initial table length.
        theta: the base of the frequencies (10000 in the paper, 500000 in Llama 3).
    """

    def __init__(self, head_dim: int, *, max_len: int = 2048, theta: float = 10000.0):
        super().__init__()
        if not is_int(head_dim) or head_dim <= 0 or head_dim % 2 != 0:
            raise ValueError(f"RotaryEmbedding head_dim must be a positive even int, got {head_dim!r}")
        check_int("RotaryEmbedding max_len", max_len, minimum=1)
        self.head_dim = head_dim
        # theta <= 0 would make every angle NaN (0 ** -x = inf, a negative base to a fractional power = NaN)
        self.theta = check_float("RotaryEmbedding theta", theta, low=0.0, low_inclusive=False)
        # inv_freq_i = theta ** (-2i / D), i < D/2, computed as HF does (int exponents -> float32)
        exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
        inv_freq = 1.0 / (self.theta ** exponents)  # (D/2,)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        cos, sin = self._tables(max_len)
        self.register_buffer("cos_cached", cos, persistent=False)
        self.register_buffer("sin_cached", sin, persistent=False)

    def _frequencies(self) -> torch.Tensor:
        """``inv_freq`` in at least float32: after ``.to(bfloat16)`` (or float16) the buffer holds a rounded copy,
        and angles of positions in the thousands computed in it are off by whole radians, so it is computed again.

        Shape:
            returns ``(D/2,)``.
        """
        if self.inv_freq.dtype in (torch.float32, torch.float64):
            return self.inv_freq
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device=self.inv_freq.device).float()
        return 1.0 / (self.theta ** (exponents / self.head_dim))

    def _tables(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = self._frequencies()
        positions = torch.arange(length, dtype=torch.int64, device=inv_freq.device).to(inv_freq.dtype)
        freqs = positions[:, None] * inv_freq[None, :]  # (L, D/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (L, D): the same angle for channels i and i + D/2
        return emb.cos(), emb.sin()

    def _ensure_length(self, length: int) -> None:
        current = self.cos_cached.shape[0]
        if length <= current:
            return
        cos, sin = self._tables(max(length, 2 * current))
        self.cos_cached = cos.to(self.cos_cached.dtype)
        self.sin_cached = sin.to(self.sin_cached.dtype)

    def cos_sin(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin at the given positions (in the tables' dtype).

        Shape:
            position_ids: ``(B, T)`` or ``(T,)`` -> cos, sin: ``(B, T, D)`` or ``(T, D)``.
        """
        if position_ids.is_floating_point() or position_ids.dtype == torch.bool:
            raise ValueError(f"position_ids must be an integer tensor, got {position_ids.dtype}")
        if no_host_reads():  # torch.compile / a GPU's updates: no host sync, so the table cannot grow here
            n = self.cos_cached.shape[0]
            torch._assert_async(((position_ids >= 0) & (position_ids < n)).all(),
                                f"under torch.compile position ids must be in [0, {n}) (the precomputed table)")
        elif position_ids.numel():
            lo, hi = int(position_ids.min()), int(position_ids.max())
            if lo < 0:
                raise ValueError(f"position_ids must be >= 0, got min {lo}")
            self._ensure_length(hi + 1)
        return self.cos_cached[position_ids], self.sin_cached[position_ids]

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Rotate every head of ``x`` by its token's position.

        ``position_ids`` may differ per batch row (left-padded batches, caches of different lengths).

        Shape:
            x: ``(B, H, T, D)``; position_ids: ``(B, T)`` or ``(T,)`` -> ``(B, H, T, D)``.
        """
        if x.dim() != 4 or x.shape[-1] != self.head_dim:
            raise ValueError(f"RotaryEmbedding expects x of shape (B, H, T, D={self.head_dim}), got {tuple(x.shape)}")
        B, _, T, _ = x.shape
        if position_ids.dim() == 1:
            if position_ids.shape[0] != T:
                raise ValueError(f"position_ids must have shape (T,) = ({T},) or (B, T) = ({B}, {T}), "
                                 f"got {tuple(position_ids.shape)}")
        elif position_ids.dim() == 2:
            if tuple(position_ids.shape) != (B, T) and tuple(position_ids.shape) != (1, T):
                raise ValueError(f"position_ids must have shape (B, T) = ({B}, {T}) or (T,), got {tuple(position_ids.shape)}")
        else:
            raise ValueError(f"position_ids must have shape (B, T) = ({B}, {T}) or (T,), got {tuple(position_ids.shape)}")
        cos, sin = self.cos_sin(position_ids.to(x.device))  # (B, T, D) or (T, D)
        if cos.dim() == 2:
            cos, sin = cos[None], sin[None]  # (1, T, D)
        cos = cos[:, None].to(x.dtype)  # (B|1, 1, T, D): broadcast over heads
        sin = sin[:, None].to(x.dtype)
        return x * cos + rotate_half(x) * sin

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, theta={self.theta}, length={self.cos_cached.shape[0]}"

    def shift(self, x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """Move already rotated vectors by ``delta`` positions (negative = earlier), one amount per batch row.

        RoPE rotations compose: rotating a key of position ``p`` by ``delta`` gives the key of position
        ``p + delta`` (up to float rounding). A KV cache that drops its oldest tokens uses this to renumber
        the kept keys without recomputing them (llama.cpp's context shift).

        Shape:
            x: ``(B, K, S, D)``; delta: ``(B,)`` integer -> ``(B, K, S, D)``.
        """
        if x.dim() != 4 or x.shape[-1] != self.head_dim:
            raise ValueError(f"RotaryEmbedding.shift expects x of shape (B, K, S, D={self.head_dim}), got {tuple(x.shape)}")
        if (delta.dim() != 1 or delta.shape[0] != x.shape[0] or delta.is_floating_point() or delta.is_complex()
                or delta.dtype == torch.bool):
            raise ValueError(f"delta must be an integer tensor of shape (B,) = ({x.shape[0]},), got "
                             f"{delta.dtype} {tuple(delta.shape)}")
        inv_freq = self._frequencies()
        freqs = delta.to(inv_freq.device, inv_freq.dtype)[:, None] * inv_freq[None, :]  # (B, D/2)
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, None, :]  # (B, 1, 1, D)
        return x * emb.cos().to(x.dtype) + rotate_half(x) * emb.sin().to(x.dtype)
