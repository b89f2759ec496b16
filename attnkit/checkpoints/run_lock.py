"""One training process per run folder: an advisory ``fcntl.flock`` on the folder itself.

Two runs writing the same ``out_dir`` would interleave checkpoints and metrics. The Trainer takes this
lock before it looks at or writes anything in the folder and keeps it until ``fit()`` ends (or the
Trainer fails to start); a second process gets a ``ValueError`` at once instead of waiting. The lock
lives on an open file descriptor of the folder, so the kernel drops it when the process dies (``kill -9``
included): there is no stale lock file to clean up, and nothing is written into the user's folder.
In a ``torch.distributed`` job only rank 0 takes it (the job's ranks are one run).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def _other_rank() -> bool:
    """True in a torch.distributed process other than rank 0 (rank 0 holds the lock for the whole job)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_rank() != 0


class RunLock:
    """An exclusive, non-blocking lock on the folder ``path`` (which must exist)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fd: int | None = None
        if _other_rank():  # one distributed job is one run: its rank 0 holds the lock
            return
        self._fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            raise ValueError(f"{self.path} is in use by another training process (it holds the folder's lock); "
                             f"wait for it to finish or choose another --out") from None

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __del__(self) -> None:
        self.release()
