"""Sharded (FSDP2) checkpoints through ``torch.distributed.checkpoint`` (DCP), and their conversion to the
ordinary single-file checkpoint.

A sharded checkpoint is a folder like an ordinary one (``checkpoint.py``) with the tensors in DCP's
format instead of ``model.safetensors`` / ``optimizer.safetensors``::

    step_00000400/
        dcp/               DCP files: one ``__<rank>_0.distcp`` per process + ``.metadata``
                           ({"model": model state, "optim": optimizer state}, by parameter name)
        state.json         as in an ordinary checkpoint, with ``"sharded": true`` (no optimizer tensors)

Every rank writes its own shard (a collective call); rank 0 writes ``state.json`` and publishes the folder
with the same ``.tmp`` + rename as ordinary checkpoints. DCP re-shards on load, so a run saved by N
processes resumes with M. DCP's ``.metadata`` is a pickle written by torch; attnkit only reads sharded
folders its own runs wrote, and :func:`convert_sharded` turns one into the ordinary safetensors + JSON
checkpoint that ``sample`` / ``eval`` / ``finetune`` load anywhere (the optimizer state stays behind).

No tensors flow through the public API except through modules, so there are no shapes to document.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnkit.files import fsync_dir, publish_folder, write_text_atomic
from attnkit.checkpoints.checkpoint import (DCP_DIR, FORMAT, FORMAT_VERSION, CheckpointError, check_replaceable,
                                            read_checkpoint_state, save_checkpoint)
from attnkit.checkpoints.rng import capture_rng_state

from . import distributed as D


def _describe_failure(err: BaseException) -> str:
    """One line for an error of ``torch.distributed.checkpoint``: its ``CheckpointException`` (a ``BaseException``
    holding every failing rank's error and traceback) becomes "rank 1: FileNotFoundError: ..." per distinct error
    (without the ranks in one process)."""
    failures = getattr(err, "failures", None)
    if not isinstance(failures, dict) or not failures:
        return " ".join(f"{type(err).__name__}: {err}".split())
    ranks: dict[str, list[str]] = {}
    for rank, failure in sorted(failures.items()):
        exc = failure[0] if isinstance(failure, tuple) and failure else failure
        ranks.setdefault(" ".join(f"{type(exc).__name__}: {exc}".split()), []).append(str(rank))
    if not D.current_world().distributed:  # one process (convert): no ranks to tell apart
        return "; ".join(ranks)
    return "; ".join(f"rank{'s' if len(r) > 1 else ''} {', '.join(r)}: {msg}" for msg, r in ranks.items())


def _failure_kinds(err: BaseException) -> list[BaseException]:
    failures = getattr(err, "failures", None)
    if not isinstance(failures, dict):
        return [err]
    return [f[0] if isinstance(f, tuple) and f else f for f in failures.values()]


class _HideDcpLogs(logging.Filter):
    """Drops the root logger's records written by ``torch.distributed.checkpoint`` (it logs to the root logger,
    with tracebacks, before raising what :func:`_describe_failure` turns into one line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "distributed/checkpoint/" not in record.pathname.replace(os.sep, "/")


@contextlib.contextmanager
def _dcp_call():
    """Around a ``torch.distributed.checkpoint`` call: its log lines (tracebacks) are not printed."""
    hide = _HideDcpLogs()
    logging.getLogger().addFilter(hide)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(hide)


def is_sharded(path: str | os.PathLike) -> bool:
    """True if ``path`` is a sharded (DCP) checkpoint folder."""
    return (Path(path) / DCP_DIR).is_dir()


def save_sharded(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
                 state: dict[str, Any], extra: dict[str, Any]) -> Path:
    """Collective: every rank writes its shard of model + optimizer; rank 0 writes ``state.json`` and renames
    ``<path>.tmp`` to ``<path>`` (replacing an older checkpoint of that name). Returns ``path``. Raises
    ``ValueError`` on every rank, before anything is written, where :func:`save_checkpoint` would: ``path`` (or
    its ``.tmp`` / ``.old``) is a file, a link or a folder holding files of the user's."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_state_dict

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")

    def fresh_tmp() -> None:
        check_replaceable(path, "save_sharded")
        if tmp.exists():
            shutil.rmtree(tmp)
        (tmp / DCP_DIR).mkdir(parents=True)

    D.on_main(fresh_tmp)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    try:
        with _dcp_call():
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp / DCP_DIR))
    except (Exception, CheckpointException) as err:  # the same error on every rank (DCP gathers them)
        kind = OSError if any(isinstance(e, OSError) for e in _failure_kinds(err)) else CheckpointError
        raise kind(f"{tmp / DCP_DIR}: cannot write the sharded checkpoint: {_describe_failure(err)}") from None
    payload = {"format": FORMAT, "version": FORMAT_VERSION, **state, "extra": extra, "sharded": True,
               "world_size": D.current_world().size, "scheduler": scheduler.state_dict(), "rng": capture_rng_state()}

    def publish() -> None:
        write_text_atomic(tmp / "state.json", json.dumps(payload, indent=2, allow_nan=False))
        fsync_dir(tmp)
        publish_folder(tmp, path)

    D.on_main(publish)
    return path


def load_sharded(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> dict[str, Any]:
    """Collective: restore model, optimizer and scheduler of an FSDP-sharded ``model`` from ``path`` (written by
    any number of processes). Returns ``state.json``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(path)
    data = read_checkpoint_state(path)
    if not is_sharded(path):
        raise CheckpointError(f"{path} is not a sharded checkpoint (no {DCP_DIR}/ folder); it was written "
                              f"without --fsdp, so resume it without --fsdp")
    model_sd, optim_sd = get_state_dict(model, optimizer)
    both = {"model": model_sd, "optim": optim_sd}
    try:
        with _dcp_call():
            dcp.load(both, checkpoint_id=str(path / DCP_DIR))
    except (Exception, CheckpointException) as err:  # DCP's CheckpointException (a BaseException) has every rank's
        raise CheckpointError(f"{path / DCP_DIR}: cannot restore the sharded checkpoint: "
                              f"{_describe_failure(err)}") from None
    set_state_dict(model, optimizer, model_state_dict=both["model"], optim_state_dict=both["optim"])
    scheduler.load_state_dict(data["scheduler"])
    return data


def convert_sharded(src: str | os.PathLike, dst: str | os.PathLike, model: nn.Module) -> Path:
    """Turn the sharded checkpoint ``src`` into an ordinary checkpoint folder ``dst`` (weights + ``state.json``,
    no optimizer), using ``model`` — a plain, unsharded model built from the run's model config — as the
    template whose weights are filled. Runs in one process without a process group. Returns ``dst``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    src, dst = Path(src), Path(dst)
    data = read_checkpoint_state(src)
    if not is_sharded(src):
        raise CheckpointError(f"{src} is not a sharded checkpoint (no {DCP_DIR}/ folder): it is already an "
                              f"ordinary checkpoint")
    weights = {k: v for k, v in model.state_dict().items()}
    try:
        with warnings.catch_warnings(), _dcp_call():  # "no process group: loading in one process" is the point
            warnings.simplefilter("ignore", UserWarning)
            dcp.load({"model": weights}, checkpoint_id=str(src / DCP_DIR), no_dist=True)
    except (Exception, CheckpointException) as err:
        raise CheckpointError(f"{src / DCP_DIR}: cannot read the model weights: {_describe_failure(err)}") from None
    model.load_state_dict(weights)
    state = {k: v for k, v in data.items() if k not in ("format", "version", "extra", "optimizer", "scheduler",
                                                        "rng", "sharded", "world_size")}
    state["converted_from"] = str(src)
    return save_checkpoint(dst, model, state=state, extra=data.get("extra", {}), include_rng=False)
