"""Byte-level BPE: a :class:`~attnkit.data.tokenizers.tokenizer.Tokenizer` backed by a Hugging Face ``tokenizers.Tokenizer``.

Byte-pair encoding starts from the 256 possible bytes and repeatedly merges the most frequent adjacent pair
into a new token, so common words become single tokens while any text (any language, emoji, binary-looking junk)
can still be written with the byte tokens. "Byte-level" (GPT-2's trick) means the text is first turned into its
UTF-8 bytes and every byte is shown as one printable character (see :func:`bytes_to_unicode`), so the BPE model
works on strings yet can never meet an unknown symbol: encoding then decoding gives back exactly the input text.

Axes: ``V`` vocabulary size, ``N`` number of ids, ``B`` number of texts in a batch.

Two ways to get one:

- :meth:`BPETokenizer.train` learns a vocabulary from text (byte-level pre-tokenizer with GPT-2's splitting
  regex, byte-level decoder, no prefix space added, no normaliser, so round-trips are exact);
- ``BPETokenizer(tokenizers_obj, bos=..., eos=..., pad=..., unk=...)`` wraps any existing ``tokenizers.Tokenizer``
  (GPT-2's from :mod:`attnkit.data.tokenizers.gpt2_tokenizer`, the MT joint BPE, a GGUF/SmolLM2 tokenizer).

``encode`` never adds special tokens by itself (``add_special_tokens=False`` is passed to the backend, so a
post-processor template is ignored); ask for them with ``encode(text, add_bos=True, add_eos=True)``. Nor does it
truncate or pad: a wrapped tokenizer's truncation and padding settings (a ``tokenizer.json`` saved with them on)
are turned off, in a copy, as ``transformers`` ignores them unless asked. Special tokens
written literally in the text (e.g. ``"<|endoftext|>"``) are recognised as their single id, and ``decode`` writes
them back (unless ``skip_special_tokens=True``, which drops the bos/eos/pad/unk tokens too, as transformers does),
so such text round-trips too.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from attnkit.checks import check_int, is_int
from attnkit.data.tokenizers.tokenizer import Tokenizer, check_text_list, register_tokenizer_type

MAX_BPE_VOCAB = 1 << 22  # 4,194,304 tokens, 16x the largest vocabularies in use; the trainer allocates per token

__all__ = ["BPETokenizer", "bytes_to_unicode", "GPT2_SPLIT_PATTERN", "byte_level_pre_tokenizer", "backend_call",
           "check_encodable", "check_encodable_text", "tokenizer_from_json"]

# GPT-2's pre-tokenization regex: text is first cut into pieces (contractions, a word with its leading space,
# a number, a run of punctuation, whitespace), and BPE merges never cross a piece boundary.
# `\s+(?!\S)` takes a whitespace run but leaves its last space to start the next word (" world").
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Conventional spellings of special tokens, used to fill the roles when `train` is not told them explicitly.
_ROLE_NAMES = {
    "bos": ("<bos>", "<s>", "<|startoftext|>", "<|im_start|>"),
    "eos": ("<eos>", "</s>", "<|endoftext|>", "<|im_end|>"),
    "pad": ("<pad>", "<|pad|>"),
    "unk": ("<unk>", "<|unk|>"),
}


def backend_call(what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` on the Rust ``tokenizers`` backend, its errors as one ``ValueError``: it raises a
    bare ``Exception`` for a malformed tokenizer JSON or a model that cannot encode, and a ``PanicException`` (a
    ``BaseException``) where its own code fails an assertion."""
    try:
        return call(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit, GeneratorExit, ValueError):
        raise
    except BaseException as err:  # noqa: BLE001 - Exception and pyo3's PanicException
        message = " ".join(str(err).split()) or type(err).__name__
        raise ValueError(f"{what}: {message[:500]}") from None


def check_encodable(texts: Sequence[str]) -> None:
    """``ValueError`` naming the first lone surrogate in ``texts``: such a ``str`` is not Unicode text (UTF-8 cannot
    encode it), and the backend refuses it saying only that it "must be str"."""
    for text in texts:
        check_encodable_text(text)


def check_encodable_text(text: str, what: str = "the text", offset: int = 0) -> None:
    """:func:`check_encodable` of one text, named ``what`` in the message; ``text`` starts at character ``offset``
    of that text (a piece of a longer one)."""
    if isinstance(text, str) and not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            start = max(err.start - 20, 0)
            raise ValueError(f"cannot tokenize a lone surrogate, {text[err.start]!r} at character "
                             f"{offset + err.start} of {what} (near {text[start:err.start + 20]!r}): expected Unicode "
                             "text that UTF-8 can encode") from None


def _check_bpe_merges(spec: Any, what: str) -> None:
    """Refuse a BPE model whose merges the backend would panic on. With a ``continuing_subword_prefix`` the model
    merges ``a`` and ``b`` into ``a + b[len(prefix):]``, slicing ``b`` by the prefix's length in bytes without a
    check: a second part that does not start with the prefix (shorter than it, or cut inside a character) makes
    the Rust code panic, which prints a backtrace to stderr before Python sees the error."""
    model = spec.get("model") if isinstance(spec, dict) else None
    if not isinstance(model, dict) or model.get("type", "BPE") != "BPE":
        return
    prefix, merges = model.get("continuing_subword_prefix"), model.get("merges")
    if not isinstance(prefix, str) or not prefix or not isinstance(merges, list):
        return
    for i, merge in enumerate(merges):
        pair = merge.split(" ") if isinstance(merge, str) else merge
        if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str) and not pair[1].startswith(prefix):
            raise ValueError(f"{what}: merge {i} joins {pair[0][:40]!r} and {pair[1][:40]!r}, but the second part of "
                             f"a merge must start with the model's continuing_subword_prefix {prefix[:40]!r}"
                             f"{f' ({len(prefix):,} characters)' if len(prefix) > 40 else ''}")


def tokenizer_from_json(text: str, what: str) -> tokenizers.Tokenizer:
    """A ``tokenizers.Tokenizer`` from its JSON text; any error, the backend's included, as one ``ValueError``
    starting with ``what``."""
    try:
        spec = json.loads(text)
    except ValueError as err:  # JSONDecodeError; RecursionError is not a ValueError and goes to the backend
        raise ValueError(f"{what}: {err}") from None
    except RecursionError:
        spec = None
    _check_bpe_merges(spec, what)
    return backend_call(what, tokenizers.Tokenizer.from_str, text)


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from each byte value (0..255) to one printable Unicode character.

    Bytes that are already visible, non-space characters (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``) map to themselves;
    the remaining 68 (control characters, space, …) are given the code points 256, 257, … in byte order.
    So a space (byte 32) becomes ``"Ġ"`` (U+0120) and a newline (byte 10) ``"Ċ"`` (U+010A).
    """
    visible = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping: dict[int, str] = {b: chr(b) for b in visible}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return dict(sorted(mapping.items()))


def byte_level_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """GPT-2 pre-tokenization spelled out: split with :data:`GPT2_SPLIT_PATTERN`, then map bytes to characters.

    Equivalent to ``pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)``, written in two steps
    so the regex is visible.
    """
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(GPT2_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def _chunks_of(text: str, size: int = 1 << 20) -> Iterator[str]:
    """Cut one long string into ~``size``-character pieces, each ending just after a newline when possible."""
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            nl = text.rfind("\n", start, end)
            if nl > start:
                end = nl + 1
        yield text[start:end]
        start = end


@register_tokenizer_type
class BPETokenizer(Tokenizer):
    """A byte-level BPE tokenizer (or any ``tokenizers.Tokenizer``) behind the attnkit interface.

    Args:
        tokenizer: the ``tokenizers.Tokenizer`` doing the work (a copy without its truncation and padding, if
            it has any).
        bos, eos, pad, unk: the special token for each role, as its spelling (``"<eos>"``) or its id; ``None`` for
            none. Each must be in the vocabulary.
    """

    type = "bpe"

    def __init__(self, tokenizer: tokenizers.Tokenizer, *, bos: str | int | None = None, eos: str | int | None = None,
                 pad: str | int | None = None, unk: str | int | None = None):
        if not isinstance(tokenizer, tokenizers.Tokenizer):
            raise ValueError(f"BPETokenizer wraps a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
        if tokenizer.truncation is not None or tokenizer.padding is not None:
            # a tokenizer.json saved with truncation or padding on would cut every text at max_length and pad it
            # with pad ids; transformers ignores both unless asked, and encode never does either (a copy: the
            # caller's object stays as it was)
            tokenizer = tokenizers.Tokenizer.from_str(tokenizer.to_str())
            tokenizer.no_truncation()
            tokenizer.no_padding()
        self._tok = tokenizer
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        # V = largest id + 1 (robust to added tokens placed after gaps)
        self._vocab_size = max(vocab.values()) + 1 if vocab else 0
        self._roles: dict[str, str | None] = {}
        self._role_ids: dict[str, int | None] = {}
        for role, tok in (("bos", bos), ("eos", eos), ("pad", pad), ("unk", unk)):
            if tok is None:
                self._roles[role], self._role_ids[role] = None, None
                continue
            if isinstance(tok, bool) or not isinstance(tok, (str, int)):
                raise ValueError(f"{role} must be a token (a string) or its id (an int), got {tok!r}")
            if isinstance(tok, int):
                spelled = tokenizer.id_to_token(tok) if 0 <= tok < 2**32 else None
                if spelled is None:
                    raise ValueError(f"{role} id must be in [0, {self._vocab_size}), got {tok}")
                tok = spelled
            tid = tokenizer.token_to_id(tok)
            if tid is None:
                raise ValueError(f"{role} token {tok!r} is not in the vocabulary (size {self._vocab_size})")
            self._roles[role], self._role_ids[role] = tok, tid
        # role tokens the backend does not mark special (a tokenizer_config.json's eos that tokenizer.json adds as
        # an ordinary token): decode(skip_special_tokens=True) drops them too, as transformers does
        marked = tokenizer.get_added_tokens_decoder()
        self._unmarked_special = {i for i in self._role_ids.values()
                                  if i is not None and not (i in marked and marked[i].special)}

    # --- construction ------------------------------------------------------------------------------------------
    @classmethod
    def train(cls, texts: str | Iterable[str], vocab_size: int, *, special_tokens: Sequence[str] = (),
              min_frequency: int = 2, bos: str | None = None, eos: str | None = None, pad: str | None = None,
              unk: str | None = None, show_progress: bool = False) -> "BPETokenizer":
        """Learn a byte-level BPE vocabulary of (at most) ``vocab_size`` entries from ``texts``.

        Args:
            texts: one string or an iterable of strings (e.g. lines, documents, or a generator over a file).
            vocab_size: target size ``V`` including the 256 byte tokens and the special tokens.
            special_tokens: tokens added first, with ids ``0..len-1`` in the given order (e.g.
                ``["<pad>", "<bos>", "<eos>", "<unk>"]``); never split, matched literally in text.
            min_frequency: a pair must occur at least this often to be merged.
            bos, eos, pad, unk: the role of each special token. When left ``None``, a special token with a
                conventional spelling fills the role (``<bos>``/``<s>`` → bos,
                ``<eos>``/``</s>``/``<|endoftext|>`` → eos, ``<pad>`` → pad, ``<unk>`` → unk).
            show_progress: show the ``tokenizers`` progress bar.

        Shape:
            returns a tokenizer with ``vocab_size <= V``; fewer when the text has too few distinct pairs.
        """
        if not isinstance(texts, str) and (isinstance(texts, (bytes, bytearray)) or not hasattr(texts, "__iter__")):
            raise ValueError(f"texts must be a string or an iterable of strings, got {type(texts).__name__} "
                             f"{str(texts)[:60]!r}")
        if isinstance(special_tokens, (str, bytes)):  # a list of its characters would become the special tokens
            raise ValueError(f"special_tokens must be a list of token strings, e.g. [{special_tokens!r}], got "
                             f"the {type(special_tokens).__name__} {special_tokens!r}")
        special_tokens = list(special_tokens)
        for token in special_tokens:
            if not isinstance(token, str) or not token:
                raise ValueError(f"special_tokens must be non-empty strings, got {token!r} in {special_tokens}")
        if len(set(special_tokens)) != len(special_tokens):
            raise ValueError(f"special_tokens must be distinct, got {special_tokens}")
        minimum = 256 + len(special_tokens)
        if not is_int(vocab_size) or not minimum <= vocab_size <= MAX_BPE_VOCAB:
            raise ValueError(f"vocab_size must be an int in [256 bytes + {len(special_tokens)} special tokens = "
                             f"{minimum}, {MAX_BPE_VOCAB:,}], got {vocab_size!r}")
        check_int("min_frequency", min_frequency, minimum=1)  # not a bool: True is a bug, not a 1
        roles = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
        for role, tok in roles.items():
            if tok is not None and tok not in special_tokens:
                raise ValueError(f"{role}={tok!r} must be one of special_tokens {special_tokens}")
            if tok is None:
                roles[role] = next((t for t in special_tokens if t in _ROLE_NAMES[role]), None)

        tok = tokenizers.Tokenizer(models.BPE())
        tok.pre_tokenizer = byte_level_pre_tokenizer()
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=special_tokens,
            # all 256 byte characters are in the vocabulary even if the training text lacks some of them,
            # so any later text can be encoded
            initial_alphabet=list(bytes_to_unicode().values()),
            show_progress=show_progress,
        )

        def pieces(text: str, what: str) -> Iterator[str]:
            offset = 0
            for piece in _chunks_of(text):  # a lone surrogate: the backend's UnicodeEncodeError names no text
                check_encodable_text(piece, what, offset)
                offset += len(piece)
                yield piece

        def iterate() -> Iterator[str]:
            if isinstance(texts, str):
                yield from pieces(texts, "the training text")
                return
            for i, t in enumerate(texts):
                if not isinstance(t, str):
                    raise ValueError(f"texts must be strings, item {i} is {type(t).__name__}")
                yield from pieces(t, f"training text {i}")

        tok.train_from_iterator(iterate(), trainer=trainer)
        return cls(tok, **roles)

    @classmethod
    def from_file(cls, path: str | os.PathLike, **roles: str | int | None) -> "BPETokenizer":
        """Wrap a ``tokenizer.json`` file (Hugging Face ``tokenizers`` format); ``ValueError`` naming the file if
        the backend cannot read it."""
        what = f"{path} is not a tokenizers JSON file"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"{what}: {err}") from None
        return cls(tokenizer_from_json(text, what), **roles)

    @property
    def backend(self) -> tokenizers.Tokenizer:
        """The wrapped ``tokenizers.Tokenizer``."""
        return self._tok

    # --- the interface -------------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def _encode(self, text: str) -> list[int]:
        check_encodable([text])
        return backend_call("cannot encode the text", self._tok.encode, text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Encode many texts at once (the Rust backend uses several threads)."""
        texts = check_text_list(texts, "encode_batch")
        check_encodable(texts)
        encoded = backend_call("cannot encode the texts", self._tok.encode_batch, texts,
                                add_special_tokens=False)
        return [e.ids for e in encoded]

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        """``skip_special_tokens=True`` drops the backend's special tokens and the bos/eos/pad/unk tokens."""
        ids = self._check_ids(ids)
        if skip_special_tokens and self._unmarked_special:
            ids = [i for i in ids if i not in self._unmarked_special]
        return backend_call("cannot decode the ids", self._tok.decode, ids, skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, id: int) -> str:
        (i,) = self._check_ids([id])
        tok = self._tok.id_to_token(i)
        if tok is None:
            raise ValueError(f"id {i} is in [0, {self.vocab_size}) but has no vocabulary entry")
        return tok

    # --- serialisation -------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """``{"type": "bpe", "tokenizer": <the tokenizers JSON, via Tokenizer.to_str()>, "bos": ..., ...}``."""
        return {"type": self.type, "tokenizer": json.loads(self._tok.to_str()), **self._roles}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BPETokenizer":
        if d.get("type") != cls.type or "tokenizer" not in d:
            raise ValueError(f"expected a dict with type {cls.type!r} and a 'tokenizer' field, got keys {sorted(d)}")
        backend = d["tokenizer"]
        if not isinstance(backend, (str, dict)):
            raise ValueError(f"a bpe tokenizer's 'tokenizer' must be the tokenizers JSON (an object or its text), "
                             f"got {type(backend).__name__}")
        text = backend if isinstance(backend, str) else json.dumps(backend)
        backend = tokenizer_from_json(text, "the bpe tokenizer's 'tokenizer' is not a valid tokenizers JSON")
        return cls(backend, bos=d.get("bos"), eos=d.get("eos"), pad=d.get("pad"), unk=d.get("unk"))
