"""A compiled decoding step: ``torch.compile`` of one cached GPT forward, on shapes that never change.

Axis legend: ``B`` batch, ``S`` cache slots (``cache.max_len``), ``V`` vocabulary.

Why: at batch 1 a decoding step reads every weight once, so its matrix products are memory-bound and
cannot get faster; what is left is everything between them: ~300 small operators per token (norms, GELU,
residual adds, head split/merge, attention over the cache), each called from Python. On the benchmark
machine (``docs/experiments/cpu_speed.md``, "Session 4") that is 3-5 ms of a ~21 ms GPT-2-small step, more than the
same operators cost on their own, because the 500 MB of weights streamed between them evict the
interpreter's and the dispatcher's working set from the caches. Inductor fuses the element-wise work into a
few C++ loops, and its C++ wrapper (``cpp_wrapper``) calls the kernels without going back to Python.

Fixed shapes: a step writes its keys/values into the cache slot ``cache_position`` (a tensor) and attends
over all ``S`` slots with a mask (``GPT.forward(..., cache_position=)``), so step ``n`` and step ``n + 1``
look the same to the compiler: one compilation per ``(B, S)`` serves every step. Growing the cache by one
position per step instead would recompile every step or need dynamic shapes (measured slower than eager).

Costs: the first step compiles (about 30 s for GPT-2 small on the benchmark machine, 4-6 s once inductor's
on-disk cache holds the result; ``generate`` rounds
``S`` up to a multiple of :data:`SLOT_MULTIPLE` so nearby lengths share a compilation); inductor needs a C++
compiler; batch rows are not dropped when they finish (that would change ``B``). Used by
``generate(..., compile=True)``.

On a GPU the same fixed shapes allow one more step: ``mode="reduce-overhead"`` records each ``(B, S)`` step as
a CUDA graph and replays it with one launch (Hugging Face's static-cache ``generate`` compiles the same way).
"""

from __future__ import annotations

import torch
from torch import nn

from attnkit.modules.quantized_linear import QuantizedLinear

__all__ = ["SLOT_MULTIPLE", "RECOMPILE_LIMIT", "compiled_step", "check_compilable"]

SLOT_MULTIPLE = 16  # cache lengths are rounded up to this, so nearby lengths share one compilation
# (every step reads all S slots of keys and values: rounding to 64 instead cost GPT-2 small ~0.3 ms per step)
_FBGEMM_MODES = ("two_digit", "dynamic")  # QuantizedLinear modes whose weights are FBGEMM packed objects


def _step(model: nn.Module, idx: torch.Tensor, key_padding_mask: torch.Tensor | None,
          position_ids: torch.Tensor, cache, cache_position: torch.Tensor) -> torch.Tensor:
    """One decoding step: the next-token logits of the last position.

    Shape:
        idx ``(B, 1)``; key_padding_mask ``(B, S)`` or None; position_ids ``(B, 1)``; cache_position ``(1,)``
        -> logits ``(B, V)``.
    """
    logits = model(idx, key_padding_mask=key_padding_mask, position_ids=position_ids, cache=cache,
                   cache_position=cache_position)  # (B, 1, V)
    return logits[:, -1, :]  # (B, V)


_COMPILED: dict[bool, object] = {}  # with and without CUDA graphs: the compiled step, made on first use
RECOMPILE_LIMIT = 64  # distinct (model structure, B, S) combinations per process before it is an error


def uses_cuda_graphs(device: torch.device) -> bool:
    """Whether the compiled step on ``device`` is replayed as CUDA graphs: on CUDA devices."""
    return device.type == "cuda"


def _compiled_for(graphs: bool):
    """The compiled :func:`_step`: with ``graphs`` (CUDA) ``mode="reduce-overhead"`` (each ``(B, S)`` recorded
    once as a CUDA graph and replayed: at batch 1 a step is a few hundred small kernels, and launching them one by
    one from the host takes longer than running them), else with inductor's C++ wrapper."""
    if graphs not in _COMPILED:
        _COMPILED[graphs] = (torch.compile(_step, dynamic=False, fullgraph=True, mode="reduce-overhead") if graphs
                             else torch.compile(_step, dynamic=False, fullgraph=True, options={"cpp_wrapper": True}))
    return _COMPILED[graphs]


def _mark_static(cache) -> None:
    """Tell the compiler the cache's buffers keep their addresses (CUDA graphs then write into them in place
    instead of refusing a graph whose inputs it mutates); once per cache."""
    if getattr(cache, "_static_marked", False):
        return
    for layer in cache:
        for buffer in (layer.k_cache, layer.v_cache):
            torch._dynamo.mark_static_address(buffer)
    cache._static_marked = True


def compiled_step(model: nn.Module, idx: torch.Tensor, key_padding_mask: torch.Tensor | None,
                  position_ids: torch.Tensor, cache, cache_position: torch.Tensor) -> torch.Tensor:
    """:func:`_step` under ``torch.compile``: the next-token logits of one decoding step.

    Compiled on the first call for each model structure and ``(B, S)`` (the compiled function is made on
    first use: importing attnkit does not load the compiler). ``fullgraph``: a graph break would quietly
    put Python back between the kernels, so it is an error instead. Pass fresh ``(B, 1)`` tensors for
    ``idx`` and ``position_ids``: the compiled code is specialised on strides, and a slice of a growing
    tensor has new strides every step. On CUDA the step is replayed as a CUDA graph (:func:`_compiled_for`);
    the logits returned are then a copy, since the graph's own output is overwritten by the next step.

    Shape:
        idx ``(B, 1)``; key_padding_mask ``(B, S)`` or None; position_ids ``(B, 1)``; cache_position ``(1,)``
        -> logits ``(B, V)``.
    """
    graphs = uses_cuda_graphs(idx.device)
    fn = _compiled_for(graphs)
    if graphs:
        _mark_static(cache)
        torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs are no longer read
    # dynamo's default allows 8 compilations per function; a long-lived process may decode many shapes
    if torch._dynamo.config.recompile_limit >= RECOMPILE_LIMIT:  # (as inside generate's loop: no patch a step)
        logits = fn(model, idx, key_padding_mask, position_ids, cache, cache_position)
    else:
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            logits = fn(model, idx, key_padding_mask, position_ids, cache, cache_position)
    return logits.clone() if graphs else logits


def check_compilable(model: nn.Module) -> None:
    """Raise ``ValueError`` if ``generate(..., compile=True)`` cannot compile ``model``'s decoding step."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        params = {}
    if "cache_position" not in params:
        raise ValueError(f"compile=True needs a model whose forward takes cache_position (attnkit's GPT); "
                         f"{type(model).__name__}.forward does not")
    for name, module in model.named_modules():
        if isinstance(module, QuantizedLinear) and module.mode in _FBGEMM_MODES:
            raise ValueError(f"compile=True cannot trace int8 mode {module.mode!r} ({name}: FBGEMM's packed "
                             f"weights are opaque to torch.compile); use compile=False, or mode 'reference' "
                             f"or 'weight_only'")
