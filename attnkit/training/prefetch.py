"""Training batches built and copied to the device one update ahead, in a background thread.

While the host runs an update (on a GPU: queues its kernels, then waits for nothing), a worker thread builds the
next update's micro-batches (the task's ``batch("train", i)``, this process's share of it) and copies them to the
device: through pinned memory without blocking on CUDA (:func:`~attnkit.training.task.move_to_device`), a plain
reference on the CPU. The CPU runs the very same code; only the copy differs.

The numbers do not change: a batch is a pure function of its index and the task's state (the task contract, see
``task.py``), so it is the same whichever thread builds it, and the task's ``batch`` must not draw from torch's
global random generator (which the model's dropout uses). The trainer keeps the task still while a batch is
being built: it waits for the worker (:meth:`BatchPrefetcher.settle`) before it evaluates, saves, or calls the
task's ``on_budget``, and when ``on_budget`` says the task changed (it returns a line), the batches built before
are dropped (:meth:`BatchPrefetcher.discard`) and built again.

There are no tensor axes in this file: batches are whatever the task makes.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable

import torch

from .task import move_to_device

__all__ = ["BatchPrefetcher"]


class BatchPrefetcher:
    """Builds batches by index ahead of their use, one at a time, in one worker thread.

    Args:
        build: ``index -> batch`` on the host (the trainer's: the task's training batch ``index``, this
            process's rows of it).
        device: where the batches go (:func:`~attnkit.training.task.move_to_device`: pinned memory and a copy that
            does not block on CUDA; nothing to copy on the CPU).

    ``get(i)`` returns batch ``i`` on the device: built ahead when :meth:`ahead` asked for it, else built now in
    the calling thread. Exceptions raised while building come out of ``get``.
    """

    def __init__(self, build: Callable[[int], Any], device: torch.device):
        if not callable(build):
            raise ValueError(f"BatchPrefetcher build must be callable, got {type(build).__name__}")
        self._build = build
        self.device = torch.device(device)
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[int, Future] = {}

    def _make(self, index: int) -> Any:
        return move_to_device(self._build(index), self.device)

    def ahead(self, indices: Iterable[int]) -> None:
        """Start building ``indices`` (in order, in the worker thread) unless they are already under way."""
        for index in indices:
            if index not in self._pending:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnkit-batches")
                self._pending[index] = self._pool.submit(self._make, index)

    def get(self, index: int) -> Any:
        """Batch ``index`` on the device (waits for its build when one is under way)."""
        future = self._pending.pop(index, None)
        return self._make(index) if future is None else future.result()

    def settle(self) -> None:
        """Wait until no batch is being built (the built ones are kept), so the task may be used or changed."""
        for future in list(self._pending.values()):
            future.exception()  # waits; an error stays in the future and is raised by get()

    def discard(self) -> None:
        """Drop every batch built or being built (the task's state changed: they would be stale)."""
        self.settle()
        self._pending.clear()

    @property
    def pending(self) -> list[int]:
        """The indices built or being built ahead, in the order they were asked for."""
        return list(self._pending)

    def close(self) -> None:
        """Drop what was built ahead and stop the worker thread (a later :meth:`ahead` starts a new one)."""
        self.discard()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
