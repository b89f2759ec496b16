"""A faster weight layout for token-by-token decoding on CPU (same values, same shapes).

Axis legend: ``N`` output features, ``K`` input features (``nn.Linear`` weights are ``(N, K)``),
``M`` rows of the input (1 per sequence in a decoding step).

Why it helps: a decoding step multiplies one row ``x (1, K)`` by every weight matrix, so it is
*memory bound*: the time is the time to stream the weights from memory. ``nn.Linear`` computes
``x @ W.T`` with ``W`` stored row-major ``(N, K)``. For ``M = 1`` the BLAS kernel then walks ``W`` as a
matrix-vector product "transposed", which on this class of CPU reads memory markedly slower than the
plain product ``x @ Wt`` with ``Wt = W.T`` stored contiguously ``(K, N)`` (the layout GPT-2's original
``Conv1D`` uses). That holds for square and *widening* matrices (``N >= K``); for *narrowing* ones
(``N < K``, e.g. the MLP's output projection 3072 -> 768) the row-major kernel is the faster one.
``docs/experiments/cpu_speed.md`` has the measurements (one row, one thread): the 50257 x 768 GPT-2 head 13.6 ms
row-major against 7.7 ms transposed, 3072 x 768 0.94 against 0.61 ms, but 768 x 3072 0.57 against 0.68 ms.

:func:`use_decoding_layout` re-stores every widening or square ``nn.Linear`` weight in place as the
transpose of a contiguous ``(K, N)`` buffer, and keeps (or makes) narrowing ones contiguous ``(N, K)``: the parameter keeps its shape ``(N, K)`` and its values (only its strides
change, to ``(1, N)``), so ``F.linear`` -- and everything else -- works unchanged and gives the same
numbers (up to float summation order), and ``W.T`` is now the contiguous matrix the fast kernel wants.
Tied weights stay tied (the shared tensor is converted once; an embedding that shares it still looks
rows up correctly, just with a stride).

It is opt-in and explicit: the model's parameters are not contiguous afterwards, so code that needs
contiguous tensors (``safetensors.save_file``, some exporters) must call ``.contiguous()`` -- attnkit's
own checkpoint and export code does. :func:`use_training_layout` converts back.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["use_decoding_layout", "use_training_layout", "is_decoding_layout"]


def _linear_weights(model: nn.Module) -> list[nn.Parameter]:
    """Every ``nn.Linear`` weight of ``model`` once (tied weights appear once)."""
    seen: set[int] = set()
    out = []
    for module in model.modules():
        if isinstance(module, nn.Linear) and id(module.weight) not in seen:
            seen.add(id(module.weight))
            out.append(module.weight)
    return out


def _is_transposed_storage(w: torch.Tensor) -> bool:
    """``w (N, K)`` is the transpose of a contiguous ``(K, N)`` tensor."""
    return w.dim() == 2 and w.t().is_contiguous() and not (w.shape[0] == 1 or w.shape[1] == 1)


def _wants_transposed(w: torch.Tensor) -> bool:
    """Whether the decoding layout of ``w (N, K)`` is transposed: square or widening (``N >= K``)."""
    return w.shape[0] >= w.shape[1]


def _in_decoding_layout(w: torch.Tensor) -> bool:
    return _is_transposed_storage(w) if _wants_transposed(w) else w.is_contiguous()


@torch.no_grad()
def use_decoding_layout(model: nn.Module) -> int:
    """Store every square or widening ``nn.Linear`` weight of ``model`` transposed (``(K, N)`` contiguous) and
    every narrowing one (``N < K``) contiguous ``(N, K)``, in place.

    Values, shapes, parameter identity and weight tying are kept; only the memory layout changes.
    Returns the number of weight tensors converted (ones already in that layout are skipped).

    Shape:
        each weight stays ``(N, K)``; the strides of a transposed one become ``(1, N)``.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"use_decoding_layout expects an nn.Module, got {type(model).__name__}")
    n = 0
    for w in _linear_weights(model):
        if _in_decoding_layout(w) or w.shape[0] == 1 or w.shape[1] == 1:
            continue
        if _wants_transposed(w):
            w.data = w.data.t().contiguous().t()  # (N, K) view of a contiguous (K, N) buffer
        else:
            w.data = w.data.contiguous()  # (N, K) row-major
        n += 1
    return n


@torch.no_grad()
def use_training_layout(model: nn.Module) -> int:
    """Undo :func:`use_decoding_layout`: make every ``nn.Linear`` weight contiguous ``(N, K)`` again.

    Returns the number of weight tensors converted.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"use_training_layout expects an nn.Module, got {type(model).__name__}")
    n = 0
    for w in _linear_weights(model):
        if not w.is_contiguous():
            w.data = w.data.contiguous()
            n += 1
    return n


def is_decoding_layout(model: nn.Module) -> bool:
    """Whether every (non-degenerate) ``nn.Linear`` weight of ``model`` is stored as :func:`use_decoding_layout`
    stores it, and at least one of them transposed (so a model of only narrowing layers is never "converted")."""
    weights = [w for w in _linear_weights(model) if w.shape[0] > 1 and w.shape[1] > 1]
    return (all(_in_decoding_layout(w) for w in weights)
            and any(_is_transposed_storage(w) for w in weights))
