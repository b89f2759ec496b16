"""Readable labels for token ids, and what each token is underneath (its piece, its bytes, its id).

Axis legend: ``N`` tokens in a sequence.

Two kinds of label:

- :func:`text_labels` labels the tokens of one running text (the ticks of an attention map, the tokens of the
  attention page). A byte-level BPE (GPT-2's, attnkit's :class:`~attnkit.data.tokenizers.bpe_tokenizer.BPETokenizer`,
  a GGUF model's) may cut a character into several tokens: "ß" is the two bytes ``c3 9f``, an emoji four. Such a
  character is shown whole on the token that completes it (where the text can first be read, as a streaming
  decoder prints it), and every earlier token that holds some of its bytes ends in ``◌`` (U+25CC, "a character
  continues in a later token"). So GPT-2's ``ĠðŁĺ`` ``Ģ`` read ``·◌`` ``😀``, and a German BPE's ``oÃ`` ``Ł``
  read ``o◌`` ``ß``.
- :func:`token_labels` labels ids that stand alone (the top-k candidates for the next token): each id is decoded
  on its own. Bytes that are not a whole character on their own are written in hex between ``‹ ›``: the lone
  first byte of "ß" is ``‹c3›``.

Whitespace that would vanish on a plot axis is made visible: a leading/trailing space becomes ``·`` (as in
``·the``), a newline ``↵``, a tab ``⇥``, another ASCII control character its byte (``‹1b›``); a C1 control, a
line separator, a bidi control (which would reorder the text around it) and a token of format characters only (a
lone zero-width space) show their code points (``‹U+202E›``). Special tokens keep their spelling (``<bos>``).
:func:`token_titles` gives the raw form for a hover text: the id, the piece as the tokenizer spells it (``"ÃŁ"``)
and its bytes.

The bytes of a token come from its piece: a byte-level tokenizer spells every byte as one printable character
(:func:`~attnkit.data.tokenizers.bpe_tokenizer.bytes_to_unicode`), so inverting that map gives them back exactly.
A SentencePiece-style tokenizer with byte fallback (Llama 2's, Mistral's ``tokenizer.json``: a decoder with
``ByteFallback``, ``Metaspace`` or ``Replace("▁", " ")``) spells a byte it has no piece for as ``<0xC3>`` and a
space as ``▁``: those become the byte and a space, and its characters are put together as for byte-level BPE
(``<0xC3>`` ``<0x9F>`` read ``◌`` ``ß``). Where its decoder drops the space it put before the text (``Strip``,
``Metaspace``), :func:`text_labels` drops it from the first token too, so the labels still spell the text.
Other tokenizers (characters) decode the id on its own and take that text's UTF-8 bytes.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

__all__ = ["TokenPiece", "text_labels", "token_labels", "token_pieces", "token_titles", "visible", "CONTINUES"]

_REPLACEMENTS = {"\n": "↵", "\r": "␍", "\t": "⇥"}
# bidi controls (marks, embeddings, overrides, isolates): invisible, and they reorder the text around them
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

CONTINUES = "◌"  # this token holds the first bytes of a character that a later token completes


def _hides(c: str) -> bool:
    """Whether ``c`` shows nothing or moves its neighbours: a control, a line separator, a bidi control."""
    return unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in _BIDI


def _shown(c: str, alone: bool) -> str:
    """``c`` itself, or its byte (ASCII) or code point where it would show nothing or move its neighbours:
    ``‹1b›``, ``‹U+202E›``. Other format characters (a zero-width joiner in an emoji or a word) stay, unless
    the text is ``alone`` made of them."""
    if _hides(c) or (alone and unicodedata.category(c) == "Cf"):
        return f"‹{ord(c):02x}›" if ord(c) < 0x80 else f"‹U+{ord(c):04X}›"
    return c


def visible(text: str) -> str:
    """Make whitespace visible: spaces at either end -> ``·``, newline -> ``↵``, tab -> ``⇥``; another control
    character is written as its byte in hex (escape -> ``‹1b›``), a C1 control, a line separator or a bidi
    control as its code point (right-to-left override -> ``‹U+202E›``), and so is a text of format characters
    only (a lone zero-width space -> ``‹U+200B›``)."""
    for raw, shown in _REPLACEMENTS.items():
        text = text.replace(raw, shown)
    alone = all(unicodedata.category(c) == "Cf" for c in text)  # e.g. a lone zero-width space: no label at all
    text = "".join(_shown(c, alone) for c in text)
    if text == "":
        return "∅"
    stripped = text.strip(" ")
    if not stripped:
        return "·" * len(text)
    left = len(text) - len(text.lstrip(" "))
    right = len(text) - len(text.rstrip(" "))
    return "·" * left + stripped + "·" * right


@dataclass(frozen=True)
class TokenPiece:
    """What one token id stands for.

    ``piece``: the vocabulary entry as the tokenizer spells it (``"ĠðŁĺ"``; the id as text without a tokenizer);
    ``data``: its bytes, or ``None`` for a special token (``<bos>``), which is not text; ``special``: whether it is.
    """

    id: int
    piece: str
    data: bytes | None
    special: bool


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    from attnkit.data.tokenizers.bpe_tokenizer import bytes_to_unicode

    return {ch: b for b, ch in bytes_to_unicode().items()}


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # a SentencePiece byte-fallback piece


@dataclass(frozen=True)
class _Scheme:
    """How a ``tokenizers`` backend spells its pieces: ``byte_level`` (GPT-2's byte alphabet) or ``metaspace``
    (SentencePiece style: ``space`` stands for a space, ``<0xNN>`` for a byte); ``strips``: its decoder drops the
    space put before the text."""

    kind: str
    space: str = "▁"
    strips: bool = False


def _decoder_steps(backend: Any) -> list[dict]:
    """The backend's decoder as a flat list of its JSON descriptions (a ``Sequence`` expanded); [] if unreadable."""
    decoder = getattr(backend, "decoder", None)
    if decoder is None:
        return []
    try:
        state = json.loads(decoder.__getstate__())
    except Exception:  # noqa: BLE001 - a decoder we cannot read: treated as none
        return []

    def flat(d: Any) -> list[dict]:
        if not isinstance(d, dict):
            return []
        if d.get("type") == "Sequence":
            return [s for x in d.get("decoders") or [] for s in flat(x)]
        return [d]

    return flat(state)


def _backend_scheme(tokenizer: Any):
    """``(backend, scheme)``: the ``tokenizers.Tokenizer`` behind ``tokenizer`` and how it spells its pieces, or
    ``(None, None)`` when it is neither byte-level nor SentencePiece style."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders

    backend = getattr(tokenizer, "backend", None)
    if not isinstance(backend, Backend):
        return None, None
    if isinstance(backend.decoder, decoders.ByteLevel):
        return backend, _Scheme("byte_level")
    steps = _decoder_steps(backend)
    space, strips, metaspace = "▁", False, False
    for step in steps:
        kind = step.get("type")
        if kind == "Metaspace":
            metaspace = True
            space = step.get("replacement") or space
            strips = strips or step.get("prepend_scheme", "always") != "never" or bool(step.get("add_prefix_space"))
        elif kind == "ByteFallback":
            metaspace = True
        elif kind == "Replace" and step.get("content") == " ":
            pattern = step.get("pattern") or {}
            if isinstance(pattern, dict) and isinstance(pattern.get("String"), str) and pattern["String"]:
                metaspace, space = True, pattern["String"]
        elif kind == "Strip" and step.get("content") == " " and int(step.get("start") or 0) > 0:
            strips = True
    if metaspace:
        return backend, _Scheme("metaspace", space, strips)
    return None, None


def _metaspace_bytes(piece: str, space: str) -> bytes:
    """A SentencePiece-style piece's bytes: ``<0xC3>`` is the byte c3, ``space`` (``▁``) a space."""
    m = _BYTE_PIECE.fullmatch(piece)
    if m:
        return bytes([int(m.group(1), 16)])
    return piece.replace(space, " ").encode("utf-8", "surrogatepass")


def token_pieces(tokenizer: Any, ids: Sequence[int]) -> list[TokenPiece]:
    """The piece, bytes and kind of every id (see :class:`TokenPiece`); ``tokenizer`` may be ``None``.

    Shape:
        ids ``(N,)`` -> ``N`` pieces.
    """
    ids = [int(i) for i in ids]
    if tokenizer is None:
        return [TokenPiece(i, str(i), str(i).encode(), False) for i in ids]
    special = set(getattr(tokenizer, "special_ids", None) or [])
    backend, scheme = _backend_scheme(tokenizer)
    added = backend.get_added_tokens_decoder() if backend is not None else {}
    to_byte = _unicode_to_byte()
    pieces = []
    for i in ids:
        piece = tokenizer.id_to_token(i) if hasattr(tokenizer, "id_to_token") else tokenizer.decode([i])
        if i in special or (i in added and added[i].special):
            pieces.append(TokenPiece(i, piece, None, True))
        elif i in added:  # a user-defined token is stored as plain text, not in the byte alphabet
            pieces.append(TokenPiece(i, piece, added[i].content.encode("utf-8"), False))
        elif scheme is not None and scheme.kind == "metaspace" and isinstance(piece, str):
            pieces.append(TokenPiece(i, piece, _metaspace_bytes(piece, scheme.space), False))
        elif backend is not None and all(ch in to_byte for ch in piece):
            pieces.append(TokenPiece(i, piece, bytes(to_byte[ch] for ch in piece), False))
        else:
            pieces.append(TokenPiece(i, piece, tokenizer.decode([i]).encode("utf-8", "surrogatepass"), False))
    return pieces


def _char_length(data: bytes, at: int) -> int:
    """How many bytes the UTF-8 character starting at ``data[at]`` has, or 0 if no valid character starts there."""
    lead = data[at]
    if lead < 0x80:
        return 1
    n = 2 if 0xC2 <= lead < 0xE0 else 3 if 0xE0 <= lead < 0xF0 else 4 if 0xF0 <= lead < 0xF5 else 0
    if n == 0 or at + n > len(data):
        return 0
    try:
        data[at:at + n].decode("utf-8")  # rejects bad continuation bytes, overlong forms and surrogates
    except UnicodeDecodeError:
        return 0
    return n


def _shorten(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def _check_max_chars(max_chars: int) -> None:
    if not isinstance(max_chars, int) or max_chars < 2:
        raise ValueError(f"max_chars must be an int >= 2, got {max_chars!r}")


class _Spelling:
    """The text of one token being built: whole characters as themselves, each run of stray bytes as ``‹hex›``."""

    def __init__(self) -> None:
        self.parts: list[str | bytearray] = []

    def char(self, text: str) -> None:
        self.parts.append(text)

    def stray(self, byte: int) -> None:
        if self.parts and isinstance(self.parts[-1], bytearray):
            self.parts[-1].append(byte)
        else:
            self.parts.append(bytearray([byte]))

    def text(self) -> str:
        return "".join(p if isinstance(p, str) else "‹" + p.hex() + "›" for p in self.parts)


def _alone(data: bytes) -> str:
    """One token's bytes as text on their own: whole characters as themselves, other bytes as ``‹hex›``."""
    out, at = _Spelling(), 0
    while at < len(data):
        n = _char_length(data, at)
        if n:
            out.char(data[at:at + n].decode("utf-8"))
        else:
            out.stray(data[at])
        at += n or 1
    return out.text()


def token_labels(tokenizer: Any, ids: Sequence[int], *, max_chars: int = 12) -> list[str]:
    """One short label per id, each id decoded on its own (see the module docstring); ``tokenizer`` may be
    ``None`` (ids as text). For the tokens of one running text use :func:`text_labels`.

    Shape:
        ids ``(N,)`` -> ``N`` strings.
    """
    _check_max_chars(max_chars)
    labels = []
    for p in token_pieces(tokenizer, ids):
        text = p.piece if p.data is None or tokenizer is None else visible(_alone(p.data))
        labels.append(_shorten(text, max_chars))
    return labels


def text_labels(tokenizer: Any, ids: Sequence[int], *, max_chars: int = 12) -> list[str]:
    """One label per token of a running text: a character cut into several tokens is shown on the token that
    completes it, earlier ones end in ``◌`` (see the module docstring); ``tokenizer`` may be ``None``.

    Joined without the ``◌`` marks (and with the whitespace marks undone) the labels of a text spell the text.

    Shape:
        ids ``(N,)`` -> ``N`` strings.
    """
    _check_max_chars(max_chars)
    pieces = token_pieces(tokenizer, ids)
    _, scheme = _backend_scheme(tokenizer) if tokenizer is not None else (None, None)
    if scheme is not None and scheme.strips:
        # the decoder drops the space the tokenizer put before the text: so does the text's first token
        first = next((k for k, p in enumerate(pieces) if p.data is not None), None)
        if first is not None and pieces[first].data.startswith(b" "):
            p = pieces[first]
            pieces[first] = TokenPiece(p.id, p.piece, p.data[1:], p.special)
    texts = [_Spelling() for _ in pieces]
    pending = [False for _ in pieces]
    run: list[int] = []  # positions of the tokens of the current stretch of text (special tokens cut it)

    def flush() -> None:
        data = b"".join(pieces[k].data for k in run)
        owner = [k for k in run for _ in pieces[k].data]  # which token each byte came from
        at = 0
        while at < len(data):
            n = _char_length(data, at)
            if n:
                last = owner[at + n - 1]
                texts[last].char(data[at:at + n].decode("utf-8"))
                for k in {owner[b] for b in range(at, at + n - 1)} - {last}:
                    pending[k] = True
            else:  # a byte that starts no valid character: written in hex where it is
                texts[owner[at]].stray(data[at])
            at += n or 1
        run.clear()

    for k, p in enumerate(pieces):
        if p.data is None:
            flush()
        else:
            run.append(k)
    flush()
    labels = []
    for p, spelling, cont in zip(pieces, texts, pending):
        text = spelling.text()
        if p.data is None or tokenizer is None:
            label = p.piece
        elif cont:
            label = (visible(text) if text else "") + CONTINUES
        else:
            label = visible(text)
        labels.append(_shorten(label, max_chars))
    return labels


def token_titles(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """A hover text per id: ``id 39683 · piece "ÃŁ" · bytes c3 9f`` (a special token: ``id 1 · special "<bos>"``).

    Shape:
        ids ``(N,)`` -> ``N`` strings.
    """
    titles = []
    for p in token_pieces(tokenizer, ids):
        # quoted, with \n, \t and any other character that hides or reorders text escaped (\u202e)
        piece = "".join(f"\\u{ord(c):04x}" if _hides(c) else c for c in json.dumps(p.piece, ensure_ascii=False))
        if p.data is None:
            titles.append(f"id {p.id} · special {piece}")
        else:
            titles.append(f"id {p.id} · piece {piece} · bytes {p.data.hex(' ') or '(none)'}")
    return titles
