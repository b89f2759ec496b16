"""Int8 linear layers for fast CPU inference: weights stored as int8 with one fp32 scale per output row.

Axis legend: ``N`` output features, ``K`` input features (the weight is ``(N, K)`` as in ``nn.Linear``),
``*`` any leading axes of the input, ``M`` input rows (the leading axes flattened), ``R`` extra kernel rows.

Why: decoding one token at a time is *memory bound*: each step reads every weight once and does only
two flops per weight. Storing weights in int8 instead of fp32 reads 4x fewer bytes.

Quantization (symmetric, per output channel)::

    scale[n]  = max_k |W[n, k]| / 127
    Wq[n, k]  = round(W[n, k] / scale[n])            in [-127, 127]
    W ~= Wq * scale[:, None]                          (error <= scale / 2 per weight)

That is round-to-nearest; :func:`quantize_linear_layers` with ``calibration`` text instead picks the int8
values by GPTQ (:mod:`attnkit.modules.gptq`): same scales and format, smaller error in the layers' outputs.

Four ways to compute ``y = x W^T + b`` with the int8 weight (``mode``):

* ``"reference"``: dequantize to fp32 and call ``F.linear``. Readable, exact with respect to the
  dequantized weight, but it reads (and writes) the fp32 weight: no faster than fp32.
* ``"two_digit"`` (default): each activation row gets its own scale ``s = max|row| / 127`` and is written as
  two int8 "digits", ``x ~= s * (hi + lo / 254)`` (:func:`split_activation`), error <= ``s / 508`` per element
  (about 15 bits). Both digit rows go through FBGEMM's int8 kernel in *one* pass over the weight (int32
  accumulation, exact), then ``y = s * (hi @ Wq^T + lo @ Wq^T / 254) * scale + b``. Agrees with
  ``"reference"`` to about 1e-4 relative (SmolLM2-135M perplexity +0.24%, like ``"weight_only"``'s +0.23%);
  about 2-2.5x the per-layer time of ``"dynamic"`` for one row (the digit split and a 3-row product), still
  well under fp32 for a decoding step: GPT-2-small greedy decoding ~2x attnkit fp32 at 1 thread.
* ``"dynamic"``: ``torch.ops.quantized.linear_dynamic`` (FBGEMM/oneDNN) as is: the activations are rounded
  to 8 bits with ONE scale (and zero point) for the whole input tensor. The fastest, but it fails the
  quality check on a real model (SmolLM2-135M: perplexity +87%): in a multi-token pass one token with a
  huge activation (e.g. 2,800 at the MLP output projection's input, where other tokens' values are ~1) sets
  the scale and every other token is rounded to a handful of levels. Per-row 8-bit scales fix that
  token-to-token spread but not the spread *within* a row (perplexity still +3%), hence two digits.
  Kept for the measurements in ``docs/experiments/int8.md`` ("int8 modes (session 2)").
* ``"weight_only"``: ``torch._weight_int8pack_mm``, fp32 activations times int8 weights (no activation
  rounding). Exact w.r.t. the dequantized weight, but in torch 2.13 its CPU kernel is ~10x slower than
  fp32 for fp32 activations; kept for the measurements.

All modes give the same result up to rounding; ``tests/modules/test_quantized_linear.py`` checks them
against ``"reference"`` (each with its stated tolerance) and ``"reference"`` against the fp32 layer.

Where the kernel is not exact: on x86 CPUs without VNNI (AVX2 only, e.g. older AMD EPYC and Intel Xeon before
Cascade Lake), FBGEMM multiplies unsigned 8-bit activations by signed 8-bit weights in pairs that it adds into
16-bit integers *with saturation* (``vpmaddubsw``): two products of 255 x 127 overflow, so full-range
activations give wrong sums (measured: errors of 0.5 where ``"reference"`` gives values near 1).
:func:`fast_int8_is_exact` probes the kernel once with worst-case digits; where it is not exact, ``"two_digit"``
and ``"dynamic"`` compute with ``"reference"``'s product instead (same int8 weights, no speed-up) and warn once.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.checks import check_choice, check_int

from .lora import LoRALinear

MODES: tuple[str, ...] = ("reference", "two_digit", "dynamic", "weight_only")
_KERNEL_EXACT: bool | None = None  # fast_int8_is_exact(), probed on first use


def fast_int8_is_exact() -> bool:
    """Whether ``torch.ops.quantized.linear_dynamic`` computes full-range 8-bit products exactly on this machine.

    Probed once (cached): activation rows of -128 and 127 times weight rows of 127 and -127, the sums where a
    kernel that adds pairs of products into saturating 16-bit integers (FBGEMM on x86 without VNNI) goes
    wrong, compared with the exact float64 product.
    """
    global _KERNEL_EXACT
    if _KERNEL_EXACT is None:
        k = 64
        x = torch.tensor([[-128.0, 127.0] * (k // 2), [127.0] * k, [-128.0] * k])  # (3, K)
        w = torch.tensor([[127] * k, [-127] * k, [127, -127] * (k // 2)], dtype=torch.int8)  # (3, K)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                qw = torch._make_per_channel_quantized_tensor(w, torch.ones(3, dtype=torch.float64),
                                                              torch.zeros(3, dtype=torch.int64), 0)
                y = torch.ops.quantized.linear_dynamic(x, torch.ops.quantized.linear_prepack(qw, None), False)
            _KERNEL_EXACT = bool(torch.equal(y.double(), x.double() @ w.double().T))
        except RuntimeError:  # no quantized engine on this build or platform
            _KERNEL_EXACT = False
    return _KERNEL_EXACT


_WARNED = False


def _warn_inexact_kernel() -> None:
    global _WARNED
    if not _WARNED:
        _WARNED = True
        warnings.warn("this CPU's int8 kernel (FBGEMM without VNNI) saturates full-range 8-bit products; "
                      "QuantizedLinear computes with the dequantized weight instead (correct, not faster)",
                      RuntimeWarning, stacklevel=3)



def split_activation(x: torch.Tensor, tail: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Write each row of ``x`` as two int8 "digits": ``x ~= s * (hi + lo / 254)``.

    ``s = max|row| / 127`` (one scale per row), so ``u = x / s`` lies in ``[-127, 127]``; ``hi = round(u)`` and
    ``lo = round((u - hi) * 254)``. Since ``|u - hi| <= 1/2``, both digits lie in ``[-127, 127]`` and each can go
    through an int8 kernel. The error is at most ``s / 508`` per element: about 15 bits instead of 8.
    Rows that are all zero get a tiny positive ``s`` (their digits are 0). ``tail`` rows, if given, are
    copied after the digits (the caller's extra kernel rows), saving a concatenation.

    Shape:
        x ``(M, K)`` float32, tail ``(R, K)`` -> (digits ``(2M + R, K)`` float32 holding integers: rows ``:M`` are
        ``hi``, rows ``M:2M`` are ``lo``; s ``(M, 1)``).
    """
    if x.dim() != 2 or x.dtype != torch.float32:
        raise ValueError(f"split_activation expects a 2-D float32 tensor (M, K), got {x.dim()}-D {x.dtype}")
    m, k = x.shape
    if tail is not None and (tail.dim() != 2 or tail.shape[1] != k):
        raise ValueError(f"tail must be (R, K = {k}), got shape {tuple(tail.shape)}")
    extra = 0 if tail is None else tail.shape[0]
    digits = torch.empty(2 * m + extra, k, dtype=x.dtype, device=x.device)
    s = torch.linalg.vector_norm(x, ord=float("inf"), dim=1, keepdim=True)  # max |x| per row: (M, 1)
    s = s.mul_(1.0 / 127.0).clamp_min_(torch.finfo(torch.float32).tiny)
    u = x / s  # (M, K), in [-127, 127]
    hi = torch.round(u, out=digits[:m])
    torch.sub(u, hi, out=digits[m:2 * m]).mul_(254.0).round_()  # u - hi is exact in fp32, within [-1/2, 1/2]
    if tail is not None:
        digits[2 * m:] = tail
    return digits, s


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8 quantization.

    Rows that are all zero get scale 1 (their int8 values are 0 either way), so no division by zero.

    Shape:
        weight ``(N, K)`` float -> (int8 ``(N, K)``, fp32 scale ``(N,)``).
    """
    if weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError(f"weight must be a 2-D float tensor (N, K), got {weight.dim()}-D {weight.dtype}")
    if not bool(torch.isfinite(weight).all()):
        raise ValueError("weight must hold only finite values to be quantized, got NaN or inf")
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

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True, mode: str = "two_digit"):
        super().__init__()
        check_int("QuantizedLinear in_features", in_features, minimum=1)
        check_int("QuantizedLinear out_features", out_features, minimum=1)
        check_choice("mode", mode, MODES)
        self.in_features = in_features
        self.out_features = out_features
        self.mode = mode
        self.register_buffer("weight_int8", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("scale", torch.ones(out_features))
        if bias:
            self.register_buffer("bias", torch.zeros(out_features))
        else:
            self.bias = None
        self._packed = None  # (with_bias, FBGEMM/oneDNN packed weight), built on first use
        # the "pin" row(s) of mode "two_digit" (see _two_digit_linear): -128 and 127 somewhere, zeros elsewhere
        pin = torch.zeros(1 if in_features > 1 else 2, in_features)  # (1, K), or (2, 1) when K = 1
        pin.view(-1)[:2] = torch.tensor([-128.0, 127.0])
        self.register_buffer("_pin", pin, persistent=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, mode: str = "two_digit") -> "QuantizedLinear":
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

    def _packed_weight(self, with_bias: bool):
        # Per-channel quantized tensor with the same int8 values and scales, packed for FBGEMM/oneDNN.
        # "dynamic" lets the kernel add the bias; "two_digit" adds it itself (after combining the digits).
        if self._packed is None or self._packed[0] != with_bias:
            with warnings.catch_warnings():  # torch 2.13 flags quantized tensors as deprecated
                warnings.simplefilter("ignore", UserWarning)
                qw = torch._make_per_channel_quantized_tensor(
                    self.weight_int8, self.scale.double(), torch.zeros(self.out_features, dtype=torch.int64), 0)
                packed = torch.ops.quantized.linear_prepack(qw, self.bias if with_bias else None)
            self._packed = (with_bias, packed)
        return self._packed[1]

    def _two_digit_linear(self, x2: torch.Tensor) -> torch.Tensor:
        """``x2 W^T + b`` with ``x2`` split into two int8 digits per row (see :func:`split_activation`).

        Shape:
            x2 ``(M, K)`` -> ``(M, N)``.
        """
        m = x2.shape[0]
        # FBGEMM's dynamic kernel quantizes its whole input with one (scale, zero point) taken from the input's
        # min and max. A "pin" row holding -128 and 127 makes that scale exactly 1 and the zero point 128, so the
        # integer-valued digits go into the int8 product unchanged (int32 accumulation: exact), and the kernel
        # returns (digits @ Wq^T) * scale[n]. The pin row's output is dropped. Both digits share one pass over
        # the weight: for a decoding step (M = 1) three rows cost little more than one.
        rows, s = split_activation(x2, tail=self._pin)  # (2M + 1, K), (M, 1)
        if m and not math.isfinite(float(s.max())):  # NaN or inf in x2: FBGEMM cannot quantize it; do as F.linear
            return F.linear(x2, self.dequantized_weight(), self.bias)
        out = torch.ops.quantized.linear_dynamic(rows, self._packed_weight(False), False)  # (2M + 1, N)
        y = torch.add(out[:m], out[m:2 * m], alpha=1.0 / 254.0)  # (hi + lo/254) @ W^T: (M, N)
        if self.bias is None:
            return y.mul_(s)
        return torch.addcmul(self.bias, y, s)  # b + s * y

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
        if self.mode in ("two_digit", "dynamic") and not fast_int8_is_exact():
            _warn_inexact_kernel()
            return F.linear(x, self.dequantized_weight(), self.bias)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)  # (M, K)
        if self.mode == "two_digit":
            y = self._two_digit_linear(x2)  # (M, N)
        elif self.mode == "dynamic" and x2.numel() and not math.isfinite(float(x2.abs().max())):  # NaN or inf
            y = F.linear(x2, self.dequantized_weight(), self.bias)
        elif self.mode == "dynamic":
            y = torch.ops.quantized.linear_dynamic(x2.contiguous(), self._packed_weight(True), False)  # (M, N)
        else:  # weight_only
            y = torch._weight_int8pack_mm(x2.contiguous(), self.weight_int8, self.scale)  # (M, N)
            if self.bias is not None:
                y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, mode={self.mode!r}")


def quantize_linear_layers(model: nn.Module, *, mode: str = "two_digit", skip: tuple[str, ...] = (),
                           calibration=None) -> int:
    """Replace every ``nn.Linear`` of ``model`` (in place) by a :class:`QuantizedLinear`.

    Tied weights (e.g. a language-model head sharing the token embedding) are fine: the head gets its
    own int8 copy and the embedding keeps the fp32 table for its lookups. Names in ``skip`` (qualified
    module names, e.g. ``"lm_head"``) are left in fp32. Returns the number of layers replaced.

    ``calibration``: sequences of token ids, or a ``(B, T)`` tensor of them (a language model's
    ``model(LongTensor (1, T))`` must run on each row). When given, the int8 values are chosen by GPTQ
    (:mod:`attnkit.modules.gptq`) on the inputs each layer sees for that text, instead of rounding each weight
    to the nearest level: same format, same speed, smaller output error (a few thousand tokens of ordinary text
    are enough). A layer the calibration text does not reach (one the model's forward does not use) is rounded
    to nearest.

    Raises ``ValueError`` (before changing anything) for a ``skip`` name that is no ``nn.Linear`` of ``model``, a
    layer whose weight holds NaN or inf, a model that already has :class:`QuantizedLinear` layers (quantize the fp32
    model once, with the ``mode`` wanted) and a model with LoRA adapters (``merge_lora(model)`` first).

    Shape:
        unchanged: every replaced layer maps ``(*, K) -> (*, N)`` as before.
    """
    check_choice("mode", mode, MODES)
    if isinstance(skip, str) or not all(isinstance(s, str) for s in skip):
        raise ValueError(f"skip must be a sequence of module names (e.g. ('lm_head',)), got {skip!r}")
    modules = dict(model.named_modules())
    adapted = [name for name, m in modules.items() if isinstance(m, LoRALinear)]
    if adapted:
        raise ValueError(f"{type(model).__name__} has LoRA adapters ({adapted[0]!r}, ...): merge_lora(model) "
                         f"before quantizing, or the adapted layers would stay in fp32")
    done = [name for name, m in modules.items() if isinstance(m, QuantizedLinear)]
    if done:
        raise ValueError(f"{type(model).__name__} is already quantized ({len(done)} QuantizedLinear layers, e.g. "
                         f"{done[0]!r}); quantize the fp32 model once, with the mode wanted")
    linears = [name for name, m in modules.items() if isinstance(m, nn.Linear)]
    unknown = [name for name in skip if name not in linears]
    if unknown:
        raise ValueError(f"skip names {unknown} are no nn.Linear of {type(model).__name__}; its Linear layers "
                         f"are named like {linears[:6]} ({len(linears)} in all)")
    targets = [(name, modules[name]) for name in linears if name not in skip]
    bad = [name for name, m in targets if not bool(torch.isfinite(m.weight).all())]
    if bad:
        raise ValueError(f"cannot quantize {bad}: their weights hold NaN or inf")
    hessians = None
    if calibration is not None:
        from .gptq import gptq_round, input_hessians  # (imported here: plain quantization does not need it)

        hessians = input_hessians(model, calibration, names=[name for name, _ in targets])  # before replacing
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        q = QuantizedLinear.from_linear(linear, mode=mode)
        # a layer the calibration text never reached (all-zero Hessian) keeps round-to-nearest: GPTQ would take
        # all its inputs for ones that do not matter and set every weight to 0
        if hessians is not None and bool(hessians[name].any()):
            codes, scale = gptq_round(linear.weight, hessians[name])
            q.weight_int8.copy_(codes)
            q.scale.copy_(scale)
        setattr(parent, child, q)
    return len(targets)
