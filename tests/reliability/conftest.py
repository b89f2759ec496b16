"""Make the repository root importable (the sweep's rows live in ``benchmarks/reliability.py``), and run the
sweep's command-line rows in this process through the command's entry point (the sweep alone runs them in child
processes, as a user does: the outcome is the same, without a torch import per row)."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import benchmarks.reliability as sweep  # noqa: E402
from attnkit.cli.main import build_parser, main  # noqa: E402

sweep.IN_PROCESS_MAIN = main
sweep.BUILD_PARSER = build_parser
