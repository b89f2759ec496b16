"""Builder functions: config in, model out.

``build_model`` dispatches on the config's class; ``device="meta"`` builds shapes only (no memory),
which is how :mod:`attnkit.models.params` counts GPT-2 XL without allocating 6 GB.
"""

from __future__ import annotations

import torch

from .configs import GPTConfig, TransformerConfig
from .gpt import GPT
from .transformer import Transformer


def _build(cls, config, device, dtype):
    if device is None:
        model = cls(config)
    else:
        with torch.device(device):  # parameters and buffers are created on `device` directly
            model = cls(config)
    if dtype is not None:
        model = model.to(dtype=dtype)
    return model


def build_gpt(config: GPTConfig, *, device: torch.device | str | None = None,
              dtype: torch.dtype | None = None) -> GPT:
    """A freshly initialised :class:`GPT` (on ``device``, in ``dtype`` if given)."""
    if not isinstance(config, GPTConfig):
        raise ValueError(f"build_gpt expects a GPTConfig, got {type(config).__name__}")
    return _build(GPT, config, device, dtype)


def build_transformer(config: TransformerConfig, *, device: torch.device | str | None = None,
                      dtype: torch.dtype | None = None) -> Transformer:
    """A freshly initialised encoder-decoder :class:`Transformer`."""
    if not isinstance(config, TransformerConfig):
        raise ValueError(f"build_transformer expects a TransformerConfig, got {type(config).__name__}")
    return _build(Transformer, config, device, dtype)


def build_model(config: GPTConfig | TransformerConfig, *, device: torch.device | str | None = None,
                dtype: torch.dtype | None = None) -> GPT | Transformer:
    """:func:`build_gpt` or :func:`build_transformer` depending on the config's class."""
    if isinstance(config, GPTConfig):
        return build_gpt(config, device=device, dtype=dtype)
    if isinstance(config, TransformerConfig):
        return build_transformer(config, device=device, dtype=dtype)
    raise ValueError(f"build_model expects a GPTConfig or TransformerConfig, got {type(config).__name__}")
