"""Translation pairs in a token store: encoded once, read by the batches from the memory map.

:func:`encode_pairs_stored` is :func:`attnkit.data.pipeline.mt_batching.encode_pairs` for corpora of millions of
pairs. Python lists of ids cost some 36 bytes per id (a pointer and, above 256, an int object); here the ids of
every source and then every target sentence go into one :class:`~attnkit.data.pipeline.token_store.TokenStore`
(one document per sentence: the store's document offsets are the per-sentence index), encoded in groups through
the tokenizer's batch call on all cores, and :func:`~attnkit.data.pipeline.mt_batching.collate` gathers each
batch's ids from the map. The length limits are applied when the pairs are read, not stored: the same store
serves any ``max_len``.

The store is ``$ATTNKIT_HOME/token_store/pairs/<key>.tokens``, ``key`` = sha256 of the sentences and of the
tokenizer: a changed text or tokenizer is another store; a damaged one is built again.

Axes: ``N`` pairs, ``M`` ids in the store.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from attnkit.data.tokenizers.tokenizer import Tokenizer

from .lm_dataset import _tokenizer_fingerprint
from .mt_batching import EncodedPairs, check_pair_inputs, too_long
from .store_encoding import encode_documents
from .token_store import STORE_SUFFIX, TokenStore, TokenStoreWriter, open_or_build

__all__ = ["encode_pairs_stored", "pairs_sha256"]


def pairs_sha256(sources: Sequence[str], targets: Sequence[str]) -> str:
    """sha256 of the pairs (their count, then every source, then every target, each closed by a NUL byte).

    Inside a text, byte 0x01 is written 0x01 0x01 and a NUL 0x01 0x02, so a NUL in a text cannot pass for the end
    of one (``["a\\0", "b"]`` and ``["a", "\\0b"]`` differ); a text without either byte is hashed as it is.
    """
    h = hashlib.sha256(f"{len(sources)}:{len(targets)}\0".encode())
    for side in (sources, targets):
        for text in side:
            raw = text.encode("utf-8", "surrogatepass")
            if b"\0" in raw or b"\1" in raw:
                raw = raw.replace(b"\1", b"\1\1").replace(b"\0", b"\1\2")
            h.update(raw + b"\0")
    return h.hexdigest()


def encode_pairs_stored(tokenizer: Tokenizer, sources: Sequence[str], targets: Sequence[str], *, max_src_len: int,
                        max_tgt_len: int | None = None, truncate: bool = True,
                        cache_dir: str | os.PathLike | None = None, verify: bool = True,
                        show_progress: bool = False, where: Callable[[int], str] | None = None) -> EncodedPairs:
    """The pairs of :func:`~attnkit.data.pipeline.mt_batching.encode_pairs` (same ids, same cuts, same errors),
    read from a token store built on first use (see the module docstring).

    Shape:
        ``N`` strings each → :class:`EncodedPairs` with ``N`` pairs over a store of ``M`` ids.
    """
    max_tgt_len, ids = check_pair_inputs(tokenizer, sources, targets, max_src_len, max_tgt_len)
    if cache_dir is None:
        from attnkit.data.fetch import attnkit_home

        cache_dir = attnkit_home() / "token_store" / "pairs"
    fingerprint = {"pairs": pairs_sha256(sources, targets), "tokenizer": _tokenizer_fingerprint(tokenizer)}
    key = hashlib.sha256(repr(sorted(fingerprint.items())).encode()).hexdigest()[:32]

    def build(path: Path) -> TokenStore:
        with tqdm(total=2 * len(sources), unit="sentence", unit_scale=True, desc="tokenizing pairs",
                  disable=not show_progress) as bar, \
                TokenStoreWriter(path, vocab_size=tokenizer.vocab_size, documents=True) as writer:
            encode_documents(tokenizer, sources, writer, bar=bar)
            encode_documents(tokenizer, targets, writer, bar=bar)
            return writer.finish(fingerprint, {"pairs": len(sources)})

    store, _ = open_or_build(Path(cache_dir) / f"{key}{STORE_SUFFIX}", fingerprint, build, verify=verify)
    if store.n_docs != 2 * len(sources):
        raise ValueError(f"token store {store.path} holds {store.n_docs} sentences, expected {2 * len(sources)}")
    n = len(sources)
    offsets = np.asarray(store.doc_offsets, dtype=np.int64)  # (2N + 1,)
    raw = np.diff(offsets)  # (2N,) ids per sentence
    src_raw, tgt_raw = raw[:n], raw[n:]
    cut_src, cut_tgt = src_raw + 1 > max_src_len, tgt_raw + 1 > max_tgt_len
    if not truncate and (cut_src.any() or cut_tgt.any()):
        i_src = int(np.argmax(cut_src)) if cut_src.any() else n
        i_tgt = int(np.argmax(cut_tgt)) if cut_tgt.any() else n
        where = where or (lambda i: f"pair {i}")
        if i_src <= i_tgt:
            raise too_long(where(i_src), "source", int(src_raw[i_src]) + 1, "<eos>", "max_src_len", max_src_len)
        raise too_long(where(i_tgt), "target", int(tgt_raw[i_tgt]) + 1, "<bos>", "max_tgt_len", max_tgt_len)
    content = hashlib.sha256(f"{store.content_id}:{max_src_len}:{max_tgt_len}".encode()).hexdigest()[:32]
    return EncodedPairs.from_ragged(
        store, (offsets[:n], np.minimum(src_raw + 1, max_src_len)),
        (offsets[n:2 * n], np.minimum(tgt_raw, max_tgt_len - 1)),
        n_truncated_src=int(cut_src.sum()), n_truncated_tgt=int(cut_tgt.sum()), content_id="store:" + content, **ids)
