"""Print generated text while it is being generated.

Axis legend: none (one sequence, one token at a time).

``generate(..., streamer=TextStreamer(tok))`` calls :meth:`TextStreamer.put` with every token it keeps
and :meth:`TextStreamer.end` when it stops. The streamer turns tokens into text with the tokenizer's
incremental decoder (:class:`attnkit.data.tokenizers.tokenizer.StreamDecoder`), which holds text back while it ends
in an incomplete UTF-8 character: a byte-level BPE model may produce an emoji as three or four byte
tokens, and printing after each one would show replacement characters. So the streamed text is, piece
by piece, exactly ``tokenizer.decode(generated_ids)``.

Only the generated tokens are streamed, not the prompt, and only for one sequence (batch size 1).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import TextIO

from attnkit.data.tokenizers.tokenizer import StreamDecoder

__all__ = ["TextStreamer"]


class TextStreamer:
    """Writes decoded text to a text stream (stdout by default) as token ids arrive.

    Args:
        tokenizer: an attnkit :class:`~attnkit.data.tokenizers.tokenizer.Tokenizer`.
        skip_special_tokens: passed to the tokenizer's ``decode``.
        file: where to write; ``None`` = ``sys.stdout`` (looked up at write time, so redirection works).
        end: written once after the last piece (like ``print``'s ``end``); ``""`` for none.
        context: ids before the stream (the prompt's), never written: the text is written as it continues them
            (see :class:`~attnkit.data.tokenizers.tokenizer.StreamDecoder`).

    Attributes:
        text: everything written so far, excluding ``end``.
    """

    def __init__(self, tokenizer, *, skip_special_tokens: bool = False, file: TextIO | None = None, end: str = "\n",
                 context: Sequence[int] = ()):
        if not callable(getattr(tokenizer, "decode", None)):
            raise ValueError(f"TextStreamer needs a tokenizer with decode(ids), got {type(tokenizer).__name__}")
        if not isinstance(end, str):
            raise ValueError(f"end must be a str, got {type(end).__name__}")
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.file = file
        self._end = end
        self._decoder = StreamDecoder(tokenizer, skip_special_tokens=skip_special_tokens, context=context)
        self.text = ""

    def _write(self, piece: str) -> None:
        if piece:
            out = self.file if self.file is not None else sys.stdout
            out.write(piece)
            out.flush()

    def put(self, token_ids: int | Iterable[int]) -> None:
        """Take one or more new token ids and print the text they complete (maybe nothing yet).

        Shape:
            token_ids: one id or a list of ``N`` ids.
        """
        piece = self._decoder.push(token_ids)
        self.text += piece
        self._write(piece)

    def end(self) -> None:
        """The sequence is over: print what is left, then ``end``; the streamer can be reused afterwards."""
        piece = self._decoder.flush()
        self.text += piece
        self._write(piece + self._end)
