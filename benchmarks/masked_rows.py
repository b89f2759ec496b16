"""Benchmark check (not a test): does a row of padding only turn torch.nn's training NaN on this device?

    python -m benchmarks.masked_rows --device cuda          # on a GPU (issue #40: the torch.nn peer's NaN)
    python -m benchmarks.masked_rows                        # on the CPU

Why. ``train mt --cuda-graphs`` pads its batches to a few fixed shapes, which adds rows of padding only. In the
GPU call of 2026-11-29 the ``torch.nn.Transformer`` peer stopped with a NaN gradient norm on such batches (at
update 7, with fixed shapes, graphed or not), while it trained on the same data without them and attnkit
trained with them. A padding-only row leaves its queries no key to attend. attnkit gives such rows zeros on every
device. This check asks what torch.nn's encoder does with them on ``--device``, in fp32 and under bf16 autocast:
are the padding-only row's outputs, the other rows' outputs and the weight gradients finite when only the other
rows carry loss? Then it asks each SDPA backend the device has what it returns for a row that may attend
nothing, and attnkit's attention the same.

Prints one line per case and, with ``--json``, writes them.

Axis legend: B batch, S source length, C d_model, H heads, D head width.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness import out_file_flag


def _dtype(device: str) -> torch.dtype:
    """The attention inputs' dtype: bf16 on an accelerator (what its fused kernels take), fp32 on the CPU."""
    return torch.bfloat16 if device != "cpu" else torch.float32


def encoder_case(device: str, autocast: bool, *, seed: int = 0) -> dict:
    """A 2-layer pre-norm ``nn.TransformerEncoder`` (512 wide, 8 heads) on a batch whose last row is padding only;
    the loss covers the other rows. Returns which parts are finite."""
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.1, batch_first=True, norm_first=True)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(device)
    x = torch.randn(4, 40, 512, device=device, requires_grad=True)  # (B, S, C)
    pad = torch.zeros(4, 40, dtype=torch.bool, device=device)  # (B, S), True = padding
    pad[1, 30:] = True
    pad[3] = True  # a row of padding only, as fixed shapes add
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=autocast):
        y = enc(x, src_key_padding_mask=pad)  # (B, S, C)
    (y[:3].float() ** 2).mean().backward()  # the padding-only row has no labels, so no loss
    return {"case": f"nn.TransformerEncoder, {'bf16 autocast' if autocast else 'fp32'}",
            "padding_row_finite": bool(torch.isfinite(y[3]).all()),
            "other_rows_finite": bool(torch.isfinite(y[:3]).all()),
            "weight_grads_finite": all(bool(torch.isfinite(p.grad).all()) for p in enc.parameters())}


def sdpa_cases(device: str) -> list[dict]:
    """``F.scaled_dot_product_attention`` with a boolean mask (True = may attend, SDPA's polarity) whose second
    batch row may attend nothing, through each backend; what that row gets, or why the backend is unavailable."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dtype = _dtype(device)
    q = torch.randn(2, 8, 16, 64, device=device, dtype=dtype)  # (B, H, S, D)
    allowed = torch.ones(2, 1, 1, 16, dtype=torch.bool, device=device)
    allowed[1] = False
    out = []
    for backend in (SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        row = {"case": f"sdpa {backend.name.lower()}, {str(dtype).removeprefix('torch.')}"}
        try:
            with sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(q, q, q, attn_mask=allowed)  # (B, H, S, D)
            row["masked_row"] = [round(float(v), 4) for v in o[1, 0, 0, :3]]
            row["masked_row_finite"] = bool(torch.isfinite(o[1]).all())
        except RuntimeError as err:
            row["unavailable"] = str(err).splitlines()[0][:100]
        out.append(row)
    return out


def attnkit_case(device: str) -> dict:
    """attnkit's attention (its fast path on ``device``) with a key padding mask whose second row is all padding:
    that row's output (zeros by attnkit's rule) and the gradients of q, k and v."""
    from attnkit.modules.attention import scaled_dot_product_attention

    dtype = _dtype(device)
    q = torch.randn(2, 8, 16, 64, device=device, dtype=dtype, requires_grad=True)  # (B, H, S, D)
    padding = torch.zeros(2, 16, dtype=torch.bool, device=device)  # (B, S), True = padding
    padding[1] = True
    o, _ = scaled_dot_product_attention(q, q, q, key_padding_mask=padding)  # (B, H, S, D)
    o[0].float().sum().backward()
    return {"case": f"attnkit attention, {str(dtype).removeprefix('torch.')}",
            "masked_row": [round(float(v), 4) for v in o.detach()[1, 0, 0, :3]],
            "masked_row_finite": bool(torch.isfinite(o[1]).all()), "grads_finite": bool(torch.isfinite(q.grad).all())}


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--json", type=out_file_flag, default=None, help="write the cases here")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device}: this machine has no CUDA device")
    from attnkit.training.device import resolve_device

    try:  # an unknown name or a GPU this machine lacks: one line, not torch's RuntimeError
        device = resolve_device(args.device)
    except ValueError as err:
        p.error(f"--device: {err}")
    if args.device.strip().lower() == "auto":  # torch has no "auto": the device it stands for
        args.device = str(device)
    rows = [encoder_case(args.device, False), encoder_case(args.device, True), *sdpa_cases(args.device),
            attnkit_case(args.device)]
    for row in rows:
        print(" ".join(f"{k}={v}" for k, v in row.items()))
    if args.json is not None:
        from benchmarks.mt_de_en import machine_description

        record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "command": "python -m benchmarks.masked_rows " + " ".join(argv if argv is not None else sys.argv[1:]),
                  "device": args.device, "machine": machine_description(args.device), "torch": torch.__version__,
                  "cases": rows}
        args.json.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
