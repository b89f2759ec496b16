"""Character-level tokenizer: one id per distinct character, as in Karpathy's char-rnn / nanoGPT Shakespeare.

The vocabulary is the sorted set of characters of the training text (sorted by code point, so ``"\\n"`` and
``" "`` come first, then punctuation, digits, capitals, lower case). There are no special tokens: ``bos_id``,
``eos_id``, ``pad_id`` and ``unk_id`` are all ``None``, and a character outside the vocabulary is an error rather
than a silent ``<unk>``. Train it on all the text a model will see (train *and* valid), as nanoGPT does.

Axes: ``V`` vocabulary size (number of distinct characters), ``N`` number of characters / ids.

Encoding and decoding are vectorised with numpy (a 5 MB text takes a fraction of a second): the text's code
points index a lookup table ``code point -> id``, and decoding maps ids back to code points and decodes UTF-32.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from attnkit.data.tokenizers.tokenizer import Tokenizer, register_tokenizer_type

__all__ = ["CharTokenizer"]


def _code_points(text: str) -> np.ndarray:
    """The code points of ``text`` as a uint32 array of length ``N`` (UTF-32 is one 4-byte unit per character)."""
    # "surrogatepass" lets the (rare) lone surrogate through as its own code point instead of failing
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


@register_tokenizer_type
class CharTokenizer(Tokenizer):
    """Maps each character of a fixed alphabet to its index in the sorted alphabet.

    Args:
        chars: the vocabulary, an iterable of distinct single characters (stored sorted by code point).
    """

    type = "char"

    def __init__(self, chars: Iterable[str]):
        chars = list(chars)
        for c in chars:
            if not isinstance(c, str) or len(c) != 1:
                raise ValueError(f"each vocabulary entry must be a single character, got {c!r}")
        if len(set(chars)) != len(chars):
            dupes = sorted({c for c in chars if chars.count(c) > 1})  # (small vocabularies: quadratic is fine)
            raise ValueError(f"vocabulary characters must be distinct, got duplicates {dupes[:10]}")
        if not chars:
            raise ValueError("a character vocabulary needs at least one character, got none")
        self._chars: list[str] = sorted(chars)
        self._index: dict[str, int] = {c: i for i, c in enumerate(self._chars)}
        # sorted code points, for vectorised lookup; position in this array = token id
        self._cps = np.array([ord(c) for c in self._chars], dtype=np.uint32)
        self._table = np.full(int(self._cps[-1]) + 1, -1, dtype=np.int32)  # code point -> id (at most 4.4 MB)
        self._table[self._cps] = np.arange(len(self._cps), dtype=np.int32)

    @classmethod
    def train(cls, text: str | Iterable[str]) -> "CharTokenizer":
        """Vocabulary = the sorted distinct characters of ``text`` (a string or an iterable of strings)."""
        if not isinstance(text, str) and (isinstance(text, (bytes, bytearray)) or not hasattr(text, "__iter__")):
            raise ValueError(f"CharTokenizer.train expects a string or an iterable of strings, got "
                             f"{type(text).__name__} {str(text)[:60]!r}")
        texts = [text] if isinstance(text, str) else list(text)
        seen: set[str] = set()
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"CharTokenizer.train expects strings, item {i} is {type(t).__name__}")
            seen.update(chr(c) for c in np.unique(_code_points(t)).tolist())
        if not seen:
            raise ValueError("cannot build a character vocabulary from empty text (0 characters)")
        return cls(seen)

    @property
    def chars(self) -> list[str]:
        """The vocabulary, in id order."""
        return list(self._chars)

    @property
    def vocab_size(self) -> int:
        return len(self._chars)

    def encode_array(self, text: str) -> np.ndarray:
        """Vectorised encoding.

        Shape:
            text of ``N`` characters → int64 array ``(N,)`` with values in ``[0, V)``.

        Raises:
            ValueError: naming the characters that are not in the vocabulary (repr, up to 10) and how many there are.
        """
        if not isinstance(text, str):
            raise ValueError(f"encode expects a str, got {type(text).__name__}")
        cps = _code_points(text)  # (N,)
        # table[code point] = id, or -1 for characters outside the vocabulary; code points above the
        # largest vocabulary code point are clipped to it first and then caught by the `known` test
        clipped = np.minimum(cps, self._cps[-1])  # (N,)
        ids = self._table[clipped]  # (N,)
        known = (ids >= 0) & (clipped == cps)  # (N,) True where the character is in the vocabulary
        if not known.all():
            bad, counts = np.unique(cps[~known], return_counts=True)
            shown = ", ".join(repr(chr(c)) for c in bad[:10].tolist())
            more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
            raise ValueError(
                f"{len(bad)} distinct character(s) not in the vocabulary of {self.vocab_size} "
                f"({int(counts.sum())} occurrence(s) in a text of {len(cps)} characters): {shown}{more}; "
                "a character-level tokenizer knows only the characters of the text it was built from: use only those "
                "(in a prompt), or build it from all the text it must encode (train and valid)"
            )
        return ids.astype(np.int64)

    def _encode(self, text: str) -> list[int]:
        return self.encode_array(text).tolist()

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        # (no special tokens, so skip_special_tokens changes nothing)
        ids = self._check_ids(ids)
        # ids -> code points -> UTF-32 bytes -> str, all vectorised
        return self._cps[np.asarray(ids, dtype=np.int64)].astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")

    def token_to_id(self, token: str) -> int | None:
        return self._index.get(token)

    def id_to_token(self, id: int) -> str:
        (i,) = self._check_ids([id])
        return self._chars[i]

    def to_dict(self) -> dict[str, Any]:
        """``{"type": "char", "chars": [the vocabulary in id order]}``."""
        return {"type": self.type, "chars": list(self._chars)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CharTokenizer":
        """Rebuild from :meth:`to_dict`; ``ValueError`` for ``chars`` out of id order (a damaged or hand-made file)."""
        if d.get("type") != cls.type or not isinstance(d.get("chars"), list):
            raise ValueError(f"expected a dict with type {cls.type!r} and a 'chars' list, got keys {sorted(d)}")
        tok = cls(d["chars"])
        if tok.chars != d["chars"]:  # ids are positions in the list: another order would give other ids
            shown = next(f"{a!r} before {b!r}" for a, b in zip(d["chars"], d["chars"][1:]) if not a < b)
            raise ValueError(f"a char tokenizer's 'chars' must be its vocabulary in id order, sorted by code point "
                             f"as to_dict writes it; got {shown}")
        return tok
