"""The ``attnkit`` command line: one entry point, a sub-command per job (``attnkit --help`` lists them; each has
``--help``). Each command turns its flags into :mod:`attnkit.api` options, calls one function and prints the
result; heavy imports happen after the flags are parsed, so ``--help`` is instant.

Exit codes: 0 done, 2 a clear error (one line), 130 / 143 stopped by SIGINT / SIGTERM (a training run first writes
a checkpoint and prints how to resume, :mod:`attnkit.training.preemption`; before torch is loaded, Ctrl-C ends the
process at once), 141 (128 + SIGPIPE) stopped quietly as the reader of its output went away (``... | head``).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys

from attnkit import __version__
from attnkit.api.launcher import import_torch, starting_up

# One module per command, each with ``register(subparsers)`` adding its parser; in ``attnkit --help`` order.
COMMANDS = ("params", "data", "train", "finetune", "sample", "evaluate", "translate", "viz", "trace", "convert")
# Free-text options take the next argument as their value even when it starts with "-" ("-5 degrees").
TEXT_OPTIONS = frozenset({"--prompt", "--system", "--stop", "--text", "--src", "--tgt"})


def join_text_values(argv: list[str]) -> list[str]:
    """``argv`` with ``TEXT_OPTION -VALUE`` written as ``TEXT_OPTION=-VALUE`` (nothing after a bare ``--``)."""
    out, rest = [], list(argv)
    while rest and rest[0] != "--":
        arg = rest.pop(0)
        out.append(f"{arg}={rest.pop(0)}" if arg in TEXT_OPTIONS and rest and rest[0].startswith("-") else arg)
    return out + rest


class CommandParser(argparse.ArgumentParser):
    """A command's parser: an unknown flag is its own error, with its usage and the closest flag it knows."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extra = super().parse_known_args(args, namespace)
        if extra:
            flags = [flag for action in self._actions for flag in action.option_strings]
            close = difflib.get_close_matches(extra[0].split("=")[0], flags, n=1)
            self.error(f"unrecognized arguments: {' '.join(extra)}" + (f"; did you mean {close[0]}?" if close else ""))
        return namespace, extra


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnkit", description="The Transformer built by hand in PyTorch: train, "
                                     "sample, translate, inspect.")
    parser.add_argument("--version", action="version", version=f"attnkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=CommandParser)
    for name in COMMANDS:
        importlib.import_module(f"attnkit.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    with starting_up():  # until torch is loaded (every command but `data` runs it), Ctrl-C ends the process quietly
        args = build_parser().parse_args(join_text_values(sys.argv[1:] if argv is None else list(argv)))
        if args.command != "data":
            import_torch(args.command)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as stop:
        from attnkit.api.launcher import interruption
        message, code = interruption(stop)
        if message:
            print(message, file=sys.stderr)
        return code
    except BrokenPipeError:  # stdout's reader has gone (`| head`): stop as a Unix filter does, without a word
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush then writes nowhere
        return 141
    except (ValueError, OSError, RuntimeError, ArithmeticError) as e:
        # Expected failures (bad input, missing files, fetch errors, float overflow): one clear line, no traceback.
        print(f"attnkit {args.command}: error: {e}", file=sys.stderr)
        return 2
    finally:
        # A training run's process group (torchrun) is left cleanly; not imported (or cut short by Ctrl-C): none.
        shutdown = getattr(sys.modules.get("attnkit.training.distributed"), "shutdown", None)
        if shutdown is not None:
            shutdown()


if __name__ == "__main__":
    sys.exit(main())
