"""``attnkit translate``: translate stdin or ``--input`` line by line, streaming (:class:`attnkit.api.Translator`:
one line out per line in, in order; over-long sources cut and counted, or refused under ``--strict``), or with
``--output PAIRS.tsv`` into a resumable pairs file (:func:`attnkit.api.translate_file`, back-translation).

    echo "Das Haus ist groß." | attnkit translate --ckpt runs/de-en
    attnkit translate --ckpt runs/en-de --input en-mono --output synthetic.tsv --beam 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnkit.cli.flags import (DEFAULT_BATCH_SIZE, add_decoding_flags, add_device_flags, add_translator_flag,
                               options_from)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate stdin or --input FILE with a trained translator",
                       description="Translate one sentence per line (stdin or --input) with a model trained by "
                                   "`attnkit train mt`; writes one translation per line to stdout, streaming.")
    add_translator_flag(p)
    p.add_argument("--input", default=None, help="UTF-8 text file, one sentence per line (default stdin); with "
                   "--output also the name of a monolingual recipe (en-mono)")
    p.add_argument("--output", type=Path, default=None, metavar="PAIRS",
                   help="write sentence<TAB>translation pairs to this file instead of translations to stdout (needs "
                        "--input): the synthetic data of back-translation (train mt --synthetic); a progress bar, the "
                        "throughput at the end; an existing file is continued after its last complete line")
    p.add_argument("--sort-batches", type=int, default=None, metavar="K",
                   help="with --output: read K batches at a time and sort them by length together (default 16)")
    p.add_argument("--no-progress", action="store_true", help="with --output: no progress bar")
    add_decoding_flags(p)
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences/batch (default %(default)s)")
    p.add_argument("--strict", action="store_true", help="refuse sentences longer than the model allows (not cut)")
    add_device_flags(p)
    p.set_defaults(func=run_translate)


def run_translate(args: argparse.Namespace) -> int:
    from attnkit.api.translation import TranslateOptions, Translator, open_lines

    if args.output is not None:
        return _translate_to_pairs(args)
    if args.sort_batches is not None or args.no_progress:
        raise ValueError("--sort-batches and --no-progress work only with --output (a pairs file), got them without")
    if args.input is None and sys.stdin is None:
        raise ValueError("no input: stdin is closed; pass --input FILE")
    if args.input is not None and not Path(args.input).is_file():
        raise FileNotFoundError(f"--input: {'a folder' if Path(args.input).is_dir() else 'no such file'}: {args.input}")
    translator = Translator(options_from(TranslateOptions, args))
    lines = open_lines(args.input) if args.input is not None else sys.stdin
    # Typing at a terminal: answer every line at once instead of waiting for a full batch.
    batch_size = 1 if args.input is None and sys.stdin.isatty() else args.batch_size
    try:
        for hyps in translator.stream(lines, batch_size=batch_size):
            sys.stdout.write("".join(h + "\n" for h in hyps))
            sys.stdout.flush()  # stream: this batch is out before the next is read
    finally:
        if args.input is not None:
            lines.close()
    if translator.n_truncated:
        print(f"attnkit translate: {translator.n_truncated} of {translator.n_lines} sentences were longer than "
              f"max_len = {translator.max_len} tokens and were truncated (--strict refuses them)", file=sys.stderr)
    return 0


def _translate_to_pairs(args: argparse.Namespace) -> int:
    from attnkit.api.translation import TranslateFileOptions, translate_file

    if args.input is None:
        raise ValueError("--output needs --input (a file, read again to continue a stopped run)")
    sort = TranslateFileOptions.sort_batches if args.sort_batches is None else args.sort_batches  # None: default 16
    result = translate_file(options_from(TranslateFileOptions, args, sort_batches=sort))
    if result.truncated:
        print(f"attnkit translate: {result.truncated} sentences were longer than the model allows and were truncated "
              "(--strict refuses them)", file=sys.stderr)
    print(result.summary(), file=sys.stderr)
    return 0
