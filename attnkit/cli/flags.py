"""Flags shared by several commands, and what they turn into.

Devices (``train lm``, ``train mt``, ``finetune``, ``sample``, ``translate``, ``eval``, ``viz``):
``--device auto|cpu|cuda|cuda:N|mps`` (auto = CUDA when available, else the CPU) and
``--autocast bf16|fp16|off`` (training: autocast of the forward pass, fp16 with a gradient scaler;
inference: the weights in that precision). Training commands also get ``--fsdp``. The meaning of each value lives in
:mod:`attnkit.training.device`; here they are only parsed.

Processes: under ``torchrun`` every process runs the same command; :func:`world_size` / :func:`is_main_process`
read the launcher's environment (before any process group exists) so that the CLI can turn the per-process
``--batch-size`` into the global batch and print its lines once (rank 0).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

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
