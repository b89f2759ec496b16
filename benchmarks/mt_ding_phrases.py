"""Benchmark probe (not a test): does the Ding dictionary's *word and phrase* entries help the translator?

The de-en recipe keeps only the dictionary's example sentences. Its other ~376k aligned parts are headwords and
phrases (``Planungsprozess {m}; Planungsverfahren {n} :: planning process; planning procedure``), a bilingual
lexicon that covers rare words of the Ding test: 6.3% of the test's German word tokens never occur in
``train.tsv``; with the phrases (from entries other than those of valid/test sentences) 2.9%. This script writes
``train.tsv`` plus those pairs, once each, for a recipe probe:

    .venv/bin/python benchmarks/mt_ding_phrases.py runs/train_phrases.tsv
    .venv/bin/python benchmarks/mt_de_en.py --minutes 15 --name mt_phr15_dict \\
        --train-args "--data runs/train_phrases.tsv --valid ~/.cache/attnkit/data/de-en/valid.tsv"

Rules (:func:`ding_phrases`): every part of an entry that is not a sentence pair; its ``;``-separated
alternatives paired in order when both sides have as many, else the first with the first; annotations
(``{}``, ``[]``, ``<>``, ``()``, ``/ABBR/``) dropped; an alternative still holding a ``/`` skipped; an entry that
holds a valid or test sentence skipped whole; pairs sharing a string with valid/test/test-docs removed; pairs
already in train not added again. docs/experiments/mt.md ("Dictionary phrases") has what it did: it lost at 15 minutes.

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from attnkit.data.corpora.de_en import _DING_ANNOTATION, _is_sentence, ding_entries, ding_part, remove_overlap  # noqa: E402
from attnkit.data.corpora.parallel import normalize_text, read_tsv, write_tsv  # noqa: E402
from benchmarks.harness import out_file_flag  # noqa: E402

Pair = tuple[str, str]
# What a headword carries besides its words: <comparative forms>, (usage notes) and /ABBR/ abbreviations.
_HEADWORD_NOTE = re.compile(r"\s*(<[^<>]*>|\([^()]*\)|/[A-Z][^/\s]*/)")


def _clean(text: str) -> str:
    return normalize_text(_HEADWORD_NOTE.sub("", _DING_ANNOTATION.sub("", text))).strip(" ;,")


def ding_phrases(lines, held_out=()) -> list[Pair]:
    """Word and phrase pairs of the Ding ``de-en`` file's lines (rules in the module docstring), file order,
    duplicates removed."""
    held = set(held_out)
    seen: set[Pair] = set()
    out: list[Pair] = []
    for parts in ding_entries(lines):
        plain = [(ding_part(de), ding_part(en)) for de, en in parts]
        if any(p in held for p in plain):
            continue
        for (de, en), (raw_de, raw_en) in zip(plain, parts):
            if _is_sentence(de) and _is_sentence(en):
                continue
            de_alts = [_clean(a) for a in raw_de.split("; ")]
            en_alts = [_clean(a) for a in raw_en.split("; ")]
            aligned = zip(de_alts, en_alts) if len(de_alts) == len(en_alts) else [(de_alts[0], en_alts[0])]
            for pair in aligned:
                if all(pair) and "/" not in pair[0] + pair[1] and pair not in seen:
                    seen.add(pair)
                    out.append(pair)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=out_file_flag, help="the TSV to write (train.tsv + the phrase pairs, shuffled)")
    args = p.parse_args(argv)
    from attnkit.data.fetch import dpkg_extract
    from attnkit.data.corpora.registry import prepare

    prepared = prepare("de-en")
    splits = {s: read_tsv(prepared / f"{s}.tsv", strict=True).pairs() for s in ("train", "valid", "test", "test-docs")}
    debs = sorted((prepared / "debs").glob("trans-de-en_*.deb"))
    with tempfile.TemporaryDirectory() as tmp:
        dpkg_extract(debs[0], tmp)
        with open(Path(tmp) / "usr/share/trans/de-en", encoding="utf-8") as f:
            phrases = ding_phrases(f, held_out=set(splits["valid"]) | set(splits["test"]))
    phrases, removed = remove_overlap(phrases, splits["valid"] + splits["test"] + splits["test-docs"])
    in_train = set(splits["train"])
    phrases = [p for p in phrases if p not in in_train]
    out = splits["train"] + phrases
    random.Random(20240611).shuffle(out)
    write_tsv(args.out, out)
    words = sum(len(en.split()) for _, en in phrases), sum(len(en.split()) for _, en in splits["train"])
    print(f"{args.out}: {len(splits['train']):,} train lines + {len(phrases):,} phrase pairs ({removed} removed for "
          f"sharing a string with valid/test/test-docs); English words: phrases {words[0]:,}, train {words[1]:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
