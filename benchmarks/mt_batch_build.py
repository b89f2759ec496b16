"""How long building one translation training batch takes on the host (benchmark, not a test).

    python benchmarks/mt_batch_build.py --tokenizer bpe8000.json --tokens 4096,16384,19456 --multiples 1,8

For each token budget ``--tokens`` and each ``--multiples`` (1: the ordinary batches; 8: the fixed shapes of
``train mt --cuda-graphs``), times ``MTTask.batch("train", k)`` over ``--batches`` consecutive batches: the
batcher's plan (cached within an epoch) and ``collate`` (padding, masks, the label counts). On a GPU the host
builds the next batch while the GPU runs the current update, so this is host time an update must fit in; on the
CPU it is part of the update. Prints one line per setting and, with ``--json``, writes the record.

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import int_list, out_file_flag  # noqa: E402


def _cpu_name() -> str:
    """The CPU model as ``/proc/cpuinfo`` names it (``platform.machine()`` where there is none)."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="de-en", help="recipe name, prepared folder, TSV or SRC,TGT (default de-en)")
    p.add_argument("--tokenizer", type=Path, default=None, help="tokenizer JSON (default: train a joint BPE)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--tokens", default="4096,16384", help="comma-separated token budgets per batch")
    p.add_argument("--multiples", default="1,8", help="comma-separated shape multiples (1 = ordinary batches)")
    p.add_argument("--batches", type=int, default=200, help="batches timed per setting")
    p.add_argument("--json", type=out_file_flag, default=None, help="write the results here")
    args = p.parse_args(argv)
    if args.batches < 1:
        p.error(f"--batches must be >= 1, got {args.batches}")
    if args.max_len < 2:
        p.error(f"--max-len must be >= 2 (one token plus <bos>/<eos>), got {args.max_len}")
    lists = {}
    for flag, text in (("--tokens", args.tokens), ("--multiples", args.multiples)):
        lists[flag] = int_list(text, 1)
        if lists[flag] is None:
            p.error(f"{flag}: expected comma-separated integers >= 1, got {text!r}")
    budgets, multiples = lists["--tokens"], lists["--multiples"]

    from attnkit.data.corpora.parallel import resolve_parallel_data
    from attnkit.data.tokenizers.tokenizer import load_tokenizer
    from attnkit.training.mt_task import MTTask

    try:  # a missing file or a bad --vocab-size: one line, before any batch is timed
        tokenizer = None if args.tokenizer is None else load_tokenizer(args.tokenizer)
        source, _ = resolve_parallel_data(args.data)
        base = MTTask.from_data(source, tokenizer=tokenizer, vocab_size=args.vocab_size, max_len=args.max_len,
                                max_tokens=max(budgets))
    except (ValueError, OSError) as err:
        p.error(str(err))
    results = []
    for budget in budgets:
        for multiple in multiples:
            task = MTTask(base.train, base.valid, max_tokens=budget, seed=0, shape_multiple=multiple)
            task.batch("train", 0)  # the first call builds the corpus's flat arrays
            times = []
            for k in range(1, args.batches + 1):
                t0 = time.perf_counter()
                batch = task.batch("train", k)
                times.append(time.perf_counter() - t0)
            row = {"max_tokens": budget, "multiple": multiple, "median_ms": 1e3 * statistics.median(times),
                   "mean_ms": 1e3 * statistics.fmean(times), "positions_last": int(batch.src.numel())}
            results.append(row)
            print(f"max_tokens {budget:>6} multiple {multiple}: {row['median_ms']:.2f} ms median, "
                  f"{row['mean_ms']:.2f} ms mean per batch", flush=True)
    if args.json is not None:
        record = {"command": "python benchmarks/mt_batch_build.py " + " ".join(sys.argv[1:] if argv is None else argv),
                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": _cpu_name(),
                  "results": results}
        args.json.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
