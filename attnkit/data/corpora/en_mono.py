"""The ``en-mono`` data recipe: short everyday English sentences, monolingual, for back-translation.

Back-translation (Sennrich et al. 2016) needs text in the target language only: a model of the reverse direction
translates it into synthetic sources. What helps the ``de-en`` translator most is more sentences of its test's
register (the Ding dictionary's example sentences, short and everyday, about 8 words). The closest text in the
package registries is of the same kind: the **example sentences of WordNet 3.0** (Princeton University), Debian
package ``wordnet-base``. Each synset's gloss ends with quoted examples of the word in use::

    01156834 ... | throw away as refuse; "Please don't litter the sidewalk"; "the children littered the room"

Extraction (:func:`wordnet_examples`): the quoted parts after the ``|`` of every synset line of ``data.noun``,
``data.verb``, ``data.adj`` and ``data.adv`` (the licence header's lines, which start with two spaces, are skipped),
about 48,000 distinct examples.

Which ones are kept (:func:`is_sentence`): a third of the examples are phrases ("a precise mind", "loyal
supporters"), and the de-en runs showed that phrases cost more than they give (the Ding dictionary's word and
phrase entries lowered both test scores, docs/experiments/mt.md). An example is kept when it has at least three
words and reads as a sentence: it starts with a capital letter, or with a subject or question word (``he``,
``they``, ``there``, ``what`` …), or it holds a finite auxiliary or copula (``is``, ``was``, ``has``, ``will``,
``can``, ``n't`` …). Examples that talk about words (WordNet quotes a word between a backtick and an apostrophe:
"smog" is a blend of "smoke" and "fog") or open with a sign (":-) is an emoticon") are left out. Kept sentences
are written as the Ding test writes them (:func:`as_sentence`): first letter capital, a full stop when there is
no final ``.``, ``!`` or ``?``, and an apostrophe between two letters as ``’`` (``don't`` -> ``don’t``);
whitespace normalised (:func:`attnkit.data.corpora.parallel.normalize_text`). About 22,400 sentences of 7.6
words on average remain.

Deduplication: case-insensitively, ignoring final punctuation and the apostrophe's form (:func:`sentence_key`),
each sentence once; and **no sentence of the de-en evaluation sets**: every sentence equal to an English side of
de-en's ``valid.tsv``, ``test.tsv`` or ``test-docs.tsv`` is removed (the recipe prepares ``de-en`` first), and so is
every sentence that already is the English side of a de-en training pair (it has a real translation). The counts
of each are in ``SOURCE.json``.

Output, in ``$ATTNKIT_HOME/data/en-mono``: ``sentences.txt``, one sentence a line, in a seeded shuffle
(``random.Random(SEED)``, so that any first part of the file is a random sample of it) and ``SOURCE.json``
(package, version, sha256 of the ``.deb``, licence with its copyright notice, counts, sha256 of the output).
``attnkit translate --input en-mono --output PAIRS.tsv`` reads it by name.

Integrity: the package version and its sha256 are pinned (:data:`VERSION`, :data:`DEB_SHA256`); Debian keeps a
release's packages, so a mirror that no longer offers it stops the recipe with an error naming what changed.

There are no tensor axes in this file.
"""

from __future__ import annotations

import json
import random
import re
import tempfile
from pathlib import Path
from typing import Iterable

from attnkit.data.corpora.parallel import normalize_text, read_tsv
from attnkit.data.corpora.registry import prepare, register
from attnkit.data.fetch import (FetchError, apt_download, dpkg_extract, sha256_file, verified_record,
                                write_source_record)
from attnkit.files import write_text_atomic

__all__ = ["PACKAGE", "VERSION", "DEB_SHA256", "LICENSE", "SEED", "OUTPUT", "wordnet_examples", "is_sentence",
           "as_sentence", "sentence_key", "select_sentences", "build_en_mono", "prepare_en_mono"]

PACKAGE = "wordnet-base"
VERSION = "1:3.0-37"  # Debian 12 (bookworm)
DEB_SHA256 = "61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752"
LICENSE = ("WordNet 3.0 licence (Princeton University; permission to use, copy, modify and distribute for any "
           "purpose without fee, keeping the notice 'WordNet 3.0 Copyright 2006 by Princeton University. All rights "
           "reserved.' and the disclaimer; see usr/share/doc/wordnet-base/copyright)")
DATA_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
WORDNET_DIR = "usr/share/wordnet"
SEED = 20261128
OUTPUT = "sentences.txt"
MIN_WORDS = 3
# Bump when the extraction or the selection changes: a cache built by another version is rebuilt.
RECIPE_VERSION = 3
# the de-en splits whose English sentences may not appear here, and the training pairs whose targets need not
_HELD_OUT = ("valid", "test", "test-docs")

_EXAMPLE = re.compile(r'"([^"]+)"')
# words that open a sentence (a subject, a question, an imperative with "let"/"please"/"don't")
_OPENERS = frozenset("""i you he she it we they there this that these those who what why how when where which
let please don't do does did is are was were can could would will shall should may might must""".split())
# a finite auxiliary or copula anywhere: the example has a verb phrase of its own
_FINITE = re.compile(r"\b(?:am|is|are|was|were|has|had|have|will|would|can|could|did|does|do|should|must|may|might|"
                     r"shall)\b|\w(?:'s|'re|'ve|'ll|'d|n't)\b", re.IGNORECASE)
_APOSTROPHE = re.compile(r"(?<=[A-Za-z])'(?=[A-Za-z])")


def wordnet_examples(lines: Iterable[str]) -> list[str]:
    """The quoted example sentences of WordNet ``data.*`` lines, in order (the gloss after ``|``; licence lines,
    which start with two spaces, and lines without a gloss are skipped)."""
    out = []
    for line in lines:
        if line.startswith("  ") or "|" not in line:
            continue
        out += (normalize_text(e) for e in _EXAMPLE.findall(line.split("|", 1)[1]))
    return [e for e in out if e]


def is_sentence(text: str) -> bool:
    """Whether a WordNet example reads as a sentence (see the module docstring): at least :data:`MIN_WORDS` words,
    no word quoted with a backtick, a letter or digit first, and a capital first letter, an opening subject or question word, or a finite
    auxiliary."""
    words = text.split()
    if len(words) < MIN_WORDS or "`" in text or not text[:1].isalnum():  # `word' (or ":-)") is about words
        return False
    return text[:1].isupper() or words[0].lower() in _OPENERS or bool(_FINITE.search(text))


def as_sentence(text: str) -> str:
    """``text`` as the Ding test writes a sentence: a capital first letter, a final ``.`` unless it ends in ``.!?``,
    ``’`` for an apostrophe between letters."""
    text = _APOSTROPHE.sub("\u2019", normalize_text(text))
    if text[-1:] not in (".", "!", "?"):
        text = text.rstrip(",;:") + "."
    return text[:1].upper() + text[1:]


def sentence_key(text: str) -> str:
    """What two sentences share when they count as the same: lower case, ``'`` for ``’``, no final ``.!?``."""
    return normalize_text(text).replace("\u2019", "'").lower().rstrip(".!? ")


def select_sentences(examples: Iterable[str], held_out: Iterable[str], translated: Iterable[str], *,
                     seed: int = SEED) -> tuple[list[str], dict[str, int]]:
    """The sentences to keep, in a seeded shuffle, and the counts of what was dropped.

    ``examples``: WordNet examples; ``held_out``: sentences that may not appear (the de-en evaluation sets'
    English); ``translated``: sentences that have a real translation already (de-en training targets).
    """
    held = {sentence_key(s) for s in held_out}
    seen_translated = {sentence_key(s) for s in translated}
    counts = {"examples": 0, "not_sentences": 0, "duplicates": 0, "in_de_en_eval_sets": 0, "in_de_en_train": 0}
    kept: dict[str, str] = {}
    for example in examples:
        counts["examples"] += 1
        if not is_sentence(example):
            counts["not_sentences"] += 1
            continue
        sentence = as_sentence(example)
        key = sentence_key(sentence)
        if key in held:
            counts["in_de_en_eval_sets"] += 1
        elif key in seen_translated:
            counts["in_de_en_train"] += 1
        elif key in kept:
            counts["duplicates"] += 1
        else:
            kept[key] = sentence
    sentences = list(kept.values())
    random.Random(seed).shuffle(sentences)
    counts["sentences"] = len(sentences)
    return sentences, counts


def build_en_mono(wordnet_dir: str | Path, de_en: str | Path, out_dir: str | Path, *,
                  source: dict | None = None) -> dict:
    """Extract, select and write ``sentences.txt`` and ``SOURCE.json`` into ``out_dir`` from an unpacked WordNet
    folder and a prepared de-en folder; returns the record written to ``SOURCE.json``."""
    wordnet_dir, de_en, out_dir = Path(wordnet_dir), Path(de_en), Path(out_dir)
    examples: list[str] = []
    for name in DATA_FILES:
        with open(wordnet_dir / name, encoding="utf-8") as f:
            examples += wordnet_examples(f)
    held_out = [t for split in _HELD_OUT for t in read_tsv(de_en / f"{split}.tsv").targets]
    sentences, counts = select_sentences(examples, held_out, read_tsv(de_en / "train.tsv").targets)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / OUTPUT, "".join(s + "\n" for s in sentences))
    words = sum(len(s.split()) for s in sentences)
    record = {
        "name": "en-mono",
        **(source or {}),
        "license": LICENSE,
        "recipe_version": RECIPE_VERSION,
        "content": "the example sentences of WordNet 3.0's glosses that read as sentences, written as sentences",
        "deduplicated_against": {"de-en": [f"{s}.tsv" for s in _HELD_OUT] + ["train.tsv (English side)"],
                                 "de_en_outputs": _de_en_outputs(de_en),
                                 "de_en_source": json.loads((de_en / "SOURCE.json").read_text(encoding="utf-8"))
                                 .get("recipe_version") if (de_en / "SOURCE.json").is_file() else None},
        "counts": {**counts, "mean_words": round(words / max(1, len(sentences)), 2)},
        "order": f"seeded shuffle, random.Random({SEED})",
        "outputs": {OUTPUT: {"sha256": sha256_file(out_dir / OUTPUT), "lines": len(sentences)}},
    }
    write_source_record(out_dir, record)
    return record


def _de_en_outputs(de_en: Path) -> dict[str, str] | None:
    """The sha256 of the de-en files the selection reads (its evaluation sets and train.tsv), from de-en's
    SOURCE.json (which ``prepare("de-en")`` has just checked against the files)."""
    try:
        outputs = json.loads((de_en / "SOURCE.json").read_text(encoding="utf-8"))["outputs"]
        return {f"{s}.tsv": outputs[f"{s}.tsv"]["sha256"] for s in (*_HELD_OUT, "train")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _cached_ok(folder: Path, de_en: Path) -> bool:
    """True when SOURCE.json is from this recipe version, ``sentences.txt`` has the sha256 it records, and it was
    selected against the de-en files there are now (a new de-en may hold other evaluation sentences)."""
    record = verified_record(folder, (OUTPUT,), recipe_version=RECIPE_VERSION)
    try:
        return record["deduplicated_against"]["de_en_outputs"] == _de_en_outputs(de_en)
    except (TypeError, KeyError):  # no record, or one without the de-en files it was selected against
        return False


@register("en-mono", kind="mono",
          description="~22k short everyday English sentences for back-translation: WordNet 3.0's example sentences "
                      "(Debian package 'wordnet-base'), none of de-en's valid/test/test-docs")
def prepare_en_mono(home: Path, force: bool = False) -> Path:
    """Prepare de-en (for its evaluation sets), fetch the ``.deb`` (once), build ``sentences.txt`` into ``home``.

    ``home`` is the registry's folder for this recipe (``$ATTNKIT_HOME/data/en-mono``). Offline: put the pinned
    ``wordnet-base`` ``.deb`` into ``home/download/``.
    """
    home = Path(home)
    de_en = prepare("de-en", home=home.parent.parent)
    if not force and _cached_ok(home, de_en):
        return home
    download = home / "download"
    try:
        deb, version = apt_download(PACKAGE, download, sha256=DEB_SHA256, version=VERSION)
    except FetchError as e:
        raise FetchError(f"{e}\nOr copy {PACKAGE} {VERSION} (sha256 {DEB_SHA256}) into {download} and run "
                         "again.") from None
    with tempfile.TemporaryDirectory(dir=home, prefix="extract.") as tmp:
        folder = dpkg_extract(deb, tmp) / WORDNET_DIR
        if not all((folder / name).is_file() for name in DATA_FILES):
            raise FetchError(f"{deb.name} lacks {WORDNET_DIR}/{{{','.join(DATA_FILES)}}}; is it the right package?")
        record = build_en_mono(folder, de_en, home, source={
            "package": PACKAGE, "version": version, "registry": "Debian (apt-get download)", "file": deb.name,
            "sha256": DEB_SHA256})
    c = record["counts"]
    print(f"en-mono: {c['examples']:,} WordNet examples -> {c['sentences']:,} sentences ({c['not_sentences']:,} "
          f"phrases, {c['duplicates']:,} duplicates, {c['in_de_en_eval_sets']:,} in de-en's valid/test/test-docs and "
          f"{c['in_de_en_train']:,} already de-en training targets left out)")
    return home
