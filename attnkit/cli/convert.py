"""``attnkit convert``: a sharded (``--fsdp``) checkpoint -> the ordinary single-file safetensors checkpoint, which
loads anywhere, in one process, on any device (:func:`attnkit.api.convert_checkpoint`).

    attnkit convert runs/big                                   # the run's latest step checkpoint
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
    from attnkit.api import convert_checkpoint

    done = convert_checkpoint(args.src, args.out)
    print(f"converted {done.src} (sharded over {done.world_size} processes) -> {done.path}")
    return 0
