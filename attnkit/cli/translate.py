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

The library side of this file, used by ``attnkit eval mt`` too: :func:`encode_sources` (text → source ids
with ``<eos>``, length limit) and :func:`translate_ids` / :func:`translate_sentences` (ids or text → text,
greedy or beam search from :mod:`attnkit.generation`).

Axis legend: B sentences in a batch, S source length.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from attnkit.cli.flags import add_device_flags, inference_device, place_model

# Decoding defaults: beam 4 and the GNMT length penalty 0.6 (common values; on de-en valid, beam 4 gained ~0.4
# BLEU over greedy and the length penalty 0.0-1.0 changed BLEU by < 0.3, see benchmarks/RESULTS.md "Translation").
DEFAULT_BEAM = 4
DEFAULT_LENGTH_PENALTY = 0.6
DEFAULT_BATCH_SIZE = 32


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate stdin or --input FILE with a trained translator",
                       description="Translate one sentence per line (stdin or --input) with a model trained by "
                                   "`attnkit train mt`; writes one translation per line to stdout, streaming.")
    p.add_argument("--ckpt", type=Path, required=True,
                   help="run folder (uses checkpoints/best) or a checkpoint folder (e.g. checkpoints/averaged)")
    p.add_argument("--input", type=Path, default=None, help="UTF-8 text file, one sentence per line (default stdin)")
    add_decoding_args(p)
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences per batch")
    p.add_argument("--strict", action="store_true", help="refuse sentences longer than the model allows "
                   "instead of truncating them")
    add_device_flags(p)
    p.set_defaults(func=run_translate)


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    """``--beam``, ``--length-penalty``, ``--max-len-a``, ``--max-len-b`` (shared with ``eval mt``)."""
    g = p.add_argument_group("decoding")
    g.add_argument("--beam", type=int, default=DEFAULT_BEAM, help="beam size (1 = greedy search)")
    g.add_argument("--length-penalty", type=float, default=DEFAULT_LENGTH_PENALTY,
                   help="alpha of the GNMT length normalisation ((5 + len) / 6) ** alpha (0 = none)")
    g.add_argument("--max-len-a", type=float, default=1.2, help="target length limit a * source length + b: a")
    g.add_argument("--max-len-b", type=float, default=10, help="target length limit a * source length + b: b")


def check_decoding_args(args: argparse.Namespace) -> None:
    if args.beam < 1:
        raise ValueError(f"--beam must be >= 1, got {args.beam}")
    if getattr(args, "batch_size", 1) < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")


# ------------------------------------------------------------------------------------------------------
# library: text -> ids -> text
# ------------------------------------------------------------------------------------------------------
def encode_sources(tokenizer: Any, sentences: Sequence[str], *, max_len: int | None, strict: bool = False,
                   first_line: int = 1) -> tuple[list[list[int]], int]:
    """Tokenize source sentences for the encoder: ids + ``<eos>``, at most ``max_len`` tokens.

    Longer sentences are cut (keeping their first ``max_len - 1`` tokens, then ``<eos>``) and counted; with
    ``strict`` the first one raises ``ValueError`` naming its line (``first_line`` numbers ``sentences[0]``).
    Returns ``(ids, number truncated)``.
    """
    if tokenizer.eos_id is None or tokenizer.pad_id is None or tokenizer.bos_id is None:
        raise ValueError(f"translation needs a tokenizer with <pad>, <bos> and <eos>; got {tokenizer!r}")
    out, n_cut = [], 0
    for i, ids in enumerate(tokenizer.encode_batch(list(sentences))):
        if max_len is not None and len(ids) + 1 > max_len:
            if strict:
                raise ValueError(f"line {first_line + i}: the sentence is {len(ids) + 1} tokens with <eos>, longer "
                                 f"than the model's max_len = {max_len} (drop --strict to truncate it)")
            del ids[max_len - 1:]
            n_cut += 1
        out.append(ids + [tokenizer.eos_id])
    return out, n_cut


def translate_ids(model: Any, tokenizer: Any, sources: Sequence[list[int]], *, beam: int = DEFAULT_BEAM,
                  length_penalty: float = DEFAULT_LENGTH_PENALTY, batch_size: int = DEFAULT_BATCH_SIZE,
                  max_len_a: float = 1.2, max_len_b: float = 10) -> Iterator[list[str]]:
    """Translate source id lists (each ending with ``<eos>``; an empty list gives ``""``) in batches.

    Yields one list of ``len(chunk)`` strings per chunk of ``batch_size`` sources, in input order. Inside a
    chunk sources are sorted by length, decoded, and put back in order.

    Shape:
        each chunk is padded into ``src (B, S)`` with its padding mask ``(B, S)``.
    """
    import torch

    from attnkit.generation import beam_search, greedy_search

    if beam < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = next(model.parameters()).device
    for start in range(0, len(sources), batch_size):
        chunk = list(sources[start:start + batch_size])
        hyps = [""] * len(chunk)
        order = sorted((i for i in range(len(chunk)) if chunk[i]), key=lambda i: len(chunk[i]))
        if order:
            width = len(chunk[order[-1]])
            src = torch.full((len(order), width), tokenizer.pad_id, dtype=torch.long)  # (B, S)
            lengths = torch.tensor([len(chunk[i]) for i in order])  # (B,)
            for row, i in enumerate(order):
                src[row, :len(chunk[i])] = torch.tensor(chunk[i], dtype=torch.long)
            mask = torch.arange(width)[None, :] >= lengths[:, None]  # (B, S) True = padding
            common = dict(bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id,
                          max_len_a=max_len_a, max_len_b=max_len_b)
            with torch.no_grad():
                if beam == 1:
                    ids = greedy_search(model, src.to(device), mask.to(device), **common)
                else:
                    ids = beam_search(model, src.to(device), mask.to(device), beam_size=beam,
                                      length_penalty=length_penalty, **common)
            for row, i in enumerate(order):
                hyps[i] = tokenizer.decode(ids[row], skip_special_tokens=True)
        yield hyps


def translate_sentences(model: Any, tokenizer: Any, sentences: Sequence[str], *, strict: bool = False,
                        sort_all: bool = True, **kwargs: Any) -> tuple[list[str], int]:
    """Translate a whole list of sentences; returns ``(translations in input order, number truncated)``.

    With ``sort_all`` the whole list is sorted by length before batching (fast for a test set), and the
    results are put back in order. ``kwargs`` go to :func:`translate_ids`.
    """
    max_len = getattr(getattr(model, "config", None), "max_len", None)
    ids, n_cut = encode_sources(tokenizer, [s.strip() for s in sentences], max_len=max_len, strict=strict)
    ids = [s if text.strip() else [] for s, text in zip(ids, sentences)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i])) if sort_all else list(range(len(ids)))
    out: list[str] = [""] * len(ids)
    k = 0
    for hyps in translate_ids(model, tokenizer, [ids[i] for i in order], **kwargs):
        for h in hyps:
            out[order[k]] = h
            k += 1
    return out, n_cut


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
    from attnkit.training.runs import load_trained

    check_decoding_args(args)
    device = inference_device(args)  # a device (or --autocast) this machine lacks fails before loading
    model, tokenizer, _ = load_trained(args.ckpt, expect_kind="mt")  # an LM checkpoint is refused here
    if tokenizer is None:
        raise ValueError(f"{args.ckpt} holds no tokenizer (extra['tokenizer']); it was not written by attnkit train mt")
    place_model(model, args, device)  # greedy and beam search follow the weights' device and dtype
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
