"""Run folders: what ``attnkit train`` and ``attnkit finetune`` write, and how a path is resolved to a checkpoint.

A run folder looks like::

    run/
      run.json  metrics.jsonl  metrics.csv  loss.png  summary.json
      checkpoints/
        step_00001000/   model.safetensors  optimizer.safetensors  state.json
        best/            (a copy of the best checkpoint so far)
        averaged/        (``train mt --average-last N``)

``state.json`` holds the model config (``model_config``) and, under ``extra``, the tokenizer (``tokenizer``)
and a note of what the run was (``kind``: ``"lm"`` or ``"mt"``), so a checkpoint is self-contained.

There are no tensor axes in this file.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from .checkpoint import (FORMAT, STATE_FILE, CheckpointError, checked_model_config, latest_checkpoint,
                         read_checkpoint_state)

__all__ = ["RUN_FILE", "SUMMARY_FILE", "CHECKPOINTS_DIR", "BEST_DIR", "RUN_RECORDS", "is_run_dir", "file_above",
           "check_output_file", "check_new_run_folder", "resolve_checkpoint", "read_saved_run", "default_run_folder",
           "TRAINER_STATE_KEYS", "check_trainer_state"]

RUN_FILE = "run.json"
TRAINER_STATE_KEYS = ("step", "train_config", "model_config", "task")  # what every Trainer checkpoint's state holds
SUMMARY_FILE = "summary.json"
CHECKPOINTS_DIR = "checkpoints"
BEST_DIR = "best"
# Anything of these in a folder means "a run lives here" (so a fresh run must not write into it).
_RUN_MARKERS = (RUN_FILE, "metrics.jsonl", CHECKPOINTS_DIR)


def is_run_dir(path: str | Path) -> bool:
    """True if ``path`` holds (part of) a training run."""
    path = Path(path)
    return path.is_dir() and any((path / m).exists() for m in _RUN_MARKERS)


# the records a run writes at the top of its folder (the metrics' views included)
RUN_RECORDS = (RUN_FILE, SUMMARY_FILE, "metrics.jsonl", "metrics.csv", "loss.png")


def file_above(path: Path) -> Path | None:
    """The first existing file (not a folder) among ``path``'s parents: what stops its folders from being made."""
    return next((p for p in path.parents if p.exists() and not p.is_dir()), None)


def check_new_run_folder(out: str | Path) -> None:
    """Raise ``ValueError`` unless a fresh run (no ``--resume``) may write into ``out``: not a file (nor below one),
    no run in it (a run is never overwritten), none of a run's records (:data:`RUN_RECORDS`) in it. Reads only:
    the commands call it before any data is read; the Trainer calls it again holding the folder's lock. Also
    refused: a folder inside a checkpoint (the next publish or prune of that checkpoint would delete the run).
    The checks are on the folder the writes reach once missing folders are made (``new/../run`` is ``run``)."""
    given, out = Path(out), Path(out).resolve()
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir {given} exists and is not a folder")
    blocker = file_above(given)  # (mkdir makes the folders as spelled)
    if blocker is not None:  # the folder cannot be made: say so, not "File exists" from mkdir
        raise ValueError(f"out_dir {given}: {blocker} is a file, not a folder")
    if is_run_dir(out):
        ckpts = out / CHECKPOINTS_DIR
        if latest_checkpoint(ckpts) is None and not (ckpts / BEST_DIR).is_dir():
            raise ValueError(f"out_dir {given} already holds a training run that stopped before its first "
                             f"checkpoint, so it cannot be resumed; remove that folder or choose another (a run "
                             f"is never overwritten)")
        raise ValueError(f"out_dir {given} already holds a training run; pass --resume (resume=True) to "
                         f"continue it, or choose another folder (a run is never overwritten)")
    found = [name for name in RUN_RECORDS if (out / name).exists()]
    if found:  # files of the user's (no run wrote them: it would have left its markers) that a run writes
        raise ValueError(f"out_dir {given} holds {', '.join(found)}, which a run would overwrite, and no "
                         f"training run; choose another folder (nothing of yours is overwritten)")
    if _in_checkpoint(out / STATE_FILE):  # out itself, or a folder below it, is (in) a checkpoint
        raise ValueError(f"out_dir {given} is inside a checkpoint ({out}), which its run replaces or prunes; "
                         f"choose a folder outside it")


def _in_checkpoint(real: Path) -> bool:
    """Whether ``real`` lies in an attnkit checkpoint folder (its ``state.json`` says so; ``dcp/`` included) or in
    a run's ``checkpoints/`` folder."""
    for folder in list(real.parents)[:3]:
        if folder.name == CHECKPOINTS_DIR and is_run_dir(folder.parent):
            return True
        try:
            if json.loads((folder / STATE_FILE).read_text(encoding="utf-8")).get("format") == FORMAT:
                return True
        except (OSError, ValueError, AttributeError):  # no state.json, or one that is not attnkit's
            pass
    return False


def check_output_file(path: str | Path, flag: str, *, replaces: Callable[[Path], bool] | None = None,
                      may_replace: str = "", run_prefix: str | None = None) -> Path:
    """``path`` as a file a command may write: not a folder, not below a file, not a file of a run (its records, or
    anything in an attnkit checkpoint folder or a run's ``checkpoints/``, new or not: the next publish or prune would
    delete it; except names starting with ``run_prefix``: ``eval_`` records), and, when it exists, one that
    ``replaces`` says the command wrote before (an earlier figure, page or record: what a rerun replaces;
    ``may_replace`` names such a file in the error), and never a device, pipe or socket (``/dev/null``: a write
    would rename a regular file over it; ``/dev/full``: reading what it holds never ends). The checks are on the
    file the write reaches once missing folders are made (``new/../mine.png`` is ``mine.png``). Raises
    ``ValueError`` naming ``flag``; returns the path."""
    path = Path(path)
    real = path.resolve()
    if real.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a folder; give a file name")
    blocker = file_above(path)
    if blocker is not None:  # the folders to make cannot be made: say so before any work, not as "File exists"
        raise ValueError(f"{flag} {str(path)!r}: {str(blocker)!r} is a file, not a folder")
    ours = run_prefix is not None and real.name.startswith(run_prefix)
    if not ours and (_in_checkpoint(real) or (real.name in RUN_RECORDS and is_run_dir(real.parent))):
        raise ValueError(f"{flag} {str(path)!r} is a file of a training run; give a new file name")
    if real.name == STATE_FILE:  # written, it makes its folder (a run, a Hugging Face folder) read as a checkpoint
        raise ValueError(f"{flag} {str(path)!r}: a file named {STATE_FILE} marks its folder as an attnkit checkpoint; "
                         f"give another file name")
    if not real.exists():
        return path
    if not real.is_file():  # a device, pipe or socket: written over (/dev/null) or read without end (/dev/full)
        raise ValueError(f"{flag} {str(path)!r} is not a regular file (a device, pipe or socket); give a file name")
    if replaces is not None and not replaces(real):
        what = f" ({may_replace})" if may_replace else ""
        raise ValueError(f"{flag} {str(path)!r} exists and is not a file this command wrote{what}; it would be "
                         f"overwritten: give a new file name")
    return path


def resolve_checkpoint(path: str | Path, *, prefer: str = "best") -> Path:
    """A checkpoint folder from ``path``: the folder itself if it holds ``state.json``; for a run folder its
    ``checkpoints/best`` (``prefer="best"``) or latest step checkpoint. Raises ``FileNotFoundError`` with a
    clear message when there is none."""
    if prefer not in ("best", "latest"):
        raise ValueError(f"prefer must be 'best' or 'latest', got {prefer!r}")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such checkpoint or run folder: {path}")
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is a file, not a checkpoint folder or a run folder")
    if (path / "state.json").is_file():
        return path
    ckpts = path / CHECKPOINTS_DIR
    if ckpts.is_dir():
        best = ckpts / BEST_DIR
        latest = latest_checkpoint(ckpts)
        if prefer == "best" and (best / "state.json").is_file():
            return best
        if prefer == "best" and best.is_dir():  # damaged: never another checkpoint in its place, silently
            raise CheckpointError(f"checkpoint {best} is incomplete: {best / STATE_FILE} is missing (pass a step "
                                  f"checkpoint of {ckpts} as --ckpt)")
        if latest is not None:
            return latest
        if (best / "state.json").is_file():
            return best
    if (path / BEST_DIR).is_dir() or latest_checkpoint(path) is not None:  # a run's checkpoints/ folder itself
        raise FileNotFoundError(f"{path} is a run's checkpoints folder: give the run folder {str(path.parent)!r} or "
                                f"one checkpoint in it, such as {str(path / BEST_DIR)!r}")
    raise FileNotFoundError(f"{path} holds no checkpoint (expected state.json, or checkpoints/best or "
                            "checkpoints/step_* inside a run folder)")


def check_trainer_state(ckpt: Path, state: dict[str, Any]) -> None:
    """Raise :class:`CheckpointError` unless the state of checkpoint ``ckpt`` holds every :data:`TRAINER_STATE_KEYS`."""
    for key in TRAINER_STATE_KEYS:
        if key not in state:
            raise CheckpointError(f"{ckpt / STATE_FILE} lacks {key!r}: not written by the Trainer")


def read_saved_run(out: str | Path | None) -> dict[str, Any]:
    """The latest checkpoint's state of the run in ``out`` (what ``--resume`` continues from), checked before
    anything is built from it: it holds what the Trainer writes (step, train_config, model_config, task) and the
    tokenizer every ``attnkit`` run stores (``extra.tokenizer``), and its model config fits its weights
    (:func:`check_model_config`: a ``block_size`` of 2**31 in an edited file is refused, not allocated). Raises
    :class:`CheckpointError` naming the file."""
    if out is None:
        raise ValueError("--resume needs --out pointing at the run folder to continue")
    latest = latest_checkpoint(Path(out) / CHECKPOINTS_DIR)
    if latest is None:
        hint = ("; its run stopped before its first checkpoint: remove the folder (or choose another) and start "
                "again without --resume") if is_run_dir(out) else ""
        raise FileNotFoundError(f"--resume: {out} holds no checkpoint to resume from{hint}")
    state = read_checkpoint_state(latest)
    check_trainer_state(latest, state)
    if "tokenizer" not in state.get("extra", {}):
        raise CheckpointError(f"{latest / STATE_FILE} lacks extra.tokenizer: not a run of attnkit train or finetune")
    checked_model_config(latest, state)
    return state


def default_run_folder(kind: str, data: str, preset: str) -> Path:
    """``runs/<kind>-<data stem>-<preset>-<YYYYmmdd-HHMMSS>`` for a run started without ``--out``; ``-2``, ``-3``
    ... after it when a folder of that name exists (a run of the same data and preset started in the same second:
    a shell loop of short runs)."""
    if os.environ.get("WORLD_SIZE", "1") not in ("", "1"):
        # the default name holds the start time, which the processes of a torchrun job need not agree on
        raise ValueError("under torchrun pass --out: every process must write the same run folder")
    stem = Path(str(data)).stem if any(c in str(data) for c in "/.") else str(data)
    name = Path("runs") / f"{kind}-{stem}-{preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    taken = 1
    while os.path.lexists(name.with_name(name.name + (f"-{taken}" if taken > 1 else ""))):
        taken += 1
    return name.with_name(name.name + (f"-{taken}" if taken > 1 else ""))
