"""``attnkit eval lm|mt``: :func:`attnkit.api.evaluate_lm` (loss, perplexity) and :func:`attnkit.api.evaluate_mt`
(sacreBLEU BLEU, chrF); each prints one summary line and writes the figures as JSON (``eval lm --model``: with
``--json``).

    attnkit eval mt --ckpt runs/de-en --data de-en --split test --beam 4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnkit.cli.flags import (DEFAULT_BATCH_SIZE, add_decoding_flags, add_device_flags, add_model_source,
                               add_translator_flag, command_group, options_from)
from attnkit.data.corpora.parallel import SPLITS


def register(sub: argparse._SubParsersAction) -> None:
    esub = command_group(sub, "eval", help="evaluate a checkpoint: lm (loss, perplexity) or mt (BLEU, chrF)",
                         description="Evaluate a trained checkpoint on held-out data.", metavar="TASK")

    lm = esub.add_parser("lm", help="validation loss and perplexity of a language model",
                         description="Mean cross-entropy and perplexity over the validation split that `attnkit train "
                                     "lm` or `finetune` holds out (--model: finetune's), in windows of the block size.")
    add_model_source(lm)
    lm.add_argument("--data", required=True, help="recipe name (shakespeare, fortunes) or local text file/folder")
    lm.add_argument("--block-size", type=int, metavar="T", help="window length (default: trained; --model: 256)")
    lm.add_argument("--batch-size", type=int, default=16, help="windows per batch")
    lm.add_argument("--max-batches", type=int, default=None, help="only this many batches, spread over the split")
    lm.add_argument("--stride", type=int, metavar="N", help="overlapping windows N ids apart, each scoring its new ids")
    lm.add_argument("--documents", metavar="MODE", help="--model: documents as finetune --documents reads them (auto)")
    lm.add_argument("--json", type=Path, help="results file (default <checkpoint>/eval_lm.json; --model: none)")
    add_device_flags(lm)
    lm.set_defaults(func=run_eval_lm)

    mt = esub.add_parser("mt", help="BLEU and chrF of a translator (sacreBLEU, detokenized)",
                         description="Translate a split with beam search and score it with sacreBLEU "
                                     "(corpus BLEU with the 13a tokenizer, and chrF).")
    add_translator_flag(mt)
    mt.add_argument("--data", default=None, help="recipe name or prepared folder (with --split), a TSV file, or "
                    "SRC_FILE,TGT_FILE (default: the recipe or folder the model was trained on)")
    mt.add_argument("--split", default="test", choices=SPLITS,
                    help="split of a recipe or prepared folder (default test; test-docs: the de-en recipe's package-description sentences; ignored for files)")
    mt.add_argument("--max-sentences", type=int, default=None, help="only the first N pairs (quick checks)")
    add_decoding_flags(mt)
    mt.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences/batch (default %(default)s)")
    mt.add_argument("--strict", action="store_true", help="refuse malformed lines and over-long sources")
    mt.add_argument("--json", type=Path, help="results file (default <checkpoint>/eval_mt_<data>[_<split>].json)")
    mt.add_argument("--hyps", type=Path, default=None, help="also write the translations here, one per line")
    add_device_flags(mt)
    mt.set_defaults(func=run_eval_mt)


def run_eval_lm(args: argparse.Namespace) -> int:
    from attnkit.api import EvalLMOptions, evaluate_lm

    result = evaluate_lm(options_from(EvalLMOptions, args))
    m = result.metrics
    bpb = "" if m["bits_per_byte"] is None else f", {m['bits_per_byte']:.4f} bits per byte"
    print(f"valid loss {m['loss']:.4f}, perplexity {m['ppl']:.3f}{bpb} over {m['tokens']:,} tokens "
          f"({m['windows']} windows of {m['block_size']}, stride {m['stride']})"
          + ("" if result.path is None else f"; written to {result.path}"))
    return 0


def run_eval_mt(args: argparse.Namespace) -> int:
    from attnkit.api import EvalMTOptions, evaluate_mt

    result = evaluate_mt(options_from(EvalMTOptions, args))
    m = result.metrics
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"BLEU {m['bleu']:.2f}  chrF {m['chrf']:.2f}  ({m['sentences']} sentences, {m['split'] or m['data']}, "
          f"beam {m['beam']}, length penalty {m['length_penalty']}; {m['seconds']:.0f} s)  {m['bleu_signature']}; "
          f"written to {result.path}")
    return 0
