"""Flags shared by several commands, in one place: decoding (``translate``, ``eval mt``), sampling (``sample``),
the run and training flags (``train lm``, ``train mt``, ``finetune``), and ``--set FIELD=VALUE`` parsing.

Only argparse lives here; defaults come from :mod:`attnkit.recipes`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from attnkit.recipes import DEFAULT_BATCH_SIZE, DEFAULT_BEAM, DEFAULT_LENGTH_PENALTY

__all__ = ["TRAIN_FLAGS", "add_decoding_flags", "check_decoding_flags", "add_sampling_flags", "add_run_flags",
           "parse_overrides", "train_flag_values", "DEFAULT_BATCH_SIZE"]

# TrainConfig fields exposed as flags: (flag, field, type, help)
TRAIN_FLAGS = [
    ("--batch-size", "batch_size", int, "sequences per micro-batch"),
    ("--grad-accum", "grad_accum", int, "micro-batches per optimizer update"),
    ("--lr", "lr", float, "peak learning rate (inverse_sqrt: scale factor)"),
    ("--min-lr", "min_lr", float, "final learning rate of the cosine schedule"),
    ("--warmup-steps", "warmup_steps", int, "linear warmup steps"),
    ("--schedule", "schedule", str, "cosine | inverse_sqrt | constant"),
    ("--weight-decay", "weight_decay", float, "AdamW weight decay (matrices only)"),
    ("--grad-clip", "grad_clip", float, "max global gradient norm (0 = off)"),
    ("--eval-every", "eval_every", int, "evaluate every N steps"),
    ("--eval-batches", "eval_batches", int, "validation batches per evaluation"),
    ("--log-every", "log_every", int, "log training metrics every N steps"),
    ("--ckpt-every", "ckpt_every", int, "checkpoint every N steps"),
    ("--keep-last", "keep_last", int, "keep the last K step checkpoints (plus best/)"),
    ("--seed", "seed", int, "random seed (init, dropout, data order)"),
    ("--autocast", "autocast", str, "mixed precision: bf16 (off by default)"),
]


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """Length of the run, run folder, resume, preset and ``--set``, and every :data:`TRAIN_FLAGS` flag."""
    g = p.add_argument_group("length of the run")
    g.add_argument("--steps", type=int, default=None, help="optimizer updates to run")
    g.add_argument("--max-time", type=float, default=None, metavar="MIN",
                   help="wall-clock budget in minutes (with --steps, whichever comes first)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/<data>-<preset>-<time>); "
                   "an existing run is never overwritten: pass --resume to continue it")
    p.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
    p.add_argument("--preset", default=None, help="model preset (see `attnkit params --list`)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a model config field, e.g. --set n_layer=6 --set dropout=0.2 (repeatable)")
    t = p.add_argument_group("training")
    for flag, field, typ, help_ in TRAIN_FLAGS:
        t.add_argument(flag, dest=field, type=typ, default=None, help=help_)
    t.add_argument("--compile", action="store_true", default=None, help="opt in to torch.compile")
    t.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")


def train_flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainConfig fields the user gave as flags (those left unset are absent)."""
    fields = [field for _, field, _, _ in TRAIN_FLAGS] + ["steps", "max_time", "block_size", "compile"]
    return {f: getattr(args, f) for f in fields if getattr(args, f, None) is not None}


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["n_layer=6", "dropout=0.2", "bias=false"]`` → ``{"n_layer": 6, "dropout": 0.2, "bias": False}``."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set expects FIELD=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = {"true": True, "false": False, "none": None}.get(raw.lower(), raw)
        out[key.strip()] = value
    return out


def add_decoding_flags(p: argparse.ArgumentParser) -> None:
    """``--beam``, ``--length-penalty``, ``--max-len-a``, ``--max-len-b`` (``translate`` and ``eval mt``)."""
    g = p.add_argument_group("decoding")
    g.add_argument("--beam", type=int, default=DEFAULT_BEAM, help="beam size (1 = greedy search)")
    g.add_argument("--length-penalty", type=float, default=DEFAULT_LENGTH_PENALTY,
                   help="alpha of the GNMT length normalisation ((5 + len) / 6) ** alpha (0 = none)")
    g.add_argument("--max-len-a", type=float, default=1.2, help="target length limit a * source length + b: a")
    g.add_argument("--max-len-b", type=float, default=10, help="target length limit a * source length + b: b")


def check_decoding_flags(args: argparse.Namespace) -> None:
    if args.beam < 1:
        raise ValueError(f"--beam must be >= 1, got {args.beam}")
    if getattr(args, "batch_size", 1) < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")


def add_sampling_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--max-new-tokens", type=int, default=200, help="most tokens to generate (default 200)")
    g.add_argument("--greedy", action="store_true", help="argmax decoding (ignores temperature/top-k/top-p)")
    g.add_argument("--temperature", type=float, default=0.8, help="softmax temperature (default 0.8)")
    g.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    g.add_argument("--top-p", type=float, default=None, help="nucleus sampling: smallest set with mass >= p")
    g.add_argument("--repetition-penalty", type=float, default=1.0, help="CTRL repetition penalty (1.0 = off)")
    g.add_argument("--stop", action="append", default=None, metavar="TEXT",
                   help="stop when the generated text contains TEXT (repeatable)")
    g.add_argument("--seed", type=int, default=None, help="seed for reproducible sampling")
    g.add_argument("--num-samples", type=int, default=1, help="how many samples to draw (default 1)")
    g.add_argument("--no-cache", action="store_true", help="recompute the whole context every step (slow; for checks)")
    g.add_argument("--no-stream", action="store_true", help="print each sample when it is complete")
    g.add_argument("--compile", action="store_true",
                   help="run the decoding steps through torch.compile: faster per token, after a one-time "
                        "compilation of up to ~30 s (needs the KV cache and a C++ compiler)")
