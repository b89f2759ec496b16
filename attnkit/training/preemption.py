"""Preemption: SIGINT and SIGTERM stop a training run at the next step boundary with a checkpoint.

Ctrl-C sends SIGINT (so does a notebook's "interrupt kernel"); cluster schedulers (SLURM, Kubernetes) stop a job
with SIGTERM and kill it after a grace period. While :meth:`attnkit.training.Trainer.fit` runs,
:class:`StopOnSignal` handles both:

* the first signal is only recorded (and announced on stderr): the update under way finishes, then the trainer
  writes a checkpoint at that step (no evaluation: the grace period is short), flushes the metrics tables and
  raises :class:`Interrupted` (exit code 130 for SIGINT, 143 for SIGTERM). Under torchrun the ranks agree at each
  step boundary, so all of them stop at the same step.
* a second signal (either of the two) raises :class:`Interrupted` at once, wherever the main thread is, even
  inside a checkpoint write: checkpoint folders are written as ``<name>.tmp`` and renamed when complete, so the
  last published checkpoint stays intact and ``--resume`` continues from it (and removes the ``.tmp`` leftover).
  The previous handlers are back from then on: a third SIGTERM kills the process.
* a repeat that arrives within :data:`REPEAT_WINDOW_S` of the first is taken as a copy of it, not as a second
  signal: a scheduler that signals every process of a job (SLURM does) reaches torchrun's workers both directly
  and through the launcher, which passes on what it receives.

The handlers are installed in the main thread only (Python delivers signals there) and only for the duration of
``fit``; the previous ones are restored afterwards. A signal the process ignores (a background job's SIGINT) stays
ignored. There are no tensor axes in this file.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any, Callable

__all__ = ["Interrupted", "StopOnSignal", "SIGNALS", "REPEAT_WINDOW_S"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
REPEAT_WINDOW_S = 1.0  # seconds after the first signal in which a repeat is a copy of it (see the module docstring)


class Interrupted(KeyboardInterrupt):
    """A training run stopped by SIGINT or SIGTERM (a ``KeyboardInterrupt``, so code that handles Ctrl-C handles it).

    Attributes:
        signal: the signal's number. signal_name: ``"SIGINT"`` / ``"SIGTERM"``. exit_code: 128 + the number (130,
            143), what a shell reports for a process the signal ended.
        step: the updates done. checkpoint: the checkpoint to resume from (None when none was written yet).
        immediate: False when the run stopped after the current update with a checkpoint at ``step``; True when a
            second signal stopped it at once (``checkpoint`` is then the last one published before).
        resume_command: the command that continues the run, filled in by the ``attnkit.api`` function that ran it.
    """

    def __init__(self, signum: int, *, step: int | None = None, checkpoint: str | Path | None = None,
                 immediate: bool = False, resume_command: str | None = None):
        if signum not in SIGNALS:
            raise ValueError(f"Interrupted expects SIGINT ({int(signal.SIGINT)}) or SIGTERM "
                             f"({int(signal.SIGTERM)}), got {signum!r}")
        super().__init__(int(signum))
        self.signal = int(signum)
        self.step = step
        self.checkpoint = None if checkpoint is None else Path(checkpoint)
        self.immediate = immediate
        self.resume_command = resume_command

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signal).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signal

    def __str__(self) -> str:
        if self.immediate:
            text = f"{self.signal_name} again: stopped at once"
            text += "" if self.step is None else f" after step {self.step}"
            text += f"; last checkpoint {self.checkpoint}" if self.checkpoint is not None else "; no checkpoint yet"
        else:
            text = f"{self.signal_name}: stopped after step {self.step}; checkpoint {self.checkpoint}"
        if self.resume_command and self.checkpoint is not None:
            text += f"; resume with: {self.resume_command}"
        return text


class StopOnSignal:
    """Context manager: while it is entered, SIGINT and SIGTERM ask for a stop instead of ending the process.

    ``requested`` is None until the first signal, then that signal's number; the owner (the trainer) reads it at
    each step boundary and stops there. The second signal (``repeat_window_s`` seconds or more after the first, by
    ``clock``; earlier ones are copies of the first; None: :data:`REPEAT_WINDOW_S`) restores the previous
    handlers and raises :class:`Interrupted` (``immediate=True``) from the handler. ``announce``: print one line
    to stderr on the first signal (the trainer passes True on the main process only).

    Outside the main thread entering it changes nothing (signals keep their handlers; ``requested`` stays None).
    It can be entered again after it exits; each entry starts with no request.
    """

    def __init__(self, *, announce: bool = True, repeat_window_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.announce = announce
        self.repeat_window_s = REPEAT_WINDOW_S if repeat_window_s is None else repeat_window_s
        self.clock = clock
        self.requested: int | None = None
        self._requested_at = 0.0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopOnSignal":
        self.requested = None
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in SIGNALS:
            previous = signal.getsignal(sig)
            if previous is signal.SIG_IGN:  # ignored by whoever started the process: keep it so
                continue
            signal.signal(sig, self._handle)
            self._previous[sig] = previous
        return self

    def __exit__(self, *exc: Any) -> None:
        self._restore()

    def _restore(self) -> None:
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            # None: a handler installed from outside Python, which Python cannot put back; the default is closest
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested is None:
            self.requested, self._requested_at = signum, self.clock()
            if self.announce:
                name = signal.Signals(signum).name
                # os.write: a signal handler must not re-enter the buffered sys.stderr (a progress bar may be
                # writing to it at this very moment)
                os.write(2, f"\nattnkit: {name}: stopping after the current update, with a checkpoint "
                            f"(SIGINT or SIGTERM again stops at once)\n".encode())
            return
        if self.clock() - self._requested_at < self.repeat_window_s:  # the same stop, delivered twice
            return
        self._restore()
        raise Interrupted(signum, immediate=True)
