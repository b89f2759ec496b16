"""Registers every sub-command of the ``attnkit`` CLI (one module per command)."""

from __future__ import annotations

import argparse
import importlib

# Each module defines ``register(subparsers)`` that adds its parser and sets ``func``.
_COMMAND_MODULES = (
    "attnkit.cli.params",
    "attnkit.cli.data",
    "attnkit.cli.train",
    "attnkit.cli.finetune",
    "attnkit.cli.sample",
    "attnkit.cli.evaluate",
    "attnkit.cli.translate",
    "attnkit.cli.viz",
    "attnkit.cli.trace",
    "attnkit.cli.convert",
)


def register_all(subparsers: argparse._SubParsersAction) -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
