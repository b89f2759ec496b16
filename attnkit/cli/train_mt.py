"""``attnkit train mt``: train an encoder-decoder translator with the shared training loop.

    attnkit train mt --data de-en --max-time 15 --out runs/de-en

The run is :func:`attnkit.api.train_mt` (its docstring says what happens, in order); here are its flags.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnkit.api import TrainMTOptions, train_mt
from attnkit.cli.flags import add_run_flags, runs
from attnkit.recipes import (MT_DEFAULT_ANNEAL_SHARE, MT_DEFAULT_BLEU_SENTENCES, MT_DEFAULT_MAX_LEN,
                             MT_DEFAULT_MAX_TOKENS, MT_DEFAULT_VOCAB)


def register(tsub: argparse._SubParsersAction) -> None:
    mt = tsub.add_parser(
        "mt", help="train an encoder-decoder translator",
        description="Train an encoder-decoder Transformer on sentence pairs: a recipe name (de-en), a TSV file "
                    "(source<TAB>target) or two line-aligned files SRC_FILE,TGT_FILE; without --valid, a file's "
                    "validation pairs are a seeded 10% (at most 1,000) split off it. Defaults (the CPU recipe): preset transformer-cpu, BPE 2000, "
                    "label smoothing 0.1, warmup + cosine decay to the end of --max-time, Adam betas (0.9, 0.98), "
                    "greedy BLEU on valid at every evaluation with sample translations, best/ by BLEU.")
    mt.add_argument("--data", default=None, help="recipe name (de-en), TSV file, or SRC_FILE,TGT_FILE (default de-en)")
    mt.add_argument("--valid", default=None, help="validation pairs in the same forms (default: a recipe's "
                    "valid.tsv; for files, a seeded 10%% of the pairs, at most 1,000, split off --data)")
    mt.add_argument("--vocab-size", type=int, default=None, help=f"joint BPE vocabulary (default {MT_DEFAULT_VOCAB})")
    mt.add_argument("--tokenizer", type=Path, default=None, help="use this tokenizer JSON instead of training a BPE")
    mt.add_argument("--max-tokens", type=int, default=None,
                    help=f"token budget per batch and process, B * max(S, T) padded tokens (default {MT_DEFAULT_MAX_TOKENS}; "
                         f"under torchrun the global budget is this x the number of processes)")
    mt.add_argument("--max-len", type=int, default=None,
                    help=f"longest source/target in tokens the model takes (default {MT_DEFAULT_MAX_LEN}); "
                         "longer sentences are truncated and counted (refused with --strict)")
    mt.add_argument("--label-smoothing", type=float, default=None, help="ε of label smoothing (default 0.1)")
    mt.add_argument("--strict", action="store_true", help="refuse malformed lines and over-long sentences "
                    "(with the line / pair number) instead of skipping / truncating and counting them")
    mt.add_argument("--bleu", action="store_true", default=None,
                    help="greedy BLEU/chrF on valid at every evaluation, best/ by BLEU (the default)")
    mt.add_argument("--no-bleu", dest="bleu", action="store_false",
                    help="no decoding during training: best/ by validation loss")
    mt.add_argument("--bleu-sentences", type=int, default=None,
                    help=f"validation sentences translated at each evaluation (default {MT_DEFAULT_BLEU_SENTENCES})")
    mt.add_argument("--word-dropout", type=float, default=None, metavar="P", help="replace each source token "
                    "(not <eos>, nor the <bt> tag) by <unk> with probability P in training (default 0)")
    mt.add_argument("--anneal-data", default=None, metavar="DATA",
                    help="for the last --anneal-share of the budget, train on these pairs only (e.g. the training "
                         "pairs of the test's domain): a recipe name (its in-domain.tsv; de-en: the dictionary "
                         "sentences and the Wesnoth dialogue), a TSV file or SRC_FILE,TGT_FILE")
    mt.add_argument("--anneal-share", type=float, default=None, metavar="F",
                    help=f"final share of the budget (steps or --max-time) that trains on --anneal-data, in (0, 1) "
                         f"(default {MT_DEFAULT_ANNEAL_SHARE})")
    mt.add_argument("--anneal-replay", type=float, default=None, metavar="R",
                    help="with --anneal-data: the anneal phase also replays R training pairs per anneal pair (a fixed "
                         "random sample), so that the model keeps the other domains (default 0: anneal pairs only)")
    mt.add_argument("--reverse", action="store_true", default=None,
                    help="train the other direction: pairs of --data (--valid, --anneal-data) read target -> source, "
                         "e.g. en->de from de-en (back-translation's reverse model); recorded: translate takes English")
    mt.add_argument("--synthetic", default=None, metavar="FILE",
                    help="add back-translated pairs: a file written by `attnkit translate --output` with a model of "
                         "the reverse direction (sentence<TAB>translation), each synthetic source tagged <bt>")
    mt.add_argument("--synthetic-ratio", type=float, default=None, metavar="R",
                    help="with --synthetic: R synthetic pairs per real training pair (default 1): the file as often "
                         "as it fits, the rest a fixed random sample (the run's --seed)")
    mt.add_argument("--average-last", type=int, default=None, metavar="N",
                    help="after training, average the last N step checkpoints into <out>/checkpoints/averaged "
                         "(resuming: default the run's N; 0 turns it off)")
    add_run_flags(mt, skip=("--batch-size",))  # its batches are sized by --max-tokens
    mt.set_defaults(func=runs(train_mt, TrainMTOptions))
