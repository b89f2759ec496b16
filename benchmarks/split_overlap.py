"""How much a prepared recipe's held-out splits overlap its training split beyond exact duplicates (a measurement,
not a test): held-out sentences whose near-duplicate key occurs in train.

    python benchmarks/split_overlap.py de-en                      # valid, test, test-docs against train.tsv
    python benchmarks/split_overlap.py fortunes --json runs/overlap_fortunes.json
    python benchmarks/split_overlap.py en-mono --held-out de-en   # de-en's held-out English among en-mono

DATA is a recipe name (prepared through ``attnkit.api.prepare_data``, as ``attnkit data prepare`` does: from the
cache when it is there) or a prepared folder. The key is
:func:`attnkit.data.corpora.near_duplicates.near_duplicate_key`: casefolded, NFKC, accelerator marks, punctuation
and spacing dropped, placeholders and numbers (``--keep-numbers``: placeholders only) as one symbol.

* A translation folder (``train.tsv``, ``valid.tsv``, ``test.tsv``, ``test-docs.tsv``: ``source<TAB>target``):
  for each held-out split, the pairs whose source key, target key, either, or (source, target) key pair occurs in
  train, and the exact matches as a check (the recipes keep them at 0).
* A language-modelling folder in fortune-file format (``train.txt``, ``valid.txt``, entries ended by ``%`` lines):
  the valid entries whose key (of the whole entry) occurs in train, and the exact ones (whitespace collapsed).
* A monolingual folder (``sentences.txt``) with ``--held-out`` a translation folder or recipe: that folder's
  held-out pairs whose target (English) side occurs among the sentences, by key and exactly.

Prints the command, date and machine, a Markdown table and a few example matches (shortest first; ``--examples``);
``--json OUT`` also writes them.

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Iterable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import machine_info, out_file_flag, run_header  # noqa: E402

from attnkit.data.corpora.near_duplicates import near_duplicate_key  # noqa: E402

HELD_OUT = ("valid", "test", "test-docs")  # the translation splits measured against train, in this order
Pair = tuple[str, str]


# ------------------------------------------------------------------------------------------------
# counting (pure functions of the texts)
# ------------------------------------------------------------------------------------------------
def _index(keys: Iterable[tuple[str, object]]) -> dict[str, object]:
    """key -> the first item with that key; empty keys (text of punctuation only) are left out."""
    out: dict[str, object] = {}
    for key, item in keys:
        if key and key not in out:
            out[key] = item
    return out


def pair_overlap(train: list[Pair], held: list[Pair], *, key: Callable[[str], str] = near_duplicate_key,
                 examples: int = 3) -> tuple[dict[str, int], list[dict]]:
    """Counts of the ``held`` pairs that overlap ``train``, and up to ``examples`` near-duplicate matches.

    Counts: ``pairs``; exactly in train: ``exact_pair``, ``exact_source``, ``exact_target``; by key:
    ``source_key``, ``target_key``, ``either_key`` (source or target), ``pair_key`` (the source key and the target
    key of one train pair). Examples, pair-key matches first, then shortest held-out pair first: each held-out pair's
    closest match (by pair key, else source key, else target key) with the train pair it matches, unless what
    matched is an exact duplicate.
    """
    exact_pairs = set(train)
    exact_src = {s for s, _ in train}
    exact_tgt = {t for _, t in train}
    keyed = [(key(s), key(t), (s, t)) for s, t in train]
    by_src = _index((ks, p) for ks, _, p in keyed)
    by_tgt = _index((kt, p) for _, kt, p in keyed)
    by_pair = {(ks, kt): p for ks, kt, p in reversed(keyed) if ks and kt}  # reversed: the first pair wins
    counts = dict.fromkeys(("pairs", "exact_pair", "exact_source", "exact_target", "source_key", "target_key",
                            "either_key", "pair_key"), 0)
    matches = []
    for s, t in held:
        ks, kt = key(s), key(t)
        counts["pairs"] += 1
        counts["exact_pair"] += (s, t) in exact_pairs
        counts["exact_source"] += s in exact_src
        counts["exact_target"] += t in exact_tgt
        counts["source_key"] += ks in by_src
        counts["target_key"] += kt in by_tgt
        counts["either_key"] += ks in by_src or kt in by_tgt
        counts["pair_key"] += (ks, kt) in by_pair
        for how, match, near in (("pair", by_pair.get((ks, kt)), lambda m: m != (s, t)),
                                 ("source", by_src.get(ks), lambda m: m[0] != s),
                                 ("target", by_tgt.get(kt), lambda m: m[1] != t)):
            if match is not None:  # the closest match only, and only when it is no exact duplicate
                if near(match):
                    matches.append({"held_out": [s, t], "train": list(match), "match": how})
                break
    matches.sort(key=lambda m: (m["match"] != "pair", len(m["held_out"][0]) + len(m["held_out"][1])))
    return counts, matches[:examples]


def text_overlap(train: list[str], held: list[str], *, key: Callable[[str], str] = near_duplicate_key,
                 examples: int = 3) -> tuple[dict[str, int], list[dict]]:
    """Counts of the ``held`` texts (fortune entries, sentences) that occur in ``train``: ``entries``, ``exact``
    (compared with every run of whitespace as one space, as the fortunes recipe deduplicates), ``key``; and up to
    ``examples`` near-duplicate matches that are not exact, shortest first."""
    exact = {" ".join(t.split()) for t in train}
    by_key = _index((key(t), t) for t in train)
    counts = {"entries": 0, "exact": 0, "key": 0}
    matches = []
    for text in held:
        counts["entries"] += 1
        is_exact = " ".join(text.split()) in exact
        counts["exact"] += is_exact
        match = by_key.get(key(text))
        counts["key"] += match is not None
        if match is not None and not is_exact:
            matches.append({"held_out": text, "train": match})
    matches.sort(key=lambda m: len(m["held_out"]))
    return counts, matches[:examples]


# ------------------------------------------------------------------------------------------------
# prepared folders
# ------------------------------------------------------------------------------------------------
def folder_kind(folder: Path) -> str:
    """``"mt"`` (``train.tsv``), ``"lm"`` (``train.txt`` and ``valid.txt``) or ``"mono"`` (``sentences.txt``)."""
    if (folder / "train.tsv").is_file():
        return "mt"
    if (folder / "train.txt").is_file() and (folder / "valid.txt").is_file():
        return "lm"
    if (folder / "sentences.txt").is_file():
        return "mono"
    raise ValueError(f"{folder} holds no train.tsv, train.txt + valid.txt or sentences.txt: not a prepared recipe")


def _pairs(path: Path) -> list[Pair]:
    from attnkit.data.corpora.parallel import read_tsv

    corpus = read_tsv(path)
    return list(zip(corpus.sources, corpus.targets))


def _held_out_pairs(folder: Path) -> dict[str, list[Pair]]:
    return {name: _pairs(folder / f"{name}.tsv") for name in HELD_OUT if (folder / f"{name}.tsv").is_file()}


def measure(folder: Path, *, held_out: Path | None = None, fold_numbers: bool = True,
            examples: int = 3) -> dict:
    """The overlap record of a prepared folder: ``kind``, per held-out split its counts and example matches."""
    key = (near_duplicate_key if fold_numbers
           else lambda text: near_duplicate_key(text, fold_numbers=False))
    kind = folder_kind(folder)
    if (held_out is not None) != (kind == "mono"):
        raise ValueError("--held-out names the translation data whose held-out English is looked up in a "
                         f"monolingual folder (sentences.txt); {folder} is a {kind!r} folder"
                         if held_out is not None else f"{folder} is monolingual: name the translation data whose "
                         "held-out pairs to look up with --held-out (e.g. --held-out de-en)")
    splits: dict[str, dict] = {}
    if kind == "mt":
        train = _pairs(folder / "train.tsv")
        for name, pairs in _held_out_pairs(folder).items():
            counts, found = pair_overlap(train, pairs, key=key, examples=examples)
            splits[name] = {"counts": counts, "examples": found}
    elif kind == "lm":
        from attnkit.data.corpora.fortunes import has_separators, read_entries

        if not has_separators((folder / "valid.txt").read_text(encoding="utf-8")):
            raise ValueError(f"{folder}/valid.txt is plain text, not entries ended by '%' lines: only a corpus of "
                             "documents (fortunes) has entries to compare")
        counts, found = text_overlap(read_entries(folder / "train.txt"), read_entries(folder / "valid.txt"),
                                     key=key, examples=examples)
        splits["valid"] = {"counts": counts, "examples": found}
    else:
        if folder_kind(held_out) != "mt":
            raise ValueError(f"--held-out {held_out} is not a translation folder (train.tsv, valid.tsv ...)")
        sentences = (folder / "sentences.txt").read_text(encoding="utf-8").splitlines()
        for name, pairs in _held_out_pairs(held_out).items():
            counts, found = text_overlap(sentences, [t for _, t in pairs], key=key, examples=examples)
            splits[name] = {"counts": counts, "examples": found}
    return {"folder": str(folder), "kind": kind, "held_out": None if held_out is None else str(held_out),
            "fold_numbers": fold_numbers, "splits": splits}


# ------------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------------
def _share(n: int, total: int) -> str:
    return f"{n:,} ({100 * n / total:.1f}%)" if total else f"{n:,}"


def table(record: dict) -> str:
    """The record as a Markdown table, one row per held-out split."""
    rows = []
    if record["kind"] == "mt":
        rows.append("| split | pairs | exact pair / source / target in train | source key in train | target key in "
                    "train | either key in train | (source, target) key pair in train |")
        rows.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, split in record["splits"].items():
            c = split["counts"]
            n = c["pairs"]
            rows.append(f"| {name} | {n:,} | {c['exact_pair']} / {c['exact_source']} / {c['exact_target']} | "
                        f"{_share(c['source_key'], n)} | {_share(c['target_key'], n)} | "
                        f"{_share(c['either_key'], n)} | {_share(c['pair_key'], n)} |")
    else:
        what, where = (("entries", "train") if record["kind"] == "lm" else ("pairs (English side)", "en-mono"))
        rows.append(f"| split | {what} | exact in {where} | key in {where} |")
        rows.append("| --- | ---: | ---: | ---: |")
        for name, split in record["splits"].items():
            c = split["counts"]
            rows.append(f"| {name} | {c['entries']:,} | {c['exact']} | {_share(c['key'], c['entries'])} |")
    return "\n".join(rows)


def _show(item) -> str:
    text = " ⇥ ".join(item) if isinstance(item, list) else item
    return "`" + " ".join(text.split()).replace("`", "'") + "`"


def examples_text(record: dict) -> str:
    lines = []
    for name, split in record["splits"].items():
        for m in split["examples"]:
            how = f" ({m['match']} key)" if "match" in m else ""
            lines.append(f"- {name}{how}: {_show(m['held_out'])} ~ train {_show(m['train'])}")
    return "\n".join(lines)


def _resolve(p: argparse.ArgumentParser, flag: str, data: str) -> Path:
    """A recipe name (prepared, or found in the cache) or a folder."""
    from attnkit.data.corpora.registry import is_recipe

    if is_recipe(data):
        from attnkit.api import prepare_data

        return prepare_data(data).folder
    folder = Path(data).expanduser()
    if not folder.is_dir():
        p.error(f"{flag}: {data!r} is neither a recipe name nor a folder")
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1].rsplit("\n\nThere are no tensor axes", 1)[0])
    p.add_argument("data", help="recipe name (de-en, fortunes, en-mono ...) or prepared folder")
    p.add_argument("--held-out", default=None, metavar="DATA",
                   help="for a monolingual DATA: the translation recipe or folder whose held-out pairs to look up")
    p.add_argument("--keep-numbers", action="store_true",
                   help="numbers count in the key (placeholders are still folded)")
    p.add_argument("--examples", type=int, default=3, help="example matches per split (default 3)")
    p.add_argument("--json", type=out_file_flag, default=None, help="also write the record here")
    args = p.parse_args(argv)
    if args.examples < 0:
        p.error(f"--examples must be >= 0, got {args.examples}")
    folder = _resolve(p, "DATA", args.data)
    held_out = None if args.held_out is None else _resolve(p, "--held-out", args.held_out)
    try:
        record = measure(folder, held_out=held_out, fold_numbers=not args.keep_numbers, examples=args.examples)
    except ValueError as err:
        p.error(str(err))
    header = run_header("python benchmarks/split_overlap.py", argv)
    print(header + "\n")
    print(table(record))
    if any(split["examples"] for split in record["splits"].values()):
        print("\nExamples (held-out ~ train):\n" + examples_text(record))
    if args.json is not None:
        record.update(command=header, machine=machine_info())
        args.json.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
