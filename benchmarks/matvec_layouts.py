"""One-row products (a decoding step's matrix work) per weight shape and storage layout.

Axis legend: ``N`` output features, ``K`` input features (``nn.Linear`` weight ``(N, K)``).

For each GPT-2-small weight shape, ``F.linear(x (1, 1, K), W, b)`` with ``W`` stored row-major ``(N, K)``
("row-major") or as the transpose of a contiguous ``(K, N)`` buffer ("transposed"). Each timed call runs
over several distinct copies of the matrix (more bytes than the caches hold, as in a real step, where
every weight comes from memory); the two layouts alternate in rounds and the median per matrix is
reported, with the read bandwidth it implies. This is what ``use_decoding_layout`` chooses from.

    python -m benchmarks.matvec_layouts [--threads 1] [--rounds 12]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from .common import seeded
from .harness import loadavg, run_header

# GPT-2 small: qkv, attention output, MLP in, MLP out (bias), head (no bias)
SHAPES: tuple[tuple[int, int, bool], ...] = (
    (2304, 768, True), (768, 768, True), (3072, 768, True), (768, 3072, True), (50257, 768, False))
LAYOUTS = ("row-major", "transposed")


def _copies(N: int, K: int, bias: bool, layout: str, copies: int) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    g = seeded(N * 31 + K)
    out = []
    for _ in range(copies):
        w = torch.randn(N, K, generator=g)
        if layout == "transposed":
            w = w.t().contiguous().t()  # (N, K) view of a contiguous (K, N) buffer
        out.append((w, torch.randn(N, generator=g) if bias else None))
    return out


def measure(rounds: int = 12) -> list[dict]:
    """Median microseconds per matrix and GB/s for every shape and layout (layouts alternate in rounds)."""
    rows = []
    for N, K, bias in SHAPES:
        copies = 12 if N * K < 10_000_000 else 2
        mats = {layout: _copies(N, K, bias, layout, copies) for layout in LAYOUTS}
        x = torch.randn(1, 1, K, generator=seeded(K))
        times: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
        for _ in range(rounds + 1):  # the first round warms up and is dropped
            for layout in LAYOUTS:
                t0 = time.perf_counter()
                for w, b in mats[layout]:
                    F.linear(x, w, b)
                times[layout].append((time.perf_counter() - t0) / copies)
        row = {"N": N, "K": K, "bias": bias}
        for layout in LAYOUTS:
            med = statistics.median(times[layout][1:])
            row[layout] = {"us": med * 1e6, "GB/s": N * K * 4 / med / 1e9}
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.matvec_layouts", description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--rounds", type=int, default=12,
                    help="timed rounds per layout, after one warm-up round (default 12)")
    args = ap.parse_args(argv)
    if args.threads < 1 or args.rounds < 1:
        ap.error(f"--threads and --rounds must be >= 1, got {args.threads} and {args.rounds}")
    torch.set_num_threads(args.threads)
    before = loadavg()
    rows = measure(args.rounds)
    header = run_header("python -m benchmarks.matvec_layouts", argv)
    print(f"{header}; rounds {args.rounds}, load before {before}, after {loadavg()}")
    print("| weight (N x K) | row-major us | transposed us | row-major GB/s | transposed GB/s | faster |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        a, b = r["row-major"], r["transposed"]
        faster = "row-major" if a["us"] < b["us"] else "transposed"
        print(f"| {r['N']} x {r['K']} | {a['us']:.0f} | {b['us']:.0f} | {a['GB/s']:.1f} | {b['GB/s']:.1f} | {faster} |")


if __name__ == "__main__":
    main()
