"""Dropout with a cheaper random mask on CPU.

Axis legend: ``*`` any shape (dropout is element-wise).

Reference path: ``torch.nn.functional.dropout`` (PyTorch draws its mask with ``bernoulli_``). Fast path
(:func:`dropout`, used by :class:`Dropout`): on the CPU, for the drop rates models use (``p`` in [1/256, 255/256]),
each element gets 16 random bits, four from every 64-bit draw of torch's generator (:func:`cpu_keep_mask`), and
is kept when they reach a threshold; ``p`` is rounded to a multiple of 1/65536 (by at most 0.2% of ``p`` or of
``1 - p``) and the kept elements are scaled by the inverse of the rounded keep rate, so the output's expectation is
exactly the input's.
Elsewhere (other rates, CUDA) the mask is ``uniform(0, 1) >= p`` scaled by ``1 / (1 - p)``. Either mask is built in
one float tensor that the multiplication's backward reuses; masks differ from ``F.dropout``'s (other random
streams). Cost, forward + backward of a (16, 32, 1024) fp32 tensor on one core: 4.2 ms with ``F.dropout``, 2.7 ms
with the ``uniform`` mask (2026-11-25, Intel Xeon with AMX); the 16-bit mask then took a seq2seq training step's
mask drawing from 149 to 31 ms per five steps on two threads, and the step 4.5-8.1% less time (2026-11-27, AMD
EPYC with AVX-512; docs/experiments/cpu_speed.md, "A dropout mask from 16 random bits"). The tests that the paths agree
(keep rate, scale, expectation, gradient; every lane unbiased) are in tests/modules/test_dropout.py.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Zero each element of ``x`` with probability ``p`` and scale the rest to keep the expectation (training only).

    Shape: ``(*) -> (*)``. ``p`` must be in [0, 1]; ``p = 1`` zeroes everything (as ``F.dropout``). On the CPU, for
    ``p`` in [1/256, 255/256] (every dropout rate models use), the mask is :func:`cpu_keep_mask`'s: ``p`` rounded to a
    multiple of 1/65536 (at most 0.2% of ``p`` or of ``1 - p``) and the kept elements scaled by the inverse of the
    rounded keep rate, so the expectation is exactly ``x``.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    if x.device.type == "cpu" and MIN_LANE_P <= p <= 1.0 - MIN_LANE_P:
        mask = cpu_keep_mask(x.shape, p)  # (*) float32: 0 or the scale
    else:  # float32 uniforms even for bf16/fp16 inputs: their coarse grid would bias the keep rate
        mask = torch.rand(x.shape, device=x.device, dtype=torch.float32).ge_(p).mul_(1.0 / (1.0 - p))  # (*)
    return x * (mask if x.dtype == torch.float32 else mask.to(x.dtype))


MIN_LANE_P = 1.0 / 256  # below it (or above 1 - it) the 16-bit grid would move p by more than 0.2%: float uniforms


def keep_threshold(p: float) -> tuple[int, float]:
    """The 16-bit threshold for dropout probability ``p`` in [1/256, 255/256] and the scale of a kept element.

    A random signed 16-bit value ``r`` keeps its element when ``r >= threshold``: ``32768 - threshold`` of the 65536
    values do, and the scale ``65536 / (32768 - threshold)`` is the inverse of that keep rate. The drop rate is ``p``
    rounded to the nearest multiple of 1/65536.
    """
    if not MIN_LANE_P <= p <= 1.0 - MIN_LANE_P:
        raise ValueError(f"a 16-bit dropout mask needs p in [{MIN_LANE_P}, {1.0 - MIN_LANE_P}], got {p}")
    threshold = round(p * 65536) - 32768
    return threshold, 65536.0 / (32768 - threshold)


def cpu_keep_mask(shape: torch.Size | tuple[int, ...], p: float) -> torch.Tensor:
    """A CPU dropout mask drawn with 16 random bits per element: ``(*)`` float32, 0 or :func:`keep_threshold`'s scale.

    torch's CPU generator (a Mersenne Twister) runs on one thread and makes 32 random bits per call, and ``rand``
    spends a call on every element. Here each 64-bit draw (two calls) gives four elements their 16 bits, which
    halves the generator's time. The draw is from the same global generator, so a mask is reproducible from
    ``torch.manual_seed`` and restored with the generator's state on resume.

    Shape:
        ``shape`` -> ``(*) = shape`` float32 on the CPU.
    """
    threshold, scale = keep_threshold(p)
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None)  # the full 64-bit range
    lanes = words.view(torch.int16)[:n].view(shape)  # (*) uniform on [-32768, 32767]
    return lanes.ge(threshold).to(torch.float32).mul_(scale)


class Dropout(nn.Dropout):
    """``nn.Dropout`` with the fast mask of :func:`dropout` (same arguments, same ``p``, same train/eval rule)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """:func:`dropout` in training mode, ``x`` itself in evaluation (``inplace=True``: ``nn.Dropout``'s own).

        Shape:
            ``(*)`` -> ``(*)``.
        """
        if self.inplace:
            return super().forward(x)
        return dropout(x, self.p, self.training)
