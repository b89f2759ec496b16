"""Attention forward+backward time and peak memory against the sequence length.

Axis legend: ``B`` batch (1), ``H`` heads, ``T`` sequence length (queries = keys), ``D`` head dim.

For each ``T`` (512 ... 8192), causal self-attention on ``(B, H, T, D)`` fp32 inputs, forward then backward
with a fixed random output gradient:

* ``attnkit fast``: :func:`attnkit.modules.attention.scaled_dot_product_attention` (``need_weights=False``);
* ``torch sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` called directly;
* ``attnkit reference``: :func:`attnkit.modules.attention.reference_attention` (explicit ``(T, T)``
  scores and weights), only up to ``ref_max_len`` because its memory grows as ``T^2``.

Memory is the peak resident memory above the level before the call (inputs already allocated; the
gradients of q, k, v are freed before every call, so they are counted).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from attnkit.modules.attention import reference_attention, scaled_dot_product_attention

from .common import BenchResult, run_impls, seeded
from .harness import Impl


@dataclass
class AttnSizes:
    lengths: list[int] = field(default_factory=lambda: [512, 1024, 2048, 4096, 8192])
    batch_size: int = 1
    num_heads: int = 8
    head_dim: int = 64
    causal: bool = True
    ref_max_len: int = 4096  # the reference path needs ~ 5 * B*H*T^2*4 bytes: 2.5 GiB at T = 4096


def _fwd_bwd(fn, q, k, v, gout):
    def run() -> float:
        out = fn(q, k, v)
        out.backward(gout)
        q.grad = k.grad = v.grad = None  # keep nothing between calls: each starts from the same memory
        return 1.0

    return run


def run_attention(sizes: AttnSizes | None = None, *, rounds: int = 3, warmup: int = 1, progress=None,
                  min_time: float = 0.5) -> BenchResult:
    s = sizes or AttnSizes()
    res = BenchResult("attention", "Attention forward+backward (causal)", asdict(s))
    c = s.causal
    fns = {
        "attnkit fast": lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=c)[0],
        "torch sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=c),
        "attnkit reference": lambda q, k, v: reference_attention(q, k, v, is_causal=c)[0],
    }
    per_len = {}
    loads = []
    for T in s.lengths:
        g = seeded(T)
        shape = (s.batch_size, s.num_heads, T, s.head_dim)
        q, k, v = (torch.randn(shape, generator=g).requires_grad_() for _ in range(3))
        gout = torch.randn(shape, generator=g)
        names = ["attnkit fast", "torch sdpa"] + (["attnkit reference"] if T <= s.ref_max_len else [])
        impls = [Impl(n, _fwd_bwd(fns[n], q, k, v, gout), unit="calls") for n in names]
        sub = BenchResult("attention", f"T={T}", {})
        # a sample repeats the call for >= min_time seconds: at T = 512 one call takes ~15 ms
        run_impls(sub, impls, rounds=rounds, warmup=warmup, min_time=min_time,
                  progress=None if progress is None else (lambda msg, T=T: progress(f"T={T} {msg}")))
        loads += [sub.load_before, sub.load_after]
        per_len[T] = sub.results
        fast, ref = sub.results["attnkit fast"], sub.results["torch sdpa"]
        t_ratio = fast["seconds_per_unit"]["median"] / ref["seconds_per_unit"]["median"]
        m_ratio = (fast["peak_bytes"] / ref["peak_bytes"]) if fast["peak_bytes"] and ref["peak_bytes"] else None
        res.ratios[f"T={T} time attnkit fast / torch sdpa"] = t_ratio
        res.ratios[f"T={T} memory attnkit fast / torch sdpa"] = m_ratio
        # targets are "within 1.1x": expressed as sdpa/attnkit >= 1/1.1 so that "met" means measured >= target
        res.add_target(f"T={T} time: torch sdpa / attnkit fast", 1.0 / t_ratio, 1 / 1.1)
        if m_ratio is not None:
            res.add_target(f"T={T} memory: torch sdpa / attnkit fast", 1.0 / m_ratio, 1 / 1.1)
        del q, k, v, gout
    res.results = {f"T={T} {name}": summ for T, d in per_len.items() for name, summ in d.items()}
    res.load_before, res.load_after = loads[0], loads[-1]
    return res
