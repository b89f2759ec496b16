"""Argument checks shared across the package: each raises ``ValueError`` naming the expected and the actual value.

Configs validate their fields in ``__post_init__`` (``models/configs.py``, ``training/config.py``) with
:func:`check_int`, :func:`check_float`, :func:`check_bool` and :func:`check_choice`; functions and modules check
their arguments with the same calls (dropout rates with :func:`check_probability`; or with :func:`is_int` /
:func:`is_number` where the message names a range of its own); the decoders check single ids with :func:`check_id`,
the models their token ids with :func:`check_token_ids`, index tensors with :func:`check_index_tensor` and key-padding
masks with :func:`check_padding_mask`. ``name`` is what the message calls the value, e.g. ``"TrainConfig.steps"``.

This module imports torch only inside the tensor checks, so that configs import without torch.

**Checks that would wait for a GPU.** A check of tensor *values* (ids in range, masks that pad something) reads
them back to the host, and on a GPU that read waits for every queued kernel. Where that must not happen, under
``torch.compile`` (a graph break) and inside :func:`checks_on_device` (the trainer's updates on an accelerator),
:func:`no_host_reads` is True and such checks run on the device instead (``torch._assert_async``: a bad value
stops the program with the device's assert rather than a ``ValueError``) or are skipped where they only choose a
faster path.

Axis legend: B batch, L sequence length (``T`` for a decoder-only model's tokens).
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Any, Iterator

__all__ = ["is_int", "is_number", "check_int", "check_float", "check_probability", "check_bool", "check_choice",
           "check_id", "check_seed", "SEED_MIN", "SEED_MAX", "INDEX_MAX", "check_index_tensor", "check_padding_mask",
           "check_token_ids", "checks_on_device", "no_host_reads"]

_on_device = threading.local()  # .depth: how many checks_on_device() blocks this thread is inside


@contextlib.contextmanager
def checks_on_device(enabled: bool = True) -> Iterator[None]:
    """Inside this block (on this thread) value checks do not read tensors back to the host: see the module
    docstring. ``enabled=False`` makes it a no-op (e.g. on the CPU, where a read costs nothing)."""
    if not enabled:
        yield
        return
    _on_device.depth = getattr(_on_device, "depth", 0) + 1
    try:
        yield
    finally:
        _on_device.depth -= 1


def no_host_reads() -> bool:
    """True under ``torch.compile`` or inside :func:`checks_on_device`: a check must not read tensor values."""
    import torch

    return getattr(_on_device, "depth", 0) > 0 or torch.compiler.is_compiling()


def is_int(value: Any) -> bool:
    """An ``int`` that is not a ``bool`` (bool is an int subclass: ``steps=True`` is a bug, not a 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An ``int`` or ``float`` that is not a ``bool`` (finite or not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, minimum: int, allow_none: bool = False) -> int | None:
    """An ``int`` (not a ``bool``) of at least ``minimum``, or None if allowed."""
    if value is None and allow_none:
        return None
    if not is_int(value):
        raise ValueError(f"{name} must be an int >= {minimum}{' or None' if allow_none else ''}, "
                         f"got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return value


def check_float(name: str, value: Any, *, low: float, high: float | None = None, low_inclusive: bool = True,
                high_inclusive: bool = True, allow_none: bool = False) -> float | None:
    """A finite number in the range from ``low`` to ``high`` (None: no upper end), returned as a ``float``.

    Ints become floats so that a config's JSON round-trip is exact. The messages read
    ``"<name> must be a number, got 'x' (str)"`` and ``"<name> must be a finite number in (0.0, inf), got 0.0"``.
    """
    if value is None and allow_none:
        return None
    if not is_number(value):
        raise ValueError(f"{name} must be a number{' or None' if allow_none else ''}, "
                         f"got {value!r} ({type(value).__name__})")
    upper = "inf)" if high is None else f"{high}{']' if high_inclusive else ')'}"
    span = f"{'[' if low_inclusive else '('}{low}, {upper}"
    try:
        value = float(value)
    except OverflowError:  # an int past float's range (about 1.8e308)
        raise ValueError(f"{name} must be a finite number in {span}, got an int too large for a float "
                         f"(about 10^{int(abs(value).bit_length() * math.log10(2))})") from None
    ok = math.isfinite(value) and (value >= low if low_inclusive else value > low)
    if high is not None:
        ok = ok and (value <= high if high_inclusive else value < high)
    if not ok:
        raise ValueError(f"{name} must be a finite number in {span}, got {value}")
    return value


def check_probability(name: str, value: Any) -> Any:
    """A dropout-style probability: a number in ``[0, 1)`` (1 would drop everything; NaN fails the comparison).

    Plain comparisons only, so that ``torch.compile`` traces it without a graph break (attention calls it on every
    forward); the value is returned unchanged."""
    if not is_number(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """A real ``bool`` (not 0/1 or a string)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, got {value!r} ({type(value).__name__})")
    return value


def check_choice(name: str, value: Any, choices: tuple) -> Any:
    """One of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


SEED_MIN, SEED_MAX = -(2 ** 63), 2 ** 64 - 1  # the seeds torch.Generator.manual_seed takes
INDEX_MAX = 2 ** 31 - 1  # the most elements along the sizes torch's kernels index with 32 bits (batch x length)


def check_seed(name: str, seed: Any) -> None:
    """``seed`` None or an int that ``torch.Generator.manual_seed`` takes."""
    if seed is not None and not is_int(seed):
        raise ValueError(f"{name} must be None or an int, got {seed!r}")
    if seed is not None and not SEED_MIN <= seed <= SEED_MAX:
        raise ValueError(f"{name} must be an int in [-2**63, 2**64 - 1] (the seeds torch takes), got {seed}")


def check_id(name: str, value: Any, vocab_size: int | None) -> int:
    """A token id: an ``int`` in ``[0, vocab_size)`` (``vocab_size=None``: any id >= 0, the message says ``V``)."""
    if not is_int(value) or value < 0 or (vocab_size is not None and value >= vocab_size):
        raise ValueError(f"{name} must be an int in [0, {'V' if vocab_size is None else vocab_size}), got {value!r}")
    return value


def check_index_tensor(name: str, value: Any) -> None:
    """A ``torch.Tensor`` of dtype int64 or int32 (positions, indices); any shape."""
    import torch

    if not isinstance(value, torch.Tensor) or value.dtype not in (torch.int64, torch.int32):
        got = value.dtype if isinstance(value, torch.Tensor) else type(value).__name__
        raise ValueError(f"{name} must be an int64/int32 tensor, got {got}")


def check_padding_mask(name: str, mask: Any, shape: tuple[int, ...] | None = None, *, axes: str = "(B, S)",
                       detail: str = "") -> Any:
    """A bool key-padding mask (``True`` = padding) of exactly ``shape`` (when given); returns it.

    ``axes`` names the shape's axes in the message and ``detail`` follows the expected shape there, e.g.
    ``" (S = cached 3 + new 1)"``.

    Shape: mask ``(B, S)``.
    """
    import torch

    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"{name} must be a bool tensor (True = padding), got {got}")
    if shape is not None and tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {axes} = {tuple(shape)}{detail}, got {tuple(mask.shape)}")
    return mask


def check_token_ids(ids: Any, *, name: str, vocab_size: int, length_axis: str = "L",
                    range_label: str | None = None, vocab_name: str = "vocab_size") -> None:
    """A ``(B, L)`` tensor of int64/int32 token ids, non-empty, every id in ``[0, vocab_size)``.

    ``name`` is the argument's name in messages (``idx``, ``src``); ``length_axis`` names the second axis
    (``T`` or ``L``); ``range_label`` starts the out-of-range message (default ``"<name> token ids"``). Under
    ``torch.compile`` or :func:`checks_on_device` the range check runs on the device (no host sync) instead.

    Shape: ids ``(B, L)``.
    """
    import torch

    axes = f"(B, {length_axis})"
    if not isinstance(ids, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of token ids with shape {axes}, got {type(ids).__name__}")
    if ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must have dtype torch.int64 or torch.int32, got {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape {axes}, got {ids.dim()}-D shape {tuple(ids.shape)}")
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"{name} must have B >= 1 and {length_axis} >= 1, got shape {tuple(ids.shape)}")
    label = range_label if range_label is not None else f"{name} token ids"
    if no_host_reads():  # no host sync (a graph break under torch.compile, a wait on a GPU): check on the device
        torch._assert_async(((ids >= 0) & (ids < vocab_size)).all(),
                            f"{label} must be in [0, {vocab_name}) = [0, {vocab_size})")
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{label} must be in [0, {vocab_name}) = [0, {vocab_size}), got id {bad}")


def check_lookup_ids(ids: Any, *, what: str, upper: int, upper_name: str) -> None:
    """Ids an embedding table is indexed with: an integer tensor (not bool or float) of any shape, every id in
    ``[0, upper)``; ``what`` names them in messages (``token ids``, ``position ids``). Under ``torch.compile`` or
    :func:`checks_on_device` the range check runs on the device (no host sync).

    Shape: ids ``(*)``.
    """
    import torch

    if ids.is_floating_point() or ids.dtype == torch.bool or ids.is_complex():
        raise ValueError(f"{what} must be an integer tensor, got {ids.dtype}")
    if no_host_reads():  # torch.compile / a GPU's updates: check on the device (no host sync)
        torch._assert_async(((ids >= 0) & (ids < upper)).all(), f"{what} must be in [0, {upper_name})")
    elif ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= upper:
            raise ValueError(f"{what} must be in [0, {upper_name}) = [0, {upper}), got range [{lo}, {hi}]")
