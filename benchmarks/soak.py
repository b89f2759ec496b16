"""Soak (issue #41 part 4): do memory, open files and time per step stay flat over long runs?

    python -m benchmarks.soak lm --minutes 60          # `attnkit train lm` for an hour, sampled every 15 s
    python -m benchmarks.soak mt --minutes 60          # `attnkit train mt --data de-en` for an hour
    python -m benchmarks.soak generate --calls 10000   # 10,000 `generate` calls in one process
    python -m benchmarks.soak report                   # the table and the figure from the three records

``lm`` and ``mt`` run the ordinary command in a child process (one thread, ``OMP_NUM_THREADS=1``, as a user would)
and sample it from outside: resident memory (``VmRSS`` of ``/proc/PID/status``), open file descriptors
(``/proc/PID/fd``), CPU time (``utime + stime`` of ``/proc/PID/stat``) and the last logged step (the run's
``metrics.jsonl``), so the run itself is untouched. ``generate`` runs a char-small GPT (random weights, a character
tokenizer) through :func:`attnkit.generation.generate` with the KV cache, sampled, prompts of 1 to 64 tokens and
48 new tokens, and samples its own process every 100 calls.

What "flat" means here: after a warm-up (the first 10% of the run), the last tenth of the run against the first
tenth after the warm-up: the medians of resident memory and open files, and time per step as each window's rate
(seconds spent over updates made between the window's first and last sample); growth under 5% passes (open files:
at most one more, since a checkpoint being written holds one). Time per step is judged as CPU seconds per update
(per call), which other jobs on the machine move far less than wall seconds (reported, not judged), though not
entirely on a shared virtual machine: keep the machine quiet, and read the record's load column.

Records go to ``benchmarks/records/soak/`` (``<mode>.json``; ``report`` writes ``soak.md`` and ``soak.png``).
There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RECORDS = HERE / "records" / "soak"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import loadavg, machine_info, path_flag  # noqa: E402

WARMUP = 0.10  # share of the run left out at the start
WINDOW = 0.10  # share of the run each compared window spans
LIMIT = 0.05  # growth allowed
TICKS = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------------------
# sampling a process
# ---------------------------------------------------------------------------------------------------------
def proc_sample(pid: int) -> dict[str, float] | None:
    """RSS and peak RSS (MB), open descriptors, threads and CPU seconds of process ``pid`` (None once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = {line.split(":")[0]: line.split(":", 1)[1].split() for line in status.splitlines() if ":" in line}
    after_name = stat.rsplit(")", 1)[1].split()  # fields 3.. of /proc/PID/stat (the name may hold spaces)
    cpu = (int(after_name[11]) + int(after_name[12])) / TICKS  # utime + stime
    return {"rss_mb": int(fields["VmRSS"][0]) / 1024, "hwm_mb": int(fields["VmHWM"][0]) / 1024, "fds": fds,
            "threads": int(fields["Threads"][0]), "cpu_s": cpu}


def last_step(metrics: Path) -> int | None:
    """The highest step logged in a run's ``metrics.jsonl`` so far."""
    if not metrics.is_file():
        return None
    step = None
    with open(metrics, encoding="utf-8") as fh:
        for line in fh:
            try:
                step = max(step or 0, int(json.loads(line)["step"]))
            except (ValueError, KeyError):
                continue
    return step


# ---------------------------------------------------------------------------------------------------------
# the three soaks
# ---------------------------------------------------------------------------------------------------------
def soak_training(kind: str, minutes: float, out: Path, every: float, extra: list[str]) -> dict:
    """Run ``attnkit train KIND`` for ``minutes`` in a child process and sample it every ``every`` seconds."""
    if out.exists():
        raise SystemExit(f"{out} exists; pass another --out (a soak starts a fresh run)")
    data = ["--data", "shakespeare"] if kind == "lm" else ["--data", "de-en"]
    command = [sys.executable, "-m", "attnkit", "train", kind, *data, "--max-time", str(minutes), "--out", str(out),
               "--no-progress", *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = out.with_name(out.name + ".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    samples = []
    with open(log, "w") as fh:
        child = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        t0 = time.monotonic()
        while child.poll() is None:
            s = proc_sample(child.pid)
            step = last_step(out / "metrics.jsonl")
            if s is not None and step is not None:
                samples.append({"t": time.monotonic() - t0, "step": step, **s, "load": (loadavg() or [None])[0]})
            time.sleep(every)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited with {child.returncode}; see {log}")
    return {"mode": kind, "command": "OMP_NUM_THREADS=1 attnkit " + " ".join(command[3:]), "samples": samples,
            "unit": "update", "log": str(log.relative_to(ROOT) if log.is_relative_to(ROOT) else log)}


def soak_generate(calls: int, every: int, new_tokens: int, seed: int) -> dict:
    """``calls`` sampled generations from a char-small GPT in this process; a sample every ``every`` calls."""
    import torch

    from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
    from attnkit.generation import generate
    from attnkit.models import build_model, get_preset
    from tqdm.auto import tqdm

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    text = "".join(chr(c) for c in range(32, 127)) + "\n"
    tokenizer = CharTokenizer.train(text)
    model = build_model(get_preset("char-small", vocab_size=tokenizer.vocab_size)).eval()
    rng = random.Random(seed)
    samples, t0, cpu0 = [], time.monotonic(), time.process_time()
    for i in tqdm(range(1, calls + 1), desc="generate", unit="call"):
        prompt = [[rng.randrange(tokenizer.vocab_size) for _ in range(rng.randint(1, 64))]]
        with torch.inference_mode():
            generate(model, prompt, max_new_tokens=new_tokens, do_sample=True, top_k=20, seed=i)
        if i % every == 0:
            s = proc_sample(os.getpid())
            samples.append({"t": time.monotonic() - t0, "step": i, **s, "cpu_s": time.process_time() - cpu0,
                            "load": (loadavg() or [None])[0]})
    return {"mode": "generate", "command": f"python -m benchmarks.soak generate --calls {calls} --sample-every {every} "
                                           f"--new-tokens {new_tokens} --seed {seed}",
            "samples": samples, "unit": "call", "model": "char-small (random weights), KV cache, top-k 20"}


# ---------------------------------------------------------------------------------------------------------
# judging flatness
# ---------------------------------------------------------------------------------------------------------
def window_rate(samples: list[dict], key: str, lo: float, hi: float) -> float:
    """``d key / d step`` over the samples with ``lo <= t < hi`` (and the one before): the window's total over its
    steps. (A median of the rates between neighbouring samples is biased when the logged step moves in jumps, as a
    run's metrics.jsonl does every --log-every updates: it judged a flat hour of ``train lm`` +31.7%.)"""
    inside = [i for i, x in enumerate(samples) if lo <= x["t"] < hi]
    w = samples[max(inside[0] - 1, 0):inside[-1] + 1] if inside else []  # from the sample before the window
    if len(w) < 2 or w[-1]["step"] <= w[0]["step"]:
        raise ValueError(f"too few samples to compare windows ({len(w)} between {lo:.0f} s and {hi:.0f} s); "
                         f"soak longer")
    return (w[-1][key] - w[0][key]) / (w[-1]["step"] - w[0]["step"])


def rates(samples: list[dict], key: str, span: float) -> list[tuple[float, float]]:
    """``(t, d key / d step)`` over consecutive spans of ``span`` seconds (for the figure)."""
    out, end = [], samples[-1]["t"]
    lo = samples[0]["t"]
    while lo < end:
        try:
            out.append((lo + span / 2, window_rate(samples, key, lo, lo + span + 1e-9)))
        except ValueError:
            pass
        lo += span
    return out


def judge(record: dict) -> dict:
    """Growth from the first window after the warm-up to the last window: medians of RSS and descriptors, and
    CPU and wall seconds per step as the window's rate (:func:`window_rate`)."""
    s = record["samples"]
    if not s:
        raise ValueError("no samples to judge; soak longer")
    end = s[-1]["t"]
    first, last = (WARMUP * end, (WARMUP + WINDOW) * end), ((1 - WINDOW) * end, end + 1)
    rows = {}
    for name in ("rss_mb", "fds", "cpu_s_per_step", "wall_s_per_step"):
        if name in ("rss_mb", "fds"):
            def median(lo: float, hi: float, key: str = name) -> float:
                values = [float(x[key]) for x in s if lo <= x["t"] < hi]
                if not values:
                    raise ValueError(f"too few samples to compare windows (none between {lo:.0f} s and {hi:.0f} s); "
                                     f"soak longer")
                return statistics.median(values)
            a, b = median(*first), median(*last)
        else:
            key = "cpu_s" if name == "cpu_s_per_step" else "t"
            a, b = window_rate(s, key, *first), window_rate(s, key, *last)
        growth = (b - a) / a if a else 0.0
        judged = name != "wall_s_per_step"
        # descriptors are a handful, and one is open while a checkpoint is written: a leak climbs by many
        ok = (b - a <= 1) if name == "fds" else (growth < LIMIT)
        rows[name] = {"first": a, "last": b, "growth": growth, "judged": judged, "pass": ok if judged else None}
    return {"minutes": end / 60, "steps": s[-1]["step"], "peak_rss_mb": max(x["hwm_mb"] for x in s), "rows": rows,
            "load_median": statistics.median([x["load"] for x in s if x["load"] is not None] or [0.0])}


def report(names: list[str]) -> None:
    """``soak.md`` (the table, with command, date and machine) and ``soak.png`` (the curves) from the records."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [{**json.loads((RECORDS / f"{n}.json").read_text()), "name": n} for n in names
               if (RECORDS / f"{n}.json").is_file()]
    if not records:
        raise SystemExit(f"no records in {RECORDS}; run the soaks first")
    fig, axes = plt.subplots(len(records), 3, figsize=(13, 3.2 * len(records)), squeeze=False)
    lines = ["# Soak: memory, open files and time per step over long runs", "",
             f"Growth = median over the last {WINDOW:.0%} of the run against the median over the {WINDOW:.0%} after a "
             f"{WARMUP:.0%} warm-up; {LIMIT:.0%} allowed. Time per step is CPU seconds per update (per call), which "
             "other jobs on the machine do not move; wall seconds are reported beside it.", "",
             "| run | length | steps | peak RSS | RSS first → last | open files | CPU s / step | wall s / step | "
             "growth (RSS, files, CPU s/step) | flat | load (median) | command | date | machine |", "|" + "---|" * 14]
    for row, rec in zip(axes, records):
        try:
            j = rec["judgement"] = judge(rec)  # from the samples, by this script's rule
        except ValueError as err:
            raise SystemExit(f"{RECORDS / (rec['name'] + '.json')}: {err}") from None
        (RECORDS / f"{rec['name']}.json").write_text(json.dumps(rec, indent=1), encoding="utf-8")
        r = j["rows"]
        flat = all(v["pass"] for v in r.values() if v["judged"])
        lines.append(
            f"| {rec['mode']} | {j['minutes']:.0f} min | {j['steps']:,} {rec['unit']}s | {j['peak_rss_mb']:.0f} MB | "
            f"{r['rss_mb']['first']:.0f} → {r['rss_mb']['last']:.0f} MB | {r['fds']['first']:.0f} → "
            f"{r['fds']['last']:.0f} | {r['cpu_s_per_step']['first']:.4f} → {r['cpu_s_per_step']['last']:.4f} | "
            f"{r['wall_s_per_step']['first']:.4f} → {r['wall_s_per_step']['last']:.4f} | "
            f"{r['rss_mb']['growth']:+.1%}, {r['fds']['growth']:+.1%}, {r['cpu_s_per_step']['growth']:+.1%} | "
            f"{'yes' if flat else 'NO'} | {j['load_median']:.1f} | `{rec['command']}` | {rec['date']} | {rec['machine']} |")
        s = rec["samples"]
        t = [x["t"] / 60 for x in s]
        row[0].plot(t, [x["rss_mb"] for x in s])
        row[0].set_ylabel(f"{rec['mode']}: RSS (MB)")
        row[1].plot(t, [x["fds"] for x in s])
        row[1].set_ylabel("open files")
        span = WINDOW * t[-1] * 60 / 2  # a point per twentieth of the run
        cpu = rates(s, "cpu_s", span)
        row[2].plot([p[0] / 60 for p in cpu], [p[1] for p in cpu], label="CPU s")
        wall = rates(s, "t", span)
        row[2].plot([p[0] / 60 for p in wall], [p[1] for p in wall], label="wall s", alpha=0.5)
        row[2].set_ylabel(f"s per {rec['unit']}")
        row[2].legend(fontsize=7)
        for ax in row:
            ax.axvspan(0, WARMUP * t[-1], color="0.9")
            ax.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(RECORDS / "soak.png", dpi=90)
    lines += ["", "![soak curves](soak.png)", ""]
    (RECORDS / "soak.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=("lm", "mt", "generate", "report"))
    p.add_argument("--minutes", type=float, default=60.0, help="lm / mt: the run's --max-time (default 60)")
    p.add_argument("--every", type=float, default=15.0, help="lm / mt: seconds between samples (default 15)")
    p.add_argument("--out", type=path_flag, default=None, help="lm / mt: the run folder (default runs/soak-<mode>)")
    p.add_argument("--train-args", default="", help="lm / mt: more flags for the training command")
    p.add_argument("--calls", type=int, default=10000, help="generate: how many calls (default 10,000)")
    p.add_argument("--sample-every", type=int, default=100, help="generate: calls between samples (default 100)")
    p.add_argument("--new-tokens", type=int, default=48, help="generate: tokens per call (default 48)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default=None, help="record name (default: the mode)")
    args = p.parse_args(argv)
    if args.mode == "generate":  # checked before the calls: fewer calls than --sample-every leave no sample
        for flag, value in (("--calls", args.calls), ("--sample-every", args.sample_every),
                            ("--new-tokens", args.new_tokens)):
            if value < 1:
                p.error(f"{flag} must be >= 1, got {value}")
        if args.sample_every > args.calls:
            p.error(f"--sample-every must be <= --calls, got {args.sample_every} and {args.calls}")
    elif args.mode != "report":
        for flag, value in (("--minutes", args.minutes), ("--every", args.every)):
            if not 0 < value < float("inf"):  # NaN is refused too
                p.error(f"{flag} must be a number > 0, got {value:g}")
    if args.name is not None and (not args.name.strip() or "/" in args.name):  # the record is RECORDS/<name>.json
        p.error(f"--name: expected a file name stem, got {args.name!r}")
    RECORDS.mkdir(parents=True, exist_ok=True)
    if args.mode == "report":
        report(["lm", "mt", "generate"])
        return 0
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.mode == "generate":
        record = soak_generate(args.calls, args.sample_every, args.new_tokens, args.seed)
    else:
        out = args.out or ROOT / "runs" / f"soak-{args.mode}"
        record = soak_training(args.mode, args.minutes, out, args.every, args.train_args.split())
    info = machine_info()
    machine = f"{info.get('cpu_model', 'unknown CPU')} ({info.get('cpu_capability')}), {os.cpu_count()} cores"
    record.update(date=started, machine=machine)
    name = args.name or args.mode
    try:
        record["judgement"] = judge(record)
    except ValueError as err:  # the samples are kept: the record is written without a judgement
        record["judgement"] = None
        print(f"soak: not judged: {err} (the samples are in {RECORDS / f'{name}.json'})", file=sys.stderr)
    (RECORDS / f"{name}.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    if record["judgement"] is None:
        return 1
    j = record["judgement"]
    for key, row in j["rows"].items():
        print(f"{name} {key}: {row['first']:.4g} -> {row['last']:.4g} ({row['growth']:+.1%})"
              + ("" if row["pass"] is None else " pass" if row["pass"] else " FAIL"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
