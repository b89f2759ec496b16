"""CUDA graphs for training: a micro-batch's forward, loss and backward recorded once per batch shape, then replayed.

Why. On a GPU an eager update is a few thousand kernel launches, each one a trip through Python, the
dispatcher and the driver. For a model the size of ``transformer-base`` on a modern GPU that host work takes
longer than the kernels themselves, so the GPU waits for the CPU (``docs/experiments/gpu.md``, "Host-bound on a
GPU": 8% busy at 16k tokens a batch). A CUDA graph records the kernels of one micro-batch once; replaying it
launches all of them with one call.

How (``torch.cuda.graph``, the "whole-network capture" of PyTorch's CUDA notes), for each batch shape:

* **Static inputs.** The first batch of a shape is copied to the device and its tensors become the graph's
  inputs; every later batch of that shape is copied into them (from pinned memory, without waiting) before
  the replay. Shapes are the shapes and dtypes of the batch's tensors: a task must make batches of a few
  fixed shapes (language modelling always does; translation with ``MTTask(shape_multiple=...)``), and more
  than :data:`MAX_SHAPES` shapes raise ``ValueError``.
* **Weight.** The graph backpropagates ``loss * w`` with ``w`` a 0-dim device tensor filled before each replay
  (the trainer's ``n_tokens / total``), so one recording serves every batch of the shape.
* **Gradients.** Every graph accumulates into the parameters' ``.grad`` tensors, which exist before the first
  recording (zeros) and are never replaced: the trainer zeroes them in place, and clipping and the optimizer
  step run eagerly on them (a few fused launches). A parameter that gets no gradient thus has a zero one.
* **Warm-up.** Before recording, the micro-batch runs twice eagerly on a side stream with ``w = 0`` (nothing
  reaches the gradients), as capture requires (lazy initialisations must not happen inside it).
* **Memory.** All graphs share one memory pool: replays run one after the other, each graph's only output
  (its loss) is copied out right after its replay, so no graph reads what another one left in the pool.
* **Randomness.** Dropout in a graph draws new numbers at every replay (torch registers its generator with
  the graph), continuing the same generator as the eager code.
* **Checks.** The models' id checks run inside the graph as device-side asserts (``checks_on_device``), so
  every replayed batch is still checked. Python checks of a task's ``loss`` run only when a shape is recorded.

Single process only (no DDP/FSDP), no ``torch.compile``, full precision or bf16 autocast (fp16's gradient
scaler reads the gradients back on the host).

There are no tensor axes in this file: batches are whatever the task makes.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import torch
from torch import nn

from attnkit.checks import checks_on_device
from .device import autocast_context
from .task import move_to_device

__all__ = ["MAX_SHAPES", "GraphedMicroBatch", "batch_tensors"]

MAX_SHAPES = 64
WARMUP_PASSES = 2


def batch_tensors(batch: Any) -> list[torch.Tensor]:
    """The tensors inside a (nested) tuple / list / dict batch, in a fixed order (that of ``move_to_device``)."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        return [t for v in batch.values() for t in batch_tensors(v)]
    if isinstance(batch, (list, tuple)):
        return [t for v in batch for t in batch_tensors(v)]
    return []


class _Recorded(NamedTuple):
    graph: torch.cuda.CUDAGraph
    inputs: list[torch.Tensor]   # the static device tensors the graph reads
    weight: torch.Tensor         # 0-dim, the factor of the loss in the backward pass
    loss: torch.Tensor           # 0-dim, what the last replay computed


class GraphedMicroBatch:
    """Runs ``loss_fn(model, batch)`` and its backward pass (weighted) as a CUDA graph recorded per batch shape.

    Args:
        model: the module being trained (on ``device``, in training mode); its trainable parameters get their
            ``.grad`` tensors before the first recording.
        loss_fn: ``(model, batch) -> (0-dim loss, n_tokens)``, e.g. a task's ``loss``; called only to record.
        device: a CUDA device.
        autocast: None or "bf16" (``device.autocast_context``, without its weight cache while recording).

    ``run(batch, weight)`` returns a copy of the micro-batch's loss (a 0-dim device tensor) and adds
    ``weight * d loss / d params`` to the parameters' gradients. ``shapes`` is the number of recorded graphs.
    """

    def __init__(self, model: nn.Module, loss_fn: Callable[[nn.Module, Any], tuple[torch.Tensor, Any]],
                 device: torch.device, autocast: str | None = None):
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, got {device}")
        if autocast not in (None, "bf16"):
            raise ValueError(f"CUDA graphs run in full precision or with autocast bf16, got autocast {autocast!r} "
                             f"(fp16's gradient scaler reads the gradients on the host)")
        self.model, self.loss_fn, self.device, self.autocast = model, loss_fn, device, autocast
        self._graphs: dict[tuple, _Recorded] = {}
        self._pool = torch.cuda.graph_pool_handle()
        self._stream = torch.cuda.Stream(device)

    @property
    def shapes(self) -> int:
        return len(self._graphs)

    def _forward_backward(self, batch: Any, weight: torch.Tensor) -> torch.Tensor:
        with autocast_context(self.autocast, self.device, cache=False), checks_on_device(True):
            loss, _ = self.loss_fn(self.model, batch)
        if not isinstance(loss, torch.Tensor) or loss.ndim != 0 or not loss.requires_grad:
            raise ValueError(f"the loss must be a 0-dim tensor with grad, got {loss!r:.60}")
        (loss * weight).backward()
        return loss.detach()

    def _record(self, batch: Any, key: tuple) -> _Recorded:
        if len(self._graphs) >= MAX_SHAPES:
            raise ValueError(f"CUDA graphs need batches of a few fixed shapes, got more than {MAX_SHAPES}; new shape "
                             f"{[s for s, _ in key]} (translation: MTTask shape_multiple, the CLI's --cuda-graphs)")
        for p in self.model.parameters():
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)  # the tensors every graph accumulates into, from now on
        static = move_to_device(batch, self.device)
        weight = torch.zeros((), device=self.device)
        current = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            for _ in range(WARMUP_PASSES):  # weight 0: the gradients are left as they are
                self._forward_backward(static, weight)
        current.wait_stream(self._stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, stream=self._stream):
            loss = self._forward_backward(static, weight)
        return _Recorded(graph, batch_tensors(static), weight, loss)

    def run(self, batch: Any, weight: float) -> torch.Tensor:
        """Copy ``batch`` (CPU tensors) into its shape's graph (recorded on first sight), replay it with ``weight``;
        return the loss (a copy, 0-dim, on the device)."""
        tensors = batch_tensors(batch)
        key = tuple((tuple(t.shape), t.dtype) for t in tensors)  # a graph per shape
        recorded = self._graphs.get(key)
        if recorded is None:
            recorded = self._graphs[key] = self._record(batch, key)
        for static, new in zip(recorded.inputs, tensors):
            static.copy_(new.pin_memory() if new.device.type == "cpu" else new, non_blocking=True)
        recorded.weight.fill_(weight)
        recorded.graph.replay()
        return recorded.loss.clone()
