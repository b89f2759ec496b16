"""Debian package descriptions in German and English: sentence pairs aligned by description md5.

Debian translates the descriptions of its packages through the DDTP (Debian Description Translation
Project). apt's translation indexes hold them: ``Translation-en`` has every English description and
``Translation-de`` the German ones, each entry keyed by ``Description-md5``, the md5 of the English text::

    Package: 0ad
    Description-md5: d943033bedada21853d2ae54a2578a7b
    Description-de: Echtzeit-Strategiespiel über antike Kriegsführung     <- the short description
     0 A.D. ist ein freies, quelloffenes, plattformübergreifendes         <- the long description,
     Echtzeit-Strategiespiel (RTS) über antike Kriegsführung. …              one space in front
     .                                                                    <- paragraph break
     Dieses Paket enthält die wichtigsten von 0 A.D. benötigten Datendateien.

A German entry and the English entry with the same md5 are translations of each other. They are aligned
step by step, keeping only what lines up exactly (:func:`align_description`): the short descriptions; then
paragraphs when both sides have as many; inside two matched paragraphs, list items when both have as many;
inside two matched units, sentences when both have as many (otherwise the whole unit, if short enough).
Every pair then passes :func:`attnkit.data.corpora.pair_filters.check_pair`.

Descriptions repeat templates across the binary packages of one source package ("This package contains the
development files"), so documents are grouped by *source* package (from apt's ``Packages`` index): a held-out
document is a whole source package. The indexes come from apt itself (:func:`fetch_translation_indexes`,
signed and hash-checked by apt; their sha256 is recorded by the recipe). License: the descriptions are part of
the packages' metadata, which Debian distributes under each package's license; the DDTP translations are
contributed under the same terms (DDTP/DDTSS), see docs/data.md.

There are no tensor axes in this file.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterable, Iterator

from attnkit.data.fetch import FetchError
from attnkit.data.corpora.pair_filters import MAX_WORDS, admit_pair, split_sentences
from attnkit.data.corpora.parallel import normalize_text

__all__ = ["read_index", "source_packages", "description_units", "align_description", "description_documents",
           "fetch_translation_indexes"]

Pair = tuple[str, str]  # (german, english)


def read_index(lines: Iterable[str]) -> Iterator[dict[str, str]]:
    """The stanzas of an apt index (``Packages`` or ``Translation-xx``) as dicts; continuation lines (which
    start with a space) are kept with their ``\\n`` inside the field's value."""
    stanza: dict[str, str] = {}
    key = None
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            if stanza:
                yield stanza
            stanza, key = {}, None
        elif line[0] in " \t":
            if key is not None:
                stanza[key] += "\n" + line
        else:
            key, _, value = line.partition(":")
            stanza[key] = value.strip()
    if stanza:
        yield stanza


def source_packages(packages_lines: Iterable[str]) -> dict[str, str]:
    """Binary package → its source package, from a ``Packages`` index (``Source: name (version)``; a package
    without a ``Source`` field is its own source)."""
    out = {}
    for st in read_index(packages_lines):
        if "Package" in st:
            out[st["Package"]] = st.get("Source", st["Package"]).split()[0]
    return out


_BULLET = re.compile(r"^\s*([*+o-]|\d+[.)])\s+")


def description_units(text: str) -> tuple[str, list[list[str]]]:
    """Split a description into its short line and its paragraphs, each a list of units.

    A unit is a list item (a line starting with ``*``, ``-``, ``+``, ``o`` or a number) with its continuation
    lines, or the running text before the first item. Lines are joined and whitespace is normalised.
    Returns ``(short, [[unit, …], …])``.
    """
    short, _, long = text.partition("\n")
    paragraphs: list[list[str]] = []
    for block in re.split(r"\n\s\.[ \t]*(?:\n|$)", "\n" + long if long else ""):
        units: list[list[str]] = []
        for line in block.split("\n"):
            if not line.strip():
                continue
            body = line[1:] if line.startswith(" ") else line
            if _BULLET.match(body) or not units:
                units.append([_BULLET.sub("", body, count=1)])
            else:
                units[-1].append(body)
        texts = [normalize_text(" ".join(u)) for u in units]
        if any(texts):
            paragraphs.append([t for t in texts if t])
    return normalize_text(short), paragraphs


def _align_unit(de: str, en: str) -> list[Pair]:
    de_s, en_s = split_sentences(de), split_sentences(en)
    if len(de_s) == len(en_s):
        return list(zip(de_s, en_s))
    if len(de.split()) <= MAX_WORDS and len(en.split()) <= MAX_WORDS:
        return [(de, en)]
    return []


def align_description(german: str, english: str) -> list[Pair]:
    """Pairs from one German description and its English original (the ``Description-de``/``-en`` values).

    The short descriptions always pair; paragraphs pair only if both sides have as many, units (list items)
    inside a paragraph only if both have as many, sentences inside a unit only if both have as many (else the
    whole unit, when it has at most ``MAX_WORDS`` words a side). No filter is applied here.
    """
    de_short, de_pars = description_units(german)
    en_short, en_pars = description_units(english)
    pairs = [(de_short, en_short)]
    if len(de_pars) != len(en_pars):
        return pairs
    for de_units, en_units in zip(de_pars, en_pars):
        if len(de_units) == len(en_units):
            for de, en in zip(de_units, en_units):
                pairs.extend(_align_unit(de, en))
    return pairs


def description_documents(german_index: Iterable[str], english_index: Iterable[str],
                          sources: dict[str, str]) -> tuple[dict[str, list[Pair]], collections.Counter]:
    """Aligned, filtered pairs grouped by source package.

    ``german_index``/``english_index`` are the lines of ``Translation-de`` and of the ``Translation-en``
    files (concatenated); ``sources`` maps binary to source packages (:func:`source_packages`). Each
    description md5 is used once (many binary packages share one description). Returns
    ``({source package: [(german, english), …]}, counter of kept/dropped reasons)``; a pair seen before
    (in any document) is dropped as ``"duplicate"``.
    """
    english: dict[str, str] = {}
    for st in read_index(english_index):
        if "Description-md5" in st and "Description-en" in st:
            english.setdefault(st["Description-md5"], st["Description-en"])
    docs: dict[str, list[Pair]] = collections.defaultdict(list)
    reasons: collections.Counter = collections.Counter()
    seen_md5: set[str] = set()
    seen: set[Pair] = set()
    for st in read_index(german_index):
        md5, text = st.get("Description-md5"), st.get("Description-de")
        if md5 is None or text is None or md5 in seen_md5:
            continue
        seen_md5.add(md5)
        if md5 not in english:
            reasons["no english"] += 1
            continue
        doc = sources.get(st.get("Package", ""), st.get("Package", ""))
        for de, en in align_description(text, english[md5]):
            if admit_pair(de, en, seen, reasons):
                docs[doc].append((de, en))
    return dict(docs), reasons


_APT_CONFIG = """\
Dir::Etc::Parts "{root}/parts";
Dir::State::Lists "{root}/lists";
Dir::Cache "{root}/cache";
Acquire::Languages {{ "de"; "en"; }};
Acquire::IndexTargets::deb::DEP-11 {{ DefaultEnabled "false"; }};
Acquire::IndexTargets::deb::DEP-11-icons {{ DefaultEnabled "false"; }};
Acquire::IndexTargets::deb::DEP-11-icons-small {{ DefaultEnabled "false"; }};
Acquire::IndexTargets::deb::Contents-deb {{ DefaultEnabled "false"; }};
"""


def fetch_translation_indexes(dest: str | os.PathLike) -> dict[str, list[Path]]:
    """Fetch apt's German and English translation indexes (and the ``Packages`` index) of the machine's
    Debian sources into ``dest`` with a private apt configuration, and return
    ``{"de": [...], "en": [...], "packages": [...]}`` (paths of the uncompressed index files).

    The machine's own apt setup usually turns translation indexes off (``Acquire::Languages "none"`` in
    Docker images), so this runs ``apt-get update`` with its own ``APT_CONFIG``: an empty configuration
    folder (``Dir::Etc::Parts``), the languages de and en, and private list and cache folders, so the
    system's lists are untouched. apt verifies the archive's signature and each index's hash.
    Files already in ``dest/lists`` are reused.
    """
    root = Path(dest).absolute()
    lists = root / "lists"

    def found() -> dict[str, list[Path]]:
        files = sorted(p for p in lists.glob("*") if p.is_file())
        return {"de": [p for p in files if p.name.endswith("_i18n_Translation-de")],
                "en": [p for p in files if p.name.endswith("_i18n_Translation-en")],
                "packages": [p for p in files if p.name.endswith("_Packages")]}

    have = found() if lists.is_dir() else {}
    if have and all(have.values()):
        return have
    if shutil.which("apt-get") is None:
        raise FetchError("apt-get is not available on this machine, so Debian's translation indexes cannot be "
                         "fetched; pass a local parallel file instead (for example --data pairs.tsv)")
    for d in ("parts", "lists/partial", "cache/archives/partial"):
        (root / d).mkdir(parents=True, exist_ok=True)
    config = root / "apt.conf"
    config.write_text(_APT_CONFIG.format(root=root), encoding="utf-8")
    proc = subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True,
                          env={**os.environ, "APT_CONFIG": str(config)})
    have = found()
    if proc.returncode != 0 or not have["de"] or not have["en"]:
        raise FetchError(f"could not fetch Debian's translation indexes (apt-get update exit code "
                         f"{proc.returncode}, {len(have['de'])} German and {len(have['en'])} English indexes): "
                         f"{proc.stderr.strip()[-500:]}")
    return have
