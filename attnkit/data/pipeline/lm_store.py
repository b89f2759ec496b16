"""A language-modelling corpus as token stores: what ``--data`` names → tokenizer + one store per split, cached.

:func:`open_lm_stores` is the bounded-memory path of :func:`attnkit.data.pipeline.lm_dataset.prepare_lm_data`.
Nothing in it holds the whole text or its ids in memory:

1. The text: a recipe's ``train.txt`` and ``valid.txt``, or a local file / folder split by
   :func:`attnkit.data.corpora.text.split_text`'s rule (the last ``valid_fraction`` of the characters, cut at a line
   boundary; the same train and valid text as ever, found by :meth:`TextFiles.split` without reading it all).
   Each file group is scanned once (:meth:`~attnkit.data.pipeline.text_stream.TextFiles.scan`: checked, counted,
   hashed); the scan is kept as ``scan-<n>.json`` with the files' sizes and modification times, and read again
   only when one of them changes.
2. The tokenizer: ``char`` from the scans' characters (train and valid, as before), ``bpe`` trained from the train
   text streamed in the pieces ``BPETokenizer.train`` always used (the same tokenizer, kept as
   ``tokenizer-bpe-<V>.json`` until the text changes), ``gpt2``, a tokenizer file or object as given.
3. One :class:`~attnkit.data.pipeline.token_store.TokenStore` per split, ``<tokenizer>-<split>.tokens``, whose
   fingerprint is the text's sha256, the split's character range and the tokenizer's sha256: it is reused while
   they match, and built again (streaming, :func:`~attnkit.data.pipeline.store_encoding.encode_blocks`) when the
   text or the tokenizer changes or the file is damaged.

Everything lives in ``$ATTNKIT_HOME/token_store/<name>-<key>/``, one folder per text source (its key: the files'
absolute paths, or the recipe's name).

There are no tensor axes in this file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from attnkit.data.corpora.text import DEFAULT_VALID_FRACTION, lm_recipe_folder, text_source_files
from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.data.tokenizers.tokenizer import Tokenizer, tokenizer_from_dict
from attnkit.files import write_text_atomic

from .lm_dataset import DEFAULT_BPE_VOCAB, _tokenizer_fingerprint, build_tokenizer, cache_cut_key
from .store_encoding import bpe_training_pieces, encode_blocks
from .text_stream import TextFiles, TextScan
from .token_store import STORE_SUFFIX, TokenStore, TokenStoreWriter, open_or_build

__all__ = ["LMStores", "open_lm_stores", "STORE_FOLDER", "LM_SPLITS"]

STORE_FOLDER = "token_store"
LM_SPLITS = ("train", "valid")


def _write_json(path: Path, payload: Any) -> None:
    """A small JSON file written under a temporary name and renamed into place."""
    write_text_atomic(path, json.dumps(payload, ensure_ascii=True))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@dataclass
class _Part:
    """A split: characters ``[start, stop)`` of the text group ``group``."""

    group: int
    start: int
    stop: int


@dataclass
class LMStores:
    """What :func:`open_lm_stores` returns: the tokenizer, one store per split asked for, the source's description
    (as ``load_text_corpus`` gives it, plus the split sizes) and one note per store (where it is, whether it was
    reused or built and in how long)."""

    tokenizer: Tokenizer
    stores: dict[str, TokenStore]
    source_info: dict[str, Any]
    notes: list[str] = field(default_factory=list)


class _Source:
    """The files behind ``--data``, their scans (cached in ``folder``) and the splits' character ranges."""

    def __init__(self, data: str | os.PathLike, *, valid_fraction: float, home: Path | None, root: Path,
                 progress: bool):
        recipe_folder = lm_recipe_folder(data, home=home)
        if recipe_folder is not None:
            self.groups = [TextFiles([recipe_folder / "train.txt"]), TextFiles([recipe_folder / "valid.txt"])]
            key_parts: list[Any] = ["recipe", str(data), str(recipe_folder.resolve())]
            name = str(data)
            self.info: dict[str, Any] = json.loads((recipe_folder / "SOURCE.json").read_text(encoding="utf-8"))
            self.info.update(recipe=str(data), folder=str(recipe_folder))
        else:
            path = Path(data).expanduser()
            files, kind = text_source_files(path)
            self.groups = [TextFiles(files, folder=kind == "folder")]
            key_parts = ["path", str(path.resolve()), kind]
            name = path.name or "text"
            self.info = {"kind": kind, "path": str(path.resolve()),
                         "files": [f.relative_to(path).as_posix() for f in files] if kind == "folder" else [path.name]}
        key = hashlib.sha256(json.dumps(key_parts).encode()).hexdigest()[:16]
        self.folder = root / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', name)[:40]}-{key}"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.identities = [g.identity() for g in self.groups]
        self.scans = [self._scan(i, g, progress) for i, g in enumerate(self.groups)]
        if recipe_folder is not None:
            self.parts = {"train": _Part(0, 0, self.scans[0].n_chars), "valid": _Part(1, 0, self.scans[1].n_chars)}
            self.range_key = "recipe"
        else:
            scan = self.scans[0]
            cut = self._cut(valid_fraction)
            self.parts = {"train": _Part(0, 0, cut), "valid": _Part(0, cut, scan.n_chars)}
            self.range_key = f"v{valid_fraction:g}"
            self.info.update(bytes=scan.n_bytes, sha256=scan.sha256, valid_fraction=valid_fraction,
                             train_chars=cut, valid_chars=scan.n_chars - cut)

    def _scan(self, i: int, group: TextFiles, progress: bool) -> TextScan:
        """The group's scan: the cached one while the files' sizes and times are unchanged, else a new one."""
        path = self.folder / f"scan-{i}.json"
        identity = self.identities[i]
        cached = _read_json(path)
        if isinstance(cached, dict) and cached.get("identity") == identity:
            try:
                return TextScan.from_dict(cached["scan"])
            except ValueError:
                pass  # a damaged record: scan again
        scan = group.scan(progress=progress)
        self.check_unchanged(group, identity)
        _write_json(path, {"identity": identity, "scan": scan.to_dict()})
        return scan

    @staticmethod
    def check_unchanged(group: TextFiles, identity: list) -> None:
        if group.identity() != identity:
            raise ValueError(f"{identity[0][0]} changed while it was read; try again once it is written")

    def _cut(self, valid_fraction: float) -> int:
        """The train/valid cut of the one text group, kept in its scan record per ``valid_fraction``."""
        path = self.folder / "scan-0.json"
        record = _read_json(path)
        record = record if isinstance(record, dict) else {}
        scan = record.get("scan")
        cuts = record.get("cuts") if isinstance(scan, dict) and scan.get("sha256") == self.scans[0].sha256 else {}
        cuts = cuts if isinstance(cuts, dict) else {}  # a damaged record: the cut is found again
        key = f"{float(valid_fraction)!r}/2"  # /2: the rule of 2026-11-30 (valid at most twice its share)
        cached = cuts.get(key)
        if isinstance(cached, int) and not isinstance(cached, bool) and 0 <= cached <= self.scans[0].n_chars:
            return cached
        cut = self.groups[0].split(self.scans[0], valid_fraction)
        if record:
            record["cuts"] = dict(cuts, **{key: cut})
            _write_json(path, record)
        return cut

    def text_sha256(self, part: _Part) -> str:
        return self.scans[part.group].sha256

    def blocks(self, part: _Part):
        return self.groups[part.group].read(self.scans[part.group], part.start, part.stop)

    def all_chars(self) -> str:
        return "".join(sorted(set().union(*(s.chars for s in self.scans))))


def _resolve_tokenizer(kind: str | os.PathLike | Tokenizer, source: _Source, *, vocab_size: int | None,
                       home: Path | None, progress: bool) -> Tokenizer:
    """The tokenizer of ``kind`` (see :func:`attnkit.data.pipeline.lm_dataset.build_tokenizer`), built from the
    source's scans or its streamed train text."""
    if kind == "char":
        if not source.all_chars():
            raise ValueError("cannot build a character vocabulary from empty text (0 characters)")
        return CharTokenizer(source.all_chars())
    if kind == "bpe":
        V = DEFAULT_BPE_VOCAB if vocab_size is None else vocab_size
        part = source.parts["train"]
        path = source.folder / f"tokenizer-bpe-{V}.json"
        want = {"text": source.text_sha256(part), "range": [part.start, part.stop]}
        cached = _read_json(path)
        if isinstance(cached, dict) and cached.get("source") == want:
            try:
                return tokenizer_from_dict(cached["tokenizer"])
            except (KeyError, ValueError):
                pass  # a damaged record: train again
        tok = BPETokenizer.train(bpe_training_pieces(source.blocks(part)), V, special_tokens=["<|endoftext|>"],
                                 show_progress=progress)
        _write_json(path, {"source": want, "tokenizer": tok.to_dict()})
        return tok
    return build_tokenizer(kind, [], vocab_size=vocab_size, home=home)  # gpt2, a file; anything else refused


def open_lm_stores(data: str | os.PathLike, tokenizer: str | os.PathLike | Tokenizer = "char", *,
                   splits: Sequence[str] = LM_SPLITS, vocab_size: int | None = None,
                   valid_fraction: float = DEFAULT_VALID_FRACTION, home: str | os.PathLike | None = None,
                   verify: bool = True, show_progress: bool = False) -> LMStores:
    """Recipe name or local path + tokenizer choice → tokenizer and a token store per split (see the module
    docstring); every store is reused when intact and of the same text and tokenizer, else built, streaming.

    Args:
        splits: the splits wanted (``attnkit eval lm`` needs only ``"valid"``).
        verify: check every block of a reused store against its sha256 (reads it once; a process that opens a
            store another one has just built or checked may skip it).
        show_progress: tqdm bars for the scan, the BPE training and the encoding.
    """
    for split in splits:
        if split not in LM_SPLITS:
            raise ValueError(f"splits must be among {LM_SPLITS}, got {split!r}")
    from attnkit.data.fetch import attnkit_home

    home = Path(home) if home is not None else None
    root = (home if home is not None else attnkit_home()) / STORE_FOLDER
    source = _Source(data, valid_fraction=valid_fraction, home=home, root=root, progress=show_progress)
    tok = _resolve_tokenizer(tokenizer, source, vocab_size=vocab_size, home=home, progress=show_progress)
    tok_sha = _tokenizer_fingerprint(tok)
    stores, notes = {}, []
    cut = cache_cut_key(tok)  # stores of another rule were built with GPT-2's, wrong for this tokenizer
    for split in splits:
        part = source.parts[split]
        fingerprint = {"text": source.text_sha256(part), "range": [part.start, part.stop], "tokenizer": tok_sha}
        if cut is not None:
            fingerprint["cut"] = cut
        path = source.folder / f"{tok.type}-{tok_sha[:16]}-{source.range_key}-{split}{STORE_SUFFIX}"

        def build(target: Path, part: _Part = part, fingerprint: dict = fingerprint, split: str = split) -> TokenStore:
            with tqdm(total=part.stop - part.start, unit="char", unit_scale=True, desc=f"tokenizing {split}",
                      disable=not show_progress) as bar, \
                    TokenStoreWriter(target, vocab_size=tok.vocab_size) as writer:
                encode_blocks(tok, source.blocks(part), writer, bar=bar)
                source.check_unchanged(source.groups[part.group], source.identities[part.group])
                return writer.finish(fingerprint, {"split": split, "chars": part.stop - part.start})

        t0 = time.perf_counter()
        store, how = open_or_build(path, fingerprint, build, verify=verify)
        notes.append(f"token store {split}: {store.path} ({store.numel():,} ids as {store.dtype.name}; {how} in "
                     f"{time.perf_counter() - t0:.1f} s)")
        stores[split] = store
    return LMStores(tok, stores, dict(source.info), notes)
