"""Streaming tokenization: text that arrives in blocks → ids appended to a token store, in bounded memory.

- :func:`encode_blocks` encodes a stream of text blocks into a
  :class:`~attnkit.data.pipeline.token_store.TokenStoreWriter` and gives exactly the ids that :func:`attnkit.data.pipeline.lm_dataset.encode_corpus` gives for the joined text:
  a :class:`~attnkit.data.tokenizers.char_tokenizer.CharTokenizer` with one numpy lookup per block (any cut is
  exact for characters); a :class:`~attnkit.data.tokenizers.bpe_tokenizer.BPETokenizer` on chunks cut at line
  ends where its pre-tokenization starts afresh (``lm_dataset.cut_rule``; :func:`aligned_segments`, then
  ``lm_dataset._newline_chunks``) encoded by the Rust backend's batch call on all cores (``encode_batch_fast``:
  the ids of ``encode_batch`` without the character offsets); any other tokenizer by ``encode`` on each segment.
- :func:`encode_documents` encodes many short texts (translation sentences) in groups through the batch call and
  appends them as documents.
- :func:`bpe_training_pieces` cuts a stream of blocks into the pieces ``BPETokenizer.train`` cuts one string into,
  so a BPE trained from the stream (``train_from_iterator``) equals the one trained on the whole text.

Axes: ``n`` ids of a block, ``d`` documents of a group.
"""

from __future__ import annotations

import itertools
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer, backend_call, check_encodable
from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.data.tokenizers.tokenizer import Tokenizer

from .lm_dataset import _newline_chunks, cut_rule, last_cut, trailing_blank_start
from .token_store import TokenStoreWriter

__all__ = ["aligned_segments", "bpe_training_pieces", "encode_blocks", "encode_documents", "batch_ids"]

CHUNK_CHARS = 1 << 16  # characters per encode_batch item (the chunk size of encode_corpus)
DOCUMENT_GROUP = 8192  # sentences per encode_batch call
CHAR_SLICE = 1 << 20  # characters per CharTokenizer.encode_array call
GROUP_CHARS = 1 << 20  # characters per BPE batch call (two in flight: their Encoding objects are ~50 bytes an id)


def aligned_segments(blocks: Iterable[str], rule: str | None = "after-non-space") -> Iterator[str]:
    """Re-cut a stream of text blocks at the cuts of ``rule`` (``lm_dataset.next_cut``: the whitespace that ends a
    line, after a non-space character or a word character), so that encoding the segments one by one gives the ids
    of the whole text. Text with no cut yet is carried until one comes (``rule`` None: all of it).
    """
    if rule is None:
        text = "".join(blocks)
        if text:
            yield text
        return
    carry, searched = "", 0  # carry[:searched] holds no cut, whatever follows it
    for block in blocks:
        text = carry + block if carry else block
        cut = last_cut(text, rule, searched)
        if cut <= 0:  # no usable cut yet: only its trailing whitespace may still begin one
            carry, searched = text, trailing_blank_start(text)
            continue
        yield text[:cut]
        carry, searched = text[cut:], 0
    if carry:
        yield carry


def bpe_training_pieces(blocks: Iterable[str], size: int = 1 << 20) -> Iterator[str]:
    """The pieces of about ``size`` characters, each ending just after a newline when one is in reach, that
    ``BPETokenizer.train`` cuts the joined ``blocks`` into (``bpe_tokenizer._chunks_of``): yielded as the blocks
    arrive, never more than a block and a piece in memory."""
    buf, pos = "", 0
    for block in blocks:
        buf = buf[pos:] + block
        pos = 0
        while len(buf) - pos > size:  # more text follows this piece: end it after its last newline, if any
            nl = buf.rfind("\n", pos, pos + size)
            end = nl + 1 if nl > pos else pos + size
            yield buf[pos:end]
            pos = end
    buf = buf[pos:]
    if buf:
        yield buf


def batch_ids(tokenizer: Tokenizer, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Encode ``texts`` with the tokenizer's batch call (all cores for BPE): ``(ids, lengths)``.

    Shape: ``d`` texts → ids ``(n,)`` int64 (the texts' ids one after the other), lengths ``(d,)``.
    """
    if isinstance(tokenizer, BPETokenizer):
        texts = list(texts)
        check_encodable(texts)
        encoded = backend_call("cannot encode the texts", tokenizer.backend.encode_batch_fast, texts,
                               add_special_tokens=False)
        lists = [e.ids for e in encoded]
    else:
        lists = tokenizer.encode_batch(list(texts))
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    ids = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lengths.sum()))
    return ids, lengths


def encode_blocks(tokenizer: Tokenizer, blocks: Iterable[str], writer: TokenStoreWriter, *,
                  bar: Any = None) -> int:
    """Append the ids of the joined ``blocks`` to ``writer`` (the ids of ``encode_corpus`` on the whole text);
    ``bar`` (a tqdm bar) advances by the characters encoded. Returns the number of ids appended.

    Raises ``ValueError`` for text the tokenizer cannot encode (a character outside a character vocabulary).
    """
    start = writer.n_tokens
    if isinstance(tokenizer, CharTokenizer):
        for block in blocks:
            for i in range(0, len(block), CHAR_SLICE):  # encode_array's temporaries are ~25 bytes a character
                writer.append(tokenizer.encode_array(block[i:i + CHAR_SLICE]))
            if bar is not None:
                bar.update(len(block))
        return writer.n_tokens - start
    rule = cut_rule(tokenizer)
    if not isinstance(tokenizer, BPETokenizer):
        for segment in aligned_segments(blocks, rule):
            writer.append(np.asarray(tokenizer.encode(segment), dtype=np.int64))
            if bar is not None:
                bar.update(len(segment))
        return writer.n_tokens - start
    # BPE: groups of chunks go to the Rust batch call (which releases the GIL) from two threads, so the cores stay
    # busy while a group's ids are converted and written and the next text is read; ids are appended in order
    pending: deque = deque()
    with ThreadPoolExecutor(2) as pool:
        for group in _chunk_groups(aligned_segments(blocks, rule), rule):
            pending.append((pool.submit(batch_ids, tokenizer, group), sum(map(len, group))))
            if len(pending) == 2:
                _write_oldest(pending, writer, bar)
        while pending:
            _write_oldest(pending, writer, bar)
    return writer.n_tokens - start


def _chunk_groups(segments: Iterable[str], rule: str | None) -> Iterator[list[str]]:
    """The segments' chunks, cut by ``rule`` (``lm_dataset._newline_chunks``), in groups of :data:`GROUP_CHARS`
    characters or so."""
    group: list[str] = []
    size = 0
    for segment in segments:
        for chunk in _newline_chunks(segment, CHUNK_CHARS, rule):
            group.append(chunk)
            size += len(chunk)
            if size >= GROUP_CHARS:
                yield group
                group, size = [], 0
    if group:
        yield group


def _write_oldest(pending: deque, writer: TokenStoreWriter, bar: Any) -> None:
    future, chars = pending.popleft()
    writer.append(future.result()[0])
    if bar is not None:
        bar.update(chars)


def encode_documents(tokenizer: Tokenizer, texts: Iterable[str], writer: TokenStoreWriter, *,
                     bar: Any = None) -> int:
    """Append each text's ids as one document of ``writer`` (made with ``documents=True``), encoding
    :data:`DOCUMENT_GROUP` texts per batch call; ``bar`` advances by texts. Returns the number of documents."""
    count = 0
    it = iter(texts)
    while group := list(itertools.islice(it, DOCUMENT_GROUP)):
        ids, lengths = batch_ids(tokenizer, group)
        writer.append(ids, lengths)
        count += len(group)
        if bar is not None:
            bar.update(len(group))
    return count
