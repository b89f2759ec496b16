"""Readable tick labels for token ids.

Axis legend: ``N`` tokens in a sequence.

Each id is decoded on its own, so a label shows exactly the piece of text that token stands for. Whitespace
that would vanish on a plot axis is made visible: a leading/trailing space becomes ``·`` (as in ``·the``), a
newline ``↵`` and a tab ``⇥``. Special tokens keep their spelling (``<bos>``). A byte-level token that is only
part of a multi-byte character decodes to ``�``; its id is appended then (``�#203``) so labels stay distinct
enough to read.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["token_labels", "visible"]

_REPLACEMENTS = {"\n": "↵", "\r": "␍", "\t": "⇥"}


def visible(text: str) -> str:
    """Make whitespace visible: spaces at either end -> ``·``, newline -> ``↵``, tab -> ``⇥``."""
    for raw, shown in _REPLACEMENTS.items():
        text = text.replace(raw, shown)
    if text == "":
        return "∅"
    stripped = text.strip(" ")
    if not stripped:
        return "·" * len(text)
    left = len(text) - len(text.lstrip(" "))
    right = len(text) - len(text.rstrip(" "))
    return "·" * left + stripped + "·" * right


def token_labels(tokenizer: Any, ids: Sequence[int], *, max_chars: int = 12) -> list[str]:
    """One short label per token id (see the module docstring); ``tokenizer`` may be ``None`` (ids as text).

    Shape:
        ids ``(N,)`` -> ``N`` strings.
    """
    if max_chars < 2:
        raise ValueError(f"max_chars must be >= 2, got {max_chars}")
    ids = [int(i) for i in ids]
    if tokenizer is None:
        return [str(i) for i in ids]
    special = set(getattr(tokenizer, "special_ids", None) or [])
    labels = []
    for i in ids:
        if i in special:
            text = tokenizer.id_to_token(i)
        else:
            text = visible(tokenizer.decode([i]))
            if "\ufffd" in text:
                text = f"{text}#{i}"
        if len(text) > max_chars:
            text = text[: max_chars - 1] + "…"
        labels.append(text)
    return labels
