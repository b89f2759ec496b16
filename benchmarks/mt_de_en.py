"""Benchmark (not a test): train a CPU-sized Transformer on de-en, then measure test BLEU and chrF.

    .venv/bin/python benchmarks/mt_de_en.py --minutes 40            # the recorded run (about 50 minutes in all)
    .venv/bin/python benchmarks/mt_de_en.py --skip-train --out DIR  # only the evaluation of an existing run

Steps, each one an ordinary ``attnkit`` command (printed, and recorded in ``mt_de_en.json``):

1. ``attnkit train mt --data de-en ... --max-time MINUTES --bleu --average-last 5`` (the data recipe is
   prepared on first use from Debian packages);
2. ``attnkit eval mt --split valid --beam 1`` on ``checkpoints/best`` and on ``checkpoints/averaged``: the one
   with the higher validation BLEU is kept (the test set is never used to choose);
3. ``attnkit eval mt --split test --beam B --length-penalty A`` on the kept checkpoint, writing the
   translations; ten of them are sampled (fixed seed) for the report.

Outputs: ``benchmarks/mt_de_en.json`` (figures, commands, load average samples), ``benchmarks/mt_de_en.md``
(the "Translation" section pasted into RESULTS.md) and ``benchmarks/mt_de_en_loss.png`` (the run's curves).

Threads: the runs use ONE thread (``OMP_NUM_THREADS=1``). On this shared 2-core machine (load average 4-14)
two threads were 3-4x *slower* than one: OpenMP's threads wait for each other at every parallel region, and
with more runnable processes than cores one of them is usually descheduled (see RESULTS.md).

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# The configuration chosen by the short tuning runs (see RESULTS.md, "Translation"): at this compute budget a
# 1.4M-parameter model beats transformer-small (6.6M) at equal wall-clock time.
MODEL = ["--preset", "transformer-small", "--set", "d_model=128", "--set", "dim_feedforward=512",
         "--set", "num_encoder_layers=2", "--set", "num_decoder_layers=2", "--set", "norm_first=true"]
TRAIN = ["--vocab-size", "4000", "--max-tokens", "1024", "--lr", "0.4", "--warmup-steps", "150",
         "--eval-every", "600", "--ckpt-every", "150", "--keep-last", "5", "--average-last", "5",
         "--bleu", "--bleu-sentences", "150", "--no-progress"]
BEAM, LENGTH_PENALTY = 4, 0.6


class LoadSampler(threading.Thread):
    """Samples the 1-minute load average every ``every`` seconds (the machine is shared)."""

    def __init__(self, every: float = 30.0):
        super().__init__(daemon=True)
        self.every, self.samples, self._stop = every, [], threading.Event()

    def run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(round(os.getloadavg()[0], 2))
            self._stop.wait(self.every)

    def stop(self) -> list[float]:
        self._stop.set()
        return self.samples


def attnkit(args: list[str], env: dict[str, str]) -> None:
    cmd = [sys.executable, "-m", "attnkit", *args]
    print("$ attnkit " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=40.0, help="training budget (--max-time)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/bench-mt-de-en-<time>)")
    p.add_argument("--threads", type=int, default=1, help="torch / OpenMP threads (see the module docstring)")
    p.add_argument("--skip-train", action="store_true", help="evaluate the existing run in --out")
    p.add_argument("--smoke", type=int, default=None, metavar="N",
                   help="check the evaluation part on the first N sentences only (not a benchmark figure)")
    args = p.parse_args()
    out = args.out or ROOT / "runs" / f"bench-mt-de-en-{time.strftime('%Y%m%d-%H%M%S')}"
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    sampler = LoadSampler()
    sampler.start()
    t0 = time.time()
    train_args = ["train", "mt", "--data", "de-en", *MODEL, *TRAIN, "--max-time", f"{args.minutes:g}",
                  "--out", str(out)]
    if not args.skip_train:
        attnkit(train_args, env)
    train_seconds = time.time() - t0

    limit = [] if args.smoke is None else ["--max-sentences", str(args.smoke)]
    # choose the checkpoint on the validation set
    valid = {}
    for name in ("best", "averaged"):
        ckpt = out / "checkpoints" / name
        if not ckpt.is_dir():
            continue
        j = out / f"valid_{name}.json"
        attnkit(["eval", "mt", "--ckpt", str(ckpt), "--data", "de-en", "--split", "valid", "--beam", "1",
                 "--json", str(j), *limit], env)
        valid[name] = json.loads(j.read_text())
    chosen = max(valid, key=lambda k: valid[k]["bleu"])

    test_json, hyps = out / "test.json", out / "test_hyps.txt"
    eval_args = ["eval", "mt", "--ckpt", str(out / "checkpoints" / chosen), "--data", "de-en", "--split", "test",
                 "--beam", str(BEAM), "--length-penalty", str(LENGTH_PENALTY), "--json", str(test_json),
                 "--hyps", str(hyps), *limit]
    attnkit(eval_args, env)
    test = json.loads(test_json.read_text())
    loads = sampler.stop()

    from attnkit.data.parallel import load_parallel
    from attnkit.data.registry import prepare

    corpus = load_parallel(prepare("de-en"), split="test")
    hyp_lines = hyps.read_text(encoding="utf-8").splitlines()
    picks = sorted(random.Random(0).sample(range(len(hyp_lines)), 10))
    samples = [{"source": corpus.sources[i], "reference": corpus.targets[i], "hypothesis": hyp_lines[i]}
               for i in picks]
    summary = json.loads((out / "summary.json").read_text())
    shutil.copyfile(out / "loss.png", HERE / "mt_de_en_loss.png")

    record = {"train_command": "attnkit " + " ".join(train_args), "eval_command": "attnkit " + " ".join(eval_args),
              "threads": args.threads, "train_summary": summary, "valid_greedy": valid, "chosen": chosen,
              "test": test, "samples": samples, "load_average_samples": loads,
              "wall_seconds": {"train": train_seconds, "total": time.time() - t0}}
    (HERE / "mt_de_en.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    rows = "\n".join(f"| {s['source']} | {s['reference']} | {s['hypothesis']} |" for s in samples)
    md = f"""### Run {time.strftime('%Y-%m-%d')}: test BLEU {test['bleu']:.2f}, chrF {test['chrf']:.2f}

| | |
|---|---|
| test BLEU (sacreBLEU 13a, detokenized) | **{test['bleu']:.2f}** (`{test['bleu_signature']}`) |
| test chrF | **{test['chrf']:.2f}** |
| decoding | beam {BEAM}, length penalty {LENGTH_PENALTY}, checkpoint `{chosen}` (chosen by valid greedy BLEU: """ + \
        ", ".join(f"{k} {v['bleu']:.2f}" for k, v in valid.items()) + f""") |
| training | {summary['steps']} steps, {summary['tokens']:,} target tokens, {summary['elapsed'] / 60:.1f} min, stopped by {summary['stopped_by']}; final valid loss {summary.get('valid_loss', float('nan')):.3f}, valid greedy BLEU (150 sent.) {summary.get('valid_bleu', float('nan')):.2f} |
| threads / load | {args.threads} thread; 1-min load average min {min(loads):.1f}, median {sorted(loads)[len(loads) // 2]:.1f}, max {max(loads):.1f} ({len(loads)} samples) |

Command: `{record['train_command']}`

Evaluation: `{record['eval_command']}`

![de-en training curves](mt_de_en_loss.png)

Ten test sentences (random, seed 0):

| source (de) | reference (en) | attnkit |
|---|---|---|
{rows}
"""
    (HERE / "mt_de_en.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
