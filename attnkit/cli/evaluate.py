"""``attnkit eval lm`` and ``attnkit eval mt``: measure a trained model on held-out data.

    attnkit eval lm --ckpt runs/shakespeare --data shakespeare            # valid loss, perplexity
    attnkit eval mt --ckpt runs/de-en --data de-en --split test --beam 4  # BLEU, chrF

``eval lm`` runs the model over the whole validation split in non-overlapping windows of the model's block
size (every token predicted once, :func:`attnkit.data.lm_dataset.eval_batches`), or over ``--max-batches``
batches spread evenly over it, and reports the mean cross-entropy and ``exp`` of it (perplexity). The split is
the one ``attnkit train lm`` used (same recipe, same ``valid_fraction``), tokenized with the checkpoint's own
tokenizer.

``eval mt`` translates the sources of a split (recipe name or prepared folder + ``--split``, a TSV file, or
``SRC_FILE,TGT_FILE``) with beam search (``--beam 1`` = greedy) and scores the *detokenized* output against
the references with sacreBLEU: corpus BLEU (default ``13a`` tokenizer, the WMT standard) and chrF.

Both print one summary line and write the figures as JSON (``--json``, default a file in the checkpoint
folder, written atomically); ``eval mt`` can also write the translations (``--hyps FILE``).

Axis legend: B batch (windows), T block size, V vocabulary.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from attnkit.cli.flags import (DEFAULT_BATCH_SIZE, add_decoding_flags, add_device_flags, check_decoding_flags,
                               inference_device, place_model)
from attnkit.data.parallel import SPLITS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a checkpoint: lm (loss, perplexity) or mt (BLEU, chrF)",
                       description="Evaluate a trained checkpoint on held-out data.")
    esub = p.add_subparsers(dest="eval_command", metavar="TASK", required=True)

    lm = esub.add_parser("lm", help="validation loss and perplexity of a language model",
                         description="Mean cross-entropy and perplexity over the validation split (the same split "
                                     "`attnkit train lm` held out), in non-overlapping windows of the block size.")
    lm.add_argument("--ckpt", type=Path, required=True, help="run folder (uses checkpoints/best) or checkpoint folder")
    lm.add_argument("--data", required=True, help="recipe name (shakespeare, fortunes) or the local file/folder "
                    "the model was trained on")
    lm.add_argument("--batch-size", type=int, default=16, help="windows per batch")
    lm.add_argument("--max-batches", type=int, default=None,
                    help="evaluate only this many batches (windows spread evenly over the split)")
    lm.add_argument("--json", type=Path, default=None, help="where to write the results (default <ckpt>/eval_lm.json)")
    add_device_flags(lm)
    lm.set_defaults(func=run_eval_lm)

    mt = esub.add_parser("mt", help="BLEU and chrF of a translator (sacreBLEU, detokenized)",
                         description="Translate a split with beam search and score it with sacreBLEU "
                                     "(corpus BLEU with the 13a tokenizer, and chrF).")
    mt.add_argument("--ckpt", type=Path, required=True,
                    help="run folder (uses checkpoints/best) or checkpoint folder (e.g. checkpoints/averaged)")
    mt.add_argument("--data", default=None, help="recipe name or prepared folder (with --split), a TSV file, or "
                    "SRC_FILE,TGT_FILE (default: the data the model was trained on)")
    mt.add_argument("--split", default="test", choices=SPLITS,
                    help="split of a recipe or prepared folder (default test; test-docs: the de-en recipe's package-description sentences; ignored for files)")
    mt.add_argument("--max-sentences", type=int, default=None, help="only the first N pairs (quick checks)")
    add_decoding_flags(mt)
    mt.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences per batch")
    mt.add_argument("--strict", action="store_true", help="refuse malformed lines and over-long sources")
    mt.add_argument("--json", type=Path, default=None,
                    help="where to write the results (default <ckpt>/eval_mt_<data>_<split>.json)")
    mt.add_argument("--hyps", type=Path, default=None, help="also write the translations here, one per line")
    add_device_flags(mt)
    mt.set_defaults(func=run_eval_mt)


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    from attnkit.training.atomic import write_text_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


def _default_json(ckpt: Path, name: str) -> Path:
    from attnkit.training.runs import resolve_checkpoint

    return resolve_checkpoint(ckpt) / name


# ------------------------------------------------------------------------------------------------------
# eval lm
# ------------------------------------------------------------------------------------------------------
def run_eval_lm(args: argparse.Namespace) -> int:
    import torch

    from attnkit.data.lm_dataset import eval_batches, num_eval_windows, prepare_lm_data
    from attnkit.training.lm_task import mean_token_loss, next_token_loss, perplexity
    from attnkit.training.runs import load_trained

    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.max_batches is not None and args.max_batches < 1:
        raise ValueError(f"--max-batches must be >= 1, got {args.max_batches}")
    device = inference_device(args)  # a device (or --autocast) this machine lacks fails before loading
    model, tokenizer, state = load_trained(args.ckpt, expect_kind="lm")  # a translator is refused here
    place_model(model, args, device)
    if tokenizer is None:
        raise ValueError(f"{args.ckpt} holds no tokenizer (extra['tokenizer']); it was not written by attnkit train lm")
    T = int(model.config.block_size)
    train_block = (state.get("train_config") or {}).get("block_size")
    if isinstance(train_block, int) and 1 <= train_block <= T:
        T = train_block  # evaluate at the context length the model was trained with
    lm = prepare_lm_data(args.data, tokenizer, block_size=T)
    valid = lm.valid
    n_windows = num_eval_windows(valid, T)
    max_windows = None if args.max_batches is None else args.max_batches * args.batch_size
    t0 = time.perf_counter()
    with torch.no_grad():
        mean, count = mean_token_loss(model, eval_batches(valid, T, args.batch_size, max_windows=max_windows),
                                      next_token_loss)
    if not math.isfinite(mean):
        raise FloatingPointError(f"the validation loss is {mean}: the checkpoint's weights are broken")
    result = {"kind": "lm", "ckpt": str(args.ckpt), "data": str(args.data), "split": "valid",
              "block_size": T, "windows": min(n_windows, max_windows or n_windows), "tokens": count,
              "loss": mean, "ppl": perplexity(mean), "seconds": time.perf_counter() - t0}
    out = args.json or _default_json(args.ckpt, "eval_lm.json")
    _write_json(out, result)
    print(f"valid loss {mean:.4f}, perplexity {result['ppl']:.3f} over {count:,} tokens "
          f"({result['windows']} windows of {T}); written to {out}")
    return 0


# ------------------------------------------------------------------------------------------------------
# eval mt
# ------------------------------------------------------------------------------------------------------
def run_eval_mt(args: argparse.Namespace) -> int:
    from attnkit.data.parallel import load_eval_pairs
    from attnkit.generation.translate import translate_sentences
    from attnkit.training.bleu import score_translations
    from attnkit.training.runs import load_trained

    check_decoding_flags(args)
    device = inference_device(args)  # a device (or --autocast) this machine lacks fails before loading
    model, tokenizer, state = load_trained(args.ckpt, expect_kind="mt")  # an LM checkpoint is refused here
    place_model(model, args, device)
    if tokenizer is None:
        raise ValueError(f"{args.ckpt} holds no tokenizer (extra['tokenizer']); it was not written by attnkit train mt")
    data = args.data or (state.get("extra") or {}).get("data")
    if not data:
        raise ValueError(f"{args.ckpt} does not record its data; pass --data")
    if args.data is None and "," not in data and not Path(data).is_dir() and Path(data).exists():
        # a model trained on a single TSV file: that file is its *training* data, never score on it by default
        raise ValueError(f"{args.ckpt} was trained on the file {data}, which has no test split; pass --data "
                         f"with the pairs to score")
    if "," in data:
        raise ValueError(f"{args.ckpt} was trained on the files {data}; pass --data with the pairs to score")
    corpus = load_eval_pairs(data, args.split, strict=args.strict)
    sources, refs = list(corpus.sources), list(corpus.targets)
    if args.max_sentences is not None:
        if args.max_sentences < 1:
            raise ValueError(f"--max-sentences must be >= 1, got {args.max_sentences}")
        sources, refs = sources[:args.max_sentences], refs[:args.max_sentences]
    if not sources:
        raise ValueError(f"{corpus.path} holds no usable pair ({corpus.skipped} malformed lines skipped)")

    t0 = time.perf_counter()
    hyps, n_cut = translate_sentences(model, tokenizer, sources, strict=args.strict, beam=args.beam,
                                      length_penalty=args.length_penalty, batch_size=args.batch_size,
                                      max_len_a=args.max_len_a, max_len_b=args.max_len_b)
    seconds = time.perf_counter() - t0
    scores = score_translations(hyps, refs)
    stem = Path(str(data)).stem if any(c in str(data) for c in "/.,") else str(data)
    from_files = "," in str(data) or Path(str(data)).is_file()  # --split is ignored for files
    split = None if from_files else args.split
    result = {"kind": "mt", "ckpt": str(args.ckpt), "data": str(data), "split": split,
              "sentences": len(sources), "skipped_lines": corpus.skipped, "truncated_sources": n_cut,
              "beam": args.beam, "length_penalty": args.length_penalty, "max_len_a": args.max_len_a,
              "max_len_b": args.max_len_b, **scores, "seconds": seconds}
    out = args.json or _default_json(args.ckpt, f"eval_mt_{stem}.json" if from_files
                                     else f"eval_mt_{stem}_{args.split}.json")
    _write_json(out, result)
    if args.hyps is not None:
        from attnkit.training.atomic import write_text_atomic

        write_text_atomic(args.hyps, "".join(h + "\n" for h in hyps))
    if corpus.skipped or n_cut:
        print(f"note: {corpus.skipped} malformed lines skipped, {n_cut} sources truncated", file=sys.stderr)
    print(f"BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  ({len(sources)} sentences, {split or data}, "
          f"beam {args.beam}, length penalty {args.length_penalty}; {seconds:.0f} s)  {scores['bleu_signature']}; "
          f"written to {out}")
    return 0
