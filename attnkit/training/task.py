"""The ``Task`` protocol: what the training loop needs from "language modelling" or "translation".

The trainer knows nothing about tokens, windows, source sentences or BLEU. It drives a *task*:

* ``batch(split, step) -> batch``: the batch number ``step`` of ``split`` ("train" or "valid"), a pure
  function of (task seed, split, step) and the task's state (see ``on_budget``). Nothing else (no iterator, no
  epoch counter) decides which data comes next, so a resumed run only needs the step number and the state in
  its checkpoint to continue with exactly the same data. Random draws come from the task's own generator
  (:func:`batch_seed`), never torch's global one: the trainer builds the next update's batches ahead, in another
  thread (``prefetch.py``), while dropout draws from the global generator.
  With gradient accumulation the trainer asks for micro-batch ``update * grad_accum + i``.
* ``loss(model, batch) -> (loss, n_tokens)``: a scalar loss tensor (the *mean* over the batch's
  predicted tokens, with autograd) and the number of tokens it averages over. The trainer weights
  micro-batches by ``n_tokens`` so accumulation equals one big batch even when padding makes micro-batches
  carry different numbers of tokens.
* ``evaluate(model, n_batches) -> dict[str, float]``: metrics on ``n_batches`` fixed validation batches, at
  least ``"loss"`` (the trainer logs them as ``valid_<name>``); e.g. ``{"loss", "ppl"}`` or also ``"bleu"``.
  Called in eval mode under ``torch.no_grad()``.
* ``state_dict() -> dict`` / ``load_state_dict(dict)``: JSON-able task state stored in every checkpoint
  (tasks use it to check that a resumed run sees the same data).
* optional ``eval_report() -> list[str]``: lines printed after each evaluation's metrics line (MTTask: its
  sample translations next to their references).
* optional ``count_tokens(batch) -> int``: the ``n_tokens`` that ``loss`` will return for ``batch``, counted on
  the host without running the model. Needed for CUDA graphs (``TrainConfig.cuda_graphs``), whose replayed
  updates do not call ``loss``; the batches' tensors must then come in a few fixed shapes.
* optional ``dynamic_shapes: bool``: True when the training batches change shape from one update to the next
  (MTTask's sentence batches); with ``TrainConfig.compile`` the loss is then compiled for any shape at once.
* optional ``on_budget(step, fraction) -> str | None``: called before every update with the update's first
  training batch index and the share of the run's budget used (``TrainConfig.budget_used``: steps or time,
  the clock all processes agree on, less compilation). A task whose data follow the budget (MTTask's annealing)
  decides here and must keep the decision in ``state_dict`` so that a resumed run draws the same batches; a
  returned line is printed, and tells the trainer that the batches it built ahead are stale (built again).

Implementations: :class:`attnkit.training.lm_task.LMTask`, :class:`attnkit.training.mt_task.MTTask`.

Axis legend: B batch, T sequence length.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from attnkit.checks import check_choice, check_int

SPLITS: tuple[str, ...] = ("train", "valid")
TASK_METHODS: tuple[str, ...] = ("batch", "loss", "evaluate", "state_dict", "load_state_dict")


@runtime_checkable
class Task(Protocol):
    """Structural type of a training task (see the module docstring for the contract)."""

    def batch(self, split: str, step: int) -> Any: ...

    def loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, int]: ...

    def evaluate(self, model: nn.Module, n_batches: int) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def check_task(task: Any) -> None:
    """Raise ``ValueError`` naming the missing methods if ``task`` does not implement :class:`Task`."""
    missing = [m for m in TASK_METHODS if not callable(getattr(task, m, None))]
    if missing:
        raise ValueError(f"task {type(task).__name__} must implement {list(TASK_METHODS)}; missing {missing}")


def check_split(split: str) -> None:
    check_choice("split", split, SPLITS)


def check_step(step: int) -> None:
    check_int("batch step", step, minimum=0)


def batch_seed(seed: int, split: str, step: int) -> int:
    """A 63-bit generator seed that depends only on (seed, split, step).

    A cryptographic hash (not python's ``hash()``, which is salted per process) makes neighbouring steps
    independent and the value identical in every process and on every machine.
    """
    digest = hashlib.blake2b(f"attnkit:{seed}:{split}:{step}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def tensor_fingerprint(t: torch.Tensor) -> str:
    """Short content hash of a tensor (to recognise "the same data" when resuming)."""
    data = t.detach().cpu().contiguous()
    h = hashlib.blake2b(digest_size=12)
    h.update(f"{data.dtype}:{tuple(data.shape)}:".encode())
    h.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())  # raw bytes, any dtype
    return h.hexdigest()


def move_to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor inside a (nested) tuple / list / dict batch to ``device``; other values pass through.

    From the CPU to a CUDA device a tensor goes through pinned memory without blocking: a plain copy from
    ordinary memory makes the host wait until the GPU has finished all the work queued before it.
    """
    if isinstance(batch, torch.Tensor):
        if batch.device.type == "cpu" and torch.device(device).type == "cuda":
            return batch.pin_memory().to(device, non_blocking=True)
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: move_to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(move_to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to_device(v, device) for v in batch)
    return batch
