"""What a traced forward call costs: mult-adds of its matrix products and the bytes of tensors.

Axis legend: ``B`` batch, ``H`` query heads, ``T`` query positions, ``S`` key positions, ``D`` head dim of
queries and keys, ``Dv`` head dim of values.

Mult-adds are counted on the operations PyTorch really runs (a ``TorchDispatchMode`` sees every aten call), so
``F.linear`` inside a module's own code, ``torch.matmul`` in a custom layer and the fused attention kernel are
all counted, and nothing is estimated from a module's type:

* matrix products, batched products and convolutions: half the FLOPs of torch's own table
  (``torch.utils.flop_counter``), i.e. one multiply-add per weight per output row for a Linear
  (``rows · in · out``; the bias is an addition, not counted);
* fused attention (``scaled_dot_product_attention``'s kernels): ``B·H·T·S·(D + Dv)``, the scores ``q·kᵀ``
  plus the weighted sum of ``v``, counted whole even where a causal mask hides about half of the scores;
* products of 8-bit weights (``_int_mm``, ``_weight_int8pack_mm``, ``quantized::linear_*``): ``rows · in · out``
  for the rows the kernel multiplies (``QuantizedLinear``'s ``two_digit`` mode multiplies two digit rows per
  input row and one pin row, about twice the Linear it replaces; where the CPU's int8 kernel is not exact it
  runs the dequantized ``F.linear``, counted as a Linear);
* element-wise work (norms, activations, softmax, rotary, residual additions) and lookups: none.

An operation that looks like a product but is in neither list (e.g. ``nn.MultiheadAttention``'s fused
inference kernel) is reported by name in :attr:`MultAddCounter.uncounted`, so a total is never silently short.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

__all__ = ["MultAddCounter", "tensor_bytes", "human_bytes", "human_count"]

# Names of operations that multiply matrices but that the counter has no formula for (checked by substring).
_PRODUCT_WORDS = ("attention", "conv", "rnn", "lstm", "gru", "matmul", "einsum", "mm", "linear")
# Integer-weight products ``x (..., in) -> (..., out)`` (attnkit's QuantizedLinear runs these).
_INT8_PRODUCTS = ("aten._int_mm", "aten._weight_int8pack_mm")


def _attention_mult_adds(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> int:
    """Scores and weighted sum of one fused attention call.

    Shape: query ``(B, H, T, D)``, key ``(B, K, S, D)``, value ``(B, K, S, Dv)`` (any ``K`` that divides ``H``).
    """
    return math.prod(query.shape[:-1]) * int(key.shape[-2]) * (int(query.shape[-1]) + int(value.shape[-1]))


def _is_packing(name: str) -> bool:
    """Weight packing for the quantized kernels (``quantized.linear_prepack``): no product."""
    return "prepack" in name or "unpack" in name


def _is_int8_product(name: str) -> bool:
    return name in _INT8_PRODUCTS or (name.startswith("quantized.") and "linear" in name and not _is_packing(name))


def _is_fused_attention(name: str) -> bool:
    """``aten._scaled_dot_product_*`` forward kernels: (query, key, value, ...) in the ``(B, H, T, D)`` layout."""
    return name.startswith("aten._scaled_dot_product_") and "backward" not in name


class MultAddCounter(TorchDispatchMode):
    """Counts the mult-adds of every aten call made while active and hands each count to ``on_count``.

    ``uncounted`` maps the names of product-like operations without a formula to how often they ran.
    """

    def __init__(self, on_count: Callable[[int], None]) -> None:
        super().__init__()
        self.on_count = on_count
        self.uncounted: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        name = str(packet)
        if _is_fused_attention(name):
            self.on_count(_attention_mult_adds(*args[:3]))
        elif packet in flop_registry:
            self.on_count(int(flop_registry[packet](*args, **kwargs, out_val=out)) // 2)
        elif _is_int8_product(name) and isinstance(out, torch.Tensor):
            self.on_count(args[0].numel() * int(out.shape[-1]))  # rows · in · out
        elif any(word in name for word in _PRODUCT_WORDS) and "upsample" not in name and not _is_packing(name):
            self.uncounted[name] += 1
        return out


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the given tensors' elements (``numel · element_size`` each)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def human_bytes(n: int) -> str:
    """``704 B``, ``2.82 kB``, ``1.41 MB``, ``3.10 GB`` (powers of 1000, as torchinfo)."""
    if n < 1000:
        return f"{n} B"
    value, unit = float(n), "B"
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000.0
        if round(value, 2) < 1000.0:  # as printed: 999,999 B is 1.00 MB, not 1000.00 kB
            break
    return f"{value:.2f} {unit}"


def human_count(n: int) -> str:
    """``12,345`` below a million; ``12.35 M``, ``3.10 G`` above (the exact number stays in the JSON)."""
    if n < 1_000_000:
        return f"{n:,}"
    value, unit = n / 1e6, "M"
    for bigger in ("G", "T"):
        if round(value, 2) < 1000.0:  # as printed: 999,999,999 is 1.00 G, not 1000.00 M
            break
        value, unit = value / 1000.0, bigger
    return f"{value:.2f} {unit}"


def row_bytes(value: Any) -> int:
    """Bytes of every tensor in a (possibly nested tuple/list of) forward output(s)."""
    if isinstance(value, torch.Tensor):
        return tensor_bytes([value])
    if isinstance(value, (tuple, list)):
        return sum(row_bytes(v) for v in value)
    return 0
