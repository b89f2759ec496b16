"""Normalisation layers: RMSNorm and LayerNorm (with or without bias).

Axis legend: ``C`` model width (the normalised, last axis); ``*`` any leading axes.

Both layers normalise each vector along its last axis:

* LayerNorm (Ba et al., 2016):  ``y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias``
* RMSNorm (Zhang & Sennrich, 2019): ``y = x / sqrt(mean(x**2) + eps) * weight``
  (no centring, no bias: cheaper and what Llama-style models use).

RMSNorm computes its statistics in float32 and casts the normalised vector back to the input dtype
before applying the weight, so half-precision inputs do not lose the tiny mean-square values.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.checks import check_float

NORM_KINDS = ("layernorm", "rmsnorm")


def _positive_dim(dim: int, name: str) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
        raise ValueError(f"{name} dim must be a positive int, got {dim!r}")
    return dim


def _check_eps(eps: float, name: str) -> float:
    # a negative eps turns vectors of small variance into NaN; 0 is allowed (as torch.nn: only a constant vector is NaN)
    return check_float(f"{name} eps", eps, low=0.0)


def _check_last_dim(x: torch.Tensor, dim: int, name: str) -> None:
    if x.dim() == 0 or x.shape[-1] != dim:
        raise ValueError(f"{name} expects input with last axis C = {dim}, got shape {tuple(x.shape)}")


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last axis.

    Args:
        dim: size ``C`` of the normalised axis.
        eps: added to the mean square before the square root (numerical safety).
        elementwise_affine: learn a per-channel gain ``weight`` (initialised to ones).

    Shape:
        x: ``(*, C)`` -> ``(*, C)``, in the dtype of ``x`` and ``weight`` promoted together (``x``'s own when the
        model is in one dtype; a float32 ``weight`` on a bfloat16 ``x`` gives float32, as HF Llama).
    """

    def __init__(self, dim: int, *, eps: float = 1e-6, elementwise_affine: bool = True):
        super().__init__()
        self.dim, self.eps = _positive_dim(dim, "RMSNorm"), _check_eps(eps, "RMSNorm")
        self.register_parameter("weight", nn.Parameter(torch.ones(dim)) if elementwise_affine else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` by its root mean square.

        Shape:
            x: ``(*, C)`` -> ``(*, C)``.
        """
        _check_last_dim(x, self.dim, "RMSNorm")
        x32 = x.float()  # statistics in float32 whatever the input dtype
        inv_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (*, 1)
        y = (x32 * inv_rms).type_as(x)  # cast back before the gain (HF Llama / seed 000 order)
        if self.weight is not None:
            y = self.weight * y
        return y

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, elementwise_affine={self.weight is not None}"


class LayerNorm(nn.Module):
    """Layer normalisation over the last axis, with an optional bias.

    ``torch.nn.LayerNorm`` always has a bias (unless ``bias=False`` on recent versions); this version
    exposes the switch with the parameter names ``weight`` and ``bias`` so checkpoints map one to one.

    Args:
        dim: size ``C`` of the normalised axis.
        eps: added to the variance.
        bias: learn an additive ``bias`` (initialised to zeros).

    Shape:
        x: ``(*, C)`` -> ``(*, C)``.
    """

    def __init__(self, dim: int, *, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.dim, self.eps = _positive_dim(dim, "LayerNorm"), _check_eps(eps, "LayerNorm")
        self.weight = nn.Parameter(torch.ones(dim))
        self.register_parameter("bias", nn.Parameter(torch.zeros(dim)) if bias else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` to zero mean and unit variance, then scale (and shift).

        Shape:
            x: ``(*, C)`` -> ``(*, C)``.
        """
        _check_last_dim(x, self.dim, "LayerNorm")
        return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, bias={self.bias is not None}"


def build_norm(kind: str, dim: int, *, eps: float | None = None, bias: bool = True) -> nn.Module:
    """Build a normalisation layer by name.

    Args:
        kind: ``"layernorm"`` or ``"rmsnorm"``.
        dim: normalised width ``C``.
        eps: epsilon; ``None`` uses the layer's default (1e-5 LayerNorm, 1e-6 RMSNorm).
        bias: LayerNorm bias on/off (RMSNorm has no bias; the flag is ignored there).

    Shape:
        the returned module maps ``(*, C)`` -> ``(*, C)``.
    """
    if kind == "layernorm":
        return LayerNorm(dim, bias=bias) if eps is None else LayerNorm(dim, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return RMSNorm(dim) if eps is None else RMSNorm(dim, eps=eps)
    raise ValueError(f"norm kind must be one of {NORM_KINDS}, got {kind!r}")
