"""Flags shared by several commands, and what they turn into: one place for the command line's common parts.

* the run and training flags (``train lm``, ``train mt``, ``finetune``): :func:`add_run_flags`,
  :func:`train_flag_values`, and ``--set FIELD=VALUE`` parsing (:func:`parse_overrides`);
* decoding (``translate``, ``eval mt``) and sampling (``sample``) flags;
* devices (``train lm``, ``train mt``, ``finetune``, ``sample``, ``translate``, ``eval``, ``viz``):
  ``--device auto|cpu|cuda|cuda:N|mps`` (auto = CUDA when available, else the CPU) and
  ``--autocast bf16|fp16|off`` (training: autocast of the forward pass, fp16 with a gradient scaler;
  inference: the weights in that precision). Training commands also get ``--fsdp``. The meaning of each value
  lives in :mod:`attnkit.training.device`; here they are only parsed.

Processes: under ``torchrun`` every process runs the same command; :func:`world_size` / :func:`is_main_process`
read the launcher's environment (before any process group exists) so that the CLI can turn the per-process
``--batch-size`` into the global batch and print its lines once (rank 0).

Only argparse and the launcher's environment live here; defaults come from :mod:`attnkit.recipes`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from attnkit.recipes import DEFAULT_BATCH_SIZE, DEFAULT_BEAM, DEFAULT_LENGTH_PENALTY

__all__ = ["TRAIN_FLAGS", "add_run_flags", "train_flag_values", "parse_overrides", "add_decoding_flags",
           "check_decoding_flags", "add_sampling_flags", "add_device_flags", "autocast_value", "resolve_device_flag",
           "inference_device", "place_model", "world_size", "is_main_process", "say", "DEFAULT_BATCH_SIZE"]

DEVICE_HELP = "auto (CUDA when available, else CPU), cpu, cuda, cuda:N or mps"


def add_device_flags(p: argparse.ArgumentParser | Any, *, training: bool = False, autocast: bool = True) -> None:
    """``--device`` and ``--autocast`` (and ``--fsdp`` for training commands) on parser or group ``p``."""
    p.add_argument("--device", default=None, metavar="DEVICE", help=f"{DEVICE_HELP} (default auto)")
    if autocast:
        p.add_argument("--autocast", default=None, choices=("bf16", "fp16", "off"),
                       help="mixed precision: bf16 (CPU and GPU) or fp16 (GPU; training adds a gradient scaler); "
                            "default off")
    if training:
        p.add_argument("--fsdp", action="store_true", default=None,
                       help="shard parameters, gradients and optimizer state over the torchrun processes (FSDP2) "
                            "instead of replicating them (DDP)")


def autocast_value(args: argparse.Namespace) -> str | None:
    """``--autocast`` as a TrainConfig / device.py value (``off`` and unset are None)."""
    value = getattr(args, "autocast", None)
    return None if value in (None, "off") else value


def resolve_device_flag(args: argparse.Namespace):
    """``--device`` as an available ``torch.device`` (under torchrun: this process's GPU); ValueError otherwise."""
    from attnkit.training.device import resolve_device
    from attnkit.training.distributed import env_local_rank

    return resolve_device(getattr(args, "device", None) or "auto", local_rank=env_local_rank())


def inference_device(args: argparse.Namespace):
    """``--device`` resolved and ``--autocast`` checked for it (inference commands call this before loading)."""
    from attnkit.training.device import check_autocast

    device = resolve_device_flag(args)
    check_autocast(autocast_value(args), device)
    return device


def place_model(model, args: argparse.Namespace, device):
    """Inference: ``model`` on ``device``, its weights in ``--autocast`` precision (bf16/fp16 weights: the
    KV caches and beam search follow the weights' dtype and device). Returns ``model``."""
    import torch

    model.to(device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(autocast_value(args))
    return model.to(dtype) if dtype is not None else model


def world_size() -> int:
    """Number of processes of this job (``WORLD_SIZE`` set by torchrun; 1 for a plain run)."""
    value = os.environ.get("WORLD_SIZE", "1")
    return int(value) if value.isdigit() and int(value) > 0 else 1


def is_main_process() -> bool:
    """True in a plain run and in rank 0 of a torchrun job."""
    return os.environ.get("RANK", "0") == "0"


def say(message: str) -> None:
    """Print a status line to stderr once per job (rank 0 only)."""
    if is_main_process():
        print(message, file=sys.stderr)


# TrainConfig fields exposed as flags: (flag, field, type, help)
TRAIN_FLAGS = [
    ("--batch-size", "batch_size", int, "sequences per micro-batch and process (under torchrun the global batch "
                                        "is this x the number of processes)"),
    ("--grad-accum", "grad_accum", int, "micro-batches per optimizer update"),
    ("--lr", "lr", float, "peak learning rate (inverse_sqrt: scale factor)"),
    ("--min-lr", "min_lr", float, "final learning rate of the cosine schedule"),
    ("--warmup-steps", "warmup_steps", int, "linear warmup steps (default: the recipe's, at most a tenth of "
                                            "--steps, or ended by a tenth of --max-time alone; must be <= --steps "
                                            "for the cosine schedule)"),
    ("--schedule", "schedule", str, "cosine | inverse_sqrt | constant"),
    ("--weight-decay", "weight_decay", float, "AdamW weight decay (matrices only)"),
    ("--optimizer", "optimizer", str, "adamw | muon (Muon on the hidden matrices, AdamW on embeddings, output "
                                      "layer, biases and norms; one --lr for both)"),
    ("--muon-ns-steps", "muon_ns_steps", int, "Newton-Schulz steps per Muon update (default 5; fewer is cheaper)"),
    ("--grad-clip", "grad_clip", float, "max global gradient norm (0 = off)"),
    ("--eval-every", "eval_every", int, "evaluate every N steps"),
    ("--eval-batches", "eval_batches", int, "validation batches per evaluation"),
    ("--log-every", "log_every", int, "log training metrics every N steps (also how often a GPU's numbers are read back)"),
    ("--ckpt-every", "ckpt_every", int, "checkpoint every N steps"),
    ("--keep-last", "keep_last", int, "keep the last K step checkpoints (plus best/)"),
    ("--seed", "seed", int, "random seed (init, dropout, data order)"),
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
    t.add_argument("--cuda-graphs", action="store_true", default=None,
                   help="replay each batch shape's forward and backward as a recorded CUDA graph (one CUDA process; "
                        "train mt then pads batches to a few fixed shapes): far fewer host launches per update")
    add_device_flags(t, training=True)
    t.add_argument("--no-progress", action="store_true",
                   help="no progress bar; the log lines (evaluations, sample translations) still print")


def train_flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainConfig fields the user gave as flags (those left unset are absent), for
    :func:`attnkit.training.config.resolve_train_config`.

    Fails first (before any data is read) on a ``--device`` / ``--autocast`` this machine cannot run.
    ``--batch-size`` is per process: the config (and the checkpoint) hold the global micro-batch. The device is
    always recorded (checkpoints are device-free, so it may change on resume)."""
    from attnkit.training.device import check_autocast

    device = resolve_device_flag(args)
    check_autocast(autocast_value(args), device)
    if getattr(args, "cuda_graphs", None) and device.type != "cuda":
        raise ValueError(f"--cuda-graphs needs a CUDA device (--device cuda), got {device}")
    fields = [field for _, field, _, _ in TRAIN_FLAGS] + ["steps", "max_time", "block_size", "compile", "cuda_graphs"]
    given = {f: getattr(args, f) for f in fields if getattr(args, f, None) is not None}
    if "batch_size" in given:
        given["batch_size"] = given["batch_size"] * world_size()
    given["device"] = getattr(args, "device", None) or "auto"
    if getattr(args, "autocast", None) is not None:
        given["autocast"] = autocast_value(args)
    if getattr(args, "fsdp", None):
        given["fsdp"] = True
    return given


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
