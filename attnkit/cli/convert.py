"""``attnkit convert``: a sharded (``--fsdp``) checkpoint -> the ordinary single-file safetensors checkpoint.

    attnkit convert runs/big                                   # the run's latest step checkpoint
    attnkit convert runs/big/checkpoints/step_00000400 runs/big/step400

The result loads anywhere (``sample``, ``eval``, ``finetune --from``), in one process, on any device.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="turn a sharded (--fsdp) checkpoint into an ordinary safetensors checkpoint",
                       description="Read a checkpoint written by `torchrun ... train --fsdp` (torch.distributed."
                                   "checkpoint shards, any number of processes) in one process and write the "
                                   "ordinary checkpoint folder (model.safetensors + state.json, no optimizer state).")
    p.add_argument("src", type=Path, help="sharded checkpoint folder, or a run folder (its latest step checkpoint)")
    p.add_argument("out", type=Path, nargs="?", default=None,
                   help="where to write the checkpoint folder (default: SRC-converted next to SRC); never overwritten")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnkit.models.builders import build_model
    from attnkit.models.configs import config_from_dict
    from attnkit.training.checkpoint import CheckpointError, latest_checkpoint, read_checkpoint_state
    from attnkit.training.sharded import convert_sharded

    src = Path(args.src)
    if (src / "checkpoints").is_dir():
        latest = latest_checkpoint(src / "checkpoints")
        if latest is None:
            raise CheckpointError(f"{src} holds no step checkpoint to convert")
        src = latest
    out = args.out or src.with_name(src.name + "-converted")
    if out.exists():
        raise ValueError(f"{out} already exists; choose another output folder (nothing is overwritten)")
    state = read_checkpoint_state(src)
    if "model_config" not in state:
        raise CheckpointError(f"{src / 'state.json'} lacks the model config; it was not written by attnkit's trainer")
    model = build_model(config_from_dict(state["model_config"]))
    path = convert_sharded(src, out, model)
    print(f"converted {src} (sharded over {state.get('world_size', '?')} processes) -> {path}")
    return 0
