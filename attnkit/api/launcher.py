"""This process and its job: how many processes ``torchrun`` started, which one prints.

Under ``torchrun`` every process runs the same call; these read the launcher's environment (before any process
group exists), so that a run can turn the per-process batch into the global batch and print its lines once.
Nothing here imports torch (``attnkit --help`` stays instant). There are no tensor axes in this file.
"""

from __future__ import annotations

import os
import sys

__all__ = ["world_size", "is_main_process", "say"]


def world_size() -> int:
    """Number of processes of this job (``WORLD_SIZE`` set by torchrun; 1 for a plain run)."""
    value = os.environ.get("WORLD_SIZE", "1")
    return int(value) if value.isdigit() and int(value) > 0 else 1


def is_main_process() -> bool:
    """True in a plain run and in rank 0 of a torchrun job."""
    return os.environ.get("RANK", "0") == "0"


def say(message: str) -> None:
    """Print a status line to stderr once per job (rank 0 only): the default ``log`` of every run."""
    if is_main_process():
        print(message, file=sys.stderr)


def interruption(stop: KeyboardInterrupt) -> tuple[str | None, int]:
    """The line to print (None: nothing, on a torchrun rank other than 0) and the exit code of a command stopped by
    a signal: a training run stopped by SIGINT / SIGTERM (:class:`attnkit.training.preemption.Interrupted`) says
    where its checkpoint is and how to resume, and exits with 130 / 143; any other Ctrl-C says "interrupted", 130."""
    preemption = sys.modules.get("attnkit.training.preemption")  # not imported: not a training run's stop
    if preemption is None or not isinstance(stop, preemption.Interrupted):
        return "interrupted", 130
    return (f"attnkit: {stop}" if is_main_process() else None), stop.exit_code
