"""Registers every sub-command of the ``attnkit`` CLI (one module per command)."""

from __future__ import annotations

import argparse
import importlib

# Each module defines ``register(subparsers)`` that adds its parser and sets ``func``; in ``attnkit --help`` order.
_COMMAND_MODULES = tuple(f"attnkit.cli.{name}" for name in (
    "params", "data", "train", "finetune", "sample", "evaluate", "translate", "viz", "trace", "convert"))


def register_all(subparsers: argparse._SubParsersAction) -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
