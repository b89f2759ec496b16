"""``attnkit train lm`` and ``attnkit train mt``: the one training loop, driven from the command line.

Every flag left unset takes the recipe default (or, with ``--resume``, the run's own; a resumed run may change only
--steps, --max-time, --device, --stop-at-loss and --activation-checkpointing). Runs: :mod:`attnkit.api`."""

from __future__ import annotations

import argparse

from attnkit.api import TrainLMOptions, train_lm
from attnkit.cli import train_mt
from attnkit.cli.flags import add_run_flags, command_group, runs
from attnkit.recipes import LM_RECIPES


def register(sub: argparse._SubParsersAction) -> None:
    tsub = command_group(sub, "train", help="train a language model (lm) or a translator (mt)", metavar="TASK",
                         description="Train with attnkit's one training loop (AdamW, warmup + cosine or inverse-sqrt "
                                     "schedule, clipping, accumulation, evaluation, safetensors checkpoints, exact "
                                     "--resume, metrics CSV/JSONL and loss.png in the run folder).")

    lm = tsub.add_parser("lm", help="train a decoder-only language model",
                         description="Train a GPT (default preset char-small) on a text corpus: a recipe name "
                                     "(shakespeare, fortunes) or a local UTF-8 file or folder of .txt files.")
    lm.add_argument("--data", default=None, help="recipe name or path (default shakespeare)")
    lm.add_argument("--tokenizer", default=None,
                    help="char (default), bpe (trained on the data, see --vocab-size), gpt2, or a tokenizer JSON file")
    lm.add_argument("--vocab-size", type=int, default=None, help="BPE vocabulary size (with --tokenizer bpe)")
    lm.add_argument("--block-size", dest="block_size", type=int, default=None, help="context length T")
    lm.add_argument("--recipe", choices=sorted(LM_RECIPES), default=None, help="a named recipe for every flag left "
                    "unset: shakespeare-char-gpu, stops at valid loss 1.47 (18 s, one GPU, --data tinyshakespeare.txt)")
    add_run_flags(lm)
    lm.set_defaults(func=runs(train_lm, TrainLMOptions))
    train_mt.register(tsub)
