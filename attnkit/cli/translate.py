"""``attnkit translate``: translate sentences with a trained encoder-decoder, one per line.

    echo "Das Haus ist groß." | attnkit translate --ckpt runs/de-en
    attnkit translate --ckpt runs/de-en/checkpoints/averaged --input sentences.de --beam 5 > sentences.en

Input lines are read from ``--input`` or stdin and translated in batches of ``--batch-size``; each batch's
translations are written to stdout (one line per input line, in input order, an empty line for an empty
input line) and flushed at once, so the command streams. Inside a batch the sentences are sorted by length
(less padding in the encoder and fewer finished rows dragging along in the decoder) and put back in order
before printing.

A source longer than the model's ``max_len`` (``<eos>`` included) is cut to fit and counted on stderr, or
refused with its line number under ``--strict``.

The translation itself is :mod:`attnkit.generation.translate` (shared with ``eval mt`` and training-time BLEU).

Axis legend: B sentences in a batch, S source length.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterable, Iterator

from attnkit.cli.flags import (DEFAULT_BATCH_SIZE, add_decoding_flags, add_device_flags, check_decoding_flags,
                               inference_device, place_model)

def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate stdin or --input FILE with a trained translator",
                       description="Translate one sentence per line (stdin or --input) with a model trained by "
                                   "`attnkit train mt`; writes one translation per line to stdout, streaming.")
    p.add_argument("--ckpt", type=Path, required=True,
                   help="run folder (uses checkpoints/best) or a checkpoint folder (e.g. checkpoints/averaged)")
    p.add_argument("--input", type=Path, default=None, help="UTF-8 text file, one sentence per line (default stdin)")
    add_decoding_flags(p)
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences per batch")
    p.add_argument("--strict", action="store_true", help="refuse sentences longer than the model allows "
                   "instead of truncating them")
    add_device_flags(p)
    p.set_defaults(func=run_translate)


def _read_input_lines(args: argparse.Namespace) -> Iterable[str]:
    if args.input is None:
        return sys.stdin
    if not args.input.is_file():
        raise FileNotFoundError(f"--input: no such file: {args.input}")
    return open(args.input, encoding="utf-8")


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line.rstrip("\r\n"))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def run_translate(args: argparse.Namespace) -> int:
    from attnkit.generation.translate import encode_sources, translate_ids
    from attnkit.training.runs import load_trained

    check_decoding_flags(args)
    device = inference_device(args)  # a device (or --autocast) this machine lacks fails before loading
    model, tokenizer, _ = load_trained(args.ckpt, expect_kind="mt")  # an LM checkpoint is refused here
    place_model(model, args, device)  # greedy and beam search follow the weights' device and dtype
    if tokenizer is None:
        raise ValueError(f"{args.ckpt} holds no tokenizer (extra['tokenizer']); it was not written by attnkit train mt")
    max_len = getattr(model.config, "max_len", None)
    lines = _read_input_lines(args)
    # Typing at a terminal: answer every line at once instead of waiting for a full batch.
    batch_size = 1 if args.input is None and sys.stdin.isatty() else args.batch_size
    n_lines = n_cut = 0
    try:
        for chunk in _chunks(lines, batch_size):
            ids, cut = encode_sources(tokenizer, [s.strip() for s in chunk], max_len=max_len, strict=args.strict,
                                      first_line=n_lines + 1)
            ids = [s if text.strip() else [] for s, text in zip(ids, chunk)]
            for hyps in translate_ids(model, tokenizer, ids, beam=args.beam, length_penalty=args.length_penalty,
                                      batch_size=batch_size, max_len_a=args.max_len_a,
                                      max_len_b=args.max_len_b):
                sys.stdout.write("".join(h + "\n" for h in hyps))
            sys.stdout.flush()  # stream: this batch is out before the next is read
            n_lines += len(chunk)
            n_cut += cut
    finally:
        if args.input is not None:
            lines.close()
    if n_cut:
        print(f"attnkit translate: {n_cut} of {n_lines} sentences were longer than max_len = {max_len} tokens "
              f"and were truncated (--strict refuses them)", file=sys.stderr)
    return 0
