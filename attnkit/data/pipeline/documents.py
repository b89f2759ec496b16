"""Text made of documents, for fine-tuning: split it into its documents and encode each followed by ``<eos>``.

Fortune files separate their entries by lines holding only ``%`` (one rule,
:func:`attnkit.data.corpora.fortunes.is_separator`, for this module and the fortunes recipe); other texts may
separate documents by blank lines. Lines end at LF, CR LF or a lone CR. Fortune entries are cleaned as the
recipe cleans them (their lines joined by ``"\\n"``, trailing blanks and control characters dropped); blank-line
documents, like the ``none`` stream, keep their text exactly, CR LF line ends included. Ending every document
with the tokenizer's end-of-sequence token teaches a model where a text ends (so ``attnkit sample`` stops there).
``attnkit finetune --documents auto|fortune|blank-line|none`` uses :func:`prepare_finetune_data`.

Axis legend: N tokens of a split.
"""

from __future__ import annotations

import json
import re

from attnkit.checks import check_choice

__all__ = ["DOCUMENT_MODES", "split_documents", "encode_documents", "prepare_finetune_data"]

DOCUMENT_MODES = ("auto", "fortune", "blank-line", "none")
_EOL = r"(?:\r\n|\r(?!\n)|\n)"  # one line end: LF, CR LF or a lone CR (never the CR of a CR LF on its own)
_BLANK_LINES = re.compile(_EOL + r"(?:[ \t]*" + _EOL + ")+")  # a line end and one or more blank lines after it


def _is_fortune_text(text: str) -> bool:
    from attnkit.data.corpora.fortunes import has_separators

    return has_separators(text)


def split_documents(text: str, mode: str) -> list[str] | None:
    """The documents of ``text`` (``None`` for mode ``"none"``: keep one stream).

    fortune: entries between lines holding only ``%`` (cleaned as the fortunes recipe does); blank-line:
    paragraphs separated by one or more blank lines (kept as they are, line ends included); auto: fortune if
    such ``%`` lines exist, else none.
    """
    check_choice("documents mode", mode, DOCUMENT_MODES)
    if not isinstance(text, str):
        raise ValueError(f"split_documents expects the text as a str, got {type(text).__name__}")
    if mode == "auto":
        mode = "fortune" if _is_fortune_text(text) else "none"
    if mode == "none":
        return None
    if mode == "fortune":
        from attnkit.data.corpora.fortunes import parse_fortunes

        return parse_fortunes(text)
    # every run of blank lines (spaces and tabs allowed) is one separator
    return [p.strip("\r\n") for p in _BLANK_LINES.split(text) if p.strip()]


def encode_documents(tokenizer, text: str, mode: str, *, add_bos: bool = False):
    """Token ids of ``text``: documents each followed by ``tokenizer.eos_id``, or the plain stream. With
    ``add_bos`` (a model that reads its prompts after ``<bos>``, as a GGUF file's ``add_bos_token`` says) every
    document, or the stream, starts with ``tokenizer.bos_id`` as its prompts will.

    Shape: text -> ``LongTensor (N,)``.
    """
    import numpy as np
    import torch

    from attnkit.data.pipeline.lm_dataset import encode_corpus

    bos = [tokenizer.bos_id] if add_bos and tokenizer.bos_id is not None else []
    docs = split_documents(text, mode)
    if docs is None:
        ids = encode_corpus(tokenizer, text)
        return torch.cat([torch.tensor(bos, dtype=torch.long), ids]) if bos else ids
    if tokenizer.eos_id is None:
        raise ValueError("the text is split into documents, but the tokenizer has no end-of-sequence token to "
                         "separate them; pass --documents none")
    eos = tokenizer.eos_id
    pieces = [np.asarray(bos + ids + [eos], dtype=np.int64) for ids in tokenizer.encode_batch(docs)]
    return torch.from_numpy(np.concatenate(pieces)) if pieces else torch.zeros(0, dtype=torch.long)


def prepare_finetune_data(data: str, tokenizer, documents: str = "auto", *, add_bos: bool = False,
                          encode_train: bool = True):
    """``(train_ids, valid_ids, info)`` of a recipe or a local text, encoded with the model's tokenizer
    (:func:`encode_documents`; ``add_bos``: each document starts with ``<bos>``). ``"auto"`` picks the mode from
    the train text, and both splits are encoded in that one mode; ``encode_train=False`` (an evaluation) encodes
    only the valid split (``train_ids`` is None).

    Shape: returns ``LongTensor (N_train,)`` or None, ``LongTensor (N_valid,)``.
    """
    from attnkit.data.corpora.text import load_text_corpus

    check_choice("documents mode", documents, DOCUMENT_MODES)
    train_text, valid_text, info = load_text_corpus(data)
    mode = documents
    if mode == "auto":
        mode = "fortune" if _is_fortune_text(train_text) else "none"
    train = encode_documents(tokenizer, train_text, mode, add_bos=add_bos) if encode_train else None
    valid = encode_documents(tokenizer, valid_text, mode, add_bos=add_bos)
    info = json.loads(json.dumps(info, default=str))
    return train, valid, {"source": info, "documents": mode}
