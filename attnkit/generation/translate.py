"""Translating with a trained encoder-decoder: text -> source ids -> decoded text, in batches.

The one translation path of attnkit: ``attnkit translate``, ``attnkit eval mt`` and the BLEU that
``attnkit train mt`` computes at each evaluation (:func:`greedy_translator`) all call :func:`translate_ids`,
which decodes batches of sources with :func:`search_ids` (pad, then greedy search for beam 1 or beam search
from :mod:`attnkit.generation`) and turns the ids into text; ``attnkit viz``/``trace`` call :func:`search_ids`
for the target ids of one sentence. :func:`encode_sources` turns text into source ids with ``<eos>`` under the
model's length limit; :func:`translate_sentences` does the whole list (sorted by length for less padding,
results put back in input order).

Axis legend: B sentences in a batch, S source length.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from attnkit.checks import check_int
from attnkit.generation.generate import model_device, text_vocab_limit
from attnkit.recipes import DEFAULT_BATCH_SIZE, DEFAULT_BEAM, DEFAULT_LENGTH_PENALTY

__all__ = ["DEFAULT_BEAM", "DEFAULT_LENGTH_PENALTY", "DEFAULT_BATCH_SIZE", "encode_sources", "search_ids",
           "translate_ids", "translate_sentences", "greedy_translator"]


# A source line of more than CHARS_PER_TOKEN x max_len characters is cut to that length before it is tokenized:
# only its first max_len - 1 tokens are kept anyway, and the tokenizers library takes seconds over a line of
# megabytes (10 CPU s for 4 MiB). Real sentences have a few characters per token; the cut loses none of them.
CHARS_PER_TOKEN = 64


def _cut_line(sentence: str, limit: int) -> str:
    """``sentence`` cut to at most ``limit`` characters, at the last word boundary (a non-space character followed
    by a space) when there is one: the words before it tokenize as they do in the whole line (attnkit's tokenizers
    split words at spaces first), so its first tokens are the same."""
    head = sentence[:limit + 1]
    for at in range(len(head) - 1, 0, -1):
        if head[at].isspace() and not head[at - 1].isspace():
            return head[:at]
    return head[:limit]


def encode_sources(tokenizer: Any, sentences: Sequence[str], *, max_len: int | None, strict: bool = False,
                   first_line: int = 1) -> tuple[list[list[int]], int]:
    """Tokenize source sentences for the encoder: ids + ``<eos>``, at most ``max_len`` tokens.

    Longer sentences are cut (keeping their first ``max_len - 1`` tokens, then ``<eos>``) and counted; with
    ``strict`` the first one raises ``ValueError`` naming its line (``first_line`` numbers ``sentences[0]``).
    A line of more than ``CHARS_PER_TOKEN * max_len`` characters is cut to that length (at a word boundary) before
    it is tokenized, and counted as cut. Returns ``(ids, number truncated)``.
    """
    if tokenizer.eos_id is None or tokenizer.pad_id is None or tokenizer.bos_id is None:
        raise ValueError(f"translation needs a tokenizer with <pad>, <bos> and <eos>; got {tokenizer!r}")
    limit = None if max_len is None else CHARS_PER_TOKEN * max_len
    texts = [s if limit is None or len(s) <= limit else _cut_line(s, limit) for s in sentences]
    out, n_cut = [], 0
    for i, ids in enumerate(tokenizer.encode_batch(texts)):
        if max_len is not None and (len(ids) + 1 > max_len or len(texts[i]) < len(sentences[i])):
            if strict:
                size = (f"{len(ids) + 1} tokens with <eos>" if len(texts[i]) == len(sentences[i])
                        else f"{len(sentences[i]):,} characters")
                raise ValueError(f"line {first_line + i}: the sentence is {size}, longer than the model's max_len "
                                 f"= {max_len} (drop --strict to truncate it)")
            del ids[max_len - 1:]
            n_cut += 1
        out.append(ids + [tokenizer.eos_id])
    return out, n_cut


def search_ids(model: Any, tokenizer: Any, sources: Sequence[list[int]], *, beam: int = DEFAULT_BEAM,
               length_penalty: float = DEFAULT_LENGTH_PENALTY, max_len_a: float = 1.2,
               max_len_b: float = 10) -> list[list[int]]:
    """Decode one batch of non-empty source id lists (each ending with ``<eos>``): greedy search for ``beam``
    1, beam search otherwise. Returns the target ids (no ``<bos>``/``<eos>``) in input order.

    Shape:
        the sources are sorted by length and padded into ``src (B, S)`` with its padding mask ``(B, S)``.
    """
    import torch

    from attnkit.generation import beam_search, greedy_search
    from attnkit.modules.masks import pad_right

    check_int("beam", beam, minimum=1)
    if not sources or not all(sources):
        raise ValueError(f"search_ids needs non-empty source id lists, got lengths {[len(s) for s in sources]}")
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    src, mask = pad_right([sources[i] for i in order], tokenizer.pad_id)  # (B, S), (B, S)
    device = model_device(model)
    limit = text_vocab_limit(getattr(getattr(model, "config", None), "tgt_vocab_size", None), tokenizer)
    common = dict(bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id,
                  max_len_a=max_len_a, max_len_b=max_len_b, vocab_size=limit)
    with torch.no_grad():
        if beam == 1:
            ids = greedy_search(model, src.to(device), mask.to(device), **common)
        else:
            ids = beam_search(model, src.to(device), mask.to(device), beam_size=beam,
                              length_penalty=length_penalty, **common)
    out: list[list[int]] = [[] for _ in sources]
    for row, i in enumerate(order):
        out[i] = ids[row]
    return out


def translate_ids(model: Any, tokenizer: Any, sources: Sequence[list[int]], *, beam: int = DEFAULT_BEAM,
                  length_penalty: float = DEFAULT_LENGTH_PENALTY, batch_size: int = DEFAULT_BATCH_SIZE,
                  max_len_a: float = 1.2, max_len_b: float = 10) -> Iterator[list[str]]:
    """Translate source id lists (each ending with ``<eos>``; an empty list gives ``""``) in batches.

    Yields one list of ``len(chunk)`` strings per chunk of ``batch_size`` sources, in input order; each chunk's
    non-empty sources are decoded together by :func:`search_ids`.
    """
    check_int("beam", beam, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    for start in range(0, len(sources), batch_size):
        chunk = list(sources[start:start + batch_size])
        hyps = [""] * len(chunk)
        filled = [i for i in range(len(chunk)) if chunk[i]]
        if filled:
            ids = search_ids(model, tokenizer, [chunk[i] for i in filled], beam=beam, length_penalty=length_penalty,
                             max_len_a=max_len_a, max_len_b=max_len_b)
            for i, target in zip(filled, ids):
                hyps[i] = single_line(tokenizer.decode(target, skip_special_tokens=True))
        yield hyps


def single_line(text: str) -> str:
    """A translation as one line and one TSV field: each line break the model wrote (``\\n``, ``\\r``, U+2028, ...
    as ``str.splitlines`` knows them) and each tab becomes a space, so ``attnkit translate`` writes exactly one
    line per input line, and ``--output`` pairs and ``eval mt --hyps`` files stay readable as such."""
    return " ".join(text.splitlines()).replace("\t", " ")


def translate_sentences(model: Any, tokenizer: Any, sentences: Sequence[str], *, strict: bool = False,
                        sort_all: bool = True, progress: bool = False, **kwargs: Any) -> tuple[list[str], int]:
    """Translate a whole list of sentences; returns ``(translations in input order, number truncated)``.

    With ``sort_all`` the whole list is sorted by length before batching (fast for a test set), and the
    results are put back in order. ``progress``: a tqdm bar of the sentences on stderr when it is a terminal.
    ``kwargs`` go to :func:`translate_ids`.
    """
    from tqdm.auto import tqdm

    if isinstance(sentences, (str, bytes)) or not isinstance(sentences, Sequence):
        raise ValueError(f"sentences must be a list of strings, got {type(sentences).__name__}")
    for i, s in enumerate(sentences):
        if not isinstance(s, str):
            raise ValueError(f"sentences[{i}] must be a string, got {type(s).__name__}")
    max_len = getattr(getattr(model, "config", None), "max_len", None)
    ids, n_cut = encode_sources(tokenizer, [s.strip() for s in sentences], max_len=max_len, strict=strict)
    ids = [s if text.strip() else [] for s, text in zip(ids, sentences)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i])) if sort_all else list(range(len(ids)))
    out: list[str] = [""] * len(ids)
    k = 0
    with tqdm(total=len(ids), unit="sentence", desc="translating", leave=False,
              disable=None if progress else True) as bar:  # None: on a terminal only
        for hyps in translate_ids(model, tokenizer, [ids[i] for i in order], **kwargs):
            for h in hyps:
                out[order[k]] = h
                k += 1
            bar.update(len(hyps))
    return out, n_cut


def greedy_translator(tokenizer: Any, *, batch_size: int = 64, max_len_a: float = 1.2,
                      max_len_b: float = 10) -> Callable[[Any, list[list[int]]], list[str]]:
    """A ``translate_fn`` for :class:`attnkit.training.MTTask`: :func:`translate_ids` with beam 1 (greedy search)
    in batches of ``batch_size`` sources; ``tokenizer`` needs ``pad_id``, ``bos_id``, ``eos_id`` and ``decode``.

    Shape: ``N`` source id lists (each ending with ``<eos>``) -> ``N`` strings.
    """
    check_int("batch_size", batch_size, minimum=1)
    for name in ("pad_id", "bos_id", "eos_id"):
        if getattr(tokenizer, name, None) is None:
            raise ValueError(f"greedy_translator needs a tokenizer with {name}, got {tokenizer!r}")

    def translate(model: Any, sources: list[list[int]]) -> list[str]:
        return [h for chunk in translate_ids(model, tokenizer, sources, beam=1, batch_size=batch_size,
                                             max_len_a=max_len_a, max_len_b=max_len_b) for h in chunk]

    return translate
