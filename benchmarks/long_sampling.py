"""Sampling past the context length: the KV-cache window (issue #18 part 5) against recomputing the window.

    python -m benchmarks.long_sampling [--new 400] [--rounds 3]

A random GPT of the char-small shape with ``block_size`` 128 continues a 120-token prompt by ``--new``
tokens, so almost every token lies past the context. Two models: learned positions (the cache drops
half the window and re-fills once) and RoPE (the cache shifts, re-rotating the kept keys). Each is timed
with ``use_cache=True, sliding_window=True`` (the window in the cache) and ``use_cache=False,
sliding_window=True`` (the whole window recomputed at every token: what ``attnkit sample`` did before),
alternating rounds (``benchmarks.harness.alternate``), one thread. Prints tokens/s and the ratio.
"""

from __future__ import annotations

import argparse

import torch

from attnkit.generation import generate
from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from benchmarks.harness import Impl, alternate, loadavg, run_header

BLOCK = 128


def _model(position: str) -> GPT:
    torch.manual_seed(0)
    extra = dict(position="rope", norm="rmsnorm") if position == "rope" else {}
    return GPT(GPTConfig(vocab_size=65, block_size=BLOCK, n_layer=4, n_head=4, n_embd=128, dropout=0.0, **extra)).eval()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.long_sampling", description=__doc__.splitlines()[0])
    p.add_argument("--new", type=int, default=400, help="new tokens per sample (default 400)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per implementation (default 3)")
    args = p.parse_args(argv)
    if args.new < 1 or args.rounds < 1:
        p.error(f"--new and --rounds must be >= 1, got {args.new} and {args.rounds}")
    torch.set_num_threads(1)
    prompt = [[int(t) for t in torch.randint(0, 65, (BLOCK - 8,), generator=torch.Generator().manual_seed(1))]]
    print(f"{run_header('python -m benchmarks.long_sampling', argv)}; load before {loadavg()}")
    for position in ("learned", "rope"):
        model = _model(position)
        impls = [Impl(f"{position} {name}", (lambda cache: lambda: len(generate(
                     model, prompt, max_new_tokens=args.new, do_sample=True, seed=0, top_k=20,
                     use_cache=cache, sliding_window=True)[0]))(cache)) for name, cache in
                 (("window in the KV cache", True), ("window recomputed per token", False))]
        res = alternate(impls, rounds=args.rounds, warmup=1, measure_memory=False)
        tps = {name: m.summary()["throughput"]["median"] for name, m in res.items()}
        for name, value in tps.items():
            print(f"  {name:40s} {value:8.1f} tokens/s (median of {args.rounds})")
        a, b = tps.values()
        print(f"  {position}: the cached window is {a / b:.1f}x the recomputed one")
    print(f"load after {loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
