"""The ``attnkit`` command line: one entry point, a sub-command per job.

    attnkit params PRESET                      parameter table of a preset
    attnkit data prepare NAME                  fetch, convert and cache a data recipe
    attnkit train lm|mt ...                    train a language model / a translator
    attnkit finetune --from MODEL --data ...   fine-tune a pretrained decoder
    attnkit sample --ckpt DIR | --model NAME   generate text
    attnkit eval lm|mt ...                     loss, perplexity / BLEU, chrF
    attnkit translate --ckpt DIR               translate stdin or --input FILE
    attnkit viz positions|mask|attention|...   PNG figures of what happens inside
    attnkit trace --preset NAME | --ckpt DIR   every module's shapes, parameters and masks
    attnkit convert SRC [OUT]                   sharded (--fsdp) checkpoint -> one safetensors file

Every command has ``--help``. Heavy imports happen inside the commands so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import sys

from attnkit import __version__
from attnkit.cli import commands


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
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError, RuntimeError, FloatingPointError) as e:
        # Expected failures (bad input, missing files, fetch errors) get one clear line, not a traceback.
        print(f"attnkit {args.command}: error: {e}", file=sys.stderr)
        return 2
    finally:
        if "torch.distributed" in sys.modules:  # a torchrun job: leave the process group cleanly
            from attnkit.training.distributed import shutdown

            shutdown()


if __name__ == "__main__":
    sys.exit(main())
