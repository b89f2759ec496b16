"""The one tokenizer interface every part of attnkit codes against, plus saving, loading and streaming.

A tokenizer turns text into a list of integer ids in ``[0, V)`` and back:

    ids = tok.encode("To be, or not to be")     # list[int], each in [0, tok.vocab_size)
    text = tok.decode(ids)                       # the same string again

Axes: ``V`` vocabulary size (``tok.vocab_size``), ``N`` number of ids in a sequence.

Concrete tokenizers live one per file and register themselves here by their ``type`` name:

- ``"char"``  :class:`attnkit.data.tokenizers.char_tokenizer.CharTokenizer` (a character-level vocabulary),
- ``"bpe"``   :class:`attnkit.data.tokenizers.bpe_tokenizer.BPETokenizer` (byte-level BPE from the ``tokenizers`` library;
  also used for GPT-2's tokenizer, the MT joint vocabulary and GGUF tokenizers).

Special tokens are described by four roles, each ``None`` when the tokenizer has no such token:
``bos_id`` (beginning of sequence), ``eos_id`` (end of sequence), ``pad_id`` (padding), ``unk_id`` (unknown).

Serialisation: ``tok.to_dict()`` is a JSON-serialisable dict with a ``"type"`` field;
:func:`tokenizer_from_dict` inverts it; :func:`save_tokenizer` / :func:`load_tokenizer` write and read it as a JSON
file (written to a temporary name, then renamed, so a crash never leaves half a file).

Streaming: :class:`StreamDecoder` (and the generator :func:`decode_stream`) turn a growing list of ids into the
newly completed pieces of text, never splitting a multi-byte UTF-8 character across two pieces. Generation uses it
to print text as it is produced.
"""

from __future__ import annotations

import json
import operator
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Iterable, Iterator, Sequence

import numpy as np

__all__ = [
    "Tokenizer",
    "register_tokenizer_type",
    "tokenizer_types",
    "tokenizer_from_dict",
    "save_tokenizer",
    "load_tokenizer",
    "check_text_list",
    "StreamDecoder",
    "decode_after",
    "decode_stream",
]

# The Unicode replacement character: what a byte-level decoder produces for an incomplete UTF-8 sequence.
REPLACEMENT_CHAR = "\ufffd"


def _role(name: str, what: str) -> property:
    """A read-only property: the id of ``what`` (``self._role_ids[name]``), or None when the tokenizer has none."""
    return property(lambda self: self._role_ids.get(name), doc=f"The id of {what}, or None.")


class Tokenizer(ABC):
    """Base class: text ⇄ ids.

    Subclasses implement :meth:`_encode`, :meth:`decode`, :attr:`vocab_size`, :meth:`token_to_id`,
    :meth:`id_to_token`, :meth:`to_dict` and the classmethod :meth:`from_dict`, and set the class attribute
    ``type`` (the name stored in ``to_dict()["type"]``).
    """

    type: ClassVar[str] = ""

    # --- special-token roles: the ids of ``_role_ids`` (a subclass fills it), None when absent -------------
    _role_ids: dict[str, int | None] = {}
    bos_id = _role("bos", "the beginning-of-sequence token")
    eos_id = _role("eos", "the end-of-sequence token")
    pad_id = _role("pad", "the padding token")
    unk_id = _role("unk", "the unknown-character token")

    # --- the core interface --------------------------------------------------------------------------------
    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """``V``: every id produced by :meth:`encode` is in ``[0, V)``."""

    @abstractmethod
    def _encode(self, text: str) -> list[int]:
        """Encode without special tokens (subclasses implement this)."""

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Encode ``text`` into ids, optionally framed by ``bos_id`` / ``eos_id``.

        Shape:
            text: a ``str``; returns a list of ``N`` ints in ``[0, V)``.

        Raises:
            ValueError: ``text`` is not a string, or ``add_bos``/``add_eos`` is asked of a tokenizer without that token.
        """
        if not isinstance(text, str):
            raise ValueError(f"encode expects a str, got {type(text).__name__}")
        ids = self._encode(text)
        if add_bos:
            if self.bos_id is None:
                raise ValueError(f"add_bos=True but this {self.type!r} tokenizer has no bos token (bos_id is None)")
            ids = [self.bos_id] + ids
        if add_eos:
            if self.eos_id is None:
                raise ValueError(f"add_eos=True but this {self.type!r} tokenizer has no eos token (eos_id is None)")
            ids = ids + [self.eos_id]
        return ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Encode many texts (subclasses may parallelise). Shape: ``B`` strings → ``B`` lists of ids.

        Raises:
            ValueError: ``texts`` is one ``str`` (not a list of them) or holds something that is not a ``str``.
        """
        return [self.encode(t) for t in check_text_list(texts, "encode_batch")]

    @abstractmethod
    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        """Turn ids back into text. Ids outside ``[0, V)`` raise ``ValueError``.

        Shape:
            ids: ``N`` ints in ``[0, V)``; returns a ``str``.
        """

    @abstractmethod
    def token_to_id(self, token: str) -> int | None:
        """The id of the token spelled ``token`` (e.g. ``"<eos>"``, ``"a"``); ``None`` if not in the vocabulary."""

    @abstractmethod
    def id_to_token(self, id: int) -> str:
        """The vocabulary entry of ``id`` (its internal spelling). Out of range → ``ValueError``."""

    @property
    def special_ids(self) -> list[int]:
        """The distinct ids of the special tokens this tokenizer has (sorted)."""
        return sorted({i for i in (self.bos_id, self.eos_id, self.pad_id, self.unk_id) if i is not None})

    # --- serialisation ---------------------------------------------------------------------------------------
    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description including ``"type"``; :func:`tokenizer_from_dict` inverts it."""

    @classmethod
    @abstractmethod
    def from_dict(cls, d: dict[str, Any]) -> "Tokenizer":
        """Rebuild from :meth:`to_dict` output."""

    def save(self, path: str | os.PathLike) -> Path:
        """Same as :func:`save_tokenizer`."""
        return save_tokenizer(self, path)

    def _check_ids(self, ids: Iterable[int]) -> list[int]:
        """Validate ids for decoding: ints in ``[0, V)``; returns them as a list of Python ints."""
        V = self.vocab_size
        if not isinstance(ids, (list, tuple)) and hasattr(ids, "tolist"):  # numpy array or torch tensor
            ids = ids.tolist()
        if isinstance(ids, (list, tuple)) and len(ids) > 64:
            # fast path for long sequences: one vectorised range check
            arr = np.asarray(ids)
            if arr.ndim == 1 and arr.dtype.kind in "iu":
                if arr.size and (arr.min() < 0 or arr.max() >= V):
                    bad = arr[(arr < 0) | (arr >= V)][0]
                    raise ValueError(f"token id must be an integer in [0, {V}), got {int(bad)}")
                return list(ids) if isinstance(ids, tuple) else ids
        out = []
        for i in ids:
            # operator.index accepts Python, numpy and 0-d torch integers, and rejects floats and strings
            try:
                j = operator.index(i)
            except TypeError:
                raise ValueError(f"token ids must be integers, got {i!r} of type {type(i).__name__}") from None
            if isinstance(i, bool) or not 0 <= j < V:
                raise ValueError(f"token id must be an integer in [0, {V}), got {i!r}")
            out.append(j)
        return out

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(vocab_size={self.vocab_size}, bos_id={self.bos_id}, eos_id={self.eos_id}, "
                f"pad_id={self.pad_id}, unk_id={self.unk_id})")


def check_text_list(texts: Any, what: str) -> list[str]:
    """``texts`` as a list, or ``ValueError`` unless it is a sequence (or other iterable) of ``str``: one ``str``
    would be taken as its characters.

    Shape: ``B`` strings → a list of ``B`` strings."""
    if isinstance(texts, (str, bytes)):
        raise ValueError(f"{what} expects a list of texts, got one {type(texts).__name__} ({texts[:40]!r}); "
                         f"pass [text] to encode one text")
    try:
        texts = list(texts)
    except TypeError:
        raise ValueError(f"{what} expects a list of texts, got {type(texts).__name__}") from None
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"{what} expects strings, item {i} is {type(t).__name__}")
    return texts


# --- the type registry ----------------------------------------------------------------------------------------
_TYPES: dict[str, type[Tokenizer]] = {}
# Modules defining tokenizer types; imported on demand by tokenizer_from_dict so this file has no cycles.
_TYPE_MODULES = ("attnkit.data.tokenizers.char_tokenizer", "attnkit.data.tokenizers.bpe_tokenizer")


def register_tokenizer_type(cls: type[Tokenizer]) -> type[Tokenizer]:
    """Class decorator: make ``cls`` loadable by :func:`tokenizer_from_dict` under ``cls.type``."""
    if not cls.type:
        raise ValueError(f"{cls.__name__} must set a non-empty class attribute `type`")
    _TYPES[cls.type] = cls
    return cls


def tokenizer_types() -> list[str]:
    """The known ``"type"`` names."""
    import importlib

    for mod in _TYPE_MODULES:
        importlib.import_module(mod)
    return sorted(_TYPES)


def tokenizer_from_dict(d: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from ``tok.to_dict()``; the ``"type"`` field picks the class."""
    if not isinstance(d, dict) or "type" not in d:
        raise ValueError(f"a tokenizer description must be a dict with a 'type' field, got {str(d)[:80]!r}")
    known = tokenizer_types()
    if not isinstance(d["type"], str) or d["type"] not in _TYPES:
        raise ValueError(f"unknown tokenizer type {d['type']!r}; known types: {', '.join(known)}")
    return _TYPES[d["type"]].from_dict(d)


def save_tokenizer(tok: Tokenizer, path: str | os.PathLike) -> Path:
    """Write ``tok.to_dict()`` as JSON to ``path`` (:func:`attnkit.files.write_text_atomic`: a unique temporary
    name, flushed, renamed over ``path``). Returns the path."""
    from attnkit.files import write_text_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(tok.to_dict(), ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a char vocabulary may hold one): \u escapes load back exactly
        text = json.dumps(tok.to_dict())
    write_text_atomic(path, text + "\n")
    return path


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Read a tokenizer written by :func:`save_tokenizer`."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"tokenizer file {str(path)!r} is a folder, not a file; expected a tokenizer JSON file")
    if not path.is_file():
        raise ValueError(f"tokenizer file {str(path)!r} does not exist")
    from attnkit.data.json_files import read_json_file

    d = read_json_file(path, lambda e: ValueError(f"tokenizer file {str(path)!r} is not valid UTF-8 JSON: {e}"))
    return tokenizer_from_dict(d)


# --- streaming decode -----------------------------------------------------------------------------------------
class StreamDecoder:
    """Incremental detokenizer for streaming generation.

    Feed ids as they are generated with :meth:`push`; it returns the text that became *complete* with them
    (possibly ``""``). Text is only emitted once it no longer ends in an incomplete UTF-8 sequence (which a
    byte-level decoder renders as U+FFFD), so an emoji split over several byte tokens comes out whole.
    :meth:`flush` returns whatever is left at the end.

    How: we decode a short window ``ids[prefix:]`` and compare it with the decoding of the already-emitted part
    ``ids[prefix:read]``. Decoding with a little left context (rather than the new ids alone) keeps decoders that
    treat the first token specially (e.g. stripping a leading space) from changing the text.
    Concatenating all pieces gives ``tokenizer.decode(all_ids)`` for byte-level and character tokenizers. Only the
    ids from that left context on are kept, so a long stream (a whole validation split) costs no more memory than a
    short one.

    ``context``: ids that come before the stream (a prompt's), decoded as its left context and never returned, so
    the first piece is the text as it continues them: a SentencePiece-style decoder (Metaspace) drops the space
    of ``▁time`` at the start of a text, not after ``once upon a``. The pieces then join to
    :func:`decode_after` ``(tokenizer, context, ids)``; :meth:`flush` goes back to the context.

    Example::

        sd = StreamDecoder(tok)
        for new_id in generated:
            print(sd.push(new_id), end="", flush=True)
        print(sd.flush())
    """

    def __init__(self, tokenizer: Tokenizer, *, skip_special_tokens: bool = False, context: Sequence[int] = ()):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self._context = tokenizer._check_ids(list(context))
        self._restart()

    def _restart(self) -> None:
        self._ids: list[int] = list(self._context)  # the context, then the ids pushed since
        self._prefix = 0  # start of the decoding window (left context)
        self._read = len(self._ids)  # ids before this index have been emitted as text (or are the context)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, ids: int | Iterable[int]) -> str:
        """Append one id or several; return the newly completed text (``""`` if nothing completed yet)."""
        try:
            ids = list(ids)
        except TypeError:  # a single id (int, numpy or 0-d torch integer)
            ids = [ids]
        self._ids.extend(self.tokenizer._check_ids(ids))
        emitted = self._decode(self._ids[self._prefix:self._read])
        window = self._decode(self._ids[self._prefix:])
        if len(window) > len(emitted) and not window.endswith(REPLACEMENT_CHAR) and window.startswith(emitted):
            piece = window[len(emitted):]
            del self._ids[:self._read]  # before the new left context: never decoded again (memory stays a window)
            self._prefix, self._read = 0, len(self._ids)
            return piece
        return ""

    def flush(self) -> str:
        """Return the remaining text (incomplete UTF-8 at the very end becomes U+FFFD) and reset."""
        emitted = self._decode(self._ids[self._prefix:self._read])
        window = self._decode(self._ids[self._prefix:])
        piece = window[len(emitted):] if window.startswith(emitted) else self._decode(self._ids[self._read:])
        self._restart()
        return piece


def decode_after(tokenizer: Tokenizer, context: Sequence[int], ids: Sequence[int], *,
                 skip_special_tokens: bool = False) -> str:
    """The text of ``ids`` as it continues ``context`` (a prompt's ids): ``decode(context + ids)`` less
    ``decode(context)``, so a decoder that drops a leading space at the start of a text (SentencePiece's Metaspace)
    keeps the one between a prompt and its continuation, as Hugging Face's text-generation pipeline does; plain
    ``decode(ids)`` where the context's text is not a prefix of the whole (a decoder that rewrites across ids)."""
    head = tokenizer.decode(list(context), skip_special_tokens=skip_special_tokens)
    whole = tokenizer.decode([*context, *ids], skip_special_tokens=skip_special_tokens)
    return whole[len(head):] if whole.startswith(head) else tokenizer.decode(list(ids),
                                                                             skip_special_tokens=skip_special_tokens)


def decode_stream(tokenizer: Tokenizer, ids: Iterable[int | Sequence[int]], *,
                  skip_special_tokens: bool = False) -> Iterator[str]:
    """Yield the completed text pieces while consuming ``ids`` (single ids or chunks); a final flush is included.

    Empty pieces are not yielded. ``"".join(decode_stream(tok, ids)) == tok.decode(list(ids))`` for
    byte-level BPE and character tokenizers.
    """
    sd = StreamDecoder(tokenizer, skip_special_tokens=skip_special_tokens)
    for chunk in ids:
        piece = sd.push(chunk)
        if piece:
            yield piece
    tail = sd.flush()
    if tail:
        yield tail
