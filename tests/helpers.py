"""Helpers shared by the test suite (importable as ``helpers``: ``pythonpath = ["tests"]`` in pyproject.toml).

* :func:`spread_weights` -- redraw a model's parameters so that outputs depend strongly on every input: with the
  training init (std 0.02) logits and attention maps are nearly uniform, and a parity check would pass too easily.
* :data:`TOLERANCES` and :func:`assert_close` -- the suite's tolerance table: one named entry per kind of
  comparison instead of literal ``atol``/``rtol`` numbers scattered over the files.
"""

from __future__ import annotations

import torch

__all__ = ["spread_weights", "TOLERANCES", "assert_close"]


def spread_weights(model: torch.nn.Module, *, std: float = 0.3, seed: int = 0,
                   matrices_only: bool = False) -> torch.nn.Module:
    """Redraw parameters from a seeded ``N(0, std²)``; 1-D ``…weight`` parameters (norm gains) become
    ``1 + 0.1·N(0, 1)``. ``matrices_only`` redraws only the parameters with more than one axis. Returns ``model``."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if matrices_only:
                if p.dim() > 1:
                    p.copy_(torch.randn(p.shape, generator=g) * std)
                continue
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("weight") and p.dim() == 1:  # norm gains around 1
                p.copy_(1.0 + 0.1 * noise)
            else:
                p.copy_(noise * std)
    return model


# torch.testing.assert_close keyword arguments per kind of comparison.
TOLERANCES: dict[str, dict[str, float]] = {
    # mathematically equal float32 computations (another implementation, another summation order): torch.nn
    # parity, fast path against reference path, cached against uncached
    "float32": dict(rtol=1e-5, atol=1e-5),
    # against Hugging Face transformers' float32 models (more layers and vocabulary between the two sums)
    "hf_float32": dict(rtol=0.0, atol=1e-4),
    # the same computation replayed (resume, determinism): bit for bit
    "exact": dict(rtol=0.0, atol=0.0),
}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, kind: str) -> None:
    """``torch.testing.assert_close`` with the tolerances of ``TOLERANCES[kind]``."""
    if kind not in TOLERANCES:
        raise ValueError(f"kind must be one of {sorted(TOLERANCES)}, got {kind!r}")
    torch.testing.assert_close(actual, expected, **TOLERANCES[kind])
