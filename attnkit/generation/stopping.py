"""When does a sequence stop? End-of-sequence tokens, stop strings and a length limit, per sequence.

Axis legend: ``B`` batch (number of sequences being decoded).

A batch of sequences is decoded together, but each sequence stops on its own:

* **EOS** -- the model picked one of the ``eos_token_id`` tokens. The EOS token is *not* part of the
  output (the output is the content; the EOS only says "no more").
* **stop string** -- the decoded text of the generated tokens contains one of ``stop_strings``. The token
  that completes the stop string *is* part of the output (tokens cannot be split, so the stop string
  appears in the decoded output, possibly followed by the rest of that last token's text). Only the
  generated text is searched, never the prompt, but as it continues the prompt (``contexts``: a SentencePiece
  decoder drops the space of a first ``▁time`` on its own, not after ``once upon a``), and only its final
  text: trailing U+FFFD characters (what a byte-level decoder shows for a character whose bytes are still
  being generated) are left out until text follows them, as the streamer holds them back, so a stop string
  such as ``"\ufffd"`` never cuts a character.
* **length** -- ``max_new_tokens`` tokens were generated (the limit may differ per sequence).

:class:`StoppingCriteria` keeps every sequence's tokens and its reason to stop; the decoding loops
(``generate`` and ``greedy_search``) feed it one token per live sequence per step.
"""

from __future__ import annotations

from collections.abc import Sequence

from attnkit.checks import check_int, is_int
from attnkit.data.tokenizers.tokenizer import REPLACEMENT_CHAR, decode_after

__all__ = [
    "check_max_new_tokens",
    "normalize_eos_token_id",
    "normalize_stop_strings",
    "contains_stop_string",
    "final_text",
    "StoppingCriteria",
]


# prompt ids decoded before the generated ones when stop strings are searched (see StoppingCriteria)
CONTEXT_IDS = 4


def check_max_new_tokens(max_new_tokens) -> int:
    """``max_new_tokens`` must be an int >= 0 (0 returns empty outputs without running the model)."""
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    return max_new_tokens


def normalize_eos_token_id(eos_token_id) -> frozenset[int]:
    """``None`` -> no EOS; an int or a list of ints (>= 0) -> the set of EOS ids."""
    if eos_token_id is None:
        return frozenset()
    ids = [eos_token_id] if is_int(eos_token_id) else eos_token_id
    if not isinstance(ids, (list, tuple, set, frozenset)) or not all(
        is_int(i) and i >= 0 for i in ids
    ):
        raise ValueError(f"eos_token_id must be None, an int >= 0 or a list of them, got {eos_token_id!r}")
    return frozenset(ids)


def normalize_stop_strings(stop_strings, tokenizer) -> tuple[str, ...]:
    """``None`` -> no stop strings; a str or a list of non-empty strs, which needs a ``tokenizer``."""
    if stop_strings is None:
        return ()
    strings = [stop_strings] if isinstance(stop_strings, str) else stop_strings
    if not isinstance(strings, (list, tuple)) or not all(isinstance(s, str) and s for s in strings):
        raise ValueError(f"stop_strings must be None, a non-empty str or a list of them, got {stop_strings!r}")
    if tokenizer is None or not callable(getattr(tokenizer, "decode", None)):
        raise ValueError(f"stop_strings need a tokenizer with decode(ids) -> str to read the text, got tokenizer={tokenizer!r}")
    return tuple(strings)


def contains_stop_string(text: str, stop_strings: Sequence[str]) -> bool:
    """Whether ``text`` contains any of ``stop_strings``."""
    return any(s in text for s in stop_strings)


def final_text(text: str) -> str:
    """``text`` without its trailing U+FFFD characters: a byte-level decoder's rendering of an incomplete UTF-8
    character, which the next tokens may still complete (not yet text a stop string can match)."""
    return text.rstrip(REPLACEMENT_CHAR)


class StoppingCriteria:
    """Per-sequence stopping state of a batch being decoded.

    Args:
        batch_size: ``B``.
        max_new_tokens: the length limit, one int for all sequences or one per sequence.
        eos_token_id: ``None``, an id or a list of ids (see :func:`normalize_eos_token_id`).
        stop_strings: ``None``, a str or a list of strs, searched in the final text of
            ``tokenizer.decode(generated)`` (see the module doc).
        tokenizer: anything with ``decode(list[int]) -> str``; needed for stop strings only.
        contexts: ``None`` or ``B`` lists of ids the sequences continue (their prompts'); their last
            ``CONTEXT_IDS`` ids are decoded before the generated ones and their text left out of the search.

    After :meth:`add`, ``outputs[b]`` holds the kept tokens of sequence ``b``, ``done[b]`` whether it has
    stopped and ``reasons[b]`` why: ``"eos"``, ``"stop_string"`` or ``"length"`` (``None`` while running).

    Shape:
        outputs: ``B`` lists of token ids.
    """

    def __init__(
        self,
        batch_size: int,
        *,
        max_new_tokens: int | Sequence[int],
        eos_token_id=None,
        stop_strings=None,
        tokenizer=None,
        contexts: Sequence[Sequence[int]] | None = None,
    ):
        check_int("batch_size", batch_size, minimum=1)
        if isinstance(max_new_tokens, (list, tuple)):
            limits = list(max_new_tokens)
        else:
            limits = [check_max_new_tokens(max_new_tokens)] * batch_size
        if len(limits) != batch_size:
            raise ValueError(f"max_new_tokens must be an int or B = {batch_size} ints, got {len(limits)}")
        self.max_new_tokens = [check_max_new_tokens(n) for n in limits]
        self.eos = normalize_eos_token_id(eos_token_id)
        self.stop_strings = normalize_stop_strings(stop_strings, tokenizer)
        self.tokenizer = tokenizer
        if contexts is not None and len(contexts) != batch_size:
            raise ValueError(f"contexts must be None or B = {batch_size} lists of ids, got {len(contexts)}")
        # (a few ids are enough for a decoder's rule at the start of a text, and keep each step's decoding short)
        self.contexts = [list(c)[-CONTEXT_IDS:] for c in contexts] if contexts is not None else [[]] * batch_size
        self.outputs: list[list[int]] = [[] for _ in range(batch_size)]
        # a sequence allowed 0 new tokens is done before it starts
        self.reasons: list[str | None] = ["length" if n == 0 else None for n in self.max_new_tokens]

    @property
    def done(self) -> list[bool]:
        return [r is not None for r in self.reasons]

    @property
    def all_done(self) -> bool:
        return all(r is not None for r in self.reasons)

    def add(self, b: int, token: int) -> bool:
        """Record the token picked for sequence ``b``; return ``True`` if it was *kept* in the output.

        A finished sequence refuses new tokens (``ValueError``); an EOS token stops the sequence and is
        not kept.

        Shape:
            b: a row index in ``[0, B)``; token: one id.
        """
        if self.reasons[b] is not None:
            raise ValueError(f"sequence {b} already stopped ({self.reasons[b]}), got another token {token}")
        if token in self.eos:
            self.reasons[b] = "eos"
            return False
        out = self.outputs[b]
        out.append(token)
        if self.stop_strings and contains_stop_string(final_text(self._generated_text(b)), self.stop_strings):
            self.reasons[b] = "stop_string"
        elif len(out) >= self.max_new_tokens[b]:
            self.reasons[b] = "length"
        return True

    def _generated_text(self, b: int) -> str:
        """The text of sequence ``b``'s kept tokens as it continues its context (:func:`decode_after`)."""
        out, context = self.outputs[b], self.contexts[b]
        if context:
            try:
                return decode_after(self.tokenizer, context, out)
            except ValueError:  # a prompt id the tokenizer has no text for (a model's padded output layer)
                pass
        return self.tokenizer.decode(out)
