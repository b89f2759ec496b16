"""Model presets and checkpoints from Python: a preset's parameter table (``attnkit params``) and a sharded
checkpoint turned into an ordinary one (``attnkit convert``).

    from attnkit.api import parameter_table, convert_checkpoint
    print(parameter_table("gpt2"))                     # counted on the meta device: no memory
    convert_checkpoint("runs/big")                     # -> runs/big/checkpoints/step_XXXXXXXX-converted

There are no tensor axes in this file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["preset_names", "parameter_table", "ConvertedCheckpoint", "convert_checkpoint"]

# the folders a run's trainer writes in its checkpoints/ (and resumes from, replaces or prunes)
_RUN_OWN = re.compile(r"^(step_\d+|best)(\.tmp|\.old)?$")


def preset_names() -> list[tuple[str, str]]:
    """``[(preset name, config class name), ...]`` of every preset."""
    from attnkit.models.presets import PRESETS

    return [(name, type(cfg).__name__) for name, cfg in PRESETS.items()]


def parameter_table(preset: str, *, depth: int = 1) -> str:
    """The per-module parameter table of ``preset`` and its total, the model built on the meta device."""
    import torch

    from attnkit.models.builders import build_model
    from attnkit.models.params import format_parameter_table
    from attnkit.models.presets import get_preset

    config = get_preset(preset)
    with torch.device("meta"):
        model = build_model(config)
    return f"preset {preset} ({type(config).__name__})\n" + format_parameter_table(model, depth=depth)


@dataclass
class ConvertedCheckpoint:
    """Where a sharded checkpoint (``src``, written by ``world_size`` processes) was written as one file (``path``)."""

    src: Path
    path: Path
    world_size: int | str


def convert_checkpoint(src: str | Path, out: str | Path | None = None) -> ConvertedCheckpoint:
    """Read a sharded (``--fsdp``) checkpoint folder, or a run folder's latest step checkpoint, in one process and
    write the ordinary checkpoint folder (``model.safetensors`` + ``state.json``, no optimizer state) at ``out``
    (default: ``SRC-converted`` beside it). An existing ``out`` is never overwritten; an ``out`` below a file, or named
    like a run's own checkpoints (``step_N``, ``best``) in a run's ``checkpoints/``, and a run's ``checkpoints/``
    folder as ``src`` (give the run folder) raise ``ValueError`` before anything is read; the model config of ``src``'s
    ``state.json`` is checked before the model is built (position tables past what its weights justify)."""
    from attnkit.checkpoints.checkpoint import (CheckpointError, checked_model_config, latest_checkpoint,
                                                read_checkpoint_state)
    from attnkit.checkpoints.runs import CHECKPOINTS_DIR, file_above, is_run_dir
    from attnkit.models.builders import build_model
    from attnkit.training.sharded import convert_sharded

    # Path(None) is a TypeError, Path("") the working directory
    for name, value, what in (("src", src, "the checkpoint or run folder"), ("out", out, "the folder to write")):
        if not (value is None and name == "out") and (not isinstance(value, (str, os.PathLike)) or not str(value)):
            raise ValueError(f"convert_checkpoint {name} must be {what} (a non-empty str or pathlib.Path"
                             f"{', or None' if name == 'out' else ''}), got {value!r}")
    src = Path(src)
    if src.name == CHECKPOINTS_DIR and is_run_dir(src.parent):
        raise CheckpointError(f"{src} is a run's checkpoints folder: give the run folder {str(src.parent)!r} (its "
                              "latest step checkpoint) or one checkpoint in it")
    if (src / CHECKPOINTS_DIR).is_dir():
        latest = latest_checkpoint(src / CHECKPOINTS_DIR)
        if latest is None:
            raise CheckpointError(f"{src} holds no step checkpoint to convert")
        src = latest
    out = Path(out) if out is not None else src.with_name(src.name + "-converted")
    # the folder the write reaches once missing folders are made ("new/../x" is "x"), checked and written
    target = out.parent.resolve() / out.name
    if os.path.lexists(out) or os.path.lexists(target):
        raise ValueError(f"{out} already exists; choose another output folder (nothing is overwritten)")
    blocker = file_above(out)
    if blocker is not None:  # its folders cannot be made: say so before any work, not "File exists" from mkdir
        raise ValueError(f"output folder {str(out)!r}: {str(blocker)!r} is a file, not a folder")
    if src.resolve() in out.resolve().parents:  # the checkpoint's next replacement would meet a folder it did not write
        raise ValueError(f"output folder {str(out)!r} is inside the checkpoint {str(src)!r}; expected a folder outside "
                         f"it, such as the default {str(src.with_name(src.name + '-converted'))!r}")
    parent = out.resolve().parent
    if parent.name == CHECKPOINTS_DIR and is_run_dir(parent.parent) and _RUN_OWN.match(out.name):
        raise ValueError(f"output folder {str(out)!r} has the name of one of its run's own checkpoints, which the "
                         "run would resume from or replace; expected another name, such as the default "
                         f"{src.name + '-converted'!r}")
    state = read_checkpoint_state(src)
    # checked before anything is built: a hand-edited block_size = 10**8 took 22 GB and 90 s, then wrote it out
    model = build_model(checked_model_config(src, state))
    convert_sharded(src, target, model)
    return ConvertedCheckpoint(src, out, state.get("world_size", "?"))
