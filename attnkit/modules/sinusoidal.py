"""Sinusoidal (fixed) positional encodings, "Attention Is All You Need" section 3.5.

Axis legend: ``B`` batch, ``T`` sequence length, ``C`` model width (``dim``).

For position ``pos`` and channel ``i``:

    PE[pos, i] = sin(pos / base ** (i / dim))         i even
    PE[pos, i] = cos(pos / base ** ((i - 1) / dim))   i odd

so channels ``2m`` and ``2m + 1`` share the frequency ``base ** (-2m / dim)``. An odd ``dim`` simply
ends with a sine channel.

Numerics follow the seeds exactly: the angle ``pos / base ** (i / dim)`` is computed in float64 (as
Python floats are), cast to the table dtype, and the sine/cosine is taken in that dtype. The tables
are therefore equal element by element to the seeds' loop, just built in one vectorised step.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnkit.checks import check_int, no_host_reads


def sinusoidal_table(seq_len: int, dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32,
                     device: torch.device | str | None = None) -> torch.Tensor:
    """The ``(seq_len, dim)`` table of sinusoidal position encodings.

    Shape:
        returns ``(T, C)`` with ``T = seq_len``, ``C = dim``.
    """
    if seq_len < 0 or dim <= 0:
        raise ValueError(f"sinusoidal_table needs seq_len >= 0 and dim > 0, got seq_len={seq_len}, dim={dim}")
    if not isinstance(base, (int, float)) or isinstance(base, bool) or not math.isfinite(base) or base <= 1:
        raise ValueError(f"sinusoidal_table needs a finite base > 1 (10000 in the paper), got {base!r}")
    # One divisor per channel, with Python's float64 power (as the seed does): channel i uses exponent
    # (i - i % 2) / dim, so the sine/cosine pair (2m, 2m + 1) shares a frequency. This is O(C) work.
    divisors = torch.tensor([base ** ((i - i % 2) / dim) for i in range(dim)], dtype=torch.float64, device=device)
    positions = torch.arange(seq_len, dtype=torch.float64, device=device)[:, None]  # (T, 1)
    angles = (positions / divisors).to(dtype)  # (T, C): float64 division, then cast like the seed
    table = torch.empty(seq_len, dim, dtype=dtype, device=device)
    table[:, 0::2] = torch.sin(angles[:, 0::2])
    table[:, 1::2] = torch.cos(angles[:, 1::2])
    return table


def positional_encoding(batch: int, seq_len: int, dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Seed-000 API: the table repeated over a batch.

    Shape:
        returns ``(B, T, C)``.
    """
    if batch < 0:
        raise ValueError(f"batch must be >= 0, got {batch}")
    return sinusoidal_table(seq_len, dim, dtype=dtype).unsqueeze(0).repeat(batch, 1, 1)


class SinusoidalPositionalEncoding(nn.Module):
    """Lookup into a cached sinusoidal table that grows on demand.

    The table is a non-persistent buffer ``pe`` (so it follows ``.to(device/dtype)`` but is not saved
    in checkpoints: it is a pure function of ``dim``). ``max_len`` is only the initial size: asking for
    a later position rebuilds a larger table (at least double the size). Where no tensor value may be read
    back to the host (:func:`~attnkit.checks.no_host_reads`: under ``torch.compile``, e.g. the compiled decoding
    step) the table cannot grow: call :meth:`reserve` first (``generate`` does so for the cache's length); a
    position past it then fails with the device's assert.

    Args:
        dim: model width ``C``.
        max_len: initial table length.
        base: the ``10000`` of the formula.

    Shape:
        pe: ``(max_len, C)``.
    """

    def __init__(self, dim: int, *, max_len: int = 5000, base: float = 10000.0):
        super().__init__()
        check_int("SinusoidalPositionalEncoding dim", dim, minimum=1)
        check_int("SinusoidalPositionalEncoding max_len", max_len, minimum=1)
        self.dim = dim
        self.base = base
        self.register_buffer("pe", sinusoidal_table(max_len, dim, base=base), persistent=False)

    def reserve(self, length: int) -> None:
        """Make the table hold positions ``0 .. length - 1`` (grown now, not inside a compiled graph)."""
        if length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        self._ensure_length(length)

    def _ensure_length(self, length: int) -> None:
        """Grow ``pe`` to at least ``length`` rows, keeping its device and dtype."""
        current = self.pe.shape[0]
        if length <= current:
            return
        new_len = max(length, 2 * current)
        # Build in float32 (as at construction) then convert, so the old rows keep their exact values.
        table = sinusoidal_table(new_len, self.dim, base=self.base, device=self.pe.device)
        self.pe = table.to(self.pe.dtype)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        """Encodings of arbitrary (non-negative) positions, e.g. ``(B, T)`` with left padding.

        Shape:
            position_ids: ``(*)`` integer -> ``(*, C)``.
        """
        if position_ids.is_floating_point() or position_ids.dtype == torch.bool:
            raise ValueError(f"position_ids must be an integer tensor, got {position_ids.dtype}")
        if position_ids.numel() == 0:
            return self.pe.new_zeros((*position_ids.shape, self.dim))
        if no_host_reads():  # no host sync (under torch.compile a graph break): the table cannot grow here
            n = self.pe.shape[0]
            torch._assert_async(((position_ids >= 0) & (position_ids < n)).all(),
                                f"position_ids must be in [0, {n}) here (SinusoidalPositionalEncoding.reserve)")
            return self.pe[position_ids]
        lo, hi = int(position_ids.min()), int(position_ids.max())
        if lo < 0:
            raise ValueError(f"position_ids must be >= 0, got min {lo}")
        self._ensure_length(hi + 1)
        return self.pe[position_ids]

    def forward_len(self, T: int) -> torch.Tensor:
        """Encodings of positions ``0 .. T-1``.

        Shape:
            returns ``(T, C)``.
        """
        if T < 0:
            raise ValueError(f"T must be >= 0, got {T}")
        self._ensure_length(T)
        return self.pe[:T]

    def extra_repr(self) -> str:
        return f"dim={self.dim}, length={self.pe.shape[0]}, base={self.base}"
