"""In-process A/B of the seq2seq training step (benchmark, not a test): attnkit with another revision's attention module
against attnkit as it is, and torch.nn.Transformer, alternating rounds of 5 steps on one thread.

    git show 7b883de:attnkit/modules/attention.py > /tmp/old_attention.py
    python benchmarks/ab_attention_dropout.py --old-attention /tmp/old_attention.py

Built for one change (2026-11-26): on the CPU, attention with dropout used to go through torch's fused-kernel entry,
whose CPU math fallback draws the mask with ``bernoulli_``; it now takes attnkit's reference path with attnkit's
cheaper dropout mask. Same models, batch and optimizer as ``python -m benchmarks --only seq2seq`` (whose
between-run spread, about 15%, hides a change of a few percent: hence the alternating rounds in one process).

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--old-attention", type=Path, required=True, help="another revision's attnkit/modules/attention.py")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    import attnkit.modules.multi_head_attention as mha
    from benchmarks.breakdown import _impls

    spec = importlib.util.spec_from_file_location("attnkit.modules._old_attention", args.old_attention)
    old = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = old
    spec.loader.exec_module(old)
    current = mha.scaled_dot_product_attention
    impls = dict(_impls("seq2seq", 5))
    runs = {"attnkit, old attention": (impls["attnkit"], old.scaled_dot_product_attention),
            "attnkit": (impls["attnkit"], current), "torch.nn.Transformer": (impls["torch.nn.Transformer"], current)}
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, (run, attention) in runs.items():
            mha.scaled_dot_product_attention = attention
            t0 = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - t0)
    mha.scaled_dot_product_attention = current
    peer = statistics.median(seconds["torch.nn.Transformer"])
    for name, values in seconds.items():
        print(f"{name}: median {statistics.median(values):.4f} s per 5 steps (min {min(values):.4f}, max "
              f"{max(values):.4f}); torch.nn / this {peer / statistics.median(values):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
