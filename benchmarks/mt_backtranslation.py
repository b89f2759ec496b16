"""Benchmark (not a test): de-en with back-translation, reverse -> translate -> forward, then test BLEU and chrF.

    .venv/bin/python benchmarks/mt_backtranslation.py --reverse-minutes 15 --minutes 15 --threads 2 --name mt_bt15
    .venv/bin/python benchmarks/mt_backtranslation.py --synthetic runs/bt15/synthetic.tsv --minutes 60 \\
        --threads 2 --name mt_bt60                     # the same synthetic pairs, a longer forward run
    .venv/bin/python benchmarks/mt_backtranslation.py --budget total --minutes 15 --threads 2 --name mt_bt15_total
    .venv/bin/python benchmarks/mt_backtranslation.py --smoke 40 --reverse-minutes 0.2 --minutes 0.2 --out /tmp/bt
    python benchmarks/mt_backtranslation.py --budget total --minutes 7 --reverse-share 0.3 --beam 4 --device cuda \
        --autocast bf16 --threads 8 --eval-batch-size 200 --train-args "..." --reverse-args "..."   # one GPU call

Steps, each one an ordinary ``attnkit`` command (printed, and recorded in ``<name>.json``):

1. the reverse model, English -> German: ``attnkit train mt --data de-en --reverse --max-time R``
   (the ``train mt`` defaults otherwise; skipped with ``--synthetic FILE``);
2. the monolingual English, back-translated: ``attnkit translate --ckpt <reverse run> --input en-mono --output
   synthetic.tsv --beam B`` (the ``en-mono`` recipe, 22,395 sentences, none of de-en's valid/test/test-docs;
   greedy by default: the cheap choice on a CPU; 256 sentences a batch, twice the speed of 64 on 2 CPU threads);
   its record (``synthetic.tsv.json``) gives the throughput;
3. the forward model on real + synthetic pairs: ``attnkit train mt --data de-en --synthetic synthetic.tsv
   --synthetic-ratio X --max-time F --average-last 5`` (each synthetic source tagged ``<bt>``);
4. the forward run scored as ``benchmarks/mt_de_en.py`` scores its runs (:func:`benchmarks.mt_de_en.choose_and_score`:
   checkpoint and decoding chosen on valid, then the Ding test and test-docs).

The budget (``--budget``):

* ``forward`` (the default): the forward run gets ``--minutes``; the back-translated data is prepared ahead, and its
  cost (the reverse run's ``--reverse-minutes`` and the translation's wall time) is stated separately in the record;
* ``total``: everything within ``--minutes``: the reverse run gets ``--reverse-share`` of it (default 0.25), the
  translation what it takes (measured), the forward run the rest.

On a GPU (``--device cuda``, ``--autocast bf16``, ``--eval-batch-size``), every command runs there: the reverse and
forward runs take their own flags (``--reverse-args``, ``--train-args``: the GPU run's preset, optimizer and
batches), and the translation of the monolingual English uses 512 sentences a batch.

The comparisons of issue #44 part 4 run on the same machine one after the other (each uses both cores): attnkit
without back-translation, ``benchmarks/mt_de_en.py --minutes M --threads 2``, and the torch.nn peer,
``benchmarks/mt_peer.py --minutes M --threads 2``.

Outputs (``--name``), in ``benchmarks/records/mt/``: ``<name>.json`` (figures, every command, the cost of each step,
the load average) and ``<name>.md`` (the record); the run folders stay under ``--out`` (a ``--smoke`` run writes its
record there too).

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run as a script: ``benchmarks.mt_de_en`` needs the root on the path
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import path_flag  # noqa: E402
from benchmarks.mt_de_en import (QUICK_GRID, RECORDS, LoadSampler, attnkit, choose_and_score,  # noqa: E402
                                 machine_description, run_script)

FORWARD_FLAGS = ["--average-last", "5", "--no-progress"]
REVERSE_FLAGS = ["--no-progress"]


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def _head(src: Path, dest: Path, n: int) -> Path:
    """The first ``n`` lines of ``src`` as ``dest`` (a smoke run translates only these)."""
    with open(src, encoding="utf-8") as f:
        dest.write_text("".join(line for _, line in zip(range(n), f)), encoding="utf-8")
    return dest


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=15.0, help="the forward run's budget (--budget forward), or "
                   "the whole budget (--budget total)")
    p.add_argument("--budget", choices=("forward", "total"), default="forward",
                   help="forward: the back-translated data is prepared ahead, its cost stated apart; total: "
                        "reverse run + translation + forward run within --minutes")
    p.add_argument("--reverse-minutes", type=float, default=15.0, help="the reverse run's budget (--budget forward)")
    p.add_argument("--reverse-share", type=float, default=0.25, help="the reverse run's share of --minutes "
                   "(--budget total)")
    p.add_argument("--synthetic", type=Path, default=None, metavar="FILE",
                   help="reuse this back-translation file (steps 1 and 2 skipped; their cost is in its .json)")
    p.add_argument("--synthetic-ratio", type=float, default=0.095,
                   help="synthetic pairs per real training pair (0.095: each of en-mono's 22,395 sentences once "
                        "per 236,140 real pairs, 38 twice; 0.19: each about twice)")
    p.add_argument("--beam", type=int, default=1, help="beam of the back-translation (1 = greedy)")
    p.add_argument("--threads", type=int, default=2, help="torch / OpenMP threads of every command")
    p.add_argument("--train-args", default="", metavar="FLAGS", help="extra flags of the forward `train mt`")
    p.add_argument("--reverse-args", default="", metavar="FLAGS", help="extra flags of the reverse `train mt`")
    p.add_argument("--device", default=None, help="--device of every command, e.g. cuda (default: theirs, auto)")
    p.add_argument("--autocast", choices=("bf16",), default=None,
                   help="--autocast of the two training runs and the translation (off by default)")
    p.add_argument("--eval-batch-size", type=int, default=None, metavar="N",
                   help="sentences per decoding batch of `attnkit eval mt` (default: its own)")
    p.add_argument("--out", type=path_flag, default=None, help="folder of the runs (default runs/bench-mt-bt-<time>)")
    p.add_argument("--name", default="mt_backtranslation", help="file name stem of the records")
    p.add_argument("--smoke", type=int, default=None, metavar="N",
                   help="translate only the first N English sentences and score N test sentences (not a figure)")
    args = p.parse_args()
    if args.eval_batch_size is not None and args.eval_batch_size < 1:
        p.error(f"--eval-batch-size must be >= 1, got {args.eval_batch_size}")
    # the forward run's budget is used last, after the reverse run and the translation: refused now, not then
    for flag, value in (("--minutes", args.minutes), ("--reverse-minutes", args.reverse_minutes)):
        if not 0 < value < float("inf"):
            p.error(f"{flag} must be a number > 0, got {value:g}")
    if not 0 < args.reverse_share < 1:
        p.error(f"--reverse-share must be in (0, 1), got {args.reverse_share:g}")
    for flag, value in (("--beam", args.beam), ("--threads", args.threads), ("--smoke", args.smoke)):
        if value is not None and value < 1:
            p.error(f"{flag} must be >= 1, got {value}")
    device = ["--device", args.device] if args.device else []
    autocast = ["--autocast", args.autocast] if args.autocast else []
    out = args.out or ROOT / "runs" / f"bench-mt-bt-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    run = lambda a: attnkit(a, env)  # noqa: E731
    sampler = LoadSampler()
    sampler.start()
    t0 = time.time()
    from attnkit.data.corpora.registry import prepare

    prepared, mono = prepare("de-en"), prepare("en-mono") / "sentences.txt"
    commands, cost = {}, {}
    reverse = out / "reverse"
    reverse_minutes = args.reverse_minutes if args.budget == "forward" else args.reverse_share * args.minutes
    synthetic = args.synthetic
    if synthetic is None:
        commands["reverse"] = ["train", "mt", "--data", "de-en", "--reverse", "--out", str(reverse), *REVERSE_FLAGS,
                               "--max-time", f"{reverse_minutes:g}", *device, *autocast, *args.reverse_args.split()]
        start = time.time()
        run(commands["reverse"])
        cost["reverse_seconds"] = time.time() - start
        source = mono if args.smoke is None else _head(mono, out / "mono_head.txt", args.smoke)
        synthetic = out / "synthetic.tsv"
        batch = "256" if (args.device or "cpu") == "cpu" else "512"
        commands["translate"] = ["translate", "--ckpt", str(reverse), "--input", str(source), "--output",
                                 str(synthetic), "--beam", str(args.beam), "--batch-size", batch, "--no-progress",
                                 *device, *autocast]
        start = time.time()
        run(commands["translate"])
        cost["translate_seconds"] = time.time() - start
    translation = json.loads(synthetic.with_name(synthetic.name + ".json").read_text())
    forward_minutes = args.minutes
    if args.budget == "total":
        forward_minutes = args.minutes - (time.time() - t0) / 60
        if forward_minutes <= 0:
            raise SystemExit(f"mt_backtranslation.py: the reverse run and the translation took "
                             f"{(time.time() - t0) / 60:.1f} of the {args.minutes:g} minutes")
    forward = out / "forward"
    flags = FORWARD_FLAGS if args.smoke is None else ["--no-progress"]  # a smoke run holds one checkpoint
    commands["forward"] = ["train", "mt", "--data", "de-en", "--synthetic", str(synthetic), "--synthetic-ratio",
                           f"{args.synthetic_ratio:g}", "--out", str(forward), *flags, "--max-time",
                           f"{forward_minutes:g}", *device, *autocast, *args.train_args.split()]
    start = time.time()
    run(commands["forward"])
    cost["forward_seconds"] = time.time() - start

    eval_flags = [] if args.smoke is None else ["--max-sentences", str(args.smoke)]
    eval_flags += device + ([] if args.eval_batch_size is None else ["--batch-size", str(args.eval_batch_size)])
    tests = {"test": ["--data", "de-en", "--split", "test"],
             "test-docs": ["--data", str(prepared / "test-docs.tsv")]}
    scored = choose_and_score(forward, valid=["--data", "de-en", "--split", "valid"], tests=tests, grid=QUICK_GRID,
                              run_attnkit=run, eval_flags=eval_flags)
    loads = sampler.stop()
    rev_summary = _summary(reverse) if (reverse / "summary.json").is_file() else None
    fwd_summary = _summary(forward)
    record = {"machine": machine_description(args.device), "threads": args.threads, "device": args.device, "budget": args.budget,
              "minutes": args.minutes, "commands": {k: "attnkit " + " ".join(v) for k, v in commands.items()},
              "eval_commands": {k: "attnkit " + " ".join(v) for k, v in scored["commands"].items()},
              "cost_seconds": cost, "translation": translation, "reverse_summary": rev_summary,
              "forward_summary": fwd_summary, "chosen": scored["chosen"], "decoding": scored["decoding"],
              "valid_greedy": scored["valid_greedy"], "valid_decoding": scored["valid_decoding"],
              "tests": scored["tests"], "load_average_samples": loads, "smoke": args.smoke,
              "wall_seconds": time.time() - t0}
    records = RECORDS if args.smoke is None else out  # a smoke run is no figure: its record stays with its runs
    records.mkdir(parents=True, exist_ok=True)
    (records / f"{args.name}.json").write_text(json.dumps(record, indent=2, ensure_ascii=False, default=str) + "\n",
                                               encoding="utf-8")
    test, docs = scored["tests"]["test"], scored["tests"]["test-docs"]
    rev_line = ("reused " + str(synthetic) if rev_summary is None else
                f"{rev_summary['steps']:,} updates in {cost['reverse_seconds'] / 60:.1f} min; valid en->de greedy "
                f"BLEU {rev_summary.get('final_valid', {}).get('bleu', float('nan')):.2f}")
    md = f"""### Back-translation {time.strftime('%Y-%m-%d')}: Ding test BLEU {test['bleu']:.2f}, test-docs {docs['bleu']:.2f}{' (smoke)' if args.smoke else ''}

| | |
|---|---|
| Ding test BLEU / chrF | **{test['bleu']:.2f}** / {test['chrf']:.2f} ({test['sentences']} sentences) |
| test-docs BLEU / chrF | **{docs['bleu']:.2f}** / {docs['chrf']:.2f} ({docs['sentences']} sentences) |
| decoding | beam {scored['decoding']['beam']}, length penalty {scored['decoding']['length_penalty']:g}, checkpoint `{scored['chosen']}` (chosen on valid) |
| budget | {args.budget}: forward run {forward_minutes:.1f} min |
| 1. reverse run | {rev_line} |
| 2. back-translation | {translation.get('translated', 0):,} sentences, {translation.get('sentences_per_s', 0):.1f} sentences/s, {translation.get('target_tokens_per_s', 0):,.0f} target tokens/s, beam {translation['decoding']['beam']} |
| 3. forward run | {fwd_summary['steps']:,} updates, {fwd_summary['tokens']:,} target tokens, {fwd_summary['elapsed'] / 60:.1f} min; final valid loss {fwd_summary.get('valid_loss', float('nan')):.3f} |
| machine | {record['machine']}, {args.threads} thread{'s' if args.threads > 1 else ''}; 1-min load median {sorted(loads)[len(loads) // 2] if loads else float('nan'):.1f} |

Commands: {'; '.join(f'`{c}`' for c in record['commands'].values())}
"""
    (records / f"{args.name}.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    run_script(main, "mt_backtranslation.py")
