"""This process and its job: how many processes ``torchrun`` started, which one prints.

Under ``torchrun`` every process runs the same call; these read the launcher's environment (before any process
group exists), so that a run can turn the per-process batch into the global batch and print its lines once.
Nothing here imports torch (``attnkit --help`` stays instant). There are no tensor axes in this file.
"""

from __future__ import annotations

import errno
import importlib
import io
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

__all__ = ["world_size", "is_main_process", "say", "starting_up", "standard_streams", "ClosedOutput", "import_torch"]


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


class ClosedOutput(io.TextIOBase):
    """``sys.stdout`` of a process started with its stdout closed (``>&-``): writing the command's output fails
    with an ``OSError`` (EBADF), as a Unix tool's write error does, instead of ``print`` dropping it and the command
    exiting 0 with its result lost."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed (>&-): the command's output has nowhere to go")


def _take_descriptor(fd: int) -> None:
    """Open ``/dev/null`` as the closed descriptor ``fd``, so that no file the command opens later gets it."""
    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def standard_streams() -> None:
    """A process started with its stderr closed (``2>&-``; Python leaves ``sys.stderr`` as ``None``) gets
    ``/dev/null`` there: its status lines, notes and errors are dropped, as a Unix tool's are, instead of going
    where ``print(..., file=None)`` sends them, into stdout and the command's output (generated text, translations).
    With stdout closed (``>&-``), writing the output is an error (:class:`ClosedOutput`): exit code 2, not 0 with
    nothing written. The descriptors are taken too, so no file the command opens later gets them. Open streams are
    left as they are."""
    if sys.stderr is None:
        _take_descriptor(2)
        sys.stderr = open(2, "w", closefd=False)
    if sys.stdout is None:
        _take_descriptor(1)
        sys.stdout = ClosedOutput()


def import_torch(command: str) -> None:
    """Import torch for ``attnkit COMMAND``, or stop with a one-line error (exit code 2) where it cannot load: a
    current folder that was deleted makes torch's bundled libraries abort the process with their own message."""
    try:
        os.getcwd()
    except FileNotFoundError:
        print(f"attnkit {command}: error: the current folder no longer exists (it was deleted or moved away); "
              "cd to an existing folder and run the command again", file=sys.stderr)
        raise SystemExit(2) from None
    importlib.import_module("torch")


@contextmanager
def starting_up() -> Iterator[None]:
    """While a command starts (its parser is built, torch is imported), Ctrl-C ends the process at once, as SIGINT's
    default action does: no traceback of half-done imports, and no abort inside a C extension's initialisation that
    a ``KeyboardInterrupt`` can cause; a shell reports exit code 130. Nothing is written before the command runs, so
    nothing is lost. Afterwards the previous handler is back (Python's ``KeyboardInterrupt``, which the commands
    handle). A SIGINT the process ignores (a background job) stays ignored; outside the main thread nothing changes.
    A closed stderr or stdout is dealt with first (:func:`standard_streams`)."""
    standard_streams()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main_thread else signal.SIG_IGN
    if previous is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield
    finally:
        if previous is not signal.SIG_IGN:  # None: a handler from outside Python; the default is closest
            signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
