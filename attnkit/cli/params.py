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
    from attnkit.api import parameter_table, preset_names

    if args.list or not args.preset:
        for name, kind in preset_names():
            print(f"{name:20s} {kind}")
        return 0
    print(parameter_table(args.preset, depth=args.depth))
    return 0
