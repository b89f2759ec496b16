"""Model presets and checkpoints from Python: a preset's parameter table (``attnkit params``) and a sharded
checkpoint turned into an ordinary one (``attnkit convert``).

    from attnkit.api import parameter_table, convert_checkpoint
    print(parameter_table("gpt2"))                     # counted on the meta device: no memory
    convert_checkpoint("runs/big")                     # -> runs/big/checkpoints/step_XXXXXXXX-converted

There are no tensor axes in this file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["preset_names", "parameter_table", "ConvertedCheckpoint", "convert_checkpoint"]


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
    (default: ``SRC-converted`` beside it). An existing ``out`` is never overwritten."""
    from attnkit.checkpoints.checkpoint import CheckpointError, latest_checkpoint, read_checkpoint_state
    from attnkit.models.builders import build_model
    from attnkit.models.configs import config_from_dict
    from attnkit.training.sharded import convert_sharded

    src = Path(src)
    if (src / "checkpoints").is_dir():
        latest = latest_checkpoint(src / "checkpoints")
        if latest is None:
            raise CheckpointError(f"{src} holds no step checkpoint to convert")
        src = latest
    out = Path(out) if out is not None else src.with_name(src.name + "-converted")
    if out.exists():
        raise ValueError(f"{out} already exists; choose another output folder (nothing is overwritten)")
    state = read_checkpoint_state(src)
    if "model_config" not in state:
        raise CheckpointError(f"{src / 'state.json'} lacks the model config; it was not written by attnkit's trainer")
    model = build_model(config_from_dict(state["model_config"]))
    return ConvertedCheckpoint(src, convert_sharded(src, out, model), state.get("world_size", "?"))
