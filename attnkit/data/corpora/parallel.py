"""Parallel text for translation: reading and writing sentence pairs (source ⇄ target).

Two on-disk forms are accepted:

* a **TSV file**: one pair a line, ``source<TAB>target`` (exactly one tab). This is what the ``de-en`` recipe
  writes (``train.tsv``, ``valid.tsv``, ``test.tsv``) and what ``--data FILE.tsv`` reads;
* **two line-aligned files**: line ``i`` of the source file translates to line ``i`` of the target file
  (``--data train.de train.en``).

Bad lines are handled by one rule, the same for both forms. A TSV line with no tab (or more than one) or a pair
with an empty side is *skipped and counted* by default (``ParallelCorpus.skipped``), or refused with its line
number when ``strict=True``. Two files of different lengths are always refused (``ValueError`` naming both
counts): a missing line shifts every later pair, so nothing after it could be trusted.
A file that is not UTF-8, or holds a NUL byte (binary, or UTF-16 without a byte-order mark), raises ``ValueError``.

Training data without its own validation pairs (one TSV file or two line-aligned files, no ``--valid``) gets a
validation part split off by :func:`split_off_valid`: a seeded shuffle (fixed seed, so every run of the same file
gets the same split, whatever its training ``--seed``), then 10% of the pairs, at most 1,000 and at least 1, become
validation pairs; a training pair whose source sentence is also a validation source is dropped, so the two parts are
disjoint. Fewer than 10 usable pairs are refused (too few to split). ``attnkit train lm`` does the same with one
text file (its last 10% of characters, :func:`attnkit.data.corpora.text.split_text`).

All text goes through :func:`normalize_text` (Unicode NFC, tabs/newlines and runs of spaces collapsed to one
space, invisible zero-width characters removed), so a written TSV can always be read back pair for pair.
(Sentences longer than a model allows are handled later, when encoding: see :mod:`attnkit.data.pipeline.mt_batching`.)

There are no tensor axes in this file; ``N`` below is the number of pairs.
"""

from __future__ import annotations

import os
import random
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from attnkit.checks import check_int
from attnkit.files import write_atomic

__all__ = [
    "SPLITS",
    "IN_DOMAIN_FILE",
    "resolve_parallel_data",
    "in_domain_source",
    "load_in_domain",
    "load_eval_pairs",
    "read_back_translations",
    "ParallelCorpus",
    "normalize_text",
    "read_tsv",
    "read_parallel_files",
    "write_tsv",
    "load_parallel",
    "load_splits",
    "split_off_valid",
    "load_train_valid",
    "AUTO_VALID_FRACTION",
    "AUTO_VALID_MAX",
    "AUTO_VALID_MIN_PAIRS",
    "AUTO_VALID_SEED",
]

SPLITS = ("train", "valid", "test", "test-docs")
# A prepared recipe's training pairs from the domain of its valid/test sets (a subset of train.tsv): what
# ``attnkit train mt --anneal-data <recipe>`` anneals on (attnkit.training.mt_task).
IN_DOMAIN_FILE = "in-domain.tsv"

# The validation part split off training data that comes without one (see split_off_valid).
AUTO_VALID_FRACTION = 0.1
AUTO_VALID_MAX = 1000  # as many as the de-en recipe's valid.tsv: enough for a stable BLEU, quick to evaluate
AUTO_VALID_MIN_PAIRS = 10  # the smallest corpus whose tenth is one pair
AUTO_VALID_SEED = 0

# Characters that are invisible and only ever get in the way of matching/tokenizing: zero-width space,
# byte-order mark / zero-width no-break space, soft hyphen.
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\ufeff\u00ad"), None)
_WHITESPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Canonical single-line form of a sentence.

    NFC composition (so ``"u" + combining diaeresis`` and ``"ü"`` are the same string), zero-width
    characters dropped, every run of whitespace (tabs and newlines included) replaced by one space,
    leading/trailing space stripped.
    """
    if not isinstance(text, str):
        raise ValueError(f"normalize_text expects a str, got {type(text).__name__}")
    text = unicodedata.normalize("NFC", text).translate(_INVISIBLE)
    return _WHITESPACE.sub(" ", text).strip()


@dataclass
class ParallelCorpus:
    """``N`` aligned sentence pairs plus how many input lines were skipped as malformed.

    ``sources[i]`` translates to ``targets[i]``. ``skipped_lines`` holds the (1-based) line numbers that were
    skipped, ``skipped`` their count. ``lines`` (None when unknown): the 1-based input line of each pair, so that
    an error about pair ``i`` can name its line (:meth:`where`).
    """

    sources: list[str]
    targets: list[str]
    skipped_lines: list[int] = field(default_factory=list)
    path: str | None = None
    lines: list[int] | None = None

    def __post_init__(self) -> None:
        if len(self.sources) != len(self.targets):
            raise ValueError(f"a parallel corpus needs as many sources as targets, "
                             f"got {len(self.sources)} sources and {len(self.targets)} targets")
        if self.lines is not None and len(self.lines) != len(self.sources):
            raise ValueError(f"a parallel corpus needs one line number per pair, got {len(self.lines)} for "
                             f"{len(self.sources)} pairs")

    def where(self, i: int) -> str:
        """How an error names pair ``i``: ``"pair i (line LINE of PATH)"``, or ``"pair i"`` when the line is unknown."""
        if self.lines is None or self.path is None:
            return f"pair {i}"
        return f"pair {i} (line {self.lines[i]} of {self.path})"

    @property
    def skipped(self) -> int:
        return len(self.skipped_lines)

    def __len__(self) -> int:
        return len(self.sources)

    def pairs(self) -> list[tuple[str, str]]:
        """The pairs as ``(source, target)`` tuples."""
        return list(zip(self.sources, self.targets))

    def swapped(self) -> "ParallelCorpus":
        """The same pairs the other way round (each target becomes the source): the reverse direction."""
        return ParallelCorpus(list(self.targets), list(self.sources), list(self.skipped_lines), self.path,
                              None if self.lines is None else list(self.lines))

    def __repr__(self) -> str:
        where = f", path={self.path!r}" if self.path else ""
        return f"ParallelCorpus({len(self)} pairs, skipped={self.skipped}{where})"


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"parallel data file {str(path)!r} does not exist")
    data = path.read_bytes()  # decoded whole: a lone "\r" inside a line does not split it, we split on "\n"
    nul = data.find(b"\x00")
    if nul >= 0:  # binary, or UTF-16 without a byte-order mark: valid UTF-8 that would read as garbled pairs
        raise ValueError(f"{str(path)!r} looks binary: NUL byte at byte offset {nul}; expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{str(path)!r} is not UTF-8 text (byte {e.start}: {e.reason})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":  # the final newline does not start another line
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]  # tolerate CRLF files


def read_tsv(path: str | os.PathLike, *, strict: bool = False,
             columns: tuple[str, str] = ("source", "target")) -> ParallelCorpus:
    """Read ``source<TAB>target`` lines.

    A line with no tab, more than one tab, or an empty side (after :func:`normalize_text`) is skipped and its
    line number recorded; with ``strict=True`` the first such line raises ``ValueError`` naming it (and the
    column, by ``columns``: what the file's two columns are called in messages).

    Shape:
        returns a :class:`ParallelCorpus` of ``N`` pairs (``N`` ≤ number of lines).
    """
    path = Path(path)
    sources: list[str] = []
    targets: list[str] = []
    skipped: list[int] = []
    kept: list[int] = []
    for lineno, line in enumerate(_read_lines(path), start=1):
        n_tabs = line.count("\t")
        if n_tabs != 1:
            problem = f"expected exactly one tab ({columns[0]}<TAB>{columns[1]}), got {n_tabs}"
        else:
            src, tgt = (normalize_text(s) for s in line.split("\t"))
            if src and tgt:
                sources.append(src)
                targets.append(tgt)
                kept.append(lineno)
                continue
            problem = f"empty {columns[0] if not src else columns[1]} side"
        if strict:
            raise ValueError(f"{path}:{lineno}: {problem} (without strict checking such lines are skipped and "
                             f"counted)")
        skipped.append(lineno)
    return ParallelCorpus(sources, targets, skipped, str(path), kept)


def read_parallel_files(source_path: str | os.PathLike, target_path: str | os.PathLike, *,
                        strict: bool = False) -> ParallelCorpus:
    """Read two line-aligned files (line ``i`` of one translates to line ``i`` of the other).

    Files with different numbers of lines raise ``ValueError`` with both counts. A pair with an empty side is
    skipped and counted, or refused with its line number when ``strict=True``.

    Shape:
        returns a :class:`ParallelCorpus` of ``N`` pairs.
    """
    source_path, target_path = Path(source_path), Path(target_path)
    src_lines, tgt_lines = _read_lines(source_path), _read_lines(target_path)
    if len(src_lines) != len(tgt_lines):
        raise ValueError(f"parallel files must have the same number of lines: {source_path} has {len(src_lines)}, "
                         f"{target_path} has {len(tgt_lines)}")
    sources: list[str] = []
    targets: list[str] = []
    skipped: list[int] = []
    kept: list[int] = []
    for lineno, (s, t) in enumerate(zip(src_lines, tgt_lines), start=1):
        s, t = normalize_text(s), normalize_text(t)
        if s and t:
            sources.append(s)
            targets.append(t)
            kept.append(lineno)
            continue
        if strict:
            side = source_path if not s else target_path
            raise ValueError(f"{side}:{lineno}: empty line (without strict checking such pairs are skipped and "
                             f"counted)")
        skipped.append(lineno)
    return ParallelCorpus(sources, targets, skipped, f"{source_path} + {target_path}", kept)


def write_tsv(path: str | os.PathLike, pairs: Iterable[tuple[str, str]]) -> int:
    """Write ``(source, target)`` pairs as ``source<TAB>target`` lines (temporary file + rename).

    Each side is passed through :func:`normalize_text` first, so tabs and newlines inside a sentence can never
    break the format. An empty side raises ``ValueError`` (it could not be read back). Returns the number of lines.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = [0]

    def write(tmp: str) -> None:  # an empty side raises: write_atomic removes the temporary file
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for i, (src, tgt) in enumerate(pairs):
                src, tgt = normalize_text(src), normalize_text(tgt)
                if not src or not tgt:
                    raise ValueError(f"pair {i} has an empty side after normalisation: {(src, tgt)!r}")
                f.write(f"{src}\t{tgt}\n")
                count[0] += 1

    write_atomic(path, write)
    return count[0]


def load_parallel(data: str | os.PathLike | Sequence[str | os.PathLike], *, split: str = "train",
                  strict: bool = False) -> ParallelCorpus:
    """Load parallel text from what a user passes as ``--data``.

    * a folder → its ``{split}.tsv`` (a prepared recipe folder such as ``$ATTNKIT_HOME/data/de-en``);
    * one file → read as TSV;
    * two files ``[source, target]`` → read as line-aligned files.
    """
    if isinstance(data, (str, os.PathLike)):
        data = [data]
    paths = [Path(p) for p in data]
    if len(paths) == 2:
        return read_parallel_files(paths[0], paths[1], strict=strict)
    if len(paths) != 1:
        raise ValueError(f"parallel data is one TSV file, one folder or two line-aligned files, got {len(paths)} paths")
    p = paths[0]
    if p.is_dir():
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        return read_tsv(p / f"{split}.tsv", strict=strict)
    return read_tsv(p, strict=strict)


def in_domain_source(data: Any) -> Any:
    """A prepared folder → its ``in-domain.tsv`` (``FileNotFoundError`` if it has none); files stay as they are."""
    if isinstance(data, (str, os.PathLike)) and Path(data).is_dir():
        path = Path(data) / IN_DOMAIN_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{data} has no {IN_DOMAIN_FILE} (the in-domain training pairs); name a TSV "
                                    f"file or SRC_FILE,TGT_FILE instead")
        return path
    return data


def load_in_domain(data: str | os.PathLike | Sequence[str | os.PathLike], *, strict: bool = False) -> ParallelCorpus:
    """The pairs to anneal on: a prepared folder's ``in-domain.tsv``, else what :func:`load_parallel` reads."""
    return load_parallel(in_domain_source(data), strict=strict)


def load_splits(folder: str | os.PathLike, *, strict: bool = False) -> dict[str, ParallelCorpus]:
    """All of ``train.tsv`` / ``valid.tsv`` / ``test.tsv`` present in ``folder`` (``train.tsv`` is required)."""
    folder = Path(folder)
    if not (folder / "train.tsv").is_file():
        raise FileNotFoundError(f"{folder} has no train.tsv (expected train.tsv, valid.tsv, test.tsv)")
    return {s: read_tsv(folder / f"{s}.tsv", strict=strict) for s in SPLITS if (folder / f"{s}.tsv").is_file()}


def split_off_valid(corpus: ParallelCorpus, *, fraction: float = AUTO_VALID_FRACTION, max_pairs: int = AUTO_VALID_MAX,
                    seed: int = AUTO_VALID_SEED) -> tuple[ParallelCorpus, ParallelCorpus, dict[str, Any]]:
    """Split a validation part off training pairs: ``(train, valid, info)``.

    The pairs are shuffled with ``random.Random(seed)``; the first ``round(fraction * N)`` of them (at least 1, at
    most ``max_pairs``) are the validation pairs, the rest (in their original order) the training pairs, minus
    every pair whose source sentence is also a validation source (so no validation source is ever trained on).
    Deterministic in ``(corpus, fraction, max_pairs, seed)``. ``info`` holds ``pairs`` (N), ``valid``, ``train``,
    ``dropped`` (training pairs removed as sharing a validation source), ``fraction``, ``max_pairs`` and ``seed``.

    Raises ``ValueError`` when the corpus has fewer than :data:`AUTO_VALID_MIN_PAIRS` pairs, or for a fraction
    outside (0, 1) or ``max_pairs < 1``.
    """
    if not isinstance(fraction, float) or not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be a float in (0, 1), got {fraction!r}")
    check_int("max_pairs", max_pairs, minimum=1)
    n = len(corpus)
    if n < AUTO_VALID_MIN_PAIRS:
        raise ValueError(f"{corpus.path or 'the training data'} holds {n} usable pairs ({corpus.skipped} malformed "
                         f"lines skipped): too few to split off a "
                         f"validation part (needs at least {AUTO_VALID_MIN_PAIRS}); pass validation pairs "
                         f"(--valid FILE)")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_valid = min(max_pairs, max(1, round(fraction * n)))
    chosen = sorted(order[:n_valid])
    valid_sources = {corpus.sources[i] for i in chosen}
    chosen_set = set(chosen)
    rest = [i for i in range(n) if i not in chosen_set]
    train = [i for i in rest if corpus.sources[i] not in valid_sources]
    if not train:
        raise ValueError(f"{corpus.path or 'the training data'}: every pair shares its source sentence with the "
                         f"validation part split off it, nothing is left to train on; pass --valid FILE")

    def part(indices: list[int], name: str) -> ParallelCorpus:
        return ParallelCorpus([corpus.sources[i] for i in indices], [corpus.targets[i] for i in indices],
                              list(corpus.skipped_lines) if name == "train" else [],
                              f"{corpus.path} ({name} part)" if corpus.path else None,
                              None if corpus.lines is None else [corpus.lines[i] for i in indices])

    info = {"pairs": n, "valid": len(chosen), "train": len(train), "dropped": len(rest) - len(train),
            "fraction": fraction, "max_pairs": max_pairs, "seed": seed}
    return part(train, "train"), part(chosen, "valid"), info


def load_train_valid(data: Any, valid: Any = None, *, strict: bool = False, reverse: bool = False
                     ) -> tuple[ParallelCorpus, ParallelCorpus, dict[str, Any] | None]:
    """Training and validation pairs: ``(train, valid, split info or None)``.

    ``data`` and ``valid`` take the forms of :func:`load_parallel` (a prepared folder as ``valid``: its
    ``valid.tsv``). Without ``valid``, a prepared folder gives its ``valid.tsv``; a file (or two files) gets a
    validation part split off by :func:`split_off_valid`, whose
    ``info`` is returned (None when nothing was split). ``reverse``: every pair the other way round (target →
    source), swapped before a validation part is split off, so the two parts are disjoint in the new sources.
    """
    def read(what: Any, split: str) -> ParallelCorpus:
        corpus = load_parallel(what, split=split, strict=strict)
        return corpus.swapped() if reverse else corpus

    train = read(data, "train")
    if valid is not None:  # a folder as valid: its valid.tsv (a file is read whatever the split)
        return train, read(valid, "valid"), None
    if isinstance(data, (str, os.PathLike)) and Path(data).is_dir():
        return train, read(data, "valid"), None
    return split_off_valid(train)


def resolve_parallel_data(data: str, *, kind: str = "mt", flag: str = "--data") -> tuple[Any, str]:
    """What ``--data`` names → ``(argument for load_parallel / MTTask.from_data, description)``.

    An existing path → itself (its name may hold a comma); ``"SRC,TGT"`` → the two line-aligned files; anything
    else is a recipe name (prepared on first use; an unknown name or a language-modelling recipe raise
    ``ValueError``). ``flag`` is the option the errors name.
    """
    path = Path(data)
    if path.exists():
        return path, data
    if "," in data:
        parts = [p.strip() for p in data.split(",")]
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"{flag} with a comma must name exactly two files SRC_FILE,TGT_FILE, got {data!r}")
        for p in parts:
            if not Path(p).is_file():
                raise FileNotFoundError(f"{flag}: no such file: {p}")
        return [Path(parts[0]), Path(parts[1])], data
    if any(c in data for c in "/\\") or data.endswith((".tsv", ".txt")):
        raise FileNotFoundError(f"{flag}: no such file or folder: {data}")
    from attnkit.data.corpora.registry import get_recipe, prepare

    recipe = get_recipe(data)  # unknown name → ValueError listing the known recipes
    if recipe.kind != kind:
        raise ValueError(f"{flag} {data!r} is a {recipe.kind} recipe; translation needs a parallel corpus "
                         f"(an mt recipe such as de-en, a TSV file or SRC_FILE,TGT_FILE)")
    return prepare(data), data


def load_eval_pairs(data: str, split: str, *, strict: bool = False, reverse: bool = False) -> "ParallelCorpus":
    """``--data`` (+ ``--split``) → a :class:`~attnkit.data.corpora.parallel.ParallelCorpus` of the pairs to score
    (``reverse``: the other way round, for a model trained with ``train mt --reverse``)."""
    source, _ = resolve_parallel_data(data)
    if isinstance(source, Path) and source.is_dir() and not (source / f"{split}.tsv").is_file():
        raise FileNotFoundError(f"{source} has no {split}.tsv")
    corpus = load_parallel(source, split=split, strict=strict)
    return corpus.swapped() if reverse else corpus


def read_back_translations(path: str | os.PathLike, *, strict: bool = False) -> ParallelCorpus:
    """The synthetic pairs of a back-translation file (``attnkit translate --output``): each line is
    ``sentence<TAB>translation``, a monolingual sentence in the target language of the model to train and its
    machine translation into that model's source language. Returns ``(translation, sentence)`` pairs, the
    synthetic source first; lines with an empty side (an empty input line or translation) are skipped and counted
    like any malformed TSV line (refused under ``strict``)."""
    return read_tsv(path, strict=strict, columns=("sentence", "translation")).swapped()
