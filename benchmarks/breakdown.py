"""Where the time goes: a profiler breakdown of one benchmark's implementations, by kind of kernel.

Run ``python -m benchmarks.breakdown {lm,seq2seq,generate} [--steps N] [--threads N]``. Each implementation
of the chosen benchmark (the same models, data and step functions as ``python -m benchmarks``) is warmed
up, then run under ``torch.profiler``; the *self* CPU time of every ATen operator is summed into a few
categories:

* ``matmul``: ``mm``, ``addmm``, ``bmm``, ``matmul``-family kernels (the Linear layers and attention products);
* ``attention kernel``: PyTorch's fused scaled-dot-product-attention kernels;
* ``dropout RNG``: ``bernoulli_`` / ``native_dropout`` (drawing the dropout masks);
* ``softmax / cross-entropy``: ``log_softmax``, ``nll_loss``, ``softmax`` and their backward kernels;
* ``optimizer``: the AdamW kernels;
* ``other``: everything else (norms, activations, element-wise arithmetic, copies, masks, framework overhead).

The table shows how much of each implementation's step is work that every implementation must do with
the same kernels, which bounds how much faster any of them can be. The implementations alternate for
``--rounds`` profiled calls and each keeps its fastest call. Figures go to stdout as Markdown.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch

from .harness import run_header

CATEGORIES = ("matmul", "attention kernel", "dropout RNG", "softmax / cross-entropy", "optimizer", "other")


def categorize(op: str) -> str:
    """The category of an ATen operator name (e.g. ``aten::addmm``)."""
    name = op.split("::")[-1]
    if name in ("mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "_int_mm", "linear_dynamic"):
        return "matmul"
    if "scaled_dot_product" in name and "attention" in name:
        return "attention kernel"
    if name in ("bernoulli_", "bernoulli", "native_dropout", "native_dropout_backward"):
        return "dropout RNG"
    if "softmax" in name or name.startswith("nll_loss"):
        return "softmax / cross-entropy"
    if "adam" in name:
        return "optimizer"
    return "other"


def profile_breakdown(run, *, warmup: int = 1) -> dict[str, float]:
    """Self CPU seconds per category for one call of ``run`` (after ``warmup`` untimed calls)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        run()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        run()
        wall = time.perf_counter() - t0
    totals: dict[str, float] = defaultdict(float)
    for evt in prof.key_averages():
        if not evt.key.startswith("aten::"):
            continue  # autograd/profiler wrappers: their time is already in the aten ops they call
        totals[categorize(evt.key)] += evt.self_cpu_time_total / 1e6
    # wall time outside any aten op (Python, autograd engine, the profiler itself) is part of "other"
    totals["other"] += max(0.0, wall - sum(totals.values()))
    return dict(totals)


def _impls(bench: str, steps: int):
    """The benchmark's (name, run) pairs, built exactly as the speed suite builds them."""
    if bench == "lm":
        from .bench_lm import LMSizes, attnkit_gpt, hf_gpt2, make_optimizer, training_step_fn
        from .common import seeded

        s = LMSizes(steps_per_round=steps)
        g = seeded(0)
        x = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), generator=g)
        y = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), generator=g)
        torch.manual_seed(0)
        ak = attnkit_gpt(s).train()
        torch.manual_seed(0)
        hf = hf_gpt2(s).train()
        return [("attnkit", training_step_fn(ak, make_optimizer(ak.parameters(), s.optimizer, s.lr), x, y, steps,
                                             lambda m, i: m(i))),
                ("hf-gpt2-sdpa", training_step_fn(hf, make_optimizer(hf.parameters(), s.optimizer, s.lr), x, y, steps,
                                                  lambda m, i: m(input_ids=i).logits))]
    if bench == "seq2seq":
        from .bench_lm import make_optimizer
        from .bench_seq2seq import Seq2SeqSizes, TorchSeq2Seq, _step_fn, attnkit_transformer
        from .common import seeded

        s = Seq2SeqSizes(steps_per_round=steps)
        g = seeded(1)
        src = torch.randint(1, s.vocab_size, (s.batch_size, s.src_len), generator=g)
        tgt = torch.randint(1, s.vocab_size, (s.batch_size, s.tgt_len + 1), generator=g)
        torch.manual_seed(0)
        ak = attnkit_transformer(s).train()
        torch.manual_seed(0)
        tn = TorchSeq2Seq(s).train()
        return [("attnkit", _step_fn(ak, make_optimizer(ak.parameters(), s.optimizer, s.lr), src, tgt[:, :-1],
                                     tgt[:, 1:], steps)),
                ("torch.nn.Transformer", _step_fn(tn, make_optimizer(tn.parameters(), s.optimizer, s.lr), src,
                                                  tgt[:, :-1], tgt[:, 1:], steps))]
    if bench == "generate":
        from attnkit.generation import use_decoding_layout

        from .bench_generate import GenSizes, _ak_run, _attnkit_gpt2, _hf_gpt2, _hf_run
        from .common import seeded

        s = GenSizes(new_tokens=steps)
        prompt = torch.randint(0, s.vocab_size, (s.prompt_len,), generator=seeded(2)).tolist()
        torch.manual_seed(0)
        ak = _attnkit_gpt2(s)
        use_decoding_layout(ak)
        torch.manual_seed(0)
        hf = _hf_gpt2(s)
        return [("attnkit+cache", _ak_run(ak, prompt, s.new_tokens, True)),
                ("hf+cache", _hf_run(hf, prompt, s.new_tokens, True))]
    raise ValueError(f"benchmark must be one of lm, seq2seq, generate; got {bench!r}")


def breakdown_markdown(bench: str, rows: dict[str, dict[str, float]]) -> str:
    head = "| implementation | total s | " + " | ".join(CATEGORIES) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(CATEGORIES)]
    for name, cats in rows.items():
        total = sum(cats.values())
        cells = [f"{cats.get(c, 0.0):.3f} ({cats.get(c, 0.0) / total:.0%})" for c in CATEGORIES]
        lines.append(f"| {name} | {total:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.breakdown", description=__doc__.split("\n\n")[0])
    p.add_argument("bench", choices=("lm", "seq2seq", "generate"))
    p.add_argument("--steps", type=int, default=None,
                   help="training steps (lm, seq2seq; default 2) or new tokens (generate; default 32) per "
                        "profiled call")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--rounds", type=int, default=3,
                   help="alternating profiled rounds; the fastest is shown (default 3)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.threads is not None:
        if args.threads < 1:
            p.error(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    steps = args.steps if args.steps is not None else (32 if args.bench == "generate" else 2)
    if steps < 1:
        p.error(f"--steps must be >= 1, got {steps}")
    # implementations alternate (A B A B ...) and each keeps its fastest round: a busy machine only slows rounds down
    impls = _impls(args.bench, steps)
    rows: dict[str, dict[str, float]] = {}
    for r in range(args.rounds):
        for name, run in impls:
            cats = profile_breakdown(run, warmup=1 if r == 0 else 0)
            if name not in rows or sum(cats.values()) < sum(rows[name].values()):
                rows[name] = cats
    print(f"Self CPU time by kernel category, {run_header('python -m benchmarks.breakdown', argv)}\n")
    print(breakdown_markdown(args.bench, rows))
    return rows


if __name__ == "__main__":
    main()
