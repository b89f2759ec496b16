"""``attnkit trace``: every module's shapes with named axes, parameters, mult-adds and memory, in forward order
(:func:`attnkit.api.trace_model`; hooks only, the model's code is unchanged).

    attnkit trace --preset transformer-seed000 --batch 3 --src-len 12 --len 7 --depth 3
    attnkit trace --ckpt runs/de-en --src "Das Haus ist groß."            a translator (greedy target)
"""

from __future__ import annotations

import argparse

from attnkit.cli.flags import add_device_flags, options_from


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="print every module's input/output shapes, dtype, parameters and masks",
                       description="Run a model once (a preset with random weights, a run folder, or a named "
                                   "pretrained model) and print, in forward order, every module's name, input and "
                                   "output shapes with named axes (B=2 T=11 C=128) and a legend of derived widths "
                                   "(3C, (H+2K)·D), dtype, parameter count and share, mult-adds and output memory, "
                                   "for attention layers the mask used and the head split, and totals (trainable / "
                                   "frozen parameters, input, activation and parameter sizes).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", help="preset name with random weights (see `attnkit params --list`)")
    src.add_argument("--ckpt", help="run folder or checkpoint folder written by `attnkit train` / `finetune`")
    src.add_argument("--model", help="pretrained model name (smollm2-135m-instruct), .gguf file or Hugging Face folder")
    p.add_argument("--text", default=None, help="text for a language model (--ckpt / --model)")
    p.add_argument("--src", default=None, help="source sentence (translation checkpoints)")
    p.add_argument("--tgt", default=None, help="target fed after <bos> (translation; default: greedy translation)")
    p.add_argument("--batch", type=int, default=argparse.SUPPRESS, help="--preset: batch size B (default 2)")
    p.add_argument("--len", dest="length", type=int, default=argparse.SUPPRESS,
                   help="--preset: length T of the random ids (the target for an encoder-decoder; default 11)")
    p.add_argument("--src-len", type=int, default=argparse.SUPPRESS,
                   help="--preset, encoder-decoder: source length S of the random ids (default: --len)")
    p.add_argument("--vocab-size", type=int, default=argparse.SUPPRESS, help="--preset: override its vocabulary size")
    p.add_argument("--seed", type=int, default=argparse.SUPPRESS, help="--preset: seed of weights and ids (default 0)")
    p.add_argument("--depth", type=int, default=None,
                   help="show calls nested at most N deep (0 = the model only; default: every level)")
    p.add_argument("--json", action="store_true", help="print the trace as JSON instead of a table")
    add_device_flags(p, autocast=False)  # the trace shows the dtype each module really computes in
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnkit.api import ModelText, TracePreset, trace_model

    if args.depth is not None and args.depth < 0:
        raise ValueError(f"--depth must be >= 0, got {args.depth}")
    for flag in ("text", "src", "tgt") if args.preset else ():
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag} needs a tokenizer: use --ckpt or --model; a --preset takes --batch/--len")
    for dest in () if args.preset else ("batch", "length", "src_len", "vocab_size", "seed"):  # absent unless given
        if hasattr(args, dest):
            raise ValueError(f"--{'len' if dest == 'length' else dest.replace('_', '-')} is for --preset's random ids")
    what = options_from(TracePreset if args.preset else ModelText, args)
    result = trace_model(what)
    print(result.to_json(args.depth) if args.json else result.format(args.depth))
    return 0
