"""``attnkit params PRESET``: the parameter table of a model preset, counted without allocating the model."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("params", help="print the parameter table of a model preset",
                       description="Print a per-module parameter table and the total for a model preset. "
                                   "The model is built on the meta device, so even gpt2-xl costs no memory.")
    p.add_argument("preset", nargs="?", help="preset name (omit with --list to see them)")
    p.add_argument("--list", action="store_true", help="list the preset names and exit")
    p.add_argument("--depth", type=int, default=1, help="how deep to break modules down (default 1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from attnkit.models.builders import build_model
    from attnkit.models.params import format_parameter_table
    from attnkit.models.presets import PRESETS, get_preset

    if args.list or not args.preset:
        for name, cfg in PRESETS.items():
            print(f"{name:20s} {type(cfg).__name__}")
        return 0
    config = get_preset(args.preset)
    with torch.device("meta"):
        model = build_model(config)
    print(f"preset {args.preset} ({type(config).__name__})")
    print(format_parameter_table(model, depth=args.depth))
    return 0
