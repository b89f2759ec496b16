"""Benchmark (not a test): train a CPU-sized Transformer on de-en, then measure test BLEU and chrF.

    .venv/bin/python benchmarks/mt_de_en.py --minutes 60            # the `train mt` recipe; ~65 minutes in all
    .venv/bin/python benchmarks/mt_de_en.py --minutes 60 --model tiny --grid full   # the 2026-11-22 run
    .venv/bin/python benchmarks/mt_de_en.py --minutes 60 --model small --autocast bf16
    .venv/bin/python benchmarks/mt_de_en.py --minutes 15 --train-args "--set dropout=0"   # a recipe probe
    .venv/bin/python benchmarks/mt_de_en.py --skip-train --out DIR  # only the evaluation of an existing run

Steps, each one an ordinary ``attnkit`` command (printed, and recorded in ``mt_de_en.json``):

0. the training pairs: the recipe's ``train.tsv`` with its Ding dictionary pairs (the domain of valid/test)
   repeated ``--upsample-dictionary`` times (:func:`upsample_dictionary`; valid/test untouched);
1. ``attnkit train mt --data TRAIN.tsv --valid <de-en>/valid.tsv ... --max-time MINUTES --average-last 5``
   (``--model recipe``, the default: nothing else, i.e. the defaults of ``attnkit train mt``)
   (the data recipe is prepared on first use from Debian packages);
2. ``attnkit eval mt --split valid --beam 1`` on ``checkpoints/best`` and on ``checkpoints/averaged``: the one
   with the higher validation BLEU is kept; then ``--split valid`` again for each (beam, length penalty) of
   ``DECODING_GRID`` (``--grid full``; ``--grid quick``: greedy or beam 4 / 1.0), and the best one is kept (the
   test set is never used to choose);
3. ``attnkit eval mt --split test --beam B --length-penalty A`` on the kept checkpoint, writing the
   translations; ten of them are sampled (fixed seed) for the report. When the prepared data has a
   ``test-docs.tsv`` (natural sentences from documentation), it is scored the same way. Steps 2 and 3 are
   :func:`choose_and_score` (``benchmarks/mt_domain_tags.py evaluate`` runs it on its own files).

Outputs (``--name``, default ``mt_de_en``), in ``benchmarks/records/mt/``: ``<name>.json`` (figures, commands, load
average samples), ``<name>.md`` (the run's record, linked from docs/experiments/mt.md) and ``<name>_loss.png`` (the
run's curves).

Threads: by default the runs use ONE thread (``OMP_NUM_THREADS=1``). On this shared 2-core machine two threads
were 3-4x *slower* than one under load: OpenMP's threads wait for each other at every parallel region, and with
more runnable processes than cores one of them is usually descheduled (see docs/scaling.md). One-thread runs were
pinned to a core (``taskset -c N``) that no other job used, two of them side by side. ``--threads 2`` is for a
run that has the whole idle machine (1.5-1.7x the tokens of one thread in the same time).

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
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RECORDS = HERE / "records" / "mt"  # where a run's <name>.json, .md and _loss.png go
if str(ROOT) not in sys.path:  # run as a script: ``benchmarks.harness`` (machine_description) needs the root
    sys.path.insert(0, str(ROOT))

# The configuration chosen by the short tuning runs (docs/experiments/mt.md, "Tuning runs"): at this compute
# budget a 1.4M-parameter model beats transformer-small (6.6M) at equal wall-clock time, and the inverse-sqrt
# schedule beats a time-based cosine one. Evaluations are sparse (each costs ~15 s of the training budget).
# "small" is the transformer-small preset itself (6.0M parameters), pre-norm. Even with ``--autocast bf16`` (1.34x
# its fp32 speed at one thread on a CPU with AMX/AVX512-BF16) it ends a 60-minute run behind "tiny"
# (docs/experiments/mt.md, the 2026-11-23 run), so "tiny" stays the default.
MODELS = {
    "recipe": [],  # the defaults of `attnkit train mt` (preset transformer-cpu, BPE 2000, cosine over the budget)
    "tiny": ["--preset", "transformer-small", "--set", "d_model=128", "--set", "dim_feedforward=512",
             "--set", "num_encoder_layers=2", "--set", "num_decoder_layers=2", "--set", "norm_first=true"],
    "small": ["--preset", "transformer-small", "--set", "norm_first=true"],
}
TRAIN = ["--vocab-size", "2000", "--max-tokens", "1024", "--lr", "0.4", "--warmup-steps", "150",
         "--eval-every", "1500", "--ckpt-every", "250", "--keep-last", "5", "--average-last", "5",
         "--bleu", "--bleu-sentences", "150", "--no-progress", "--schedule", "inverse_sqrt"]
RECIPE_TRAIN = ["--average-last", "5", "--no-progress"]
# The Ding (in-domain) training pairs are repeated this many times (see upsample_dictionary).
UPSAMPLE_DICTIONARY = 3
# (beam size, length penalty) pairs tried on the validation set; the best one decodes the test set.
DECODING_GRID = [(4, 0.6), (4, 1.0), (8, 1.0)]
QUICK_GRID = [(1, 1.0), (4, 1.0)]


def upsample_dictionary(prepared: Path, dest: Path, times: int) -> dict[str, int]:
    """Write ``dest``: the recipe's ``train.tsv`` with its Ding dictionary pairs repeated ``times`` times.

    valid/test are Ding sentences only, while two thirds of the training text are software messages (gettext),
    a different register; repeating the in-domain third is the usual cure for such a mix. Which training pairs
    come from Ding is read from the recipe's own cached ``trans-de-en`` package (``ding_pairs`` on its
    dictionary file), so nothing new is fetched. valid/test are untouched, and no Ding pair of valid/test is in
    train (the recipe guarantees it), so none is repeated. The order is shuffled with a fixed seed. When the
    recipe already repeats them (``split.ding_weight`` in ``SOURCE.json``), only the missing repeats are added.
    """
    import tempfile

    from attnkit.data.corpora.de_en import ding_pairs
    from attnkit.data.fetch import dpkg_extract
    from attnkit.data.corpora.parallel import read_tsv, write_tsv

    debs = sorted((prepared / "debs").glob("trans-de-en_*.deb"))
    if len(debs) != 1:
        raise FileNotFoundError(f"expected one cached trans-de-en package in {prepared / 'debs'}, got {debs}")
    with tempfile.TemporaryDirectory() as tmp:
        dpkg_extract(debs[0], tmp)
        with open(Path(tmp) / "usr/share/trans/de-en", encoding="utf-8") as f:
            ding = set(ding_pairs(f))
    pairs = read_tsv(prepared / "train.tsv", strict=True).pairs()
    in_domain = list(dict.fromkeys(pair for pair in pairs if pair in ding))
    # Recipe version 2 and later already repeat the dictionary pairs (SOURCE.json: split.ding_weight).
    already = json.loads((prepared / "SOURCE.json").read_text(encoding="utf-8")).get("split", {}).get("ding_weight", 1)
    out = pairs + in_domain * max(times - already, 0)
    random.Random(0).shuffle(out)
    write_tsv(dest, out)
    return {"train_pairs": len(pairs), "dictionary_pairs": len(in_domain), "written_pairs": len(out)}


class LoadSampler(threading.Thread):
    """Samples a figure of the machine every ``every`` seconds until :meth:`stop`: by default the 1-minute load
    average (the machine is shared); ``read`` gives another (e.g. the GPU's busy percent). A ``read`` that
    raises ends the sampling (the figure is not available here); the samples so far are kept."""

    def __init__(self, every: float = 30.0, read: Callable[[], float] | None = None):
        super().__init__(daemon=True)
        self.every, self.samples, self.times = every, [], []
        self._done = threading.Event()  # (Thread has a _stop of its own)
        self.read = read or (lambda: round(os.getloadavg()[0], 2))

    def run(self) -> None:
        while not self._done.is_set():
            try:
                value = self.read()
            except Exception:
                return
            self.times.append(time.perf_counter())
            self.samples.append(value)
            self._done.wait(self.every)

    def stop(self) -> list[float]:
        self._done.set()
        self.join()
        return self.samples


def machine_description(device: str | None) -> str:
    """What ran the benchmark, for the record: the GPU (name, torch and CUDA versions) when ``device`` is a CUDA
    one or ``None`` with CUDA present (``auto``), else the CPU's model name and core count."""
    import torch

    if (device or "auto").startswith(("cuda", "auto")) and torch.cuda.is_available():
        index = int(device.split(":")[1]) if device and ":" in device else 0
        return f"{torch.cuda.get_device_name(index)} (torch {torch.__version__}, CUDA {torch.version.cuda})"
    from benchmarks.harness import machine_info

    info = machine_info()
    return f"{info.get('cpu_model', 'unknown CPU')}, {info['cpu_count']} cores (torch {torch.__version__})"


def attnkit(args: list[str], env: dict[str, str], check: bool = True) -> int:
    cmd = [sys.executable, "-m", "attnkit", *args]
    print("$ attnkit " + " ".join(args), flush=True)
    return subprocess.run(cmd, check=check, env=env, cwd=ROOT).returncode


def choose_and_score(run: Path, *, valid: list[str], tests: dict[str, list[str]], grid: list[tuple[int, float]],
                     run_attnkit: Callable[[list[str]], object], eval_flags: list[str] = (),
                     prefix: str = "") -> dict:
    """Choose a trained run's checkpoint and decoding on the validation set, then score the test sets with them.

    ``run``: a ``train mt`` run folder; of ``checkpoints/best`` and ``checkpoints/averaged`` (those present), the
    one with the higher greedy BLEU on ``valid`` is kept (the first on a tie). Then each (beam, length penalty) of
    ``grid`` decodes ``valid`` with it, and the best is kept (the first on a tie; a beam of 1 reuses the greedy
    score). Each test set ``tests[name]`` is decoded once with that checkpoint and decoding; its translations go to
    ``run/<prefix><name>_hyps.txt``. The test sets are never used to choose. ``valid`` and each ``tests[name]``
    are the data flags of ``attnkit eval mt`` (``["--data", "de-en", "--split", "valid"]`` or ``["--data",
    FILE]``); ``run_attnkit(args)`` runs one ``attnkit`` command (it must raise if the command fails);
    ``eval_flags`` go to every evaluation. Every result is also written to ``run/<prefix>...json``.

    Returns ``{"valid_greedy": {checkpoint: eval json}, "chosen": checkpoint, "valid_decoding": {label: {beam,
    length_penalty, bleu}}, "decoding": {beam, length_penalty}, "tests": {name: eval json}, "hyps": {name: the
    file of its translations}, "commands": {name: the test's eval mt arguments}}``.
    """
    def command(ckpt: str, data: list[str], beam: int, alpha: float, json_file: Path, *extra: str) -> list[str]:
        return ["eval", "mt", "--ckpt", str(run / "checkpoints" / ckpt), *data, "--beam", str(beam),
                "--length-penalty", f"{alpha:g}", "--json", str(json_file), *extra, *eval_flags]

    def evaluate(ckpt: str, data: list[str], beam: int, alpha: float, json_file: Path, *extra: str) -> dict:
        run_attnkit(command(ckpt, data, beam, alpha, json_file, *extra))
        return json.loads(json_file.read_text())

    if not grid:
        raise ValueError("grid must hold at least one (beam, length penalty) pair, got none")
    valid_greedy = {name: evaluate(name, valid, 1, 1.0, run / f"{prefix}valid_{name}.json")
                    for name in ("best", "averaged") if (run / "checkpoints" / name).is_dir()}
    if not valid_greedy:
        raise ValueError(f"expected checkpoints/best or checkpoints/averaged in {run}, found neither")
    chosen = max(valid_greedy, key=lambda k: valid_greedy[k]["bleu"])

    decoding = {}
    for beam, alpha in grid:
        if beam == 1:  # greedy on valid is already known (the length penalty plays no part in greedy search)
            decoding["greedy"] = {"beam": 1, "length_penalty": alpha, "bleu": valid_greedy[chosen]["bleu"]}
            continue
        j = run / f"{prefix}valid_{chosen}_beam{beam}_lp{alpha:g}.json"
        decoding[f"beam {beam}, lp {alpha:g}"] = {"beam": beam, "length_penalty": alpha,
                                                   "bleu": evaluate(chosen, valid, beam, alpha, j)["bleu"]}
    best = max(decoding.values(), key=lambda d: d["bleu"])
    beam, alpha = best["beam"], best["length_penalty"]

    scores, hyps, commands = {}, {}, {}
    for name, data in tests.items():
        json_file, hyps[name] = run / f"{prefix}{name}.json", run / f"{prefix}{name}_hyps.txt"
        commands[name] = command(chosen, data, beam, alpha, json_file, "--hyps", str(hyps[name]))
        run_attnkit(commands[name])
        scores[name] = json.loads(json_file.read_text())
    return {"valid_greedy": valid_greedy, "chosen": chosen, "valid_decoding": decoding,
            "decoding": {"beam": beam, "length_penalty": alpha}, "tests": scores, "hyps": hyps,
            "commands": commands}


def main() -> int:
    from benchmarks.harness import path_flag

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=60.0, help="training budget (--max-time)")
    p.add_argument("--upsample-dictionary", type=int, default=UPSAMPLE_DICTIONARY, metavar="K",
                   help="repeat the Ding (in-domain) training pairs K times (1 = the recipe's train.tsv as is)")
    p.add_argument("--out", type=path_flag, default=None, help="run folder (default runs/bench-mt-de-en-<time>)")
    p.add_argument("--threads", type=int, default=1, help="torch / OpenMP threads (see the module docstring)")
    p.add_argument("--model", choices=sorted(MODELS), default="recipe",
                   help="recipe (the train mt defaults), tiny (the 2026-11-22 run: d_model 128, 2+2 layers, "
                        "inverse-sqrt) or small (the transformer-small preset, pre-norm)")
    p.add_argument("--grid", choices=("full", "quick"), default="quick",
                   help="decodings tried on valid: full (beam 4/8, length penalty 0.6/1) or quick (greedy, beam 4)")
    p.add_argument("--name", default="mt_de_en", help="file name stem of the outputs in benchmarks/records/mt/")
    p.add_argument("--autocast", choices=("bf16",), default=None,
                   help="train with bf16 autocast (off by default; faster for larger models on CPUs with AMX, "
                        "2x slower for the recipe's model on AMX and on AVX512-BF16 alone)")
    p.add_argument("--train-args", default="", metavar="FLAGS",
                   help="extra flags for `attnkit train mt` (space-separated), e.g. \"--set dropout=0 --lr 3e-3\"")
    p.add_argument("--device", default=None,
                   help="--device of every train/eval command, e.g. cuda (default: theirs, auto = CUDA if present)")
    p.add_argument("--eval-batch-size", type=int, default=None, metavar="N",
                   help="sentences per decoding batch of `attnkit eval mt` (default: its own, 32)")
    p.add_argument("--skip-train", action="store_true", help="evaluate the existing run in --out")
    p.add_argument("--smoke", type=int, default=None, metavar="N",
                   help="check the evaluation part on the first N sentences only (not a benchmark figure: the record "
                        "goes to --out, not benchmarks/records)")
    args = p.parse_args()
    if not 0 < args.minutes < float("inf"):  # NaN is refused too
        p.error(f"--minutes must be a number > 0, got {args.minutes:g}")
    for flag, value in (("--threads", args.threads), ("--upsample-dictionary", args.upsample_dictionary),
                        ("--eval-batch-size", args.eval_batch_size), ("--smoke", args.smoke)):
        if value is not None and value < 1:
            p.error(f"{flag} must be >= 1, got {value}")
    out = args.out or ROOT / "runs" / f"bench-mt-de-en-{time.strftime('%Y%m%d-%H%M%S')}"
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    sampler = LoadSampler()
    sampler.start()
    t0 = time.time()
    from attnkit.data.corpora.registry import prepare

    prepared = prepare("de-en")
    data_args, upsampling = ["--data", "de-en"], None
    if args.upsample_dictionary > 1:
        train_tsv = out / f"train_ding{args.upsample_dictionary}.tsv"
        if not args.skip_train:
            out.mkdir(parents=True, exist_ok=True)
            upsampling = upsample_dictionary(prepared, train_tsv, args.upsample_dictionary)
            print(f"training data {train_tsv}: {upsampling}", flush=True)
        data_args = ["--data", str(train_tsv), "--valid", str(prepared / "valid.tsv")]
    flags = RECIPE_TRAIN if args.model == "recipe" else TRAIN
    if args.smoke is not None:  # a run of seconds holds one checkpoint: nothing to average
        i = flags.index("--average-last")
        flags = flags[:i] + flags[i + 2:]
    train_args = ["train", "mt", *data_args, *MODELS[args.model], *flags, "--max-time", f"{args.minutes:g}",
                  "--out", str(out)]
    if args.autocast:
        train_args += ["--autocast", args.autocast]
    if args.device:
        train_args += ["--device", args.device]
    train_args += args.train_args.split()
    train_note = None
    if not args.skip_train:
        rc = attnkit(train_args, env, check=False)
        if rc and (out / "summary.json").is_file() and (out / "checkpoints" / "best").is_dir():
            # trained, but what follows failed (e.g. --average-last N when the budget ended with fewer step
            # checkpoints): evaluate what there is, and say so in the record
            train_note = f"`attnkit train mt` exited {rc} after training (see its last line); evaluated as is"
            print("note: " + train_note, flush=True)
        elif rc:
            raise subprocess.CalledProcessError(rc, ["attnkit", *train_args])
    train_seconds = time.time() - t0

    # flags every `attnkit eval mt` takes: the smoke limit, the device and the decoding batch
    eval_flags = [] if args.smoke is None else ["--max-sentences", str(args.smoke)]
    eval_flags += (["--device", args.device] if args.device else []) + \
        (["--batch-size", str(args.eval_batch_size)] if args.eval_batch_size else [])
    tests = {"test": ["--data", "de-en", "--split", "test"]}
    for name in ("test-docs",):  # further test sets of the prepared data, same checkpoint and decoding
        if (prepared / f"{name}.tsv").is_file():
            tests[name] = ["--data", str(prepared / f"{name}.tsv")]
    scored = choose_and_score(out, valid=["--data", "de-en", "--split", "valid"], tests=tests,
                              grid=DECODING_GRID if args.grid == "full" else QUICK_GRID,
                              run_attnkit=lambda a: attnkit(a, env), eval_flags=eval_flags)
    valid, chosen, decoding = scored["valid_greedy"], scored["chosen"], scored["valid_decoding"]
    beam_size, length_penalty = scored["decoding"]["beam"], scored["decoding"]["length_penalty"]
    test, hyps, eval_args = scored["tests"]["test"], scored["hyps"]["test"], scored["commands"]["test"]
    extra_tests = {k: v for k, v in scored["tests"].items() if k != "test"}
    loads = sampler.stop()

    from attnkit.data.corpora.parallel import load_parallel

    corpus = load_parallel(prepared, split="test")
    hyp_lines = hyps.read_text(encoding="utf-8").splitlines()
    picks = sorted(random.Random(0).sample(range(len(hyp_lines)), min(10, len(hyp_lines))))
    samples = [{"source": corpus.sources[i], "reference": corpus.targets[i], "hypothesis": hyp_lines[i]}
               for i in picks]
    summary = json.loads((out / "summary.json").read_text())
    records = RECORDS if args.smoke is None else out  # a smoke run is no figure: its record stays with its run
    records.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / "loss.png", records / f"{args.name}_loss.png")

    machine = machine_description(args.device)
    record = {"train_command": "attnkit " + " ".join(train_args), "eval_command": "attnkit " + " ".join(eval_args),
              "machine": machine, "train_note": train_note, "threads": args.threads, "upsample_dictionary": args.upsample_dictionary,
              "upsampling": upsampling, "train_summary": summary, "valid_greedy": valid, "chosen": chosen,
              "valid_decoding": decoding, "decoding": {"beam": beam_size, "length_penalty": length_penalty},
              "test": test, "extra_tests": extra_tests, "samples": samples, "load_average_samples": loads,
              "wall_seconds": {"train": train_seconds, "total": time.time() - t0}, "smoke": args.smoke}
    (records / f"{args.name}.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n",
                                               encoding="utf-8")

    rows = "\n".join(f"| {s['source']} | {s['reference']} | {s['hypothesis']} |" for s in samples)
    extra_rows = "".join(f"| {k} BLEU / chrF | **{v['bleu']:.2f}** / {v['chrf']:.2f} ({v['sentences']} sentences) |\n"
                         for k, v in extra_tests.items())
    md = f"""### Run {time.strftime('%Y-%m-%d')}{' (smoke: not a figure)' if args.smoke else ''}: test BLEU {test['bleu']:.2f}, chrF {test['chrf']:.2f}

| | |
|---|---|
| test BLEU (sacreBLEU 13a, detokenized) | **{test['bleu']:.2f}** (`{test['bleu_signature']}`) |
| test chrF | **{test['chrf']:.2f}** |
{extra_rows}| decoding | beam {beam_size}, length penalty {length_penalty:g}, checkpoint `{chosen}` (checkpoint chosen by valid greedy BLEU: """ + \
        ", ".join(f"{k} {v['bleu']:.2f}" for k, v in valid.items()) + "; decoding chosen by valid BLEU: " + \
        ", ".join(f"{k} {v['bleu']:.2f}" for k, v in decoding.items()) + f""") |
| training | {summary['steps']} steps, {summary['tokens']:,} target tokens, {summary['elapsed'] / 60:.1f} min, stopped by {summary['stopped_by']}; final valid loss {summary.get('valid_loss', float('nan')):.3f}, valid greedy BLEU (150 sent.) {summary.get('valid_bleu', float('nan')):.2f} |
| machine | {machine} |
{f'| note | {train_note} |' + chr(10) if train_note else ''}| threads / load | {args.threads} thread{'s' if args.threads > 1 else ''}; 1-min load average min {min(loads):.1f}, median {sorted(loads)[len(loads) // 2]:.1f}, max {max(loads):.1f} ({len(loads)} samples) |

Command: `{record['train_command']}`

Evaluation: `{record['eval_command']}`

![de-en training curves]({args.name}_loss.png)

Ten test sentences (random, seed 0):

| source (de) | reference (en) | attnkit |
|---|---|---|
{rows}
"""
    (records / f"{args.name}.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


def run_script(main: Callable[[], int], prog: str) -> None:
    """Exit with ``main()``'s code; when an ``attnkit`` child fails, end with one line (it printed its own error)."""
    try:
        code = main()
    except subprocess.CalledProcessError as e:
        command = " ".join(map(str, e.cmd))
        command = command if len(command) <= 100 else command[:97] + "..."
        sys.exit(f"{prog}: `{command}` exited with {e.returncode} (its message is above)")
    sys.exit(code)


if __name__ == "__main__":
    run_script(main, "mt_de_en.py")
