"""Translation pairs in a token store: the same pairs, cuts, errors and batches as the in-memory encoding."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest
import torch

from attnkit.data.pipeline.mt_batching import TokenBudgetBatcher, collate, encode_pairs, train_joint_bpe
from attnkit.data.pipeline.mt_store import encode_pairs_stored, pairs_sha256

WORDS = ["Haus", "Katze", "läuft", "schnell", "nach", "Hause", "und", "der", "Hund", "bellt", "laut", "!"]


def _pairs(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    src = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 14))) for _ in range(n)]
    return src, [s.upper()[::-1] for s in src]


@pytest.fixture(scope="module")
def tok():
    src, tgt = _pairs(300)
    return train_joint_bpe(src, tgt, 300)


def _batch_tensors(batch) -> list[torch.Tensor]:
    return [t for t in batch if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("max_len", [4, 9, 64])
def test_stored_pairs_equal_the_in_memory_ones(tmp_path, tok, max_len):
    src, tgt = _pairs(500, seed=1)
    memory = encode_pairs(tok, src, tgt, max_src_len=max_len)
    stored = encode_pairs_stored(tok, src, tgt, max_src_len=max_len, cache_dir=tmp_path)
    assert stored.content_id.startswith("store:") and memory.content_id is None
    assert list(stored.src) == memory.src and list(stored.tgt) == memory.tgt
    assert (stored.n_truncated_src, stored.n_truncated_tgt) == (memory.n_truncated_src, memory.n_truncated_tgt)
    assert np.array_equal(stored.src_lens, memory.src_lens) and np.array_equal(stored.tgt_lens, memory.tgt_lens)
    rows = random.Random(2).sample(range(500), 17)
    for shape in (None, (32, max(8, max_len))):
        pairs = zip(*(_batch_tensors(collate(d, rows, shape=shape)) for d in (stored, memory)))
        assert all(torch.equal(a, b) for a, b in pairs)
    batchers = [TokenBudgetBatcher(d, max_tokens=128, seed=3) for d in (stored, memory)]
    for step in range(0, 3 * batchers[0].num_batches, 7):
        for a, b in zip(*(_batch_tensors(bt.batch(step)) for bt in batchers)):
            assert torch.equal(a, b)


def test_the_store_is_reused_and_serves_every_length_limit(tmp_path, tok):
    src, tgt = _pairs(50, seed=4)
    encode_pairs_stored(tok, src, tgt, max_src_len=64, cache_dir=tmp_path)
    files = list(tmp_path.glob("*.tokens"))
    encode_pairs_stored(tok, src, tgt, max_src_len=5, cache_dir=tmp_path)
    assert list(tmp_path.glob("*.tokens")) == files and len(files) == 1
    encode_pairs_stored(tok, src[:-1] + ["anders"], tgt, max_src_len=64, cache_dir=tmp_path)  # another text
    assert len(list(tmp_path.glob("*.tokens"))) == 2


def test_over_long_pairs_are_refused_with_the_same_message(tmp_path, tok):
    src, tgt = _pairs(40, seed=5)
    with pytest.raises(ValueError) as memory:
        encode_pairs(tok, src, tgt, max_src_len=4, truncate=False)
    with pytest.raises(ValueError) as stored:
        encode_pairs_stored(tok, src, tgt, max_src_len=4, truncate=False, cache_dir=tmp_path)
    assert str(stored.value) == str(memory.value)


def test_a_damaged_pairs_store_is_rebuilt(tmp_path, tok):
    src, tgt = _pairs(60, seed=6)
    encode_pairs_stored(tok, src, tgt, max_src_len=64, cache_dir=tmp_path)
    (path,) = tmp_path.glob("*.tokens")
    raw = bytearray(path.read_bytes())
    raw[70] ^= 0xFF  # an id
    path.write_bytes(bytes(raw))
    again = encode_pairs_stored(tok, src, tgt, max_src_len=64, cache_dir=tmp_path)
    assert list(again.src) == encode_pairs(tok, src, tgt, max_src_len=64).src


def test_pairs_hash_tells_a_nul_inside_a_text_from_the_end_of_one():
    """["a\\0", "b"] and ["a", "\\0b"] hashed alike, so one corpus's store was read for the other's pairs."""
    targets = ["x", "y"]
    assert pairs_sha256(["a\0", "b"], targets) != pairs_sha256(["a", "\0b"], targets)
    assert pairs_sha256(["a\1\2", "b"], targets) != pairs_sha256(["a\0", "b"], targets)
    # a text without NUL or 0x01 hashes as before, so the stores already built keep their names
    plain = (["Guten Tag", "café"], ["Good day", "coffee"])
    h = hashlib.sha256(b"2:2\0")
    for text in plain[0] + plain[1]:
        h.update(text.encode() + b"\0")
    assert pairs_sha256(*plain) == h.hexdigest()


def test_a_lone_surrogate_is_a_value_error(tok, tmp_path):
    """Was: a TypeError straight from the backend's batch call ("TextEncodeInput must be Union[...]")."""
    with pytest.raises(ValueError, match=r"cannot tokenize a lone surrogate, '\\udce9' at character 3"):
        encode_pairs_stored(tok, ["Haus", "caf\udce9"], ["house", "cafe"], max_src_len=16, cache_dir=tmp_path)
    assert not list(tmp_path.glob("*.tokens"))  # nothing half-built left behind
