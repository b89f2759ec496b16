"""LoRA: low-rank adapters for fine-tuning a frozen linear layer (Hu et al., 2021, arXiv:2106.09685).

Fine-tuning every weight of a pretrained model needs a gradient and two AdamW moments per weight. LoRA
freezes the pretrained weight ``W`` (out × in) and learns a low-rank *update* instead::

    y = x W^T + b  +  (alpha / r) · dropout(x) A^T B^T          A: (r × in), B: (out × r), r << min(in, out)

``A`` starts random (like an ``nn.Linear`` weight) and ``B`` starts at zero, so at step 0 the update
``B A`` is exactly zero and the adapted model computes exactly what the pretrained one does. Only ``A`` and
``B`` train: ``r · (in + out)`` numbers per layer instead of ``in · out`` (for SmolLM2's 576 → 960 ``qkv_proj``
with r = 8: 12,288 instead of 552,960). ``alpha / r`` ("scaling") keeps the update's size comparable when
you change r, so a learning rate tuned for one rank carries over.

After training, the update folds into the weight (``W' = W + (alpha / r) B A``, :func:`merge_lora`) and the
model is a plain one again: same module names, same checkpoint keys, no extra cost at inference.

Public API::

    apply_lora(model, rank=8, alpha=16, targets=("qkv_proj", "out_proj"))  # swap matching Linears in place
    mark_only_lora_trainable(model)   # freeze everything but the adapters (apply_lora already froze W, b)
    lora_parameters(model)            # [A, B, A, B, ...] -- what the optimizer should see
    merge_lora(model)                 # fold B A into W, put plain nn.Linear modules back

A :class:`LoRALinear` keeps the wrapped layer's ``weight`` and ``bias`` under those very names (frozen), so
a LoRA model's ``state_dict()`` is the plain model's keys plus ``<layer>.lora_A`` / ``<layer>.lora_B``, and
code that reads ``layer.weight`` (e.g. for its dtype) keeps working.

Axis legend: ``B`` batch (leading dims ``...`` in general), ``T`` positions, ``C_in`` input features
(``in_features``), ``C_out`` output features (``out_features``), ``r`` LoRA rank.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.checks import check_int, check_probability, is_number

from .dropout import Dropout

__all__ = [
    "DEFAULT_TARGETS",
    "LoRALinear",
    "apply_lora",
    "merge_lora",
    "lora_parameters",
    "lora_state_dict",
    "mark_only_lora_trainable",
    "linear_names",
]

# The attention projections of attnkit's MultiHeadAttention: the original paper's choice (it adapted W_q and
# W_v; our packed qkv_proj holds q, k and v). Add "w_in", "w_gate", "w_out" to adapt the feed-forward too.
DEFAULT_TARGETS: tuple[str, ...] = ("qkv_proj", "out_proj")


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update ``(alpha / r) · B A``.

    Args:
        base: the layer to adapt. Its ``weight`` and ``bias`` tensors are reused (not copied) and frozen.
        rank: ``1 <= r <= min(C_in, C_out)``, the rank of the update.
        alpha: > 0; the update is scaled by ``alpha / rank``.
        dropout: dropout probability on the adapter's input (the frozen path sees the undropped input).

    Attributes:
        weight, bias: the frozen pretrained parameters, ``(C_out, C_in)`` and ``(C_out,)`` or None.
        lora_A: ``(r, C_in)``, initialised like an ``nn.Linear`` weight (Kaiming-uniform, a = sqrt(5)).
        lora_B: ``(C_out, r)``, zeros.
        scaling: ``alpha / rank``.

    Shape:
        x ``(..., C_in)`` -> ``(..., C_out)``.
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: float, *, dropout: float = 0.0):
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise ValueError(f"LoRALinear wraps an nn.Linear, got {type(base).__name__}")
        _check_hyper(rank, alpha, dropout)
        _check_rank(rank, base, "the layer")
        self.in_features = base.in_features
        self.out_features = base.out_features
        self.rank = int(rank)
        self.alpha = float(alpha)
        self.scaling = self.alpha / self.rank
        # Reuse the pretrained tensors under their usual names; they do not train.
        self.weight = base.weight
        self.weight.requires_grad_(False)
        self.register_parameter("bias", base.bias)  # None stays a registered (empty) slot, as in nn.Linear
        if self.bias is not None:
            self.bias.requires_grad_(False)
        w = base.weight
        self.lora_A = nn.Parameter(torch.empty(self.rank, self.in_features, dtype=w.dtype, device=w.device))
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, self.rank, dtype=w.dtype, device=w.device))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # the same init nn.Linear gives its weight
        self.dropout = Dropout(dropout) if dropout > 0 else nn.Identity()

    def delta_weight(self) -> torch.Tensor:
        """The update ``(alpha / r) · B A`` as a full matrix.

        Shape: ``(C_out, C_in)``.
        """
        return (self.lora_B @ self.lora_A) * self.scaling  # (C_out, r) @ (r, C_in) -> (C_out, C_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Frozen path plus the low-rank path; the (r)-wide bottleneck is never expanded to a full matrix.

        Shape:
            x ``(..., C_in)`` -> ``(..., C_out)``.
        """
        if x.shape[-1] != self.in_features:
            raise ValueError(f"LoRALinear expects input (..., C_in) = (..., {self.in_features}), "
                             f"got {tuple(x.shape)}")
        out = F.linear(x, self.weight, self.bias)  # (..., C_out)
        low = F.linear(self.dropout(x), self.lora_A)  # (..., r)
        return out + F.linear(low, self.lora_B) * self.scaling  # (..., C_out)

    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` computing the same function (weight ``W + (alpha / r) B A``), trainable."""
        w = self.weight
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                        device=w.device, dtype=w.dtype)
        with torch.no_grad():
            lin.weight.copy_(w + self.delta_weight().to(w.dtype))
            if self.bias is not None:
                lin.bias.copy_(self.bias)
        return lin

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, rank={self.rank}, alpha={self.alpha:g}")


# -------------------------------------------------------------------------------------------------------
# model-level helpers
# -------------------------------------------------------------------------------------------------------

def _check_hyper(rank, alpha, dropout) -> None:
    check_int("LoRA rank", rank, minimum=1)
    if not is_number(alpha) or not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"LoRA alpha must be a finite number > 0, got {alpha!r}")
    check_probability("LoRA dropout", dropout)


def _check_rank(rank: int, layer: nn.Linear, name: str) -> None:
    """A rank past the layer's smaller side is no low-rank update (and a huge one overflowed torch's sizes)."""
    most = min(layer.in_features, layer.out_features)
    if rank > most:
        raise ValueError(f"LoRA rank must be <= min(C_in, C_out) = {most} of {name} ({layer.in_features} -> "
                         f"{layer.out_features}), got {rank}")


def _check_model(model) -> None:
    if not isinstance(model, nn.Module):
        raise ValueError(f"expected an nn.Module, got {type(model).__name__}")


def linear_names(model: nn.Module) -> list[str]:
    """The distinct short names (last part of the dotted name) of the ``nn.Linear`` modules in ``model``,
    sorted: the values ``apply_lora(targets=...)`` accepts, e.g. ``['lm_head', 'out_proj', 'qkv_proj', ...]``."""
    _check_model(model)
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                   if isinstance(m, (nn.Linear, LoRALinear)) and name})


def _matches(name: str, target: str) -> bool:
    """``target`` names a layer by its short name (``qkv_proj``) or a dotted suffix (``blocks.0.attn.qkv_proj``)."""
    return name == target or name.endswith("." + target)


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def _shared_elsewhere(model: nn.Module, name: str, layer: nn.Linear) -> str | None:
    """The name of another module parameter sharing ``layer.weight`` (weight tying), if any: the same parameter,
    or one over the same memory (a meta tensor has none: every one reports address 0)."""
    weight = layer.weight
    ptr = None if weight.is_meta else weight.data_ptr()
    for pname, p in model.named_parameters(remove_duplicate=False):
        shared = p is weight or (ptr is not None and not p.is_meta and p.data_ptr() == ptr)
        if shared and not pname.startswith(name + "."):
            return pname
    return None


def apply_lora(model: nn.Module, rank: int = 8, alpha: float = 16.0,
               targets: Sequence[str] = DEFAULT_TARGETS, dropout: float = 0.0) -> list[str]:
    """Replace, in place, every ``nn.Linear`` whose name matches one of ``targets`` by a :class:`LoRALinear`.

    Args:
        model: any module (attnkit's ``GPT``: the Linear short names are ``qkv_proj``, ``out_proj``, ``w_in``,
            ``w_gate`` (gated activations), ``w_out`` and ``lm_head``).
        rank, alpha, dropout: see :class:`LoRALinear`.
        targets: short names (``"qkv_proj"``) or dotted suffixes (``"blocks.0.attn.qkv_proj"``).

    Returns:
        the full dotted names of the adapted layers.

    Raises:
        ValueError: bad rank/alpha/dropout (a rank above a chosen layer's min(C_in, C_out)); empty targets; a
            target matching no Linear (the message lists the available names); a target whose weight is tied to
            another parameter (``lm_head`` of a model with tied embeddings: merging would silently change the
            embedding too); a model that already has adapters.

    Only the wrapped layers' weights and biases are frozen here; call :func:`mark_only_lora_trainable` to
    freeze the rest of the model (embeddings, norms) as well.

    Shape: no tensors in or out.
    """
    _check_model(model)
    _check_hyper(rank, alpha, dropout)
    if isinstance(targets, str):
        targets = (targets,)
    targets = tuple(targets)
    if not targets or not all(isinstance(t, str) and t for t in targets):
        raise ValueError(f"targets must be a non-empty sequence of layer names, got {targets!r}")
    if any(isinstance(m, LoRALinear) for m in model.modules()):
        raise ValueError("the model already has LoRA adapters; merge_lora(model) first to add new ones")
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear) and n]
    unknown = [t for t in targets if not any(_matches(n, t) for n, _ in linears)]
    if unknown:
        raise ValueError(f"LoRA targets {unknown} match no nn.Linear in {type(model).__name__}; "
                         f"available Linear names: {linear_names(model)}")
    chosen = [(n, m) for n, m in linears if any(_matches(n, t) for t in targets)]
    for name, layer in chosen:
        other = _shared_elsewhere(model, name, layer)
        if other is not None:
            raise ValueError(f"cannot put a LoRA adapter on {name!r}: its weight is tied to {other!r}, and "
                             f"merging would change both; leave {name.rsplit('.', 1)[-1]!r} out of targets")
    for name, layer in chosen:  # every layer before any is wrapped: a refusal leaves the model as it was
        _check_rank(rank, layer, repr(name))
    for name, layer in chosen:
        _set_submodule(model, name, LoRALinear(layer, rank, alpha, dropout=dropout))
    return [n for n, _ in chosen]


def lora_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The adapter parameters ``[A, B, A, B, ...]`` of every :class:`LoRALinear`, in module order."""
    _check_model(model)
    return [p for m in model.modules() if isinstance(m, LoRALinear) for p in (m.lora_A, m.lora_B)]


def lora_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Only the adapter tensors, by their ``state_dict`` names (``blocks.0.attn.qkv_proj.lora_A``, ...)."""
    _check_model(model)
    return {k: v for k, v in model.state_dict().items() if k.endswith((".lora_A", ".lora_B"))}


def mark_only_lora_trainable(model: nn.Module) -> int:
    """Freeze every parameter except the adapters; returns the number of trainable parameters.

    Raises ``ValueError`` if the model has no adapters (nothing would train).
    """
    _check_model(model)
    keep = {id(p) for p in lora_parameters(model)}
    if not keep:
        raise ValueError(f"{type(model).__name__} has no LoRA adapters; call apply_lora(model, ...) first")
    for p in model.parameters():
        p.requires_grad_(id(p) in keep)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter into its weight (``W + (alpha / r) B A``) and put a plain ``nn.Linear`` back.

    The result has the original module names and ``state_dict`` keys (no ``lora_A``/``lora_B``), so it saves,
    loads and exports like a model that never had adapters. The merged layers' parameters are trainable again
    (``requires_grad=True``, as in a fresh ``nn.Linear``); other parameters keep their flag. Returns ``model``
    (changed in place). A model without adapters is returned unchanged.
    """
    _check_model(model)
    for name, m in list(model.named_modules()):
        if isinstance(m, LoRALinear):
            _set_submodule(model, name, m.merged())
    return model

