"""Int8 linear layers for fast CPU inference: weights stored as int8 with one fp32 scale per output row.

Axis legend: ``N`` output features, ``K`` input features (the weight is ``(N, K)`` as in ``nn.Linear``),
``*`` any leading axes of the input.

Why: decoding one token at a time is *memory bound*: each step reads every weight once and does only
two flops per weight. Storing weights in int8 instead of fp32 reads 4x fewer bytes.

Quantization (symmetric, per output channel)::

    scale[n]  = max_k |W[n, k]| / 127
    Wq[n, k]  = round(W[n, k] / scale[n])            in [-127, 127]
    W ~= Wq * scale[:, None]                          (error <= scale / 2 per weight)

Three ways to compute ``y = x W^T + b`` with the int8 weight (``mode``):

* ``"reference"``: dequantize to fp32 and call ``F.linear``. Readable, exact with respect to the
  dequantized weight, but it reads (and writes) the fp32 weight: no faster than fp32.
* ``"dynamic"`` (default): ``torch.ops.quantized.linear_dynamic`` (FBGEMM/oneDNN). The activations are
  quantized to 8 bits on the fly (one scale per call), the product runs in int8 with int32 accumulation,
  the result is rescaled to fp32. Fast on x86; adds a small activation-rounding error.
* ``"weight_only"``: ``torch._weight_int8pack_mm``, fp32 activations times int8 weights (no activation
  rounding). Exact w.r.t. the dequantized weight, but in torch 2.13 its CPU kernel is slow for fp32
  activations; kept for the measurements in ``benchmarks/NOTES.md``.

All modes give the same result up to rounding; ``tests/modules/test_quantized_linear.py`` checks them
against each other and against the fp32 layer.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

MODES: tuple[str, ...] = ("reference", "dynamic", "weight_only")


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8 quantization.

    Rows that are all zero get scale 1 (their int8 values are 0 either way), so no division by zero.

    Shape:
        weight ``(N, K)`` float -> (int8 ``(N, K)``, fp32 scale ``(N,)``).
    """
    if weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError(f"weight must be a 2-D float tensor (N, K), got {weight.dim()}-D {weight.dtype}")
    w = weight.detach().float()
    scale = w.abs().amax(dim=1) / 127.0  # (N,)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)  # (N, K)
    return q, scale


class QuantizedLinear(nn.Module):
    """A drop-in replacement for an inference-only ``nn.Linear`` with int8 weights.

    Args:
        in_features: ``K``.
        out_features: ``N``.
        bias: whether there is an fp32 bias ``(N,)``.
        mode: one of :data:`MODES` (see the module docstring).

    Buffers (saved in ``state_dict``): ``weight_int8 (N, K)`` int8, ``scale (N,)`` fp32, ``bias (N,)``.

    Shape:
        x ``(*, K)`` float32 -> ``(*, N)`` float32.
    """

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True, mode: str = "dynamic"):
        super().__init__()
        if in_features <= 0 or out_features <= 0:
            raise ValueError(f"in_features and out_features must be positive, got {in_features}, {out_features}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.in_features = in_features
        self.out_features = out_features
        self.mode = mode
        self.register_buffer("weight_int8", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("scale", torch.ones(out_features))
        if bias:
            self.register_buffer("bias", torch.zeros(out_features))
        else:
            self.bias = None
        self._packed = None  # FBGEMM/oneDNN packed weight for mode "dynamic", built on first use

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, mode: str = "dynamic") -> "QuantizedLinear":
        """Quantize an existing ``nn.Linear`` (its weight is copied, the original is untouched)."""
        if not isinstance(linear, nn.Linear):
            raise ValueError(f"from_linear expects an nn.Linear, got {type(linear).__name__}")
        q = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, mode=mode)
        w8, scale = quantize_weight(linear.weight)
        q.weight_int8.copy_(w8)
        q.scale.copy_(scale)
        if linear.bias is not None:
            q.bias.copy_(linear.bias.detach().float())
        return q.to(linear.weight.device)

    def dequantized_weight(self) -> torch.Tensor:
        """The fp32 weight the int8 values stand for.

        Shape:
            returns ``(N, K)``.
        """
        return self.weight_int8.float() * self.scale[:, None]

    def _packed_weight(self):
        # Per-channel quantized tensor with the same int8 values and scales, packed for the int8 GEMM.
        if self._packed is None:
            with warnings.catch_warnings():  # torch 2.13 flags quantized tensors as deprecated
                warnings.simplefilter("ignore", UserWarning)
                qw = torch._make_per_channel_quantized_tensor(
                    self.weight_int8, self.scale.double(), torch.zeros(self.out_features, dtype=torch.int64), 0)
            self._packed = torch.ops.quantized.linear_prepack(qw, self.bias)
        return self._packed

    def _apply(self, fn, recurse=True):  # .to()/.float() etc.: drop the packed copy, it is rebuilt lazily
        self._packed = None
        return super()._apply(fn, recurse)

    def _load_from_state_dict(self, *args, **kwargs):
        self._packed = None
        return super()._load_from_state_dict(*args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x W^T + b`` with the int8 weight.

        Shape:
            x ``(*, K)`` -> ``(*, N)``.
        """
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"QuantizedLinear expects input with last axis K = {self.in_features}, "
                             f"got shape {tuple(x.shape)}")
        if x.dtype != torch.float32:
            raise ValueError(f"QuantizedLinear expects float32 input, got {x.dtype}")
        if torch.is_grad_enabled() and x.requires_grad:
            raise ValueError("QuantizedLinear is inference-only: run it under torch.no_grad() (input requires grad)")
        if self.mode == "reference":
            return F.linear(x, self.dequantized_weight(), self.bias)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)  # (M, K)
        if self.mode == "dynamic":
            y = torch.ops.quantized.linear_dynamic(x2.contiguous(), self._packed_weight(), False)  # (M, N)
        else:  # weight_only
            y = torch._weight_int8pack_mm(x2.contiguous(), self.weight_int8, self.scale)  # (M, N)
            if self.bias is not None:
                y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, mode={self.mode!r}")


def quantize_linear_layers(model: nn.Module, *, mode: str = "dynamic", skip: tuple[str, ...] = ()) -> int:
    """Replace every ``nn.Linear`` of ``model`` (in place) by a :class:`QuantizedLinear`.

    Tied weights (e.g. a language-model head sharing the token embedding) are fine: the head gets its
    own int8 copy and the embedding keeps the fp32 table for its lookups. Names in ``skip`` (qualified
    module names, e.g. ``"lm_head"``) are left in fp32. Returns the number of layers replaced.

    Shape:
        unchanged: every replaced layer maps ``(*, K) -> (*, N)`` as before.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear) and name not in skip]
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, QuantizedLinear.from_linear(linear, mode=mode))
    return len(targets)
