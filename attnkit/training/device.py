"""Which device to run on, and mixed precision: ``auto | cpu | cuda | cuda:N | mps`` and ``bf16 | fp16``.

:func:`resolve_device` turns a user's device string into a ``torch.device`` or raises one clear
``ValueError`` (``--device cuda`` on a machine without CUDA says so instead of failing deep inside torch).
``auto`` means CUDA when available, else the CPU (MPS is only used when asked for: several kernels there
are still slower than the CPU for small models).

:func:`autocast_context` is the one place autocast is entered (the training loop, evaluation, sampling):
``bf16`` works on CPU, CUDA and MPS; ``fp16`` only on GPUs and always comes with a
``torch.amp.GradScaler`` in the training loop (:func:`grad_scaler`), because fp16 gradients underflow.

Under ``torchrun`` each process drives the GPU of its ``LOCAL_RANK``: :func:`resolve_device` with
``local_rank`` turns ``cuda`` / ``auto`` into ``cuda:<local_rank>``.
"""

from __future__ import annotations

import contextlib
import re

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N", "mps")
AUTOCAST_CHOICES = ("bf16", "fp16")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
_CUDA_N = re.compile(r"^cuda:(\d+)$")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(name: str | torch.device | None = "auto", *, local_rank: int | None = None) -> torch.device:
    """``"auto" | "cpu" | "cuda" | "cuda:N" | "mps"`` (or a ``torch.device``) -> an available ``torch.device``.

    ``local_rank`` (the process's GPU under torchrun) picks ``cuda:<local_rank>`` for ``auto`` and ``cuda``.
    Raises ``ValueError`` naming the choices for an unknown string, and saying what is missing for a device
    this machine does not have (no CUDA, fewer GPUs than N, no MPS).
    """
    if name is None:
        name = "auto"
    if isinstance(name, torch.device):
        name = str(name)
    if not isinstance(name, str):
        raise ValueError(f"device must be one of {list(DEVICE_CHOICES)}, got {name!r}")
    text = name.strip().lower()
    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return torch.device("cpu")
    if text == "mps":
        if not _mps_available():
            raise ValueError("device 'mps' was asked for, but this machine has no Apple-GPU (MPS) support; "
                             "use --device cpu")
        return torch.device("mps")
    match = _CUDA_N.match(text)
    if text == "cuda" or match:
        if not torch.cuda.is_available():
            build = "a CPU-only torch build" if torch.version.cuda is None else "no usable NVIDIA GPU/driver"
            raise ValueError(f"device {name!r} was asked for, but CUDA is not available here ({build}, "
                             f"torch {torch.__version__}); use --device cpu or --device auto")
        index = int(match.group(1)) if match else (local_rank or 0)
        count = torch.cuda.device_count()
        if index >= count:
            raise ValueError(f"device cuda:{index} was asked for, but this machine has {count} CUDA device(s) "
                             f"(cuda:0..cuda:{count - 1})")
        return torch.device("cuda", index)
    raise ValueError(f"device must be one of {list(DEVICE_CHOICES)}, got {name!r}")


def check_autocast(autocast: str | None, device: torch.device) -> None:
    """Raise ``ValueError`` if ``autocast`` (None, "bf16", "fp16") is not usable on ``device``."""
    if autocast is None:
        return
    if autocast not in _DTYPES:
        raise ValueError(f"autocast must be one of {list(AUTOCAST_CHOICES)} (or off), got {autocast!r}")
    if autocast == "fp16" and device.type == "cpu":
        raise ValueError("autocast fp16 needs a GPU (cuda or mps); on the CPU use --autocast bf16")
    if autocast == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(f"autocast bf16 is not supported by {torch.cuda.get_device_name(device)}; "
                         f"use --autocast fp16")


def autocast_context(autocast: str | None, device: torch.device, *, cache: bool = True):
    """The context manager that runs the forward pass in ``autocast`` precision on ``device`` (or does nothing).

    ``cache=False`` recasts the weights at every use instead of caching the cast copies for the duration of the
    context: what a CUDA graph capture needs (the cache would be freed under the recorded graph).
    """
    if autocast is None:
        return contextlib.nullcontext()
    check_autocast(autocast, device)
    return torch.autocast(device_type=device.type, dtype=_DTYPES[autocast], cache_enabled=cache)


def grad_scaler(autocast: str | None, device: torch.device) -> torch.amp.GradScaler | None:
    """A ``GradScaler`` for fp16 training (loss scaling keeps small fp16 gradients from flushing to zero);
    None for bf16 and full precision, which need none."""
    if autocast != "fp16":
        return None
    return torch.amp.GradScaler(device.type)
