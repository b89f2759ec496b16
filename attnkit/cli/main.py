"""The ``attnkit`` command line: one entry point, a sub-command per job (``attnkit --help`` lists them; each has
``--help``). Each command turns its flags into :mod:`attnkit.api` options, calls one function and prints the
result; heavy imports happen inside the commands, so ``--help`` is instant.

Exit codes: 0 done, 2 a clear error (one line), 130 / 143 stopped by SIGINT / SIGTERM (a training run first writes
a checkpoint and prints the command that resumes it; see :mod:`attnkit.training.preemption`).
"""

from __future__ import annotations

import argparse
import sys

from attnkit import __version__
from attnkit.cli import commands


# Options whose value is free text: the next argument is their value even when it starts with "-" (a prompt such as
# "-5 degrees" or "--- a poem"), which argparse alone would take for an option and refuse with a usage message.
TEXT_OPTIONS = frozenset({"--prompt", "--stop", "--text", "--src", "--tgt"})


def join_text_values(argv: list[str]) -> list[str]:
    """``argv`` with each ``TEXT_OPTION VALUE`` whose value starts with "-" written as ``TEXT_OPTION=VALUE``
    (nothing after a bare ``--`` is touched)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return out + argv[i:]
        if arg in TEXT_OPTIONS and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnkit",
        description="The Transformer built by hand in PyTorch: train, sample, translate, inspect.",
    )
    parser.add_argument("--version", action="version", version=f"attnkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.register_all(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(join_text_values(sys.argv[1:] if argv is None else list(argv)))
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as stop:
        return _interrupted(stop)
    except (ValueError, OSError, RuntimeError, FloatingPointError) as e:
        # Expected failures (bad input, missing files, fetch errors) get one clear line, not a traceback.
        print(f"attnkit {args.command}: error: {e}", file=sys.stderr)
        return 2
    finally:
        if "torch.distributed" in sys.modules:  # a torchrun job: leave the process group cleanly
            from attnkit.training.distributed import shutdown

            shutdown()


def _interrupted(stop: KeyboardInterrupt) -> int:
    """The one line and the exit code of a command stopped by a signal: a training run stopped by SIGINT / SIGTERM
    (:class:`attnkit.training.preemption.Interrupted`) says where its checkpoint is and how to resume, and exits
    with 130 / 143 (printed once per torchrun job); any other Ctrl-C prints "interrupted" and exits with 130."""
    preemption = sys.modules.get("attnkit.training.preemption")  # not imported: not a training run's stop
    if preemption is None or not isinstance(stop, preemption.Interrupted):
        print("interrupted", file=sys.stderr)
        return 130
    from attnkit.api.launcher import is_main_process

    if is_main_process():
        print(f"attnkit: {stop}", file=sys.stderr)
    return stop.exit_code


if __name__ == "__main__":
    sys.exit(main())
