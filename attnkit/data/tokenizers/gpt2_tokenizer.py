"""GPT-2's tokenizer, rebuilt from the BPE ranks that ship inside the ``openai-whisper`` source distribution.

GPT-2 (and OpenAI's tiktoken ``gpt2`` encoding) uses byte-level BPE with 50 257 tokens: 256 byte tokens, 50 000
merged tokens and ``<|endoftext|>`` (id 50256). We cannot download it from a model hub, but the
``openai-whisper`` sdist on PyPI carries it as ``whisper/assets/gpt2.tiktoken``: one line per token,
``base64(token bytes) rank``, where the rank is both the token id and its merge priority.

From the ranks we build an ordinary byte-level BPE ``tokenizers.Tokenizer``:

- vocabulary: each token's bytes spelled with GPT-2's byte→character map (:func:`bytes_to_unicode`; a leading
  space shows as ``Ġ``), id = rank;
- merges: for each multi-byte token, in rank order, the pair of smaller tokens it is made from. We find that pair
  the way tiktoken encodes: start from single bytes and keep merging the adjacent pair whose concatenation has
  the lowest rank, using only ranks below the token's own, until two parts remain (:func:`merges_from_ranks`);
- pre-tokenizer: GPT-2's regex (:data:`~attnkit.data.tokenizers.bpe_tokenizer.GPT2_SPLIT_PATTERN`), no prefix space;
- ``<|endoftext|>`` as special token 50256 (it is the eos token, and GPT-2 also uses it as bos).

The sdist and the extracted asset are pinned by sha256 and cached under ``$ATTNKIT_HOME/tokenizers/gpt2/``.

Axes: ``V`` vocabulary size (50257), ``N`` number of ids.
"""

from __future__ import annotations

import base64
import hashlib
import os
import tarfile
from functools import lru_cache
from pathlib import Path

import tokenizers
from tokenizers import decoders, models

from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer, byte_level_pre_tokenizer, bytes_to_unicode
from attnkit.data.fetch import FetchError, attnkit_home, pip_download, sha256_file, write_source_record
from attnkit.files import write_bytes_atomic

__all__ = [
    "gpt2_tokenizer",
    "fetch_gpt2_ranks",
    "load_tiktoken_ranks",
    "merges_from_ranks",
    "tokenizer_from_ranks",
    "GPT2_EOT",
    "GPT2_EOT_ID",
    "GPT2_VOCAB_SIZE",
]

WHISPER_REQUIREMENT = "openai-whisper==20250625"
WHISPER_SDIST = "openai_whisper-20250625.tar.gz"
WHISPER_SDIST_SHA256 = "37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96"
WHISPER_LICENSE = "MIT"
ASSET_MEMBER = "openai_whisper-20250625/whisper/assets/gpt2.tiktoken"
ASSET_NAME = "gpt2.tiktoken"
ASSET_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
_ASSET_MAX_BYTES = 16 << 20  # refuse absurd archive members

GPT2_EOT = "<|endoftext|>"
GPT2_EOT_ID = 50256
GPT2_VOCAB_SIZE = 50257


def fetch_gpt2_ranks(home: str | os.PathLike | None = None) -> Path:
    """Return the path of the cached, verified ``gpt2.tiktoken``, fetching the whisper sdist once if needed.

    Only the one asset is read out of the archive (no ``extractall``): the member must be a regular file of sane
    size, and the extracted bytes must match :data:`ASSET_SHA256`.
    """
    folder = Path(home or attnkit_home()) / "tokenizers" / "gpt2"
    folder.mkdir(parents=True, exist_ok=True)
    asset = folder / ASSET_NAME
    if asset.is_file() and sha256_file(asset) == ASSET_SHA256:
        return asset
    try:
        sdist = pip_download(WHISPER_REQUIREMENT, folder, filename=WHISPER_SDIST, sha256=WHISPER_SDIST_SHA256,
                             sdist=True)
    except FetchError as e:
        raise FetchError(f"{e}\nTo use GPT-2's tokenizer offline, copy {ASSET_NAME} (sha256 {ASSET_SHA256}, from "
                         f"{WHISPER_SDIST}: {ASSET_MEMBER}) to {asset} or pass gpt2_tokenizer(ranks_file=PATH)."
                         ) from None
    with tarfile.open(sdist, mode="r:gz") as tf:
        try:
            member = tf.getmember(ASSET_MEMBER)
        except KeyError:
            raise FetchError(f"{WHISPER_SDIST} has no member {ASSET_MEMBER}") from None
        if not member.isfile() or member.size > _ASSET_MAX_BYTES:
            raise FetchError(f"{ASSET_MEMBER} in {WHISPER_SDIST} is not a regular file of at most "
                             f"{_ASSET_MAX_BYTES} bytes (type {member.type!r}, size {member.size})")
        data = tf.extractfile(member).read()
    got = hashlib.sha256(data).hexdigest()
    if got != ASSET_SHA256:
        raise FetchError(f"checksum mismatch for {ASSET_NAME}: expected sha256 {ASSET_SHA256}, got {got}")
    write_bytes_atomic(asset, data)
    write_source_record(folder, {
        "name": "gpt2 tokenizer (BPE ranks)",
        "package": "openai-whisper",
        "version": WHISPER_REQUIREMENT.split("==")[1],
        "license": WHISPER_LICENSE,
        "file": WHISPER_SDIST,
        "sha256": WHISPER_SDIST_SHA256,
        "member": ASSET_MEMBER,
        "outputs": {ASSET_NAME: {"sha256": ASSET_SHA256, "bytes": len(data)}},
    })
    return asset


def load_tiktoken_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """Parse a ``.tiktoken`` file (``base64(token) rank`` per line) into ``{token bytes: rank}``.

    The ranks must be exactly ``0 .. n-1`` and the tokens distinct; otherwise ``ValueError`` names the line.
    """
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                b64, rank_s = line.split()
                token, rank = base64.b64decode(b64, validate=True), int(rank_s)
            except ValueError as e:
                raise ValueError(f"{path}: line {lineno} is not 'base64 rank': {line[:60]!r} ({e})") from None
            if token in ranks:
                raise ValueError(f"{path}: line {lineno} repeats the token {token!r} (first rank {ranks[token]})")
            ranks[token] = rank
    if sorted(ranks.values()) != list(range(len(ranks))):
        present = set(ranks.values())
        missing = next(r for r in range(len(ranks)) if r not in present)
        raise ValueError(f"{path}: ranks must be exactly 0..{len(ranks) - 1} (one per token), got ranks "
                         f"{min(ranks.values())}..{max(ranks.values())} without {missing}")
    return ranks


def _bpe_parts(ranks: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """Encode ``token`` with tiktoken's rule, allowing only merges whose result has rank < ``max_rank``."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 1:
        # the adjacent pair whose concatenation has the lowest rank
        best_i, best_rank = -1, max_rank
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best_i, best_rank = i, r
        if best_i < 0:
            break
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The BPE merge list implied by tiktoken ranks, in rank order (one merge per multi-byte token).

    A token of rank ``r`` is produced by merging the two parts that remain when its own bytes are encoded using
    only tokens of rank ``< r``; exactly two must remain, or the ranks are not a BPE vocabulary (``ValueError``).
    """
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) == 1:
            continue
        parts = _bpe_parts(ranks, token, rank)
        if len(parts) != 2:
            raise ValueError(f"token {token!r} (rank {rank}) does not split into 2 lower-ranked parts: {parts}")
        merges.append((parts[0], parts[1]))
    return merges


def tokenizer_from_ranks(ranks: dict[bytes, int], special_tokens: dict[str, int]) -> tokenizers.Tokenizer:
    """A byte-level BPE ``tokenizers.Tokenizer`` equivalent to the tiktoken encoding ``ranks`` + ``special_tokens``.

    ``special_tokens`` maps spelling → id; the ids must follow the ranks contiguously (e.g. 50256 after 0..50255).
    """
    b2u = bytes_to_unicode()

    def spell(b: bytes) -> str:  # token bytes -> byte-level string, e.g. b" the" -> "Ġthe"
        return "".join(b2u[x] for x in b)

    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise ValueError(f"a byte-level BPE needs all 256 single bytes in its ranks; missing {missing[:10]}")
    vocab = {spell(tok): rank for tok, rank in ranks.items()}
    merges = [(spell(a), spell(b)) for a, b in merges_from_ranks(ranks)]
    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = byte_level_pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    for spelling, want in sorted(special_tokens.items(), key=lambda kv: kv[1]):
        tok.add_special_tokens([tokenizers.AddedToken(spelling, special=True, normalized=False)])
        got = tok.token_to_id(spelling)
        if got != want:
            raise ValueError(f"special token {spelling!r} should get id {want}, got {got}")
    return tok


@lru_cache(maxsize=4)
def _cached_gpt2(ranks_file: str | None, home: str | None) -> BPETokenizer:
    path = Path(ranks_file) if ranks_file is not None else fetch_gpt2_ranks(home)
    if ranks_file is not None and path.is_dir():
        raise ValueError(f"GPT-2 ranks file {str(path)!r} is a folder, not a file; expected a gpt2.tiktoken file")
    if ranks_file is not None and not path.is_file():
        raise ValueError(f"GPT-2 ranks file {str(path)!r} does not exist")
    backend = tokenizer_from_ranks(load_tiktoken_ranks(path), {GPT2_EOT: GPT2_EOT_ID})
    # GPT-2 uses <|endoftext|> both to end a document and (in generation) to start one
    return BPETokenizer(backend, bos=GPT2_EOT, eos=GPT2_EOT)


def gpt2_tokenizer(ranks_file: str | os.PathLike | None = None, *,
                   home: str | os.PathLike | None = None) -> BPETokenizer:
    """GPT-2's tokenizer (``V`` = 50257, ``eos_id`` = ``bos_id`` = 50256, no pad, no unk).

    Args:
        ranks_file: a local ``gpt2.tiktoken`` to use instead of fetching (for offline machines).
        home: cache folder (default ``$ATTNKIT_HOME``).

    Built once per process (about a second); the fetched file is cached on disk.

    Shape:
        ``encode(str) -> list[int]`` of ids in ``[0, 50257)``; ``"Hello world"`` → ``[15496, 995]``.
    """
    return _cached_gpt2(None if ranks_file is None else str(ranks_file), None if home is None else str(home))
