"""A model and a text to look at: what ``viz attention``, ``viz predict`` and ``trace`` run a model on.

:func:`load_inspected` loads a checkpoint (``ckpt``) or a named pretrained model (``model``) onto a device;
:func:`lm_ids` turns a text into the ids a language model reads (``<bos>`` first where it was trained with one);
:func:`mt_ids` turns a source sentence (and optionally a target) into a translator's encoder and decoder ids,
the target defaulting to the model's greedy translation through :mod:`attnkit.generation.translate`, the one
translation path. There are no tensor axes in this file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .options import DeviceOptions, Log, check_model_source

__all__ = ["ModelText", "load_inspected", "is_seq2seq", "lm_ids", "mt_ids", "BEYOND_CONTEXT"]

# How far past its context (block_size, max_len) a model without learned positions is read: the attention of every
# layer is T x S per head, so an unbounded text ran for minutes and ended in torch's allocator (160 GB asked).
BEYOND_CONTEXT = 4


def _check_beyond(flag: str, n: int, context: int, what: str) -> None:
    if n > BEYOND_CONTEXT * context:
        bos, noun = (" with <bos>", "target") if flag == "--tgt" else ("", "text")
        raise ValueError(f"{flag} is {n:,} tokens{bos}, more than {BEYOND_CONTEXT} x the model's {what} of {context} "
                         f"= {BEYOND_CONTEXT * context}, the most viz and trace read: give a shorter {noun}")


@dataclass
class ModelText(DeviceOptions):
    """Which model (``ckpt`` a run or checkpoint folder, or ``model`` a pretrained one: a name, a ``.gguf`` file or a
    Hugging Face folder) and which text:
    ``text`` for a language model; ``src`` (and optionally ``tgt``, fed after ``<bos>``) for a translator."""

    ckpt: str | Path | None = None
    model: str | Path | None = None
    text: str | None = None
    src: str | None = None
    tgt: str | None = None

    def _check(self) -> None:
        super()._check()
        check_model_source(type(self).__name__, self.ckpt, self.model)

    @property
    def name(self) -> str:
        """How figures and pages title the model: the checkpoint folder's name, or the model's."""
        return Path(self.ckpt).name if self.ckpt is not None else Path(self.model).name


def load_inspected(o: ModelText) -> Any:
    """The :class:`~attnkit.checkpoints.LoadedModel` of ``o``, the model on ``o.device`` (float32)."""
    from attnkit.checkpoints import load
    from attnkit.interop.load import load_named

    device = o.resolved_device()  # a device this machine lacks fails before loading
    loaded = load(o.ckpt) if o.ckpt is not None else load_named(str(o.model))  # a name, .gguf file or folder
    loaded.model = loaded.model.to(device)
    return loaded


def is_seq2seq(model: Any) -> bool:
    """True for an encoder-decoder translator."""
    from attnkit.models.transformer import Transformer

    return isinstance(model, Transformer)


def lm_ids(o: ModelText, loaded: Any, log: Log) -> list[int]:
    """``o.text`` as the language model reads a prompt (``LoadedModel.encode_prompt``: ``<bos>`` where it had one).
    Longer than the model's context (``block_size``): refused for learned positions, which have no embedding past
    it; for the others a note (the model is read past what it was trained on), and refused past
    :data:`BEYOND_CONTEXT` times the context."""
    if o.src is not None or o.tgt is not None:
        raise ValueError("--src/--tgt are for translation checkpoints; a language model reads --text")
    if not o.text:
        raise ValueError("a language model needs --text (a non-empty string)")
    ids = loaded.encode_prompt(o.text)
    if not ids:
        raise ValueError(f"--text {o.text!r} encodes to no tokens")
    config = getattr(loaded.model, "config", None)
    block = getattr(config, "block_size", None)
    if isinstance(block, int) and len(ids) > block:
        if getattr(config, "position", None) == "learned":
            raise ValueError(f"--text is {len(ids)} tokens, but this model (learned positions) reads at most {block}: "
                             f"give a shorter text")
        _check_beyond("--text", len(ids), block, "context")
        log(f"note: --text is {len(ids)} tokens, longer than the model's context of {block}: what it shows past "
            f"token {block} is the model read beyond what it was trained on")
    return ids


def mt_ids(o: ModelText, model: Any, tokenizer: Any, log: Log) -> tuple[list[int], list[int]]:
    """Source ids (+ ``<eos>``, cut to the model's ``max_len``) and decoder input ids (``<bos>`` + target: given,
    or the greedy translation, which is logged; a given target past ``max_len`` as a text past a language model's
    context, :func:`lm_ids`). Both texts are normalised as training and ``translate`` normalise
    theirs (``normalize_text``: NFC, one space for any whitespace run)."""
    from attnkit.data.corpora.parallel import normalize_text
    from attnkit.generation.translate import encode_sources, search_ids

    if o.src is not None and o.text is not None:
        raise ValueError("a translation model reads one source sentence: give --src (or --text), not both")
    text = normalize_text(o.src if o.src is not None else o.text or "")
    if not text:
        raise ValueError("a translation model needs --src (the source sentence)")
    max_len = getattr(model.config, "max_len", None)
    (src,), cut = encode_sources(tokenizer, [text], max_len=max_len)
    if cut:  # as translate cuts it (--strict refuses)
        log(f"note: --src is longer than the model's max_len of {max_len} tokens: it is read as its first "
            f"{max_len - 1} tokens and <eos>")
    if o.tgt is not None:
        tgt = tokenizer.encode(normalize_text(o.tgt))
        if isinstance(max_len, int) and len(tgt) + 1 > max_len:  # the decoder reads <bos> + target
            if getattr(model.config, "position", None) == "learned":
                raise ValueError(f"--tgt is {len(tgt) + 1} tokens with <bos>, but this model (learned positions) "
                                 f"reads at most {max_len}: give a shorter target")
            _check_beyond("--tgt", len(tgt) + 1, max_len, "max_len")
            log(f"note: --tgt is {len(tgt) + 1} tokens with <bos>, longer than the model's max_len of {max_len}: "
                f"what it shows past token {max_len} is the model read beyond what it was trained on")
    else:
        (tgt,) = search_ids(model, tokenizer, [src], beam=1)
        log(f"translation (greedy): {tokenizer.decode(tgt, skip_special_tokens=True)}")
    return src, [tokenizer.bos_id] + tgt
