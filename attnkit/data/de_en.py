"""The ``de-en`` data recipe: German→English sentence pairs built from Debian packages.

Where the pairs come from (everything is an ordinary Debian package, fetched with ``apt-get download`` and
unpacked with ``dpkg -x``; nothing is installed and no root is needed):

1. ``trans-de-en`` -- the Ding German-English dictionary (TU Chemnitz, GPL-2+). Its file ``usr/share/trans/de-en``
   has one entry a line, ``german | german :: english | english``: the ``|``-separated parts are aligned
   on both sides, and many parts are example *sentences* ("Er ließ sich leicht überreden." :: "He was easily
   persuaded."). We keep the parts whose two sides are both full sentences -- about 18,000 natural pairs.
   All of valid and test are drawn from these.
2. gettext message catalogs (``.mo`` files) of programs translated into German: LibreOffice, GCC, git, GIMP,
   Evolution. Each English message (``msgid``) and its German translation (``msgstr``) is a pair. User-interface
   text is a different register from the dictionary sentences, but it adds volume: about 36,000 clean pairs
   once placeholders, markup, URLs and the like are filtered out (see :func:`clean_catalog_pair`).
3. Debian's package descriptions, German (DDTP translations, ``Translation-de``) against English
   (``Translation-en``), aligned by description md5 down to sentences: about 45,000 pairs of natural technical
   prose (see :mod:`attnkit.data.debian_descriptions`), grouped by source package.
4. LibreOffice's offline help, German (``libreoffice-help-de``) against English (``libreoffice-help-en-us``),
   aligned by page and paragraph id down to sentences: about 43,000 pairs of natural instructions
   (see :mod:`attnkit.data.libreoffice_help`).
5. The Linux man pages, German (``manpages-de``, ``manpages-de-dev``) against English (``manpages``,
   ``manpages-dev``), aligned by page, section and paragraph: about 15,000 pairs (see :mod:`attnkit.data.man_pages`).

Split: a seeded shuffle of the (deduplicated) dictionary sentences gives 2,000 test and 1,000 valid pairs whose
strings are all distinct. A second test set, ``test-docs``, holds 2,000 natural full sentences (at least five
words, ending in ``.!?``, both sides) from package descriptions, held out by whole source package: no other pair
of those packages goes to train. Every train pair sharing a source or a target string with valid, test or
test-docs (compared case-insensitively) is removed, so nothing of the evaluation sets is ever seen in training.

Mixing: the dictionary sentences are the register of the Ding test; they are repeated ``DING_WEIGHT`` times in
``train.tsv`` instead of entering in the proportion they happen to have (recorded in ``SOURCE.json``).

Output, in the recipe folder ``$ATTNKIT_HOME/data/de-en`` (default ``~/.cache/attnkit/data/de-en``):
``train.tsv``, ``valid.tsv``, ``test.tsv``, ``test-docs.tsv`` (``german<TAB>english``, one pair a line) and
``SOURCE.json`` (counts per source, package versions and licenses, sha256 of each ``.deb``, of each apt index and
of each output). The downloaded ``.debs`` stay in ``debs/`` and the apt indexes in ``apt/``, so a rebuild needs no
network. A second call returns the cached folder; ``force=True``
fetches and rebuilds everything.

Integrity: ``apt-get`` checks each ``.deb`` against the archive's signed package lists. The Debian archive
only keeps the latest point release of a package, so the recipe does not pin versions; the versions and
checksums actually used are written to ``SOURCE.json``.

There are no tensor axes in this file.
"""

from __future__ import annotations

import collections
import json
import random
import re
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from attnkit.data import debian_descriptions, libreoffice_help, man_pages
from attnkit.data.fetch import apt_download, dpkg_extract, sha256_file, write_source_record
from attnkit.data.pair_filters import is_full_sentence
from attnkit.data.parallel import SPLITS, normalize_text, write_tsv
from attnkit.data.registry import register

__all__ = [
    "CatalogEntry",
    "DebSource",
    "PACKAGES",
    "ding_pairs",
    "read_mo",
    "clean_catalog_pair",
    "catalog_pairs",
    "split_pairs",
    "hold_out_documents",
    "remove_overlap",
    "prepare_de_en",
]

N_TEST = 2000
N_VALID = 1000
N_TEST_DOCS = 2000
DING_WEIGHT = 3  # times each dictionary sentence appears in train.tsv
SPLIT_SEED = 20240611
MAX_CHARS = 400  # longer catalog messages are help paragraphs, not sentences
# Bump when the extraction, cleaning or split rules change: a cache built by another version is rebuilt.
RECIPE_VERSION = 4


@dataclass(frozen=True)
class DebSource:
    """A Debian package the recipe reads, its license, and what is read from it."""

    package: str
    license: str
    kind: str  # "ding" (dictionary), "gettext" (.mo catalogs), "help-de"/"help-en" (LibreOffice help), "man-de"/"man-en"
    globs: tuple[str, ...]  # paths inside the package, relative to its root


# Download sizes (Debian 12 "bookworm", amd64) are given for orientation: about 39 MB in all.
PACKAGES: tuple[DebSource, ...] = (
    DebSource("trans-de-en", "GPL-2+", "ding", ("usr/share/trans/de-en",)),  # 6.3 MB
    # LibreOffice keeps its catalogs outside /usr/share/locale.
    DebSource("libreoffice-l10n-de", "MPL-2.0", "gettext",
              ("usr/lib/libreoffice/program/resource/de/LC_MESSAGES/*.mo",)),  # 0.9 MB
    DebSource("gcc-12-locales", "GPL-3+", "gettext", ("usr/share/locale/de/LC_MESSAGES/*.mo",)),  # 1.8 MB
    DebSource("git", "GPL-2", "gettext", ("usr/share/locale/de/LC_MESSAGES/*.mo",)),  # 7.3 MB
    DebSource("gimp-data", "GPL-3+", "gettext", ("usr/share/locale/de/LC_MESSAGES/*.mo",)),  # 14.2 MB
    DebSource("evolution-common", "LGPL-2 or LGPL-3", "gettext",
              ("usr/share/locale/de/LC_MESSAGES/*.mo",)),  # 8.5 MB
    DebSource("libreoffice-help-de", "MPL-2.0", "help-de", ("usr/share/libreoffice/help/de/text/**/*.html",)),  # 3.3 MB
    DebSource("libreoffice-help-en-us", "MPL-2.0", "help-en",
              ("usr/share/libreoffice/help/en-US/text/**/*.html",)),  # 1.8 MB
    DebSource("manpages-de", "GPL-3+ (translations)", "man-de", ("usr/share/man/de/man*/*",)),  # 3.6 MB
    DebSource("manpages-de-dev", "GPL-3+ (translations)", "man-de", ("usr/share/man/de/man*/*",)),  # 1.1 MB
    DebSource("manpages", "Linux man-pages copyleft and others", "man-en", ("usr/share/man/man*/*",)),  # 1.3 MB
    DebSource("manpages-dev", "Linux man-pages copyleft and others", "man-en", ("usr/share/man/man*/*",)),  # 2.0 MB
)

Pair = tuple[str, str]  # (german, english)


# ----------------------------------------------------------------------------------------------------------------
# 1. The Ding dictionary
# ----------------------------------------------------------------------------------------------------------------
# Ding annotations: {n} {vt} (grammar), [ugs.] [Br.] (register, region, field). They are never part of the text.
_DING_ANNOTATION = re.compile(r"\s*(\{[^{}]*\}|\[[^\[\]]*\])")


def _is_sentence(text: str) -> bool:
    """A full sentence: ends in . ! or ?, has at least 3 words, and is not a list of ``;`` alternatives."""
    return text[-1:] in (".", "!", "?") and len(text.split()) >= 3 and ";" not in text


def ding_pairs(lines: Iterable[str]) -> list[Pair]:
    """Sentence pairs from the lines of the Ding ``de-en`` file (``#`` comments and malformed lines are ignored).

    Each entry ``de_1 | de_2 | … :: en_1 | en_2 | …`` is split into its aligned parts; annotations in ``{}``
    and ``[]`` are dropped; a part is kept when both sides are full sentences (:func:`_is_sentence`).
    Returns ``(german, english)`` pairs in file order, duplicates removed.
    """
    seen: set[Pair] = set()
    out: list[Pair] = []
    for line in lines:
        line = line.rstrip("\n")
        if not line or line.startswith("#") or line.count(" :: ") != 1:
            continue
        de_side, en_side = line.split(" :: ")
        de_parts, en_parts = de_side.split(" | "), en_side.split(" | ")
        if len(de_parts) != len(en_parts):  # not aligned: cannot tell which part translates which
            continue
        for de, en in zip(de_parts, en_parts):
            de = normalize_text(_DING_ANNOTATION.sub("", de))
            en = normalize_text(_DING_ANNOTATION.sub("", en))
            if _is_sentence(de) and _is_sentence(en) and (de, en) not in seen:
                seen.add((de, en))
                out.append((de, en))
    return out


# ----------------------------------------------------------------------------------------------------------------
# 2. gettext catalogs
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CatalogEntry:
    """One singular message of a ``.mo`` file: optional context, the original and its translation."""

    context: str | None
    msgid: str
    msgstr: str


def read_mo(data: bytes | str | Path) -> list[CatalogEntry]:
    """Parse a compiled gettext catalog (``.mo``) and return its singular messages.

    The format (GNU gettext manual, "The Format of GNU MO Files") is small: a header of 32-bit integers
    ``magic, revision, N, offset_of_originals, offset_of_translations, …``, then two tables of ``N``
    ``(length, offset)`` pairs pointing at the NUL-terminated strings. The byte order is given by the magic
    number. A context is stored as ``context + "\\x04" + msgid``; plural entries hold ``singular\\0plural``
    and are skipped (their placeholders make them useless as sentence pairs anyway), as is the header entry
    (empty msgid). Strings are decoded as UTF-8, which is what every catalog in the recipe uses.
    """
    if not isinstance(data, bytes):
        data = Path(data).read_bytes()
    if len(data) < 20:
        raise ValueError(f"a .mo file has a header of at least 20 bytes, got {len(data)} bytes")
    for endian in ("<", ">"):
        if struct.unpack(endian + "I", data[:4])[0] == 0x950412DE:
            break
    else:
        raise ValueError(f"not a .mo file: magic number 0x950412de expected, got 0x{data[:4].hex()}")
    revision, n, orig_off, trans_off = struct.unpack(endian + "4I", data[4:20])
    if revision >> 16 not in (0, 1):
        raise ValueError(f"unsupported .mo major revision {revision >> 16} (expected 0 or 1)")

    def string(table: int, i: int) -> bytes:
        length, offset = struct.unpack(endian + "2I", data[table + 8 * i: table + 8 * i + 8])
        if offset + length > len(data):
            raise ValueError(f".mo string {i} runs past the end of the file ({offset + length} > {len(data)})")
        return data[offset: offset + length]

    entries = []
    for i in range(n):
        key, value = string(orig_off, i), string(trans_off, i)
        if not key or b"\x00" in key:  # header, or a plural entry
            continue
        context, _, msgid = key.rpartition(b"\x04")
        entries.append(CatalogEntry(context.decode("utf-8") if context else None,
                                    msgid.decode("utf-8"), value.decode("utf-8")))
    return entries


# Things that make a catalog message unusable as a sentence pair. Each pattern is checked on both sides.
_REJECT = (
    # printf-style placeholders: %s, %d, %1$s, %qs (GCC), %(name)s, %L ...; a lone "%" before a space is a percent sign
    ("placeholder", re.compile(r"%[^\s]")),
    ("placeholder", re.compile(r"\{[^{}]*\}")),  # {0}, {name}
    ("placeholder", re.compile(r"\$\(?\w|\$\w+\$")),  # $1, $(ARG1), $name$ (LibreOffice)
    ("markup", re.compile(r"<[A-Za-z/!?][^<>]*>|&[A-Za-z]+;|&#\d+;")),  # <b>, </a>, &amp;
    ("url", re.compile(r"[A-Za-z]+://|www\.|\S@\S+\.\w")),  # URLs and e-mail addresses
    ("tab", re.compile(r"\t")),  # option tables such as "-march=ARCH\tGenerate code for ..."
)

# Menu accelerator ("mnemonic") marks: GTK "_File", LibreOffice "~File", Qt "&File". A single mark before a
# letter or digit is removed; a second one (or an underscore left over, as in "const_double_split") means the
# string is an identifier or code, and the pair is dropped.
_MNEMONIC = re.compile(r"[_~&](?=\w)")


def _strip_mnemonic(text: str) -> str | None:
    marks = _MNEMONIC.findall(text)
    if len(marks) > 1:
        return None
    text = _MNEMONIC.sub("", text, count=1)
    if "_" in text or "~" in text or _MNEMONIC.search(text):
        return None
    return text


_LETTER = re.compile(r"[^\W\d_]")
_CODE_NAME = re.compile(r"[A-Z0-9.]+")  # spreadsheet function names such as CHIQUINV / CHISQINV


def clean_catalog_pair(english: str, german: str) -> tuple[Pair | None, str]:
    """Clean one catalog message pair; return ``((german, english), "ok")`` or ``(None, reason)``.

    Rejected: printf/brace/dollar placeholders, markup and entities, URLs and e-mail addresses, tab-separated
    tables, more than one accelerator mark or a leftover ``_``/``~`` (identifiers), empty sides, no letter at
    all, identical sides (untranslated, or names), upper-case code names on both sides (spreadsheet
    functions: ``DBSTDABW``/``DSTDEV``), an English side copied into the German one (GCC's
    "Interner Fehler: <english>"), a side longer than ``MAX_CHARS`` characters. Kept pairs have their
    accelerator mark removed and whitespace normalised (wrapped lines joined).
    """
    for reason, pattern in _REJECT:
        if pattern.search(english) or pattern.search(german):
            return None, reason
    en, de = _strip_mnemonic(english), _strip_mnemonic(german)
    if en is None or de is None:
        return None, "accelerator"
    en, de = normalize_text(en), normalize_text(de)
    if not en or not de:
        return None, "empty"
    if not _LETTER.search(en) or not _LETTER.search(de):
        return None, "no letters"
    if en == de:
        return None, "identical"
    if _CODE_NAME.fullmatch(en) and _CODE_NAME.fullmatch(de):
        return None, "code name"
    if len(en.split()) >= 3 and en in de:
        return None, "untranslated"
    if len(en) > MAX_CHARS or len(de) > MAX_CHARS:
        return None, "too long"
    return (de, en), "ok"


def catalog_pairs(mo_files: Iterable[str | Path]) -> tuple[list[Pair], collections.Counter]:
    """Clean pairs from ``.mo`` catalogs whose msgids are English and msgstrs German.

    Returns the ``(german, english)`` pairs (in file order, duplicates removed) and a counter of why the other
    messages were dropped (``"duplicate"`` included).
    """
    reasons: collections.Counter = collections.Counter()
    seen: set[Pair] = set()
    out: list[Pair] = []
    for path in mo_files:
        for entry in read_mo(path):
            pair, reason = clean_catalog_pair(entry.msgid, entry.msgstr)
            if pair is not None and pair in seen:
                reason = "duplicate"
            reasons[reason] += 1
            if reason == "ok":
                seen.add(pair)
                out.append(pair)
    return out, reasons


# ----------------------------------------------------------------------------------------------------------------
# 3. The split
# ----------------------------------------------------------------------------------------------------------------
def split_pairs(eval_pool: list[Pair], extra: list[Pair], *, n_test: int = N_TEST, n_valid: int = N_VALID,
                seed: int = SPLIT_SEED) -> tuple[dict[str, list[Pair]], int]:
    """Split into ``{"train", "valid", "test"}``; valid and test are drawn from ``eval_pool`` only.

    ``eval_pool`` is shuffled with ``random.Random(seed)``; pairs are taken in that order for test, then valid,
    skipping any whose German or English string (casefolded) was already taken, so all evaluation strings are
    distinct. Train is every other pair of ``eval_pool + extra`` (deduplicated, shuffled with the same seed)
    minus those sharing a German string with the evaluation Germans or an English string with the evaluation
    Englishes. Returns the splits and the number of train pairs removed that way.
    """
    if n_test < 0 or n_valid < 0:
        raise ValueError(f"n_test and n_valid must be >= 0, got {n_test} and {n_valid}")
    rng = random.Random(seed)
    order = list(range(len(eval_pool)))
    rng.shuffle(order)
    taken_de: set[str] = set()
    taken_en: set[str] = set()
    test: list[Pair] = []
    valid: list[Pair] = []
    for i in order:
        if len(test) == n_test and len(valid) == n_valid:
            break
        de, en = eval_pool[i]
        if de.casefold() in taken_de or en.casefold() in taken_en:
            continue
        (test if len(test) < n_test else valid).append((de, en))
        taken_de.add(de.casefold())
        taken_en.add(en.casefold())
    if len(test) < n_test or len(valid) < n_valid:
        raise ValueError(f"the evaluation pool is too small: need {n_test} test + {n_valid} valid pairs with "
                         f"distinct strings, got {len(test)} + {len(valid)} from {len(eval_pool)} pairs")
    train: list[Pair] = []
    seen: set[Pair] = set(test) | set(valid)  # the evaluation pairs themselves never go to train
    removed = 0
    for pair in eval_pool + extra:
        if pair in seen:
            continue
        seen.add(pair)
        if pair[0].casefold() in taken_de or pair[1].casefold() in taken_en:
            removed += 1  # would leak an evaluation sentence into training
            continue
        train.append(pair)
    rng.shuffle(train)
    return {"train": train, "valid": valid, "test": test}, removed


def hold_out_documents(documents: dict[str, list[Pair]], n: int, *, seed: int = SPLIT_SEED,
                       min_words: int = 5) -> tuple[list[Pair], set[str]]:
    """Pick whole documents, in a seeded order, until ``n`` full-sentence pairs are collected.

    ``documents`` maps a document name (a source package) to its pairs. The names are sorted and shuffled
    with ``random.Random(seed)``; each document in turn contributes its pairs whose both sides are full
    sentences (:func:`attnkit.data.pair_filters.is_full_sentence` with ``min_words``) and whose strings
    (casefolded) were not taken yet, until ``n`` are taken. Returns ``(pairs, names of the held-out
    documents)``: every pair of those documents must stay out of train, even those not taken.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    names = sorted(documents)
    random.Random(seed).shuffle(names)
    taken: list[Pair] = []
    taken_de: set[str] = set()
    taken_en: set[str] = set()
    held: set[str] = set()
    for name in names:
        if len(taken) == n:
            break
        held.add(name)
        for de, en in documents[name]:
            if len(taken) == n:
                break
            if (is_full_sentence(de, min_words) and is_full_sentence(en, min_words)
                    and de.casefold() not in taken_de and en.casefold() not in taken_en):
                taken.append((de, en))
                taken_de.add(de.casefold())
                taken_en.add(en.casefold())
    if len(taken) < n:
        raise ValueError(f"the documents hold only {len(taken)} full-sentence pairs, need {n}")
    return taken, held


def remove_overlap(train: list[Pair], held_out: Iterable[Pair]) -> tuple[list[Pair], int]:
    """``train`` without the pairs that share a German or an English string (casefolded) with ``held_out``;
    returns the kept pairs (in order) and how many were removed."""
    held_de, held_en = set(), set()
    for de, en in held_out:
        held_de.add(de.casefold())
        held_en.add(en.casefold())
    kept = [p for p in train if p[0].casefold() not in held_de and p[1].casefold() not in held_en]
    return kept, len(train) - len(kept)


# ----------------------------------------------------------------------------------------------------------------
# 4. The recipe
# ----------------------------------------------------------------------------------------------------------------
_OUTPUTS = tuple(f"{name}.tsv" for name in SPLITS)


def _lines(paths: Iterable[Path]) -> Iterable[str]:
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            yield from fh


def _descriptions(root: Path) -> tuple[dict[str, list[Pair]], collections.Counter, list[dict]]:
    """The package-description documents, their filter counts, and a record of the apt indexes read."""
    indexes = debian_descriptions.fetch_translation_indexes(root / "apt")
    sources = debian_descriptions.source_packages(_lines(indexes["packages"]))
    docs, reasons = debian_descriptions.description_documents(_lines(indexes["de"]), _lines(indexes["en"]), sources)
    record = [{"index": p.name, "bytes": p.stat().st_size, "sha256": sha256_file(p)}
              for kind in ("de", "en") for p in indexes[kind]]
    return docs, reasons, record


def _cached(root: Path) -> bool:
    """True if every output exists and matches the checksums in SOURCE.json written by this recipe version."""
    source = root / "SOURCE.json"
    if not source.is_file() or not all((root / f).is_file() for f in _OUTPUTS):
        return False
    try:
        record = json.loads(source.read_text(encoding="utf-8"))
        if record.get("recipe_version") != RECIPE_VERSION:
            return False
        return all(sha256_file(root / f) == record["outputs"][f]["sha256"] for f in _OUTPUTS)
    except (json.JSONDecodeError, KeyError, TypeError):
        return False


@register("de-en", kind="mt",
          description="German→English from Debian: ~18k dictionary sentences (Ding), ~36k UI messages, "
                      "~43k LibreOffice help, ~15k man-page and ~45k package-description sentences")
def prepare_de_en(root: Path, force: bool = False) -> Path:
    """Fetch the packages, extract and clean the pairs, split, write the TSVs and SOURCE.json into ``root``.

    Prints what it does and the counts. Returns ``root``. Idempotent: with the outputs present and matching
    SOURCE.json nothing is fetched; ``force=True`` re-fetches the packages and rebuilds everything.
    """
    from tqdm import tqdm

    root = Path(root)
    if not force and _cached(root):
        return root
    start = time.perf_counter()
    debs_dir = root / "debs"
    if force:
        for folder in (debs_dir, root / "apt"):
            if folder.exists():
                shutil.rmtree(folder)
    packages = []
    ding: list[Pair] = []
    mo_files: list[Path] = []
    help_roots: dict[str, Path] = {}
    man_roots: dict[str, list[Path]] = {"man-de": [], "man-en": []}
    with tempfile.TemporaryDirectory(dir=root, prefix=".extract-") as tmp:
        for src in tqdm(PACKAGES, desc="de-en: fetching Debian packages", unit="pkg"):
            deb, version = apt_download(src.package, debs_dir)
            unpacked = dpkg_extract(deb, Path(tmp) / src.package)
            files = sorted(f for g in src.globs for f in unpacked.glob(g) if f.is_file())
            if not files:
                raise RuntimeError(f"{src.package} {version} contains none of {list(src.globs)}; "
                                   "the package layout changed, update attnkit/data/de_en.py")
            packages.append({"package": src.package, "version": version, "license": src.license,
                             "deb": deb.name, "deb_bytes": deb.stat().st_size, "sha256": sha256_file(deb),
                             "paths": list(src.globs), "n_files": len(files)})
            if src.kind == "ding":
                for f in files:
                    with open(f, encoding="utf-8") as fh:
                        ding.extend(ding_pairs(fh))
            elif src.kind in man_roots:
                man_roots[src.kind].append(unpacked / man_pages.MAN_ROOT / ("de" if src.kind == "man-de" else ""))
            elif src.kind in ("help-de", "help-en"):
                help_roots[src.kind] = unpacked / libreoffice_help.HELP_ROOT / ("de" if src.kind == "help-de" else "en-US")
            else:
                mo_files.extend(files)
        catalog, reasons = catalog_pairs(mo_files)
        help_docs, help_reasons = ({}, collections.Counter())
        if help_roots:
            help_docs, help_reasons = libreoffice_help.help_documents(help_roots["help-de"], help_roots["help-en"])
        help_pairs = [p for name in sorted(help_docs) for p in help_docs[name]]
        man_docs, man_reasons = man_pages.man_documents(man_roots["man-de"], man_roots["man-en"])
        man_pairs = [p for name in sorted(man_docs) for p in man_docs[name]]
    print("de-en: reading Debian's package descriptions (German and English translation indexes)")
    docs, desc_reasons, indexes = _descriptions(root)
    test_docs, held_docs = hold_out_documents(docs, N_TEST_DOCS, seed=SPLIT_SEED)
    descriptions = [p for name in sorted(docs) if name not in held_docs for p in docs[name]]
    splits, removed = split_pairs(ding, catalog + help_pairs + man_pairs + descriptions, n_test=N_TEST,
                                  n_valid=N_VALID, seed=SPLIT_SEED)
    splits["train"], removed_docs = remove_overlap(splits["train"], test_docs)
    splits["test-docs"] = test_docs
    ding_set = set(ding)
    ding_train = [p for p in splits["train"] if p in ding_set]
    splits["train"] += ding_train * (DING_WEIGHT - 1)
    random.Random(SPLIT_SEED).shuffle(splits["train"])
    # each unique train pair counted once, for the first source (in this order) that has it
    per_source = collections.Counter()
    sources = (("catalogs", set(catalog)), ("libreoffice_help", set(help_pairs)), ("man_pages", set(man_pairs)),
               ("descriptions", set(descriptions)))
    for pair in set(splits["train"]) - ding_set:
        per_source[next((name for name, pairs in sources if pair in pairs), "other")] += 1
    per_source = {"dictionary": len(ding_train), **{name: per_source[name] for name, _ in sources}}

    outputs = {}
    for name in SPLITS:
        path = root / f"{name}.tsv"
        write_tsv(path, splits[name])
        outputs[path.name] = {"pairs": len(splits[name]), "bytes": path.stat().st_size, "sha256": sha256_file(path)}
    counts = {
        "dictionary_sentences": len(ding),
        "catalog_pairs": len(catalog),
        "catalog_dropped": dict(sorted((k, v) for k, v in reasons.items() if k != "ok")),
        "help_pairs": len(help_pairs),
        "help_pages": len(help_docs),
        "help_dropped": dict(sorted((k, v) for k, v in help_reasons.items() if k != "ok")),
        "man_pairs": len(man_pairs),
        "man_pages": len(man_docs),
        "man_dropped": dict(sorted((k, v) for k, v in man_reasons.items() if k != "ok")),
        "description_pairs": sum(len(v) for v in docs.values()),
        "description_documents": len(docs),
        "description_dropped": dict(sorted((k, v) for k, v in desc_reasons.items() if k != "ok")),
        "test_docs_documents": len(held_docs),
        "train_unique_per_source": per_source,
        "train_removed_overlap": removed + removed_docs,
        **{name: len(splits[name]) for name in SPLITS},
    }
    write_source_record(root, {
        "recipe": "de-en",
        "recipe_version": RECIPE_VERSION,
        "description": "German→English sentence pairs: Ding dictionary example sentences (trans-de-en), "
                       "gettext catalogs of LibreOffice, GCC, git, GIMP and Evolution, and Debian package "
                       "descriptions (DDTP); valid/test from Ding, test-docs from descriptions.",
        "format": "TSV, one pair a line: german<TAB>english (UTF-8, NFC, whitespace normalised)",
        "license": "per package, see packages[].license (the dictionary is GPL-2+)",
        "packages": packages,
        "apt_indexes": indexes,
        "split": {"seed": SPLIT_SEED, "n_test": N_TEST, "n_valid": N_VALID, "n_test_docs": N_TEST_DOCS,
                  "ding_weight": DING_WEIGHT,
                  "rule": "valid/test from dictionary sentences only; test-docs: full sentences (>= 5 words, "
                          ".!?) of package descriptions held out by whole source package; no train pair shares "
                          "a German or an English string (casefolded) with valid/test/test-docs; dictionary "
                          f"sentences repeated {DING_WEIGHT} times in train"},
        "counts": counts,
        "outputs": outputs,
    })
    print(f"de-en: {len(ding):,} dictionary sentences + {len(catalog):,} catalog pairs + "
          f"{len(help_pairs):,} LibreOffice help pairs + {len(man_pairs):,} man-page pairs + "
          f"{counts['description_pairs']:,} description pairs ({len(docs):,} source packages) → "
          f"train {len(splits['train']):,} (dictionary ×{DING_WEIGHT}) / valid {len(splits['valid']):,} / "
          f"test {len(splits['test']):,} / test-docs {len(splits['test-docs']):,} "
          f"({removed + removed_docs:,} train pairs removed for overlapping the evaluation sets) "
          f"in {time.perf_counter() - start:.1f}s")
    print("de-en: unique train pairs per source: "
          + ", ".join(f"{k} {v:,}" for k, v in per_source.items()))
    return root

