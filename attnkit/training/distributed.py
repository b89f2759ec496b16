"""Many processes, one run: ``torch.distributed`` (DDP or FSDP2) as launched by ``torchrun``.

attnkit does not launch anything itself. ``torchrun --nproc_per_node=N -m attnkit train lm ...`` starts N
copies of the ordinary command; each finds ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_ADDR`` in
its environment, and :func:`init_from_env` joins the process group (backend ``gloo`` for the CPU, ``nccl``
for CUDA, chosen from the device). Without those variables nothing here does anything: one process is a
world of size 1.

How N processes train exactly like one (the contract the trainer follows):

* The task's batch ``step`` is the *global* batch (``TrainConfig.batch_size`` rows, a pure function of the
  step). Rank ``r`` of ``N`` takes the ``r``-th of ``N`` contiguous row chunks (:func:`shard_batch`), so
  the ranks' shares are disjoint, deterministic and together exactly the one-process batch.
* Every rank back-propagates ``loss_r * n_r`` (its token *sum*); the gradient all-reduce (DDP averages, FSDP
  reduce-scatters the average) gives ``sum_r g_r / N``, and the trainer multiplies by ``N / sum_r n_r``:
  the gradient of the mean over all tokens of all ranks and all micro-batches, as in one process.
  During gradient accumulation DDP's all-reduce is skipped (``no_sync``) until the last micro-batch.
* Decisions are collective: the loss and token counts are summed over ranks, the time budget is rank 0's
  clock (summed over ranks with the others' zeros, :func:`all_sum`), and evaluation runs on every rank (the
  weights are identical) with rank 0's numbers broadcast, so every rank stops, evaluates and saves at the same
  step and none waits forever.
* Only rank 0 writes run files (checkpoints with DDP, metrics, plots, the progress bar). With FSDP every
  rank writes its shard through ``torch.distributed.checkpoint`` (see ``sharded.py``).

Shapes: every tensor in a batch is ``(B, ...)``; a shard is ``(B_r, ...)`` with ``sum_r B_r = B``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

BACKENDS = {"cpu": "gloo", "cuda": "nccl"}


@dataclass(frozen=True)
class World:
    """Where this process stands: ``rank`` of ``size`` processes (``local_rank`` on its machine)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def launched_by_torchrun() -> bool:
    """True if the environment describes a torchrun job (``WORLD_SIZE`` and ``RANK`` are set)."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def env_local_rank() -> int | None:
    """``LOCAL_RANK`` from the environment (None outside torchrun)."""
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value is not None and value.isdigit() else None


def backend_for(device: torch.device) -> str:
    """The process-group backend for ``device``: gloo on the CPU, nccl on CUDA."""
    if device.type not in BACKENDS:
        raise ValueError(f"distributed training supports devices {sorted(BACKENDS)}, got {device.type!r}")
    return BACKENDS[device.type]


def die_with_launcher() -> None:
    """Linux: have the kernel SIGKILL this process when its parent (the torchrun agent) dies.

    torchrun starts every worker in a session of its own, so a SIGKILL to the launcher alone (a lost
    terminal, an OOM kill, a scheduler) would leave the workers running and writing the run folder without
    anyone to collect them. With ``PR_SET_PDEATHSIG`` the job dies as one, and ``--resume`` continues it.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the launcher died before the line above: nobody will collect this process
        os._exit(1)


def init_from_env(device: torch.device) -> World:
    """Join the torchrun job described by the environment (idempotent); a plain run returns ``World()``."""
    if dist.is_available() and dist.is_initialized():
        return current_world()
    if not launched_by_torchrun():
        return World()
    die_with_launcher()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend=backend_for(device), **kwargs)
    return current_world()


def current_world() -> World:
    """This process's place in the initialised process group (``World()`` if there is none)."""
    if not (dist.is_available() and dist.is_initialized()):
        return World()
    return World(rank=dist.get_rank(), size=dist.get_world_size(), local_rank=env_local_rank() or 0)


def shutdown() -> None:
    """Leave the process group (no-op outside one), and let its gloo worker threads end while Python is alive.

    A finished run's DDP model, still holding the group, lives on in garbage reference cycles (the trainer's); left
    to the interpreter's exit, the group's worker threads outlive it: one that drops a collective's tensor then
    needs the GIL, Python ends that thread mid-destructor and the process aborts ("terminate called without an
    active exception", SIGABRT: torchrun reports a failed job after a successful run). Collecting that garbage
    first lets ``destroy_process_group`` drop the last reference, and the group's destructor join its threads now.
    Nothing here waits for the other ranks.
    """
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


# -------------------------------------------------------------------------------------------------
# data: each rank's share of a global batch
# -------------------------------------------------------------------------------------------------

def _rows(batch: Any) -> int | None:
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.ndim else None
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            n = _rows(item)
            if n is not None:
                return n
    return None


def _take(batch: Any, start: int, stop: int) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch[start:stop] if batch.ndim else batch
    if isinstance(batch, dict):
        return {k: _take(v, start, stop) for k, v in batch.items()}
    if callable(getattr(batch, "take_rows", None)):  # a batch that knows its share (MTBatch: recounts its labels)
        return batch.take_rows(start, stop)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # other namedtuples
        return type(batch)(*(_take(v, start, stop) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_take(v, start, stop) for v in batch)
    return batch


def shard_batch(batch: Any, rank: int, world_size: int) -> Any:
    """Rank ``rank``'s contiguous share of the rows of every tensor in ``batch`` (``(B, ...)`` -> ``(B_r, ...)``).

    Rows are split as evenly as possible (the first ``B % N`` ranks get one more), so the shares are
    disjoint and concatenate back to ``batch``. A batch with a ``take_rows(start, stop)`` method cuts itself
    (:class:`~attnkit.data.pipeline.mt_batching.MTBatch` recounts the labels of its share). Raises ``ValueError`` if there are fewer rows than ranks
    (a rank would have nothing to learn from) or if tensors disagree on ``B``.
    """
    if world_size == 1:
        return batch
    rows = _rows(batch)
    if rows is None:
        raise ValueError(f"cannot split a batch of type {type(batch).__name__} across processes: it holds no tensor")
    if rows < world_size:
        raise ValueError(f"a batch of {rows} rows cannot be shared by {world_size} processes; "
                         f"use a larger batch (or token budget) or fewer processes")
    base, rest = divmod(rows, world_size)
    start = rank * base + min(rank, rest)
    stop = start + base + (1 if rank < rest else 0)
    return _take(batch, start, stop)


# -------------------------------------------------------------------------------------------------
# collective decisions
# -------------------------------------------------------------------------------------------------

def _comm_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_sum(values: list[float]) -> list[float]:
    """Element-wise sum of ``values`` over all ranks (float64; the input itself outside a process group)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` (JSON-like python data) on every rank."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, device=_comm_device() if dist.get_backend() == "nccl" else None)
    return box[0]


def on_main(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on rank 0 only; every rank returns its result or raises its error (no rank is left waiting).

    Errors travel as ``(type name, message)``; ``ValueError``, ``OSError`` and ``FloatingPointError`` are
    raised again as themselves on the other ranks, anything else as ``RuntimeError``.
    """
    world = current_world()
    if not world.distributed:
        return fn()
    outcome: Any = None
    if world.is_main:
        try:
            outcome = ("ok", fn())
        except Exception as err:  # sent to every rank below, then raised there too
            outcome = ("error", type(err).__name__, str(err))
            box = broadcast_object(outcome)
            raise
    box = broadcast_object(outcome)
    if box[0] == "ok":
        return box[1]
    kind = {"ValueError": ValueError, "OSError": OSError, "FloatingPointError": FloatingPointError,
            "CheckpointError": ValueError}.get(box[1], RuntimeError)
    raise kind(box[2])


def barrier() -> None:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


# -------------------------------------------------------------------------------------------------
# wrapping the model
# -------------------------------------------------------------------------------------------------

def wrap_ddp(model: nn.Module, device: torch.device, *, find_unused_parameters: bool = False) -> nn.Module:
    """``DistributedDataParallel(model)`` for the training forward/backward (the bare model stays the one
    that is evaluated and saved). ``find_unused_parameters`` is for models whose forward pass may leave some
    parameters out (LayerDrop): DDP then marks those ready after each backward pass instead of waiting for them."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find_unused_parameters)


def shard_fsdp(model: nn.Module) -> nn.Module:
    """FSDP2 in place: ``fully_shard`` every block (each element of the model's ``nn.ModuleList`` s), then the
    root (embeddings, final norm, the tied head). Parameters become DTensors sharded over the ranks; their
    names do not change. Returns ``model``."""
    from torch.distributed.fsdp import fully_shard

    for module in list(model.modules()):
        if isinstance(module, nn.ModuleList):
            for block in module:
                fully_shard(block)
    fully_shard(model)
    return model


@contextlib.contextmanager
def _fsdp_no_sync(model: nn.Module):
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def no_sync(train_model: nn.Module, skip: bool):
    """When ``skip`` (a micro-batch before the last of an accumulation): DDP's ``no_sync()``, or FSDP2's
    ``set_requires_gradient_sync(False)`` (gradients stay local and unsharded until the last micro-batch);
    otherwise nothing."""
    if skip and hasattr(train_model, "no_sync"):
        return train_model.no_sync()
    if skip and hasattr(train_model, "set_requires_gradient_sync"):
        return _fsdp_no_sync(train_model)
    return contextlib.nullcontext()
