"""From sentence pairs to padded translation batches: joint BPE, encoding, token-budget bucketing, masks.

Axis legend: ``B`` sentence pairs in a batch, ``S`` source length (padded), ``T`` target length (padded),
``N`` pairs in a corpus, ``V`` vocabulary.

The pipeline::

    pairs ──train_joint_bpe──▶ one tokenizer for both languages (<pad>=0 <bos>=1 <eos>=2 <unk>=3)
          ──encode_pairs─────▶ EncodedPairs (source ids + <eos>; target ids), over-long sides truncated or refused
          ──plan_batches─────▶ lists of pair indices, each batch within a token budget
          ──collate──────────▶ MTBatch: padded tensors and padding masks

What one pair becomes (``▁`` marks padding)::

    src     Er  lobte  ihre  Kochkunst  .  <eos>  ▁      (B, S)   source ids + <eos>
    tgt_in  <bos>  He  praised  her  cooking  .   ▁      (B, T)   decoder input: <bos> + target
    labels  He  praised  her  cooking  .  <eos>   -100   (B, T)   what each position must predict

so position ``t`` of the decoder sees ``tgt_in[:t+1]`` and predicts ``labels[t]``. Padding positions of
``labels`` hold :data:`IGNORE_INDEX` (-100, ``cross_entropy``'s default ``ignore_index``), never a real id,
so the loss cannot count them even if the text contained a literal ``"<pad>"``.

Padding masks follow torch.nn: bool, ``True`` = padding (may not be attended to). They are built from the
sentence lengths, not by comparing ids with ``pad_id``.

**Token budget.** A batch's size is ``B × max(S, T)``: the number of positions of the larger of its two
padded tensors (fairseq's convention; the batch holds at most ``2 × max_tokens`` padded positions in all).
Pairs are sorted by length, so a batch holds pairs of similar lengths
and little padding, and consecutive pairs are packed greedily while ``B × max(S, T) <= max_tokens``.
Short sentences thus make wide batches and long ones narrow batches of about the same cost.

**Fixed shapes** (``multiple > 1``, for CUDA graphs, which replay one recorded shape). Each pair's width
``max(S, T)`` is rounded up to a multiple of ``multiple`` (at most the corpus's longest width) and pairs are
packed by that rounded width ``W``; :func:`collate` then pads both sides to ``W`` and the rows to
``max_tokens // W`` (rows of padding only: no labels, ``index`` -1), or to the number of pairs of rounded width at
most ``W`` when the corpus has fewer (no batch of width ``W`` can hold more, and a budget larger than the corpus
must not become rows of padding only). Every batch thus has one of about ``longest / multiple`` shapes
``(rows(W), W)``, at the price of more padding.

**Determinism.** The plan for epoch ``e`` is a pure function of ``(seed, e)``: pairs of equal lengths are
shuffled before the (stable) length sort, and the batch order is shuffled. The sequence of sorted lengths
does not depend on the shuffle, so every epoch has the same number of batches with the same shapes (and the
same padding ratio); only which pairs and which order change. Batch ``step`` of a run is therefore batch
``step % n_batches`` of epoch ``step // n_batches``.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from attnkit.checks import check_int, is_int
from attnkit.data.tokenizers.tokenizer import Tokenizer

__all__ = [
    "MT_SPECIAL_TOKENS",
    "IGNORE_INDEX",
    "BT_TAG",
    "train_joint_bpe",
    "tag_sources",
    "EncodedPairs",
    "encode_pairs",
    "MTBatch",
    "collate",
    "plan_batches",
    "rounded_widths",
    "TokenBudgetBatcher",
]

# Joint vocabulary specials, in id order: <pad>=0, <bos>=1, <eos>=2, <unk>=3.
MT_SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
IGNORE_INDEX = -100
# The tag of back-translated pairs (tagged back-translation, Caswell et al. 2019): written before each synthetic
# source, it tells the model which sources are machine translations. With synthetic pairs the joint BPE has it
# as its special token id 4 (after MT_SPECIAL_TOKENS), so it is one id, never split, matched in the text.
BT_TAG = "<bt>"


def train_joint_bpe(sources: Sequence[str], targets: Sequence[str], vocab_size: int = 8000, *,
                    min_frequency: int = 2, extra_specials: Sequence[str] = ()) -> Tokenizer:
    """Train one byte-level BPE on both languages, with :data:`MT_SPECIAL_TOKENS` as ids 0..3 and
    ``extra_specials`` (e.g. ``(BT_TAG,)``) as the ids after them.

    A joint vocabulary lets source and target share embeddings (``share_embeddings=True``): names, numbers
    and cognates ("Computer", "Film") get the same ids on both sides. Byte-level BPE round-trips exactly
    (``decode(encode(s)) == s``), which matters because BLEU is computed on detokenized text. A special token
    written in a text is encoded as its one id (``encode("<bt>Das Haus") == [4] + encode("Das Haus")``).
    """
    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer, check_encodable_text

    _check_sentences(sources, targets, "train_joint_bpe")
    for side, texts in (("source", sources), ("target", targets)):
        for i, text in enumerate(texts):  # named here: the trainer sees sources and targets as one stream
            if not isinstance(text, str):
                raise ValueError(f"train_joint_bpe expects strings, {side} {i} is {type(text).__name__}")
            check_encodable_text(text, f"{side} {i}")
    if len(sources) != len(targets):
        raise ValueError(f"train_joint_bpe needs as many sources as targets, got {len(sources)} and {len(targets)}")
    if not sources:
        raise ValueError("train_joint_bpe needs at least one sentence pair, got 0")
    if isinstance(extra_specials, (str, bytes)):  # its characters would become special tokens ("b", "t", ...)
        raise ValueError(f"extra_specials must be a list of token strings, e.g. [{extra_specials!r}], got the "
                         f"{type(extra_specials).__name__} {extra_specials!r}")
    specials = list(MT_SPECIAL_TOKENS) + [t for t in extra_specials if t not in MT_SPECIAL_TOKENS]
    tok = BPETokenizer.train(itertools.chain(sources, targets), vocab_size, special_tokens=specials,
                             min_frequency=min_frequency, pad="<pad>", bos="<bos>", eos="<eos>", unk="<unk>")
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    return tok


def tag_sources(sources: Sequence[str], tag: str = BT_TAG) -> list[str]:
    """Each source with ``tag`` written before it (no space: the tag is a special token, matched as one id, and the
    sentence after it is encoded as if it stood alone)."""
    return [tag + s for s in sources]


# ---------------------------------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class EncodedPairs:
    """``N`` tokenized pairs ready for batching.

    ``src[i]``: source ids ending with ``<eos>`` (the encoder input). ``tgt[i]``: target ids *without* specials;
    :func:`collate` frames them as ``<bos> + tgt`` (decoder input) and ``tgt + <eos>`` (labels).
    ``n_truncated_src`` / ``n_truncated_tgt``: how many sides were cut to fit the length limits.

    Lists in memory, or (:meth:`from_ragged`, e.g. :func:`attnkit.data.pipeline.mt_store.encode_pairs_stored`)
    read-only views of flat id arrays such as a token store's memory map: then ``src[i]`` / ``tgt[i]`` are built
    on demand and :func:`collate` gathers straight from the arrays; ``content_id`` names the ids.
    """

    src: Sequence[list[int]]
    tgt: Sequence[list[int]]
    pad_id: int
    bos_id: int
    eos_id: int
    n_truncated_src: int = 0
    n_truncated_tgt: int = 0
    content_id: str | None = None

    def __post_init__(self) -> None:
        if len(self.src) != len(self.tgt):
            raise ValueError(f"EncodedPairs needs as many sources as targets, got {len(self.src)} and {len(self.tgt)}")

    @classmethod
    def from_ragged(cls, flat: Any, src: tuple[np.ndarray, np.ndarray], tgt: tuple[np.ndarray, np.ndarray], *,
                    pad_id: int, bos_id: int, eos_id: int, n_truncated_src: int = 0, n_truncated_tgt: int = 0,
                    content_id: str | None = None) -> "EncodedPairs":
        """Pairs read from one flat id array (or a :class:`~attnkit.data.pipeline.token_store.TokenStore`, which
        indexes like one): source ``i`` is ``flat[o : o + n - 1]`` then ``<eos>`` for
        ``(o, n) = (src[0][i], src[1][i])`` (``n`` counts the ``<eos>``, which need not be in ``flat``); target
        ``i`` is ``flat[o : o + n]`` for ``(o, n) = (tgt[0][i], tgt[1][i])``.

        Shape: ``flat (M,)`` (at least one id); offsets and lengths ``(N,)`` each.
        """
        flat = flat if len(flat) else np.full(1, pad_id, dtype=np.int64)
        sides = (_Ragged(flat, *(np.asarray(a, dtype=np.int64) for a in src)),
                 _Ragged(flat, *(np.asarray(a, dtype=np.int64) for a in tgt)))
        pairs = cls(_RaggedView(sides[0], eos_id), _RaggedView(sides[1], None), pad_id, bos_id, eos_id,
                    n_truncated_src, n_truncated_tgt, content_id)
        pairs.__dict__["_ragged"] = sides  # the cached property, set: the views are not converted back
        return pairs

    def __len__(self) -> int:
        return len(self.src)

    @property
    def src_lens(self) -> np.ndarray:
        """``(N,)`` encoder input lengths (with ``<eos>``)."""
        return self._ragged[0].lengths.copy()

    @property
    def tgt_lens(self) -> np.ndarray:
        """``(N,)`` decoder input / label lengths (target + one special token)."""
        return self._ragged[1].lengths + 1

    @functools.cached_property
    def _ragged(self) -> "tuple[_Ragged, _Ragged]":
        """Both sides as flat id arrays (built on first use; the pairs are not meant to change afterwards)."""
        return _Ragged.of(self.src, self.pad_id), _Ragged.of(self.tgt, self.pad_id)


class _Ragged(NamedTuple):
    """One side of a corpus as a flat id array: sequence ``i`` is ``flat[offsets[i] : offsets[i] + lengths[i]]``;
    ``flat`` ends with one extra padding id, which out-of-range reads are clipped to."""

    flat: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray

    @staticmethod
    def of(sequences: Sequence[Sequence[int]], pad_id: int) -> "_Ragged":
        lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))
        flat = np.fromiter(itertools.chain(itertools.chain.from_iterable(sequences), (pad_id,)), dtype=np.int64,
                           count=int(lengths.sum()) + 1)
        offsets = np.zeros(len(sequences), dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        return _Ragged(flat, offsets, lengths)

    def gather(self, rows: np.ndarray, width: int) -> np.ndarray:
        """``(B, width)`` int64: position ``j`` of row ``b`` holds id ``j`` of sequence ``rows[b]``, or whatever
        lies there in ``flat`` past the sequence's end (the caller masks those positions)."""
        pos = self.offsets[np.maximum(rows, 0)][:, None] + np.arange(width)[None, :]  # (B, width)
        return np.asarray(self.flat[np.minimum(pos, len(self.flat) - 1)], dtype=np.int64)


class _RaggedView(Sequence):
    """The sequences of a :class:`_Ragged` as lists, made when asked for (``eos``: replaces each one's last id,
    as a source's ``<eos>`` that the flat array does not hold)."""

    def __init__(self, ragged: _Ragged, eos: int | None):
        self._ragged, self._eos = ragged, eos

    def __len__(self) -> int:
        return len(self._ragged.lengths)

    def _one(self, i: int) -> list[int]:
        start, n = int(self._ragged.offsets[i]), int(self._ragged.lengths[i])
        if self._eos is None:
            return self._ragged.flat[start:start + n].tolist()
        return self._ragged.flat[start:start + n - 1].tolist() + [self._eos]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._one(i) for i in range(*index.indices(len(self)))]
        i = operator.index(index)
        if not -len(self) <= i < len(self):
            raise IndexError(f"pair index {i} out of range for {len(self)} pairs")
        return self._one(i % len(self))


def _check_sentences(sources: Any, targets: Any, what: str) -> None:
    """``ValueError`` when ``sources`` or ``targets`` is one ``str``: its characters would be taken as sentences."""
    for side, texts in (("sources", sources), ("targets", targets)):
        if isinstance(texts, (str, bytes)):
            raise ValueError(f"{what} expects {side} as a list of sentences, got one {type(texts).__name__} "
                             f"({texts[:40]!r}); pass [sentence] for one")


def _check_limit(name: str, value: int) -> None:
    if not is_int(value) or value < 2:
        raise ValueError(f"{name} must be an int >= 2 (one token plus <bos>/<eos>), got {value!r}")


def check_pair_inputs(tokenizer: Tokenizer, sources: Sequence[str], targets: Sequence[str], max_src_len: int,
                      max_tgt_len: int | None) -> tuple[int, dict[str, int]]:
    """The checks of :func:`encode_pairs`' arguments; returns ``max_tgt_len`` (default ``max_src_len``) and the
    tokenizer's ``{"pad_id", "bos_id", "eos_id"}``."""
    _check_sentences(sources, targets, "encode_pairs")
    max_tgt_len = max_src_len if max_tgt_len is None else max_tgt_len
    _check_limit("max_src_len", max_src_len)
    _check_limit("max_tgt_len", max_tgt_len)
    if len(sources) != len(targets):
        raise ValueError(f"encode_pairs needs as many sources as targets, got {len(sources)} and {len(targets)}")
    ids = {"pad_id": tokenizer.pad_id, "bos_id": tokenizer.bos_id, "eos_id": tokenizer.eos_id}
    missing = [k for k, v in ids.items() if v is None]
    if missing:
        raise ValueError(f"translation needs a tokenizer with pad, bos and eos tokens; {tokenizer!r} lacks {missing}")
    return max_tgt_len, ids


def _pair_number(i: int) -> str:
    return f"pair {i}"


def too_long(where: str, side: str, n: int, marker: str, limit_name: str, limit: int) -> ValueError:
    """The error of a sentence longer than the model allows (``encode_pairs`` and the token store's reader)."""
    return ValueError(f"{where}: the {side} is {n} tokens with {marker}, longer than {limit_name} = {limit} "
                      f"(truncate=True cuts it instead)")


def _fit(ids: list[int], limit: int, truncate: bool, where: Callable[[int], str], i: int, side: str, marker: str,
         limit_name: str) -> int:
    """Cut ``ids`` in place so that with its one special token (``marker``) it holds at most ``limit`` tokens;
    returns 1 if it was cut, 0 if not. Without ``truncate`` an over-long sentence (pair ``i``'s ``side``) raises
    ``ValueError``."""
    if len(ids) + 1 <= limit:
        return 0
    if not truncate:
        raise too_long(where(i), side, len(ids) + 1, marker, limit_name, limit)
    del ids[limit - 1:]
    return 1


def encode_pairs(tokenizer: Tokenizer, sources: Sequence[str], targets: Sequence[str], *, max_src_len: int,
                 max_tgt_len: int | None = None, truncate: bool = True,
                 where: Callable[[int], str] | None = None) -> EncodedPairs:
    """Tokenize pairs for translation, enforcing the model's length limits.

    Args:
        tokenizer: has ``pad_id``, ``bos_id`` and ``eos_id`` (e.g. from :func:`train_joint_bpe`).
        sources, targets: ``N`` aligned sentences.
        max_src_len: longest encoder input the model allows, ``<eos>`` included (e.g. ``config.max_len``).
        max_tgt_len: longest decoder input the model allows, ``<bos>`` included; defaults to ``max_src_len``.
        truncate: ``True`` cuts an over-long side (keeping its first tokens, then ``<eos>``) and counts it in
            ``n_truncated_src``/``n_truncated_tgt``; ``False`` raises ``ValueError`` naming the pair.
        where: how that error names pair ``i`` (e.g. its file and line,
            :meth:`~attnkit.data.corpora.parallel.ParallelCorpus.where`); default ``"pair i"``.

    Shape:
        ``N`` strings each → :class:`EncodedPairs` with ``N`` pairs; ``len(src[i]) <= max_src_len``,
        ``len(tgt[i]) + 1 <= max_tgt_len``.
    """
    max_tgt_len, ids = check_pair_inputs(tokenizer, sources, targets, max_src_len, max_tgt_len)
    eos = ids["eos_id"]
    src_ids, tgt_ids = tokenizer.encode_batch(list(sources)), tokenizer.encode_batch(list(targets))
    n_cut_src = n_cut_tgt = 0
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        n_cut_src += _fit(s, max_src_len, truncate, (where or _pair_number), i, "source", "<eos>", "max_src_len")
        n_cut_tgt += _fit(t, max_tgt_len, truncate, (where or _pair_number), i, "target", "<bos>", "max_tgt_len")
        s.append(eos)
    return EncodedPairs(src_ids, tgt_ids, n_truncated_src=n_cut_src, n_truncated_tgt=n_cut_tgt, **ids)


# ---------------------------------------------------------------------------------------------------------------
# one batch
# ---------------------------------------------------------------------------------------------------------------
class MTBatch(NamedTuple):
    """One padded translation batch (a NamedTuple, so the trainer's ``move_to_device`` moves every tensor).

    Shape:
        src ``(B, S)`` long; tgt_in, labels ``(B, T)`` long; src_key_padding_mask ``(B, S)`` bool;
        tgt_key_padding_mask ``(B, T)`` bool (True = padding); index ``(B,)`` long, the pairs' positions in
        the corpus (to fetch reference sentences).

    ``n_tokens`` (the number of labels that are not padding) and ``max_label`` (the largest label id) are plain
    ints counted on the host when the batch is made, so that the loss can weight and check the batch without
    reading anything back from a GPU (each read waits for the device to finish its queue).
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    labels: torch.Tensor
    src_key_padding_mask: torch.Tensor
    tgt_key_padding_mask: torch.Tensor
    index: torch.Tensor
    n_tokens: int
    max_label: int

    @staticmethod
    def from_tensors(src: torch.Tensor, tgt_in: torch.Tensor, labels: torch.Tensor, src_key_padding_mask: torch.Tensor,
                     tgt_key_padding_mask: torch.Tensor, index: torch.Tensor) -> "MTBatch":
        """An MTBatch whose counts are taken from ``labels`` (read once, on the host: pass CPU tensors)."""
        real = labels[labels != IGNORE_INDEX]
        return MTBatch(src, tgt_in, labels, src_key_padding_mask, tgt_key_padding_mask, index,
                       int(real.numel()), int(real.max()) if real.numel() else IGNORE_INDEX)

    def to(self, device: torch.device | str) -> "MTBatch":
        return self._replace(**{k: v.to(device) for k, v in self._asdict().items() if isinstance(v, torch.Tensor)})

    def take_rows(self, start: int, stop: int) -> "MTBatch":
        """Rows ``start:stop`` of every tensor, with the counts of those rows (one process's share of the batch)."""
        return MTBatch.from_tensors(*(t[start:stop] for t in self if isinstance(t, torch.Tensor)))


def collate(data: EncodedPairs, indices: Sequence[int], *, shape: tuple[int, int] | None = None) -> MTBatch:
    """Pad the pairs ``indices`` of ``data`` into an :class:`MTBatch`.

    ``shape``: ``(rows, width)`` to pad to instead (fixed shapes, see the module docstring): both sides get
    ``width`` positions and ``rows - len(indices)`` rows of padding only are appended (no labels, ``index`` -1).

    The ids are gathered from each side's flat id array (``EncodedPairs._ragged``, built on first use) with one
    vectorised index per tensor, and the masks come from the lengths: no Python loop per pair (a GPU's host must
    build each batch within one update; ``benchmarks/mt_batch_build.py``).

    Shape:
        ``B = len(indices)``; ``S`` = longest source (with ``<eos>``), ``T`` = longest target + 1; with ``shape``,
        ``B = rows`` and ``S = T = width``.
    """
    if isinstance(indices, np.ndarray) and indices.dtype.kind in "iu":  # a plan's batch: ints already
        indices = indices.tolist()
    else:  # not int(i): a float index would be cut to another pair without a word
        checked = []
        for i in indices:
            try:
                if isinstance(i, (bool, np.bool_)):
                    raise TypeError
                checked.append(operator.index(i))
            except TypeError:
                raise ValueError(f"collate needs integer pair indices, got {i!r} ({type(i).__name__})") from None
        indices = checked
    if not indices:
        raise ValueError("collate needs at least one pair index, got an empty list")
    if min(indices) < 0 or max(indices) >= len(data):
        raise ValueError(f"pair indices must be in [0, {len(data)}), got min {min(indices)} max {max(indices)}")
    n_pairs = len(indices)
    if shape is not None:
        if not isinstance(shape, (tuple, list)) or len(shape) != 2:
            raise ValueError(f"collate shape must be (rows, width), got {shape!r}")
        rows_wanted, width = (check_int(f"collate shape {k}", v, minimum=1) for k, v in zip(("rows", "width"), shape))
        if rows_wanted < n_pairs:
            raise ValueError(f"collate shape rows must be >= the {n_pairs} pairs, got {rows_wanted}")
        indices = indices + [-1] * (rows_wanted - n_pairs)
    rows = np.asarray(indices, dtype=np.int64)  # (B,) -1 = a row of padding only
    real = rows >= 0
    sides = data._ragged
    src_len = np.where(real, sides[0].lengths[np.maximum(rows, 0)], 0)  # (B,) with <eos>
    tgt_len = np.where(real, sides[1].lengths[np.maximum(rows, 0)], 0)  # (B,) without specials
    S = int(src_len.max()) if shape is None else width
    T = int(tgt_len.max()) + 1 if shape is None else width
    longest = max(int(src_len.max()), int(tgt_len.max()) + 1)
    if shape is not None and width < longest:
        raise ValueError(f"collate shape width must be >= the longest side of these pairs ({longest}), got {width}")
    js, jt = np.arange(S)[None, :], np.arange(T)[None, :]  # (1, S), (1, T)
    src_pad = js >= src_len[:, None]  # (B, S) True = padding
    src = np.where(src_pad, data.pad_id, sides[0].gather(rows, S))
    src[real, src_len[real] - 1] = data.eos_id  # every source ends with <eos> (already there for lists)
    # decoder input <bos> t0 t1 ... (shifted right) and labels t0 t1 ... <eos>: target + 1 each; padding rows: none
    ids = sides[1].gather(rows, T)  # (B, T): target id j at position j
    shifted = np.empty_like(ids)  # (B, T): <bos>, then target id j - 1 at position j
    shifted[:, 0], shifted[:, 1:] = data.bos_id, ids[:, :-1]
    tgt_pad = jt >= np.where(real, tgt_len + 1, 0)[:, None]  # (B, T)
    tgt_in = np.where(tgt_pad, data.pad_id, shifted)
    labels = np.where(jt < tgt_len[:, None], ids,
                      np.where((jt == tgt_len[:, None]) & real[:, None], data.eos_id, IGNORE_INDEX))
    src, tgt_in, labels = (torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)) for a in (src, tgt_in, labels))
    src_key_padding_mask, tgt_key_padding_mask = torch.from_numpy(src_pad), torch.from_numpy(tgt_pad)
    return MTBatch.from_tensors(src, tgt_in, labels, src_key_padding_mask, tgt_key_padding_mask,
                                torch.tensor(indices, dtype=torch.long))


GRAPH_SHAPE_MULTIPLE = 8  # with CUDA graphs: batch widths rounded up to a multiple of 8 (few fixed shapes)


def rounded_widths(src_lens: np.ndarray, tgt_lens: np.ndarray, multiple: int) -> np.ndarray:
    """Each pair's batch width ``max(S, T)`` rounded up to a multiple of ``multiple``, capped at the longest width
    (so that no batch is wider than the corpus's longest pair). ``multiple`` 1 leaves the widths as they are.

    Shape: ``(N,), (N,) -> (N,)``.
    """
    check_int("multiple", multiple, minimum=1)  # (0 divided by zero: widths of 0)
    width = np.maximum(_lengths("src_lens", src_lens), _lengths("tgt_lens", tgt_lens))
    if multiple == 1 or width.size == 0:
        return width
    return np.minimum(-(-width // multiple) * multiple, width.max())


# ---------------------------------------------------------------------------------------------------------------
# bucketing to a token budget
# ---------------------------------------------------------------------------------------------------------------
def _lengths(name: str, lengths: Any) -> np.ndarray:
    """``lengths`` as an int64 array, or ``ValueError`` for anything but integers (``np.asarray(..., int64)``
    would cut ``2.7`` to 2 and take ``True`` for 1 without a word)."""
    arr = np.asarray(lengths)
    if arr.size and arr.dtype.kind not in "iu":
        first = arr.reshape(-1)[0]
        first = first.item() if isinstance(first, np.generic) else first
        raise ValueError(f"{name} must be integer token counts, got an array of {arr.dtype} (first {first!r})")
    return arr.astype(np.int64)


def plan_batches(src_lens: Sequence[int] | np.ndarray, tgt_lens: Sequence[int] | np.ndarray, max_tokens: int, *,
                 seed: int = 0, epoch: int = 0, shuffle: bool = True, multiple: int = 1) -> list[np.ndarray]:
    """Group pair indices into batches of similar lengths whose padded size ``B × max(S, T)`` <= ``max_tokens``.

    Pairs are sorted by (max(S, T), target length, source length); with ``shuffle`` pairs of equal lengths are first
    permuted and the batch order is permuted, both from ``numpy.random.default_rng([seed, epoch])``.
    Without ``shuffle`` the plan is the plain length-sorted one (for evaluation). With ``multiple`` > 1 the width
    ``max(S, T)`` is :func:`rounded_widths`' (fixed shapes, see the module docstring).

    Shape:
        src_lens, tgt_lens ``(N,)`` -> a list of index arrays ``(B_i,)`` covering ``0..N-1`` exactly once.

    Raises:
        ValueError: lengths that are not integers, of different sizes or < 1, or a single pair longer than
            ``max_tokens``.
    """
    src_lens, tgt_lens = _lengths("src_lens", src_lens), _lengths("tgt_lens", tgt_lens)
    if src_lens.ndim != 1 or src_lens.shape != tgt_lens.shape:
        raise ValueError(f"src_lens and tgt_lens must both have shape (N,), got {src_lens.shape} and {tgt_lens.shape}")
    check_int("max_tokens", max_tokens, minimum=1)
    for name, v in (("seed", seed), ("epoch", epoch)):
        check_int(f"{name}", v, minimum=0)
    check_int("multiple", multiple, minimum=1)
    n = len(src_lens)
    if n == 0:
        return []
    if int(src_lens.min()) < 1 or int(tgt_lens.min()) < 1:
        raise ValueError(f"lengths must be >= 1, got min source {int(src_lens.min())}, min target {int(tgt_lens.min())}")
    longest = int(np.maximum(src_lens, tgt_lens).max())
    if longest > max_tokens:
        raise ValueError(f"max_tokens must be at least the longest pair's max(S, T) = {longest}, got {max_tokens}")

    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(n) if shuffle else np.arange(n)
    # Sort by the batch cost's own measure, max(S, T), then target, then source length. (np.lexsort is stable
    # and sorts by its *last* key first.) On de-en this packs ~10% fewer batches than sorting by source
    # length alone, with about 4-6% padding instead of 6-10%.
    width_of = rounded_widths(src_lens, tgt_lens, multiple)  # (N,)
    order = perm[np.lexsort((src_lens[perm], tgt_lens[perm], width_of[perm]))]  # (N,)

    batches: list[np.ndarray] = []
    start, width = 0, 0  # current batch = order[start:i]; width = its max(S, T) so far
    for i, j in enumerate(order.tolist()):
        w = max(width, int(width_of[j]))
        if (i - start + 1) * w > max_tokens:  # adding pair j would exceed the budget: close the batch
            batches.append(order[start:i])
            start, w = i, int(width_of[j])
        width = w
    batches.append(order[start:])
    if shuffle:
        batches = [batches[k] for k in rng.permutation(len(batches))]
    return batches


class TokenBudgetBatcher:
    """Batches of one corpus under a token budget, addressed by step: ``batch(step)`` is deterministic.

    Args:
        data: the encoded corpus.
        max_tokens: budget per batch, ``B × max(S, T)`` (see the module docstring).
        seed: data-order seed.
        shuffle: ``True`` for training (a new plan per epoch); ``False`` gives one length-sorted plan.
        multiple: 1, or fixed shapes: widths rounded up to this multiple and every batch padded to
            ``(rows(W), W)``, ``rows(W) = min(max_tokens // W, pairs of rounded width <= W)`` (see the module
            docstring; :attr:`shapes` lists them).

    Shape:
        ``batch(step)`` -> :class:`MTBatch` with ``B × max(S, T) <= max_tokens``.
    """

    def __init__(self, data: EncodedPairs, *, max_tokens: int, seed: int = 0, shuffle: bool = True,
                 multiple: int = 1):
        if len(data) == 0:
            raise ValueError("TokenBudgetBatcher needs at least one pair, got an empty corpus")
        check_int("multiple", multiple, minimum=1)  # before `multiple > 1` below (a str: TypeError)
        self.data = data
        self.max_tokens = max_tokens
        self.seed = seed
        self.shuffle = shuffle
        self.multiple = multiple
        self._src_lens, self._tgt_lens = data.src_lens, data.tgt_lens
        self._widths = rounded_widths(self._src_lens, self._tgt_lens, multiple) if multiple > 1 else None
        self._epoch = 0
        self._plan = plan_batches(self._src_lens, self._tgt_lens, max_tokens, seed=seed, epoch=0, shuffle=shuffle,
                                  multiple=multiple)
        self._rows: dict[int, int] = {}  # fixed shapes: the rows of a batch of width W (max_tokens checked above)
        if self._widths is not None:
            sorted_widths = np.sort(self._widths)
            for w in np.unique(sorted_widths).tolist():
                fit = int(np.searchsorted(sorted_widths, w, side="right"))  # pairs of width <= w
                self._rows[w] = min(max_tokens // w, fit)

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The distinct ``(rows, width)`` of the fixed-shape batches (empty without ``multiple``)."""
        if self._widths is None:
            return []
        return sorted((rows, w) for w, rows in self._rows.items())

    @property
    def num_batches(self) -> int:
        """Batches per epoch (the same for every epoch)."""
        return len(self._plan)

    def __len__(self) -> int:
        return self.num_batches

    def plan(self, epoch: int) -> list[np.ndarray]:
        """The index arrays of every batch of ``epoch`` (the last plan is cached)."""
        if epoch != self._epoch and self.shuffle:
            self._plan = plan_batches(self._src_lens, self._tgt_lens, self.max_tokens, seed=self.seed, epoch=epoch,
                                      multiple=self.multiple)
            self._epoch = epoch
        return self._plan

    def batch(self, step: int) -> MTBatch:
        """Batch ``step % num_batches`` of epoch ``step // num_batches``."""
        check_int("batch step", step, minimum=0)
        epoch, k = divmod(step, self.num_batches)
        indices = self.plan(epoch)[k]
        if self._widths is None:
            return collate(self.data, indices)
        width = int(self._widths[indices].max())
        return collate(self.data, indices, shape=(self._rows[width], width))

    def padding_ratio(self) -> dict[str, float]:
        """Fraction of padding positions in the padded tensors of one epoch: ``src``, ``tgt`` and ``total``.

        The same for every epoch (the batch shapes do not change).
        """
        pad = {"src": 0, "tgt": 0}
        size = {"src": 0, "tgt": 0}
        for idx in self._plan:
            for side, lens in (("src", self._src_lens[idx]), ("tgt", self._tgt_lens[idx])):
                if self._widths is None:
                    padded = len(idx) * int(lens.max())
                else:  # fixed shapes: rows(W) rows of W positions
                    width = int(self._widths[idx].max())
                    padded = self._rows[width] * width
                size[side] += padded
                pad[side] += padded - int(lens.sum())
        out = {side: pad[side] / size[side] for side in pad}
        out["total"] = (pad["src"] + pad["tgt"]) / (size["src"] + size["tgt"])
        return out
