"""Where the wall clock of a real ``attnkit train mt`` run goes (benchmark, not a test).

    .venv/bin/python benchmarks/mt_profile.py runs/de-en            # a finished run folder

Reads the run's ``metrics.jsonl`` and splits its wall clock (``elapsed``) into

* **training updates**: the sum of the timed updates (``tokens / tokens_per_s`` of each logged interval); an
  update = fetching + padding the batch, forward, backward, clipping, optimizer step;
* **evaluations**: the extra wall clock of the logging intervals that hold an evaluation (valid loss on
  ``--eval-batches`` batches + greedy decoding of ``--bleu-sentences`` sentences for BLEU/chrF + best/ save);
* **checkpoints and the rest**: what remains (step checkpoints every ``--ckpt-every``, logging).

Then it times, in this process and on the run's own data and checkpoint, the parts that hide inside those:
building one training batch (the batcher's plan + ``collate``: padding and masks), the validation loss of one
evaluation, and the greedy decoding of the BLEU sentences; and reads the padding ratio of the training batches.
Results are printed as a Markdown table (pasted, with the command, date and load, into docs/experiments/mt.md).

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def wall_clock_split(rows: list[dict], eval_steps: set[int]) -> dict[str, float]:
    """Seconds of timed updates, evaluations and the rest, from the logged rows (``step``, ``elapsed``,
    ``tokens``, ``tokens_per_s``) of one run."""
    logs = [r for r in rows if "tokens_per_s" in r]
    update_s, eval_s, prev = 0.0, 0.0, None
    for r in logs:
        if prev is None:
            interval_tokens, gap = r["tokens"], r["elapsed"]
        else:
            interval_tokens, gap = r["tokens"] - prev["tokens"], r["elapsed"] - prev["elapsed"]
        timed = interval_tokens / max(r["tokens_per_s"], 1e-9)
        update_s += timed
        lo = 0 if prev is None else prev["step"]
        if any(lo <= s < r["step"] for s in eval_steps):  # an evaluation runs right after the log of its step
            eval_s += max(gap - timed, 0.0)
        prev = r
    total = logs[-1]["elapsed"] if logs else 0.0
    return {"total": total, "updates": update_s, "evaluations": eval_s,
            "other": max(total - update_s - eval_s, 0.0)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a finished `attnkit train mt` run folder")
    p.add_argument("--batches", type=int, default=300, help="training batches to time for the data part")
    args = p.parse_args(argv)
    if args.batches < 1:
        p.error(f"--batches must be >= 1, got {args.batches}")
    from attnkit.training import MTTask
    from attnkit.checkpoints import load
    from benchmarks.harness import run_header

    from attnkit.data.corpora.parallel import resolve_parallel_data

    if not args.run.is_dir():
        p.error(f"run: no such run folder {str(args.run)!r}")
    try:  # not a finished `train mt` run, or its data gone: one line, before anything is timed
        rows = [json.loads(line) for line in (args.run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        state = json.loads((args.run / "run.json").read_text())
        if not any("tokens_per_s" in r for r in rows):
            raise ValueError(f"{args.run / 'metrics.jsonl'} holds no training log: is the run finished?")
        loaded = load(args.run, expect_kind="mt")
        cfg = state["train_config"]
        model, tokenizer, ck = loaded.model, loaded.tokenizer, loaded.state
        opts = ck["extra"]["mt_options"]
        data = ck["extra"]["data"]
        source, _ = resolve_parallel_data(data)
        valid = opts.get("valid")
        valid_source = resolve_parallel_data(valid)[0] if valid else None
        task = MTTask.from_data(source, valid=valid_source, tokenizer=tokenizer, max_len=opts["max_len"],
                                bleu=True, max_tokens=opts["max_tokens"], seed=cfg["seed"],
                                bleu_sentences=opts["bleu_sentences"])
    except (ValueError, OSError) as err:
        p.error(str(err))
    except KeyError as err:  # a hand-made or older run.json / checkpoint
        p.error(f"{args.run}: not a finished `attnkit train mt` run (its records have no {err})")
    eval_steps = {r["step"] for r in rows if "valid_loss" in r}
    split = wall_clock_split(rows, eval_steps)
    n_steps = max(r["step"] for r in rows)

    t0 = time.perf_counter()
    for i in range(args.batches):
        task.batch("train", i)
    batch_s = (time.perf_counter() - t0) / args.batches
    model.eval()
    t0 = time.perf_counter()
    task.translate_fn, saved = None, task.translate_fn  # valid loss only
    task.evaluate(model, cfg["eval_batches"])
    loss_s = time.perf_counter() - t0
    task.translate_fn = saved
    t0 = time.perf_counter()
    decoded = task.translation_scores(model, opts["bleu_sentences"])["sentences"]  # at most the valid set
    decode_s = time.perf_counter() - t0
    pad = task.padding_ratio("train")

    total = split["total"]
    data_s = batch_s * n_steps
    n_evals = len([s for s in eval_steps if s < n_steps])  # the final evaluation runs after the budget
    lines = [
        f"Run `{args.run}`: {n_steps:,} updates, {total / 60:.1f} min of wall clock, {n_evals} evaluations "
        "within it (the final one runs after the budget).",
        "",
        "| part | seconds | share of the run |",
        "|---|---:|---:|",
        f"| training updates (all of it below) | {split['updates']:.0f} | {split['updates'] / total:.1%} |",
        f"| - of which building batches (plan + collate/padding), timed here: {batch_s * 1e3:.2f} ms x {n_steps:,} "
        f"| {data_s:.0f} | {data_s / total:.1%} |",
        f"| - of which padding positions (computed on, then masked): {pad['total']:.1%} of the batch positions "
        f"| ~{split['updates'] * pad['total']:.0f} | ~{split['updates'] * pad['total'] / total:.1%} |",
        f"| evaluations (valid loss + BLEU decoding + best/ save) | {split['evaluations']:.0f} | "
        f"{split['evaluations'] / total:.1%} |",
        f"| - of which valid loss ({cfg['eval_batches']} batches), timed here: {loss_s:.1f} s x {n_evals} | "
        f"{loss_s * n_evals:.0f} | {loss_s * n_evals / total:.1%} |",
        f"| - of which greedy decoding of {decoded} sentences for BLEU, timed here: {decode_s:.1f} s "
        f"x {n_evals} | {decode_s * n_evals:.0f} | {decode_s * n_evals / total:.1%} |",
        f"| checkpoints every {cfg['ckpt_every']} updates, logging, the rest | {split['other']:.0f} | "
        f"{split['other'] / total:.1%} |",
    ]
    print(f"{run_header('python benchmarks/mt_profile.py', argv)}\n")
    print("\n".join(lines))
    print(f"\nload average now {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
