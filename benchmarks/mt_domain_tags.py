"""Benchmark probe (not a test): does a *domain tag* on the source help the translator?

Kobus et al. 2017 ("Domain Control for Neural Machine Translation") put a token naming the domain at the start of
every source sentence, so that one model trained on mixed data can be told at test time which register to
produce. Issue #15 names it as a way to weight the domains. The de-en recipe mixes two registers: natural
sentences (the Ding dictionary's examples and the Wesnoth dialogue, the recipe's ``in-domain.tsv``; the register
of valid and of the Ding test) and documentation (everything else; the register of ``test-docs``). This script
writes tagged copies of the prepared splits: ``xxnat `` before every source of a training pair found in
``in-domain.tsv`` and before every valid / test source, ``xxdoc `` before every other training source and before
every test-docs source. The targets are untouched. The joint BPE is trained on the tagged text, so each tag
becomes a token of its own (it occurs tens of thousands of times).

    .venv/bin/python benchmarks/mt_domain_tags.py write runs/tag
    OMP_NUM_THREADS=1 taskset -c 1 attnkit train mt --data runs/tag/train_tag.tsv --valid runs/tag/valid_tag.tsv \\
        --average-last 5 --no-progress --max-time 15 --out runs/tag/tag
    OMP_NUM_THREADS=1 taskset -c 1 .venv/bin/python benchmarks/mt_domain_tags.py evaluate runs/tag/tag \\
        runs/tag/valid_tag.tsv runs/tag/test_tag.tsv runs/tag/test-docs_tag.tsv

``evaluate`` runs ``benchmarks/mt_de_en.py``'s ``choose_and_score`` on the given files: ``checkpoints/best`` or
``checkpoints/averaged``, whichever has the higher greedy BLEU on valid, then greedy or beam 4 (length penalty 1),
whichever is better on valid, for the test set and test-docs; it prints and writes ``RUN/probe.json`` (and the
``RUN/probe_*.json`` of each evaluation, the translations in ``RUN/probe_*_hyps.txt``). The untagged
control is the same two commands with ``--data de-en`` and the prepared folder's own ``valid.tsv``, ``test.tsv`` and
``test-docs.tsv``. docs/experiments/mt.md ("Domain tags, ...") has what it did.

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import path_flag  # noqa: E402

TAGS = {"natural": "xxnat", "docs": "xxdoc"}
# split file of the prepared folder -> the tag its sources get (train: by membership in in-domain.tsv)
EVAL_SPLITS = {"valid": "natural", "test": "natural", "test-docs": "docs"}


def write_tagged(prepared: Path, dest: Path) -> dict[str, dict[str, int]]:
    """Write ``dest/{train,valid,test,test-docs}_tag.tsv`` (rules in the module docstring); returns the counts."""
    from attnkit.data.corpora.parallel import read_tsv, write_tsv

    natural = set(read_tsv(prepared / "in-domain.tsv", strict=True).pairs())
    dest.mkdir(parents=True, exist_ok=True)
    train = [("natural" if pair in natural else "docs", pair) for pair in read_tsv(prepared / "train.tsv", strict=True).pairs()]
    write_tsv(dest / "train_tag.tsv", [(f"{TAGS[domain]} {src}", tgt) for domain, (src, tgt) in train])
    counts = {"train": dict(collections.Counter(domain for domain, _ in train))}
    for split, domain in EVAL_SPLITS.items():
        pairs = [(f"{TAGS[domain]} {s}", t) for s, t in read_tsv(prepared / f"{split}.tsv", strict=True).pairs()]
        write_tsv(dest / f"{split}_tag.tsv", pairs)
        counts[split] = {domain: len(pairs)}
    return counts


def evaluate(run: Path, valid: str, test: str, test_docs: str) -> dict:
    """mt_de_en.py's choice of checkpoint and decoding on ``valid`` (its quick grid), then ``test``, ``test_docs``."""
    from benchmarks.mt_de_en import QUICK_GRID, attnkit, choose_and_score

    env = dict(os.environ)
    tests = {"test": ["--data", test], "test_docs": ["--data", test_docs]}
    scored = choose_and_score(run, valid=["--data", valid], tests=tests, grid=QUICK_GRID,
                              run_attnkit=lambda a: attnkit(a, env), prefix="probe_")
    t, d = scored["tests"]["test"], scored["tests"]["test_docs"]
    summary = json.loads((run / "summary.json").read_text())
    record = {"run": str(run), "steps": summary["steps"], "tokens": summary["tokens"],
              "valid_loss": summary.get("valid_loss"),
              "valid_greedy": {k: v["bleu"] for k, v in scored["valid_greedy"].items()}, "chosen": scored["chosen"],
              "valid_decoding": scored["valid_decoding"], "beam": scored["decoding"]["beam"],
              "test": {"bleu": t["bleu"], "chrf": t["chrf"]}, "test_docs": {"bleu": d["bleu"], "chrf": d["chrf"]}}
    (run / "probe.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write the tagged splits into a folder")
    w.add_argument("dest", type=path_flag)
    e = sub.add_parser("evaluate", help="choose checkpoint and decoding on valid, then score test and test-docs")
    e.add_argument("run", type=path_flag)
    e.add_argument("valid")
    e.add_argument("test")
    e.add_argument("test_docs")
    args = p.parse_args()
    if args.command == "evaluate":  # checked before the evaluations, not at the end of them
        if not (args.run / "summary.json").is_file():
            e.error(f"run: {str(args.run)!r} is no finished `attnkit train mt` run folder (no summary.json)")
        for name in ("valid", "test", "test_docs"):
            if not Path(getattr(args, name)).exists():
                e.error(f"{name}: no such file {getattr(args, name)!r}")
    if args.command == "write":
        from attnkit.data.corpora.registry import prepare

        print(json.dumps(write_tagged(prepare("de-en"), args.dest)))
    else:
        print(json.dumps(evaluate(args.run, args.valid, args.test, args.test_docs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
