"""What a training run stopped by SIGINT / SIGTERM tells its user: the command that resumes it.

The trainer stops at a step boundary with a checkpoint and raises
:class:`~attnkit.training.preemption.Interrupted` (step and checkpoint); the run functions of this package know
which command they are and add the command line that continues the run::

    with resume_hint("train lm", out):
        summary = trainer.fit()
    # Interrupted: SIGTERM: stopped after step 1234; checkpoint runs/x/checkpoints/step_00001234;
    #              resume with: attnkit train lm --out runs/x --resume

Under ``torchrun`` the command starts with the launcher and the flags it was started with (read from the
launcher's command line on Linux, else rebuilt from torchrun's environment). Nothing here imports torch. There are
no tensor axes in this file.
"""

from __future__ import annotations

import os
import shlex
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["resume_command", "resume_hint"]

_LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")  # python -m ... forms of torchrun
_ENTRY_FLAGS = ("-m", "--module", "--no-python", "--no_python")  # how torchrun was told what to run


def _launcher_flags(parent: list[str], own: list[str]) -> list[str] | None:
    """torchrun's own flags in its command line ``parent`` (``[..., "torchrun", flags..., entry, args...]``),
    where this worker's ``sys.argv`` ``own`` is the tail (``own[0]`` stands for the entry point); None when
    ``parent`` is not such a command line."""
    start = next((i + 1 for i, word in enumerate(parent)
                  if Path(word).name == "torchrun" or (word in _LAUNCHERS and i > 0 and parent[i - 1] == "-m")), None)
    end = len(parent) - len(own)
    if start is None or end < start or parent[end + 1:] != own[1:]:
        return None
    flags = parent[start:end]
    while flags and flags[-1] in _ENTRY_FLAGS:
        flags = flags[:-1]
    return flags


def _parent_command() -> list[str]:
    """The command line of this process's parent (Linux ``/proc``; empty where it cannot be read)."""
    try:
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return []
    return [w.decode(errors="replace") for w in raw.split(b"\0") if w]


def _torchrun_prefix() -> list[str]:
    """``[]`` for a plain process; under torchrun ``["torchrun", its flags...]``."""
    if "TORCHELASTIC_RUN_ID" not in os.environ and "LOCAL_WORLD_SIZE" not in os.environ:
        return []
    flags = _launcher_flags(_parent_command(), sys.argv)
    if flags is None:  # not readable: rebuild from the environment torchrun gives its workers
        per_node = os.environ.get("LOCAL_WORLD_SIZE", "1")
        nodes = os.environ.get("GROUP_WORLD_SIZE", "1")
        flags = [f"--nproc_per_node={per_node}"]
        flags = ["--standalone", *flags] if nodes == "1" else [f"--nnodes={nodes}", *flags]
    return ["torchrun", *flags]


def resume_command(command: str, out: str | os.PathLike) -> str:
    """The shell command that resumes the run in ``out`` that ``attnkit COMMAND`` started: ``command`` is
    ``"train lm"``, ``"train mt"`` or ``"finetune"``; under torchrun the launcher and its flags come first."""
    prefix = _torchrun_prefix()
    entry = [*prefix, "-m", "attnkit"] if prefix else ["attnkit"]
    return shlex.join([*entry, *command.split(), "--out", str(out), "--resume"])


@contextmanager
def resume_hint(command: str, out: str | os.PathLike) -> Iterator[None]:
    """Add :func:`resume_command` to an :class:`~attnkit.training.preemption.Interrupted` raised inside."""
    from attnkit.training.preemption import Interrupted

    try:
        yield
    except Interrupted as stop:
        stop.resume_command = resume_command(command, out)
        raise
