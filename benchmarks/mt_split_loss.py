"""How much a trained translator has memorised (benchmark, not a test): its unsmoothed loss per target token on
pairs it trained on against held-out pairs of the same domain.

    D=~/.cache/attnkit/data/de-en
    awk -F'\t' 'NR == FNR {n[$0]++; next} n[$0] == 3' $D/train.tsv $D/in-domain.tsv > runs/ding_train.tsv
    python benchmarks/mt_split_loss.py --ckpt runs/t2_60_zen4/checkpoints/averaged \
        --pairs ding-train=runs/ding_train.tsv:0:1000 --pairs ding-valid=$D/valid.tsv \
        --pairs train=$D/train.tsv:sample:1000 --pairs test-docs=$D/test-docs.tsv:0:1000

Each ``--pairs NAME=TSV[:START:COUNT]`` is a TSV of pairs (source<TAB>target) and optionally a part of it: lines
``START .. START+COUNT-1`` (0-based), or ``sample:COUNT`` for COUNT lines drawn with ``--seed``. The loss is the
one ``attnkit train mt`` reports as ``valid_loss`` (:meth:`attnkit.training.mt_task.MTTask.evaluate`: mean
cross-entropy per target token, no label smoothing, the model in eval mode), so a pair file the model trained on
and a held-out one of the same domain give the generalisation gap in nats. In the de-en recipe the dictionary's
example sentences are the pairs that ``train.tsv`` holds three times (every other pair is there once), which the
``awk`` line above picks out of ``in-domain.tsv`` (the dictionary and dialogue pairs of train, in train's order);
``valid.tsv`` holds other example sentences of the same dictionary.

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import out_file_flag  # noqa: E402


def parse_pairs_spec(spec: str) -> tuple[str, Path, str | None, int | None, int | None]:
    """``NAME=PATH[:START:COUNT]`` or ``NAME=PATH:sample:COUNT`` -> (name, path, mode, start, count)."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"--pairs takes NAME=TSV[:START:COUNT] or NAME=TSV:sample:COUNT, got {spec!r}")
    parts = rest.rsplit(":", 2)
    if len(parts) == 3 and parts[2].isdigit() and (parts[1].isdigit() or parts[1] == "sample"):
        path, first, count = parts
        mode = "sample" if first == "sample" else "slice"
        start = None if mode == "sample" else int(first)
        return name, Path(path).expanduser(), mode, start, int(count)
    return name, Path(rest).expanduser(), None, None, None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", required=True, help="checkpoint folder or run folder (its checkpoints/best)")
    p.add_argument("--pairs", action="append", required=True, metavar="NAME=TSV[:START:COUNT]",
                   help="pairs to score (repeatable); COUNT lines from START, or sample:COUNT seeded lines")
    p.add_argument("--seed", type=int, default=0, help="seed of sample:COUNT (default 0)")
    p.add_argument("--max-tokens", type=int, default=2048, help="padded tokens per evaluation batch (default 2048)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=out_file_flag, default=None, help="also write the losses here")
    args = p.parse_args(argv)
    try:
        specs = [parse_pairs_spec(s) for s in args.pairs]
    except ValueError as e:
        p.error(str(e))
    for name, path, *_ in specs:
        if not path.is_file():
            p.error(f"--pairs {name}: no such file {path}")
    for flag, value in (("--max-tokens", args.max_tokens), ("--threads", args.threads)):
        if value < 1:
            p.error(f"{flag} must be >= 1, got {value}")

    import torch

    from attnkit.data.pipeline.mt_batching import encode_pairs
    from attnkit.data.corpora.parallel import read_tsv
    from attnkit.training.mt_task import MTTask
    from attnkit.checkpoints import load

    torch.set_num_threads(args.threads)
    try:  # a missing or wrong checkpoint: one line
        loaded = load(args.ckpt, expect_kind="mt")
    except (ValueError, OSError) as err:
        p.error(f"--ckpt: {err}")
    model, tokenizer, state = loaded.model, loaded.tokenizer, loaded.state
    max_len = state["model_config"]["max_len"]
    rows = []
    for name, path, mode, start, count in specs:
        corpus = read_tsv(path)
        pairs = list(zip(corpus.sources, corpus.targets))
        if mode == "slice":
            pairs = pairs[start:start + count]
        elif mode == "sample":
            pairs = random.Random(args.seed).sample(pairs, min(count, len(pairs)))
        if not pairs:
            p.error(f"--pairs {name}: no pair selected from {path} ({len(corpus)} pairs)")
        enc = encode_pairs(tokenizer, [s for s, _ in pairs], [t for _, t in pairs], max_src_len=max_len)
        task = MTTask(enc, enc, max_tokens=args.max_tokens)
        with torch.no_grad():
            loss = task.evaluate(model, task.num_batches("valid"))["loss"]
        rows.append({"name": name, "path": str(path), "pairs": len(pairs),
                     "target_tokens": sum(len(t) + 1 for t in enc.tgt), "loss": loss})
        print(f"{name:>16s}  {len(pairs):6d} pairs  loss {loss:.3f}", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"ckpt": str(args.ckpt), "seed": args.seed, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
