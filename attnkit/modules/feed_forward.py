"""Position-wise feed-forward network (the "MLP" of a Transformer block).

Axis legend: ``C`` model width (``dim``), ``F`` hidden width (``hidden_dim``); ``*`` any leading axes.

Two shapes of network:

* plain:  ``y = w_out(dropout(act(w_in(x))))``            (paper, GPT-2, seed 003)
* gated:  ``y = w_out(dropout(act(w_gate(x)) * w_in(x)))`` (GLU variants, Shazeer 2020; Llama's SwiGLU)

``w_in`` is the "up" projection, ``w_gate`` the "gate" projection (gated variants only) and ``w_out``
the "down" projection. The dropout here acts on the hidden activations; the dropout on the residual
branch belongs to the layer that adds the residual.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.checks import check_choice, check_int, check_probability

from .dropout import Dropout

# Element-wise activations, by name.
_PLAIN: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,  # exact erf form
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's "gelu_new"
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "leaky_relu": F.leaky_relu,  # negative_slope 0.01, as nn.LeakyReLU()
    "elu": F.elu,  # alpha 1.0, as nn.ELU()
}
# Gated variants: name -> activation applied to the gate branch.
_GATED: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "swiglu": F.silu,
    "geglu": F.gelu,
}

ACTIVATIONS: tuple[str, ...] = tuple(_PLAIN) + tuple(_GATED)
GATED_ACTIVATIONS: tuple[str, ...] = tuple(_GATED)


def get_activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """Return the element-wise function for a plain activation name (gated names give their gate function).

    Shape:
        the function maps ``(*)`` -> ``(*)``.
    """
    if name in _PLAIN:
        return _PLAIN[name]
    if name in _GATED:
        return _GATED[name]
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {name!r}")


class FeedForward(nn.Module):
    """Two-layer (or gated three-matrix) feed-forward network.

    Args:
        dim: input width ``C``.
        hidden_dim: hidden width ``F``.
        activation: one of :data:`ACTIVATIONS`.
        dropout: dropout probability on the hidden activations.
        bias: biases on all linear layers.
        out_dim: output width (default ``dim``).

    Shape:
        x: ``(*, C)`` -> ``(*, out_dim)``.
    """

    def __init__(
        self,
        dim: int,
        hidden_dim: int,
        *,
        activation: str = "gelu",
        dropout: float = 0.0,
        bias: bool = True,
        out_dim: int | None = None,
    ):
        super().__init__()
        check_choice("activation", activation, ACTIVATIONS)
        check_int("FeedForward dim", dim, minimum=1)
        check_int("FeedForward hidden_dim", hidden_dim, minimum=1)
        check_int("FeedForward out_dim", out_dim, minimum=1, allow_none=True)
        check_probability("dropout", dropout)
        self.dim = dim
        self.hidden_dim = hidden_dim
        self.out_dim = dim if out_dim is None else out_dim
        self.activation = activation
        self.gated = activation in _GATED
        self._act = get_activation(activation)

        self.w_in = nn.Linear(dim, hidden_dim, bias=bias)  # "up"
        if self.gated:
            self.w_gate = nn.Linear(dim, hidden_dim, bias=bias)  # "gate"
        else:
            self.w_gate = None
        self.w_out = nn.Linear(hidden_dim, self.out_dim, bias=bias)  # "down"
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the network to every position independently.

        Shape:
            x: ``(*, C)`` -> ``(*, out_dim)``.
        """
        if x.dim() == 0 or x.shape[-1] != self.dim:
            raise ValueError(f"FeedForward expects input with last axis C = {self.dim}, got shape {tuple(x.shape)}")
        if self.gated:
            h = self._act(self.w_gate(x)) * self.w_in(x)  # (*, F)
        else:
            h = self._act(self.w_in(x))  # (*, F)
        return self.w_out(self.dropout(h))  # (*, out_dim)

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"
