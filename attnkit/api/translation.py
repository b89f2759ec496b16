"""``translate``: translate sentences with a trained encoder-decoder (``attnkit translate``).

    from attnkit.api import translate, Translator, TranslateOptions
    translate(["Das Haus ist groß."], ckpt="runs/de-en", beam=4)           # -> ["The house is big."]
    translator = Translator(TranslateOptions(ckpt="runs/de-en"))
    for batch in translator.stream(open("sentences.de")):                # one list of translations per batch
        ...

Sentences are translated in batches of ``batch_size``; :meth:`Translator.stream` yields each batch's translations
(one per input line, in input order, an empty string for an empty line) as soon as it is done, so a caller can
stream. Inside a batch the sentences are sorted by length (less padding in the encoder and fewer finished rows
dragging along in the decoder) and put back in order. A source longer than the model's ``max_len`` (``<eos>``
included) is cut to fit and counted (:attr:`Translator.n_truncated`), or refused with its line number under
``strict``. The translation itself is :mod:`attnkit.generation.translate` (shared with ``evaluate_mt`` and the
BLEU of training).

Axis legend: B sentences in a batch, S source length (inside :mod:`attnkit.generation.translate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from .decoding import DecodingOptions
from .options import inference_device, place_model

__all__ = ["TranslateOptions", "Translator", "translate"]


@dataclass
class TranslateOptions(DecodingOptions):
    """Options of :class:`Translator` / :func:`translate`: the checkpoint (a run folder uses ``checkpoints/best``;
    or a checkpoint folder such as ``checkpoints/averaged``) and the decoding settings."""

    ckpt: str | Path = ""

    def _check(self) -> None:
        super()._check()
        if not str(self.ckpt):
            raise ValueError("translate needs ckpt (a run or checkpoint folder written by train mt)")


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line.rstrip("\r\n"))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class Translator:
    """A loaded translator: the model on its device, its tokenizer and the decoding settings.

    Attributes:
        max_len: the longest source the model takes, in tokens.
        n_lines, n_truncated: lines translated so far, and how many of them were cut to ``max_len``.
    """

    def __init__(self, options: TranslateOptions | None = None, **kwargs: Any):
        from attnkit.checkpoints import load

        self.options = TranslateOptions.make(options, kwargs)
        device = inference_device(self.options)  # a device (or autocast) this machine lacks fails before loading
        loaded = load(self.options.ckpt, expect_kind="mt")  # an LM checkpoint is refused here
        self.model = place_model(loaded.model, self.options, device)  # the search follows the weights
        self.tokenizer = loaded.tokenizer
        self.max_len = getattr(self.model.config, "max_len", None)
        self.n_lines = 0
        self.n_truncated = 0

    def stream(self, lines: Iterable[str], *, batch_size: int | None = None) -> Iterator[list[str]]:
        """Translate ``lines`` (line ends stripped) ``batch_size`` at a time (default the options'); yields each
        batch's translations in input order as soon as they are done."""
        from attnkit.generation.translate import encode_sources, translate_ids

        o = self.options
        size = o.batch_size if batch_size is None else batch_size
        for chunk in _chunks(lines, size):
            ids, cut = encode_sources(self.tokenizer, [s.strip() for s in chunk], max_len=self.max_len,
                                      strict=o.strict, first_line=self.n_lines + 1)
            ids = [s if text.strip() else [] for s, text in zip(ids, chunk)]
            yield from translate_ids(self.model, self.tokenizer, ids, batch_size=size, **o.search)
            self.n_lines += len(chunk)
            self.n_truncated += cut

    def translate(self, sentences: Sequence[str]) -> list[str]:
        """The translations of ``sentences``, one each, in order."""
        return [h for hyps in self.stream(sentences) for h in hyps]


def translate(sentences: Sequence[str], options: TranslateOptions | None = None, **kwargs: Any) -> list[str]:
    """Translate ``sentences`` with the checkpoint of ``options`` (or keyword arguments): one translation each."""
    if isinstance(sentences, str):
        raise ValueError("translate expects a list of sentences, got one string; wrap it in a list")
    return Translator(options, **kwargs).translate(sentences)
