"""Language-modelling data: text → one long sequence of token ids → (input, target) blocks.

A corpus is encoded once into ``N`` ids: a token store on disk, memory-mapped
(:class:`~attnkit.data.pipeline.token_store.TokenStore`, built streaming by :mod:`attnkit.data.pipeline.lm_store`),
or a 1-D ``LongTensor`` in memory; both index the same way, and a batch converts only its own windows to int64.
A training example is any window of
``T + 1`` consecutive ids (``T`` = ``block_size``): the first ``T`` are the input, the last ``T`` (shifted by one)
are the targets, so every position predicts its next token::

    data  = [ 5, 9, 2, 7, 3, 8, ...]          (N,)
    x     = [ 5, 9, 2, 7]                     (T,)  data[i : i+T]
    y     = [ 9, 2, 7, 3]                     (T,)  data[i+1 : i+T+1]

Axes: ``N`` number of ids in a split, ``B`` batch size, ``T`` block size (context length), ``V`` vocabulary size.

- :func:`encode_corpus` — fast encoding of megabytes of text (numpy lookup for characters, batched Rust
  encoding of newline-aligned chunks for BPE).
- :func:`check_block_length` — a split must hold at least one block (``T + 1`` ids).
- :func:`random_batch` / :func:`batch_at_step` — random windows for training (the latter deterministic in
  ``(seed, step)``); :func:`eval_batches` — non-overlapping (or strided) windows covering a split, for evaluation.
- :func:`prepare_lm_data` — corpus name or path + tokenizer choice → :class:`LMData` (tokenizer, train and valid
  token stores, source info), what ``attnkit train --data ... --tokenizer ...`` needs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

from attnkit.checks import check_int, is_int
from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
from attnkit.files import write_atomic
from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.data.tokenizers.tokenizer import Tokenizer, load_tokenizer

from .token_store import TokenStore

__all__ = [
    "encode_corpus",
    "encode_corpus_cached",
    "check_block_length",
    "random_batch",
    "batch_at_step",
    "eval_batches",
    "num_eval_windows",
    "NOT_SCORED",
    "LMData",
    "build_tokenizer",
    "prepare_lm_data",
    "TOKENIZER_KINDS",
]

TOKENIZER_KINDS = ("char", "bpe", "gpt2")
DEFAULT_BPE_VOCAB = 2048


# Where a corpus may be cut so that encoding the pieces one by one gives the ids of the whole text: at the start of
# the whitespace that ends a line (a run holding "\r" or "\n"), after a character of the rule's kind. Whitespace is
# the tokenizers' regex ``\s`` (Unicode's White_Space): Python's ``isspace`` also counts U+001C..U+001F, which a
# split regex takes for punctuation.
CUT_RULES = ("after-non-space", "after-word")
_WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
_BLANKS = "[" + re.escape(_WHITESPACE.replace("\r", "").replace("\n", "")) + "]*"  # the rest of a line's whitespace
_LINE_END = {"after-non-space": re.compile("(?<=[^" + re.escape(_WHITESPACE) + "])" + _BLANKS + "[\r\n]"),
             "after-word": re.compile("(?<=[^\\W_])" + _BLANKS + "[\r\n]")}  # [^\W_]: letters, digits; see _fits
# Lines with the cut points of both rules (a line ending after punctuation, blanks, CR LF, a digit, a blank line).
_CUT_PROBES = ("Word.\nNext line", "word\nnext", "word \t\nnext", "End.\r\nNext", "end:\n\n  next", "12\r\n34",
               "a,\r\n b", "x!\n\ty", "Zeile\u3000\nweiter", "\u00e9t\u00e9 \n\u00bd", "end\r\nword")


def _fits(rule: str, ch: str) -> bool:
    """Whether a cut may follow the character ``ch`` under ``rule``."""
    if rule == "after-word":
        return unicodedata.category(ch)[0] in "LN"
    return ch not in _WHITESPACE


def next_cut(text: str, start: int, rule: str) -> int:
    """The first cut of ``rule`` at or after ``start`` (the start of the whitespace that ends a line, following a
    non-space character, or for ``"after-word"`` a letter or a digit), or -1."""
    pattern = _LINE_END[rule]
    match = pattern.search(text, start)
    while match is not None and not _fits(rule, text[match.start() - 1]):
        match = pattern.search(text, match.end())
    return -1 if match is None else match.start()


def last_cut(text: str, rule: str, start: int = 0) -> int:
    """The last cut of ``rule`` in ``text`` (see :func:`next_cut`) at or after ``start``, or -1."""
    brk = max(text.rfind("\n", start), text.rfind("\r", start))
    while brk > 0:
        run = brk
        while run > 0 and text[run - 1] in _WHITESPACE:
            run -= 1
        if run > 0 and _fits(rule, text[run - 1]):
            return run if run >= start else -1
        brk = max(text.rfind("\n", start, run), text.rfind("\r", start, run))
    return -1


def trailing_blank_start(text: str) -> int:
    """Where the whitespace at the end of ``text`` begins (``len(text)`` when it ends in another character)."""
    return len(text.rstrip(_WHITESPACE))


def cut_rule(tokenizer: Tokenizer) -> str | None:
    """The cut rule under which ``tokenizer`` encodes pieces exactly as the whole text, or None (no cut is safe).

    GPT-2's split regex (attnkit's BPE, GPT-2, SmolLM) never joins the two sides of a non-space character and the
    whitespace after it: ``"after-non-space"``. Llama 3's keeps a line break with the punctuation before it
    (``".\n"`` is one piece) but not with a letter or a digit: ``"after-word"``. The rule is found by encoding
    probe lines whole and cut; a tokenizer that fails both (one that prepends a marker to every text, say) is not
    cut at all. Nor is a rule used that would cut inside one of the tokenizer's added tokens (``"END\n"``, say).
    """
    added = ([t.content for t in tokenizer.backend.get_added_tokens_decoder().values()]
             if isinstance(tokenizer, BPETokenizer) else [])
    for rule in CUT_RULES:
        if any(next_cut(token, 1, rule) >= 0 for token in added):
            continue
        try:
            if all(_cut_encodes_exactly(tokenizer, probe, rule) for probe in _CUT_PROBES):
                return rule
        except ValueError:  # a character outside the vocabulary: this tokenizer cannot be probed
            return None
    return None


def cache_cut_key(tokenizer: Tokenizer) -> str | None:
    """What a cache key of encoded text adds for the cut rule: None for GPT-2's (``"after-non-space"``, the rule
    every cache was built with before 2026-11-30, so those caches stay valid), else the rule's name (``"None"``:
    not cut). Only a BPE tokenizer is probed; the others encode characters or bytes, which any cut keeps."""
    rule = cut_rule(tokenizer) if isinstance(tokenizer, BPETokenizer) else "after-non-space"
    return None if rule == "after-non-space" else str(rule)


def _cut_encodes_exactly(tokenizer: Tokenizer, text: str, rule: str) -> bool:
    """Whether cutting ``text`` at its first cut of ``rule`` leaves the ids, and for a BPE tokenizer the pieces its
    normalizer and pre-tokenizer make (BPE merges stay inside a piece; without a pre-tokenizer the whole text is
    one piece), as they are for the whole text: the ids alone can agree by chance of the vocabulary."""
    cut = next_cut(text, 1, rule)
    if cut < 0:
        return True
    if isinstance(tokenizer, BPETokenizer):
        backend = tokenizer.backend
        if backend.pre_tokenizer is None:
            return False

        def pieces(part: str) -> list[str]:
            part = part if backend.normalizer is None else backend.normalizer.normalize_str(part)
            return [piece for piece, _ in backend.pre_tokenizer.pre_tokenize_str(part)]

        if pieces(text) != pieces(text[:cut]) + pieces(text[cut:]):
            return False
    return tokenizer.encode(text) == tokenizer.encode(text[:cut]) + tokenizer.encode(text[cut:])


def _newline_chunks(text: str, size: int, rule: str | None = "after-non-space") -> list[str]:
    """Cut ``text`` into ~``size``-character chunks at the cuts of ``rule`` (:func:`next_cut`; None: one chunk),
    so that encoding the chunks separately gives exactly the ids of encoding the whole text.
    """
    chunks, start, n = [], 0, len(text)
    while start < n:
        end = start + size
        cut = next_cut(text, end, rule) if end < n and rule is not None else -1
        if cut <= start:  # the end of the text, or no cut: keep the rest in one piece
            chunks.append(text[start:])
            break
        chunks.append(text[start:cut])
        start = cut
    return chunks


def encode_corpus(tokenizer: Tokenizer, text: str, *, chunk_chars: int = 1 << 16,
                  show_progress: bool = False) -> torch.Tensor:
    """Encode a whole corpus into one tensor of ids.

    ``CharTokenizer``: one vectorised lookup. ``BPETokenizer``: the text is cut into chunks at line ends where
    the tokenizer's pre-tokenization starts afresh (:func:`cut_rule`, :func:`_newline_chunks`) and encoded in
    parallel by ``encode_batch``. Any other tokenizer: ``tokenizer.encode(text)``.

    Shape:
        text of ``N_chars`` characters → ``LongTensor (N,)``.
    """
    if not isinstance(text, str):
        raise ValueError(f"encode_corpus expects a str, got {type(text).__name__}")
    if isinstance(tokenizer, CharTokenizer):
        return torch.from_numpy(tokenizer.encode_array(text))
    if isinstance(tokenizer, BPETokenizer):
        check_int("chunk_chars", chunk_chars, minimum=1)
        chunks = _newline_chunks(text, chunk_chars, cut_rule(tokenizer))
        group = 64  # chunks per encode_batch call (only matters for the progress bar)
        pieces = []
        for i in tqdm(range(0, len(chunks), group), desc="encoding", unit="chunk", unit_scale=group,
                      disable=not show_progress):
            for ids in tokenizer.encode_batch(chunks[i:i + group]):
                pieces.append(np.asarray(ids, dtype=np.int64))
        if not pieces:
            return torch.zeros(0, dtype=torch.long)
        return torch.from_numpy(np.concatenate(pieces))
    return torch.tensor(tokenizer.encode(text), dtype=torch.long)


def _tokenizer_fingerprint(tokenizer: Tokenizer) -> str:
    # "surrogatepass": a character vocabulary may hold a lone surrogate (save_tokenizer keeps it); other
    # tokenizers' bytes, and so their fingerprints and the stores named after them, are what they always were
    blob = json.dumps(tokenizer.to_dict(), sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return hashlib.sha256(blob).hexdigest()


def encode_corpus_cached(tokenizer: Tokenizer, text: str, cache_dir: str | os.PathLike, *,
                         show_progress: bool = False) -> torch.Tensor:
    """:func:`encode_corpus`, remembered on disk as ``cache_dir/<sha256 of tokenizer and text>.npy``.

    BPE-encoding megabytes takes seconds; a second run with the same tokenizer and text loads the ids instead.
    The file is read with ``allow_pickle=False`` and checked (1-D int64, ids in ``[0, V)``) before use.

    Shape:
        text → ``LongTensor (N,)``.
    """
    rule = cache_cut_key(tokenizer)
    cut = "" if rule is None else f"cut={rule}\0"
    raw = text.encode("utf-8", "surrogatepass")  # the text a character vocabulary with a lone surrogate encodes
    key = hashlib.sha256((_tokenizer_fingerprint(tokenizer) + "\0" + cut).encode() + raw).hexdigest()
    path = Path(cache_dir) / f"{key}.npy"
    if path.is_file():
        try:
            arr = np.load(path, allow_pickle=False)
            # the dtype first: min and max of another dtype (a damaged header) may fail or mean nothing
            if arr.ndim == 1 and arr.dtype == np.int64 and (
                    arr.size == 0 or (arr.min() >= 0 and arr.max() < tokenizer.vocab_size)):
                return torch.from_numpy(arr)
        except (OSError, ValueError):
            pass  # unreadable: encode again and overwrite
    ids = encode_corpus(tokenizer, text, show_progress=show_progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    def save(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file object: np.save adds no ".npy" to its name
            np.save(f, ids.numpy(), allow_pickle=False)

    write_atomic(path, save)
    return ids


def check_block_length(data: torch.Tensor | TokenStore, block_size: int, split: str = "train") -> None:
    """Raise ``ValueError`` unless ``data`` is a token store or a 1-D long tensor holding one block
    (``block_size + 1`` ids)."""
    check_int("block_size", block_size, minimum=1)  # not a bool: block_size=True is a bug, not a 1
    if isinstance(data, TokenStore):
        pass
    elif not isinstance(data, torch.Tensor) or data.ndim != 1 or data.dtype != torch.long:
        desc = f"{tuple(data.shape)} {data.dtype}" if isinstance(data, torch.Tensor) else type(data).__name__
        raise ValueError(f"{split} data must be a 1-D torch.long tensor (N,), got {desc}")
    n = data.numel()
    if n < block_size + 1:
        raise ValueError(f"the {split} split has {n} tokens, but block_size={block_size} needs at least "
                         f"{block_size + 1} (block_size + 1); use a smaller block_size or more text")


def random_batch(data: torch.Tensor, block_size: int, batch_size: int, *,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``data``.

    Shape:
        data ``(N,)`` with ``N >= T + 1`` → ``x (B, T)``, ``y (B, T)``: row ``b`` is ``x = data[i : i+T]``,
        ``y = data[i+1 : i+T+1]`` for a random start ``i`` in ``[0, N - T - 1]``.
    """
    check_block_length(data, block_size)
    check_int("batch_size", batch_size, minimum=1)
    T = block_size
    starts = torch.randint(0, data.numel() - T, (batch_size,), generator=generator)  # (B,) in [0, N - T - 1]
    offsets = starts[:, None] + torch.arange(T + 1)  # (B, T + 1)
    window = data[offsets]  # (B, T + 1)
    return window[:, :-1], window[:, 1:]  # (B, T), (B, T)


def batch_at_step(data: torch.Tensor, block_size: int, batch_size: int, *, seed: int,
                  step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Like :func:`random_batch` but a pure function of ``(seed, step)``: resuming at step ``s`` replays batch ``s``.

    Shape:
        data ``(N,)`` → ``x (B, T)``, ``y (B, T)``.
    """
    if not is_int(seed):  # not int(seed): a float seed or step would be cut without a word
        raise ValueError(f"seed must be an int, got {seed!r} ({type(seed).__name__})")
    check_int("step", step, minimum=0)
    g = torch.Generator().manual_seed((int(seed) * 1_000_003 + int(step)) % (2**63 - 1))
    return random_batch(data, block_size, batch_size, generator=g)


NOT_SCORED = -100
"""The target :func:`eval_batches` puts where a strided window does not score a position (an earlier window did):
``cross_entropy``'s ``ignore_index``."""


def _eval_window_starts(data: torch.Tensor | TokenStore, block_size: int, stride: int | None) -> torch.Tensor:
    """Where the evaluation windows start: ``0, T, 2T, …`` (``n = (N - 1) // T`` windows; the evaluated targets
    are ids ``1 … nT``), or with a ``stride`` ``s`` (``1 <= s <= T``) ``0, s, 2s, …`` up to ``(n - 1)T`` (the last
    window ending on target ``nT``), plus a window starting at ``(n - 1)T`` when the strides step over it; shape
    ``(windows,)``."""
    check_int("block_size", block_size, minimum=1)
    T = block_size
    n = (data.numel() - 1) // T
    if stride is None or (is_int(stride) and stride == T):
        return torch.arange(n) * T  # (n,)
    if not is_int(stride) or not 1 <= stride <= T:
        raise ValueError(f"stride must be an int from 1 to the window length {T}, got {stride!r}")
    last = (n - 1) * T  # the start of the window that ends on the last evaluated target
    return torch.arange(0, last + stride, stride).clamp(max=last)  # (1 + ceil(last / stride),)


def num_eval_windows(data: torch.Tensor, block_size: int, stride: int | None = None) -> int:
    """How many ``T + 1``-id windows :func:`eval_batches` yields: ``(N - 1) // T`` non-overlapping ones, or with a
    ``stride`` ``s`` ``1 + ceil((n - 1)T / s)`` (``n = (N - 1) // T``)."""
    check_block_length(data, block_size, "eval")
    return int(_eval_window_starts(data, block_size, stride).numel())


def eval_batches(data: torch.Tensor, block_size: int, batch_size: int, *, max_windows: int | None = None,
                 stride: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Non-overlapping windows starting at ``0, T, 2T, …`` covering the split (every target id once, except a
    tail shorter than ``T``), in batches; the last batch may be smaller. ``max_windows`` caps the number of
    windows (evenly spread over the split) for a quick estimate.

    ``stride`` ``s`` (``1 <= s <= T``; None or ``T``: the non-overlapping windows, unchanged): strided evaluation
    of the same targets (ids ``1 … nT``, ``n = (N - 1) // T``), as in Hugging Face's "Perplexity of fixed-length
    models". The windows, each ``T`` long, start at ``0, s, 2s, …`` (:func:`num_eval_windows`); the first scores
    all its ``T`` targets, every later one only the targets past the previous window's end (its last ``s``; fewer
    for the last window, moved back to end on target ``nT``), so the scored targets of all windows partition the
    evaluated ones and each target after the first window is predicted from at least ``T - s + 1`` ids. A target
    a window does not score is :data:`NOT_SCORED` in ``y``. E.g. ``T = 4``, ``N = 12`` (targets 1–8), ``s = 3``:
    windows at 0, 3, 4 score targets 1–4, 5–7, 8. With ``max_windows`` the chosen windows keep their scored
    targets.

    Shape:
        data ``(N,)`` → yields ``x (B', T)``, ``y (B', T)`` with ``B' <= batch_size``.
    """
    check_int("batch_size", batch_size, minimum=1)
    T = block_size
    check_block_length(data, T, "eval")
    starts = _eval_window_starts(data, T, stride)  # (n,)
    scored = torch.diff(starts, prepend=starts.new_tensor([-T]))  # (n,) targets each window scores, its last ones
    n = starts.numel()
    if max_windows is not None:
        if isinstance(max_windows, bool) or not isinstance(max_windows, int) or max_windows < 1:
            raise ValueError(f"max_windows must be an int >= 1 or None, got {max_windows!r}")
        if max_windows < n:
            keep = torch.linspace(0, n - 1, max_windows).round().long()  # (max_windows,)
            starts, scored = starts[keep], scored[keep]
    for i in range(0, starts.numel(), batch_size):
        s = starts[i:i + batch_size]  # (B',)
        window = data[s[:, None] + torch.arange(T + 1)]  # (B', T + 1)
        x, y = window[:, :-1], window[:, 1:]
        m = scored[i:i + batch_size]  # (B',)
        if bool((m < T).any()):
            y = y.masked_fill(torch.arange(T) < T - m[:, None], NOT_SCORED)  # (B', T): the first T - m not scored
        yield x, y


def build_tokenizer(kind: str | os.PathLike | Tokenizer, texts: list[str], *, vocab_size: int | None = None,
                    home: str | os.PathLike | None = None) -> Tokenizer:
    """Make the tokenizer for an LM run.

    Args:
        kind: ``"char"`` (vocabulary from all of ``texts`` — pass train and valid so valid can be encoded),
            ``"bpe"`` (byte-level BPE trained on ``texts[0]``, the train text, with ``<|endoftext|>`` as special
            token 0 and eos; ``vocab_size`` default 2048), ``"gpt2"`` (GPT-2's 50257-token BPE), a path to a
            tokenizer JSON written by ``save_tokenizer``, or a ready ``Tokenizer``.
        texts: ``[train_text, valid_text]``.
        home: cache folder for the GPT-2 ranks (default ``$ATTNKIT_HOME``).
    """
    if isinstance(kind, Tokenizer):
        return kind
    if kind == "char":
        return CharTokenizer.train(texts)
    if kind == "bpe":
        V = DEFAULT_BPE_VOCAB if vocab_size is None else vocab_size
        return BPETokenizer.train(texts[0], V, special_tokens=["<|endoftext|>"])
    if kind == "gpt2":
        from attnkit.data.tokenizers.gpt2_tokenizer import gpt2_tokenizer

        return gpt2_tokenizer(home=home)
    if isinstance(kind, (str, os.PathLike)) and (Path(kind).is_file() or Path(kind).is_dir()):
        return load_tokenizer(kind)  # a folder: "is a folder, not a file"
    raise ValueError(f"tokenizer must be one of {TOKENIZER_KINDS}, a tokenizer JSON file or a Tokenizer, got {kind!r}")


@dataclass
class LMData:
    """Everything an LM training run needs from the data side.

    ``notes``: one line per token store (where it is, reused or built); empty for tensors.

    Shape:
        ``train (N_train,)``, ``valid (N_valid,)``: token stores (or ``torch.long`` tensors) of ids in ``[0, V)``,
        ``V = tokenizer.vocab_size``.
    """

    tokenizer: Tokenizer
    train: torch.Tensor | TokenStore
    valid: torch.Tensor | TokenStore
    block_size: int
    source_info: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_block_length(self.train, self.block_size, "train")
        check_block_length(self.valid, self.block_size, "valid")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size


def prepare_lm_data(data: str | os.PathLike, tokenizer: str | os.PathLike | Tokenizer = "char", *, block_size: int,
                    vocab_size: int | None = None, valid_fraction: float = 0.1, home: str | os.PathLike | None = None,
                    cache: bool = True, show_progress: bool = False, verify: bool = True) -> LMData:
    """Recipe name or local path → tokenizer + encoded train/valid ids, validated against ``block_size``.

    With ``cache`` (default) the ids are token stores in ``$ATTNKIT_HOME/token_store/``, built streaming in
    bounded memory and reused while the text and the tokenizer are the same
    (:func:`attnkit.data.pipeline.lm_store.open_lm_stores`; ``verify``: check a reused store's checksums).
    ``cache=False`` reads the text and encodes it into tensors in memory (small corpora, tests).

    Shape:
        returns :class:`LMData` with ``train (N_train,)`` and ``valid (N_valid,)``, both ``>= block_size + 1``.
    """
    if cache:
        from .lm_store import open_lm_stores

        got = open_lm_stores(data, tokenizer, vocab_size=vocab_size, valid_fraction=valid_fraction, home=home,
                             verify=verify, show_progress=show_progress)
        train, valid = got.stores["train"], got.stores["valid"]
        info = dict(got.source_info, tokenizer=got.tokenizer.type, vocab_size=got.tokenizer.vocab_size,
                    train_tokens=train.numel(), valid_tokens=valid.numel())
        return LMData(tokenizer=got.tokenizer, train=train, valid=valid, block_size=block_size, source_info=info,
                      notes=got.notes)
    from attnkit.data.corpora.text import load_text_corpus

    train_text, valid_text, info = load_text_corpus(data, valid_fraction=valid_fraction, home=home)
    tok = build_tokenizer(tokenizer, [train_text, valid_text], vocab_size=vocab_size, home=home)
    train = encode_corpus(tok, train_text, show_progress=show_progress)
    valid = encode_corpus(tok, valid_text, show_progress=show_progress)
    info = dict(info, tokenizer=tok.type, vocab_size=tok.vocab_size, train_tokens=train.numel(),
                valid_tokens=valid.numel())
    return LMData(tokenizer=tok, train=train, valid=valid, block_size=block_size, source_info=info)
