"""How fast the real ``train mt`` update runs at several batch sizes (benchmark, not a test).

    python benchmarks/mt_step_scaling.py --device cuda --autocast bf16 --preset transformer-base \\
        --set norm_first=true --tokens 8192,16384,32768,65536 --json benchmarks/records/gpu/mt_step_scaling_h200.json

On one process, for each token budget ``--tokens`` (``--max-tokens`` of ``attnkit train mt``: ``B * max(S, T)``
padded positions per batch), a fresh model of ``--preset`` trains ``--steps`` updates through the ordinary
:class:`attnkit.training.Trainer` on the real pairs (``--data``, default the de-en recipe, encoded once with a
joint BPE of ``--vocab-size`` or ``--tokenizer``). From the run's metrics (the timed updates only: fetching and
padding the batch, forward, backward, clipping, optimizer step; on a GPU, whose updates are queued, also the
wait for them when the trainer reads their numbers back at each logged step; the first logged interval is
warm-up and is left out) it reports updates/s and target tokens/s, and on CUDA the share of the time the GPU was busy
(``torch.cuda.utilization``, NVML's "a kernel was running" ratio, sampled every 0.1 s during the updates).

What it answers: whether the update is bound by the GPU's arithmetic (updates/s fall as the batch grows) or
by the per-update work on the CPU (Python, kernel launches, host syncs, batch building: updates/s stay flat,
so a larger batch is nearly free tokens). The translation recipe's batch size and model size for a GPU
budget follow from it (docs/experiments/gpu.md).

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import int_list, out_file_flag  # noqa: E402
from benchmarks.mt_de_en import LoadSampler  # noqa: E402


class UtilizationSampler(LoadSampler):
    """Samples ``torch.cuda.utilization(device)`` (percent) every ``every`` seconds while running; none where
    NVML (pynvml) is missing."""

    def __init__(self, device, every: float = 0.1):
        import torch

        super().__init__(every, read=lambda: float(torch.cuda.utilization(device)))


def _steady_pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """The consecutive training log rows whose interval counts as steady state: every one after the first (warm-up)
    in which no CUDA graph was recorded (the row's ``cuda_graphs`` count did not grow)."""
    logs = [r for r in rows if "tokens_per_s" in r]
    if len(logs) < 2:
        raise ValueError(f"need at least two logged intervals (one is warm-up), got {len(logs)}: raise --steps")
    return [(prev, row) for prev, row in zip(logs, logs[1:]) if row.get("cuda_graphs") == prev.get("cuda_graphs")]


def steady_windows(rows: list[dict]) -> list[tuple[float, float]]:
    """The ``(start, end)`` run-clock seconds (the rows' ``elapsed``) of the intervals :func:`update_rates` times."""
    return [(prev["elapsed"], row["elapsed"]) for prev, row in _steady_pairs(rows)]


def update_rates(rows: list[dict]) -> dict[str, float]:
    """Updates/s and target tokens/s of the logged intervals after the first (warm-up) one, leaving out those in which
    a CUDA graph was recorded (their rows' ``cuda_graphs`` count grew).

    ``rows``: the run's ``metrics.jsonl`` rows; those with ``tokens_per_s`` are the training logs (one every
    ``--log-every`` updates), each holding the running ``tokens`` and the interval's tokens/s of timed updates.
    """
    seconds = tokens = 0.0
    updates = 0
    for prev, row in _steady_pairs(rows):
        updates += row["step"] - prev["step"]
        interval = row["tokens"] - prev["tokens"]
        tokens += interval
        seconds += interval / row["tokens_per_s"]
    if updates == 0:
        raise ValueError("every logged interval recorded a CUDA graph: raise --steps")
    return {"updates_per_s": updates / seconds, "target_tokens_per_s": tokens / seconds,
            "timed_updates": updates, "timed_seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="de-en", help="recipe name, prepared folder, TSV or SRC,TGT (default de-en)")
    p.add_argument("--valid", default=None, help="validation pairs (default: the recipe's / a split-off part)")
    p.add_argument("--tokenizer", type=Path, default=None, help="tokenizer JSON (default: train a joint BPE)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--preset", default="transformer-base")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="model config override")
    p.add_argument("--tokens", default="8192,16384,32768", help="comma-separated token budgets per batch")
    p.add_argument("--steps", type=int, default=150, help="updates per budget")
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--lr", type=float, default=5e-4,
                   help="peak lr (default 5e-4; 1e-3, the default until 2026-11-26, diverged on an H200 past about "
                        "110 updates of transformer-base at 16k tokens, eager and graphed alike)")
    p.add_argument("--device", default="auto")
    p.add_argument("--autocast", choices=("bf16", "fp16"), default=None)
    p.add_argument("--modes", default="eager",
                   help="comma-separated ways to run the update, each over every --tokens: eager (train mt's "
                        "default), fixed (eager on fixed-shape batches, widths rounded to 8: the padding that "
                        "--cuda-graphs costs), graphs (train mt --cuda-graphs), compile (train mt --compile)")
    p.add_argument("--adamw-impl", choices=("auto", "fused", "foreach", "for_loop"), default="auto")
    p.add_argument("--json", type=out_file_flag, default=None, help="write the results here")
    args = p.parse_args(argv)

    import torch

    from attnkit.data.corpora.parallel import resolve_parallel_data
    from attnkit.data.pipeline.mt_batching import GRAPH_SHAPE_MULTIPLE
    from attnkit.data.tokenizers.tokenizer import load_tokenizer
    from attnkit.models.builders import build_model
    from attnkit.models.configs import parse_overrides
    from attnkit.models.presets import get_preset
    from attnkit.training import TrainConfig, Trainer
    from attnkit.training.device import resolve_device
    from attnkit.training.mt_task import MTTask

    budgets = int_list(args.tokens, 1)
    if budgets is None:
        p.error(f"--tokens: expected comma-separated integers >= 1, got {args.tokens!r}")
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - {"eager", "fixed", "graphs", "compile"})
    if unknown:
        p.error(f"--modes: unknown {unknown}; choose from eager, fixed, graphs, compile")
    for flag, value in (("--steps", args.steps), ("--log-every", args.log_every), ("--max-len", args.max_len)):
        if value < 1:
            p.error(f"{flag} must be >= 1, got {value}")
    try:  # the model config now, not after the data is encoded; its max_len is --max-len's (as in train mt)
        overrides = parse_overrides(args.set)
        if "max_len" in overrides:
            raise ValueError(f"--set max_len={overrides['max_len']!r}: the model's max_len is --max-len's; use "
                             f"--max-len {overrides['max_len']!r}")
        get_preset(args.preset, max_len=args.max_len, **overrides)
    except ValueError as err:
        p.error(str(err))
    try:  # a bad device, a missing file or a bad --vocab-size: one line, before any training
        device = resolve_device(args.device)
        source, _ = resolve_parallel_data(args.data)
        valid = None if args.valid is None else resolve_parallel_data(args.valid, flag="--valid")[0]
        t0 = time.perf_counter()
        tokenizer = None if args.tokenizer is None else load_tokenizer(args.tokenizer)
        base = MTTask.from_data(source, valid=valid, tokenizer=tokenizer, vocab_size=args.vocab_size,
                                max_len=args.max_len, max_tokens=max(budgets))
    except (ValueError, OSError) as err:
        p.error(str(err))
    print(f"data encoded in {time.perf_counter() - t0:.0f} s: {len(base.train):,} train pairs", flush=True)
    V = base.tokenizer.vocab_size
    config = get_preset(args.preset, src_vocab_size=V, tgt_vocab_size=V, max_len=args.max_len,
                        pad_id=base.tokenizer.pad_id, **overrides)
    machine = (torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU") + f", torch {torch.__version__}"
    results = []
    for mode, budget in [(m, b) for m in modes for b in budgets]:
        task = MTTask(base.train, base.valid, max_tokens=budget, seed=0,
                      shape_multiple=GRAPH_SHAPE_MULTIPLE if mode in ("fixed", "graphs") else 1)
        torch.manual_seed(0)
        model = build_model(config)
        n_params = sum(p.numel() for p in model.parameters())
        cfg = TrainConfig(steps=args.steps, lr=args.lr, warmup_steps=min(50, args.steps // 5),
                          eval_every=args.steps, eval_batches=1, log_every=args.log_every, ckpt_every=args.steps,
                          keep_last=1, device=args.device, autocast=args.autocast,
                          compile=mode == "compile", cuda_graphs=mode == "graphs", adamw_impl=args.adamw_impl)
        with tempfile.TemporaryDirectory() as out:
            sampler = UtilizationSampler(device) if device.type == "cuda" else None
            if sampler is not None:
                sampler.start()
            diverged = None
            try:
                Trainer(model, task, cfg, Path(out) / "run", model_config=config.to_dict(), progress=False,
                        log=False).fit()
            except FloatingPointError as err:  # recorded with the losses up to there; the other runs go on
                diverged = str(err)
            busy = sampler.stop() if sampler is not None else []
            rows = [json.loads(line) for line in (Path(out) / "run" / "metrics.jsonl").read_text().splitlines()]
        if diverged is not None:
            losses = {r["step"]: round(r["loss"], 4) for r in rows if "tokens_per_s" in r}
            results.append({"mode": mode, "max_tokens": budget, "diverged": diverged, "losses": losses})
            print(f"{mode:>7} max_tokens {budget:>6}: {diverged}; losses {losses}", flush=True)
            continue
        rates = update_rates(rows)
        n_batches = task.num_batches("train")
        row = {"mode": mode, "max_tokens": budget, "padding": task.padding_ratio("train")["total"],
               "pairs_per_batch": len(task.train) / n_batches, **rates,
               "gpu_busy_percent": (sum(busy) / len(busy)) if busy else None,
               "peak_memory_gib": (torch.cuda.max_memory_allocated(device) / 2**30) if device.type == "cuda" else None}
        row["losses"] = {r["step"]: round(r["loss"], 4) for r in rows if "tokens_per_s" in r}
        results.append(row)
        print(f"{mode:>7} max_tokens {budget:>6}: {row['pairs_per_batch']:6.0f} pairs/batch, padding "
              f"{row['padding']:.0%}, {rates['updates_per_s']:6.2f} "
              f"updates/s, {rates['target_tokens_per_s']:10,.0f} target tokens/s"
              + (f", GPU busy {row['gpu_busy_percent']:.0f}%" if busy else "") + f"; losses {row['losses']}", flush=True)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
    record = {"command": "python benchmarks/mt_step_scaling.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine,
              "preset": args.preset, "set": args.set, "autocast": args.autocast, "adamw_impl": args.adamw_impl, "steps": args.steps,
              "parameters": n_params, "results": results}
    if args.json is not None:
        args.json.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
