"""The token store: dtype choice, the file format's checks, streaming builds equal to in-memory encoding, rebuilds
on a changed text or tokenizer or a damaged file, bounded memory, and the streamed text and split."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from attnkit.data.corpora.text import read_text_source, split_text
from attnkit.data.pipeline.lm_dataset import _tokenizer_fingerprint, encode_corpus, prepare_lm_data
from attnkit.data.pipeline.lm_store import open_lm_stores
from attnkit.data.pipeline.store_encoding import aligned_segments, bpe_training_pieces
from attnkit.data.pipeline.text_stream import TextFiles
from attnkit.data.pipeline.token_store import StoreError, TokenStore, TokenStoreWriter, smallest_dtype
from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer, _chunks_of
from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.data.tokenizers.tokenizer import save_tokenizer

ROOT = Path(__file__).resolve().parents[3]


def _text(seed: int, lines: int) -> str:
    """Lines of words with runs of spaces, blank lines, tabs and a few non-ASCII characters: the places where a
    careless cut would change BPE ids."""
    rng = random.Random(seed)
    words = ["the", "quick", "brown", "fox", "Zürich", "naïve", "東京", "42", "—", "it's", "<|endoftext|>"]
    out = []
    for _ in range(lines):
        line = (" " * rng.randint(0, 3)).join(rng.choice(words) for _ in range(rng.randint(0, 9)))
        out.append(line + rng.choice(["\n", "\n", "\n\n", " \n", "\t\n", "  \n\n"]))
    return "".join(out)


def _write(tmp_path: Path, text: str, name: str = "corpus.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bpe() -> BPETokenizer:
    return BPETokenizer.train(_text(0, 400), 320, special_tokens=["<|endoftext|>"])


def _store(tmp_path: Path, ids, vocab_size: int = 300, documents=None) -> TokenStore:
    with TokenStoreWriter(tmp_path / "s.tokens", vocab_size=vocab_size, documents=documents is not None) as w:
        w.append(ids, documents)
        return w.finish({"test": 1})


# -- the file ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("vocab, dtype", [(1, "uint8"), (256, "uint8"), (257, "uint16"), (65_536, "uint16"),
                                          (65_537, "uint32"), (2**32, "uint32")])
def test_the_smallest_unsigned_dtype_that_holds_the_vocabulary(vocab, dtype):
    assert smallest_dtype(vocab) == np.dtype(dtype)


@pytest.mark.parametrize("vocab", [0, -1, 2**32 + 1, 3.0, True])
def test_a_vocabulary_size_outside_the_dtypes_is_refused(vocab):
    with pytest.raises(ValueError, match=r"vocab_size must be an int in \[1, 2\*\*32\]"):
        smallest_dtype(vocab)


@pytest.mark.parametrize("vocab", [200, 50_000, 100_000])
def test_a_store_gives_back_its_ids_in_its_dtype(tmp_path, vocab):
    ids = np.random.default_rng(0).integers(0, vocab, 10_000)
    store = TokenStore.open(_store(tmp_path, ids, vocab).path, fingerprint={"test": 1})
    assert store.dtype == smallest_dtype(vocab) and store.numel() == len(store) == 10_000
    assert store.max_id == ids.max() and store[5] == ids[5]
    assert store[10:20].dtype == torch.long and store[10:20].tolist() == ids[10:20].tolist()
    where = torch.tensor([[3, 4], [9_999, 0]])
    assert torch.equal(store[where], torch.from_numpy(ids[where.numpy()]))
    assert (tmp_path / "s.tokens").stat().st_size < 10_000 * store.dtype.itemsize + 4096


def test_documents_and_their_offsets(tmp_path):
    store = _store(tmp_path, [1, 2, 3, 4, 5, 6], 10, documents=[2, 0, 4])
    assert store.n_docs == 3 and [store.document(d).tolist() for d in range(3)] == [[1, 2], [], [3, 4, 5, 6]]


def test_a_document_is_read_by_a_list_index_or_refused(tmp_path):
    """Was: document(-1) an empty array (offsets[-1] to offsets[0]), not the last document; document(3) of 3 an
    IndexError of the offsets' numpy array."""
    store = _store(tmp_path, [1, 2, 3, 4, 5, 6], documents=[2, 0, 4])
    assert store.document(-1).tolist() == [3, 4, 5, 6] and store.document(-3).tolist() == [1, 2]
    for bad in (3, -4, 1.0):
        with pytest.raises(ValueError, match=rf"document index must be an int in \[-3, 3\), got {bad}"):
            store.document(bad)


@pytest.mark.parametrize("ids, docs, message", [
    ([0, 300], None, r"ids must be in \[0, 300\), got min 0 max 300"),
    ([-1], None, r"ids must be in \[0, 300\), got min -1"),
    ([[1, 2]], None, r"1-D integer array"),
    ([1.5], None, r"1-D integer array"),
    ([1, 2], [1], r"doc_lengths must be >= 0 and add up to the 2 ids"),
])
def test_the_writer_refuses_bad_ids(tmp_path, ids, docs, message):
    with pytest.raises(ValueError, match=message):
        _store(tmp_path, ids, documents=docs)
    assert not list(tmp_path.iterdir())  # the temporary file is gone


def _damage(kind: str, raw: bytes) -> bytes:
    return {"truncated": raw[:-1], "cut in the ids": raw[:200],
            "a flipped id": raw[:100] + bytes([raw[100] ^ 4]) + raw[101:],
            "a flipped header": raw[:-70] + bytes([raw[-70] ^ 1]) + raw[-69:], "one byte more": raw + b"\0",
            "empty": b"", "not a store": b"hello world" * 20}[kind]


@pytest.mark.parametrize("kind", ["truncated", "cut in the ids", "a flipped id", "a flipped header", "one byte more",
                                  "empty", "not a store"])
def test_a_damaged_store_is_refused(tmp_path, kind):
    path = _store(tmp_path, np.arange(1000) % 300).path
    path.write_bytes(_damage(kind, path.read_bytes()))
    with pytest.raises(StoreError, match=r"token store .* (truncated|damaged|not a token store|differs)"):
        TokenStore.open(path)


def test_a_store_of_another_fingerprint_is_refused(tmp_path):
    path = _store(tmp_path, [1, 2, 3]).path
    with pytest.raises(StoreError, match="made from another text or tokenizer"):
        TokenStore.open(path, fingerprint={"test": 2})


# -- the streamed text ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_streamed_text_splits_and_reads_like_the_whole_text(tmp_path, seed):
    text = _text(seed, 60) + ("no final newline" if seed % 2 else "") + ("y" * 3000 + "\n" if seed % 3 == 2 else "")
    path = _write(tmp_path, text)
    files = TextFiles([path], block_bytes=7 + seed)  # many blocks, cuts inside multi-byte characters
    scan = files.scan()
    whole, info = read_text_source(path)
    assert (scan.n_chars, scan.n_bytes, scan.sha256) == (len(whole), info["bytes"], info["sha256"])
    assert scan.chars == "".join(sorted(set(whole)))
    for fraction in (0.1, 0.5, 0.9):
        assert files.split(scan, fraction) == len(split_text(whole, fraction)[0])
    a, b = sorted(random.Random(seed).sample(range(len(whole)), 2))
    assert "".join(files.read(scan, a, b)) == whole[a:b]


def test_a_folder_streams_like_read_text_source(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_bytes(b"\xef\xbb\xbfno newline")
    (tmp_path / "d" / "b.txt").write_text("two\nlines\n", encoding="utf-8")
    files = TextFiles([tmp_path / "d" / "a.txt", tmp_path / "d" / "b.txt"], folder=True, block_bytes=4)
    whole, info = read_text_source(tmp_path / "d")
    scan = files.scan()
    assert "".join(files.read(scan)) == whole and scan.sha256 == info["sha256"]


@pytest.mark.parametrize("raw", [b"", b"ab\x00cd", b"ab\xffcd", b"\xef\xbb\xbf", b"abc\xe4",
                                 b"a\xff" + b"b" * 40 + b"\x00"])
def test_streamed_text_refuses_what_read_text_file_refuses_with_the_same_message(tmp_path, raw):
    path = tmp_path / "bad.txt"
    path.write_bytes(raw)
    with pytest.raises(ValueError) as whole:
        read_text_source(path)
    with pytest.raises(ValueError) as streamed:
        TextFiles([path], block_bytes=8).scan()
    assert str(streamed.value) == str(whole.value)


def test_a_folder_among_the_files_is_named(tmp_path):
    (tmp_path / "d").mkdir()  # was IsADirectoryError from open()
    with pytest.raises(ValueError, match=r"'.*d' is a folder; TextFiles takes files"):
        TextFiles([tmp_path / "d"]).scan()


def test_stream_cuts_keep_bpe_ids_and_training_pieces():
    text = _text(3, 300)
    blocks = [text[i:i + 97] for i in range(0, len(text), 97)]
    assert "".join(aligned_segments(blocks)) == text
    assert list(bpe_training_pieces(blocks, size=150)) == list(_chunks_of(text, 150))


# -- LM stores --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tokenizer", ["char", "bpe", "file"])
def test_lm_stores_hold_the_ids_of_in_memory_encoding(tmp_path, tokenizer, bpe, monkeypatch):
    monkeypatch.setattr("attnkit.data.pipeline.text_stream.BLOCK_BYTES", 257)  # many blocks, cuts in lines
    path = _write(tmp_path, _text(1, 2000))
    kind = str(save_tokenizer(bpe, tmp_path / "tok.json")) if tokenizer == "file" else tokenizer
    stored = prepare_lm_data(path, kind, block_size=8, vocab_size=300, home=tmp_path / "home")
    memory = prepare_lm_data(path, kind, block_size=8, vocab_size=300, cache=False)
    assert stored.tokenizer.to_dict() == memory.tokenizer.to_dict()  # BPE trained from the stream: the same
    assert isinstance(stored.train, TokenStore) and stored.source_info == memory.source_info
    for split in ("train", "valid"):
        ids = getattr(stored, split)[:]
        assert torch.equal(ids, getattr(memory, split))
        assert torch.equal(ids, encode_corpus(memory.tokenizer, memory.tokenizer.decode(ids)))
    again = prepare_lm_data(path, kind, block_size=8, vocab_size=300, home=tmp_path / "home")
    assert all("reused" in note for note in again.notes) and torch.equal(again.train[:], stored.train[:])


def test_a_changed_text_rebuilds_and_an_unchanged_one_is_not_read(tmp_path, monkeypatch):
    home = tmp_path / "home"
    path = _write(tmp_path, _text(2, 300))
    first = prepare_lm_data(path, "char", block_size=8, home=home)
    assert all("built" in n for n in first.notes)
    os.utime(path, ns=(1, 1))  # a touch: scanned again, the same text, the stores are kept
    assert all("reused" in n for n in prepare_lm_data(path, "char", block_size=8, home=home).notes)

    def no_scan(*args, **kwargs):
        raise AssertionError("an unchanged text was read again")

    monkeypatch.setattr(TextFiles, "scan", no_scan)
    prepare_lm_data(path, "char", block_size=8, home=home)
    monkeypatch.undo()
    changed = _text(2, 300).replace("fox", "cat")
    path.write_text(changed, encoding="utf-8")
    second = prepare_lm_data(path, "char", block_size=8, home=home)
    assert all("rebuilt" in n for n in second.notes)
    assert second.tokenizer.decode(second.train[:]) + second.tokenizer.decode(second.valid[:]) == changed


@pytest.mark.parametrize("cuts", [[], "x", {"0.1/2": 10**9}, {"0.1/2": -5}, {"0.1/2": True}])
def test_a_damaged_cut_in_the_scan_record_is_found_again(tmp_path, cuts):
    """Was: AttributeError ('list' object has no attribute 'get') or a refusal of the text ('read needs 0 <= start
    <= stop', 'the train split has 1 tokens') from a scan record whose train/valid cuts were damaged."""
    home = tmp_path / "home"
    path = _write(tmp_path, _text(3, 200))
    want = prepare_lm_data(path, "char", block_size=8, home=home)
    (record_path,) = (home / "token_store").glob("*/scan-0.json")
    record = json.loads(record_path.read_text())
    record_path.write_text(json.dumps(dict(record, cuts=cuts)))
    got = prepare_lm_data(path, "char", block_size=8, home=home)
    assert torch.equal(got.train[:], want.train[:]) and torch.equal(got.valid[:], want.valid[:])


def test_a_changed_tokenizer_gets_its_own_store(tmp_path, bpe):
    home = tmp_path / "home"
    path = _write(tmp_path, _text(4, 300))
    a = prepare_lm_data(path, bpe, block_size=8, home=home)
    other = BPETokenizer.train(_text(5, 400), 300, special_tokens=["<|endoftext|>"])
    b = prepare_lm_data(path, other, block_size=8, home=home)
    assert a.train.path != b.train.path and all("built" in n for n in b.notes)
    assert torch.equal(b.train[:], encode_corpus(other, other.decode(b.train[:])))


def test_a_character_vocabulary_with_a_lone_surrogate_gets_a_store(tmp_path):
    """Was: UnicodeEncodeError from the tokenizer's fingerprint (its JSON encoded as strict UTF-8), though such a
    vocabulary is saved and loaded back (``save_tokenizer``) and encodes in memory (``cache=False``)."""
    path = _write(tmp_path, "abc\n" * 40)
    tok = CharTokenizer(list("abc\n") + ["\udc80"])
    stored = prepare_lm_data(path, tok, block_size=4, home=tmp_path / "home")
    memory = prepare_lm_data(path, tok, block_size=4, cache=False)
    assert torch.equal(stored.train[:], memory.train) and torch.equal(stored.valid[:], memory.valid)
    plain = CharTokenizer(list("abc\n"))  # without a surrogate: the fingerprint (the stores' names) as before
    want = hashlib.sha256(json.dumps(plain.to_dict(), sort_keys=True).encode()).hexdigest()
    assert _tokenizer_fingerprint(plain) == want


@pytest.mark.parametrize("kind", ["truncated", "cut in the ids", "a flipped id", "a flipped header", "empty"])
def test_a_damaged_lm_store_is_rebuilt_with_the_right_ids(tmp_path, kind):
    home = tmp_path / "home"
    path = _write(tmp_path, _text(6, 500))
    good = prepare_lm_data(path, "char", block_size=8, home=home)
    want = good.train[:]
    store_path = good.train.path
    store_path.write_bytes(_damage(kind, store_path.read_bytes()))
    again = prepare_lm_data(path, "char", block_size=8, home=home)
    assert "rebuilt" in again.notes[0] and torch.equal(again.train[:], want)


def test_eval_needs_only_the_valid_store(tmp_path):
    path = _write(tmp_path, _text(7, 300))
    got = open_lm_stores(path, "char", splits=("valid",), home=tmp_path / "home")
    assert list(got.stores) == ["valid"] and len(list((tmp_path / "home").rglob("*.tokens"))) == 1


MEMORY_CHILD = textwrap.dedent("""
    import json, sys
    def peak():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    from attnkit.data.corpora.registry import recipe_names
    from attnkit.data.pipeline import lm_store
    from attnkit.data.pipeline.lm_dataset import prepare_lm_data
    recipe_names()  # every module the call below imports, imported before the baseline
    before = peak()
    data = prepare_lm_data(sys.argv[1], "char", block_size=64, home=sys.argv[2])
    n = data.train.numel() + data.valid.numel()
    print(json.dumps({"before": before, "after": peak(), "ids": n}))
""")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak memory from /proc")
def test_tokenizing_20_mb_stays_within_a_bounded_memory(tmp_path):
    rng = np.random.default_rng(0)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon\n", "zeta", "eta\n", "theta"])
    path = tmp_path / "big.txt"
    with open(path, "w", encoding="utf-8") as fh:
        for _ in range(22):  # 22 x ~0.9 MB
            fh.write(" ".join(words[rng.integers(0, len(words), 150_000)]) + "\n")
    n_chars = path.stat().st_size
    assert n_chars > 19_500_000
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(path), str(tmp_path / "home")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["ids"] == n_chars  # one id per (ASCII) character
    grown = got["after"] - got["before"]
    # the ids alone as int64 would be 8 bytes each (~160 MB), today's in-memory path peaks at ~24 bytes a character
    assert grown < 8 * n_chars / 3, f"peak memory grew by {grown / 1e6:.0f} MB for {n_chars / 1e6:.0f} MB of text"


@pytest.mark.parametrize("size", [True, 0, 2.5])
def test_chunks_refuses_a_size_that_is_not_a_positive_int(tmp_path, size):
    """Was: chunks(True) read one id at a time, chunks(0) failed in range() ("arg 3 must not be zero") and
    chunks(2.5) with a TypeError."""
    store = _store(tmp_path, [1, 2, 3])
    with pytest.raises(ValueError, match=r"chunk size must be an int >= 1, got"):
        list(store.chunks(size))
    assert [c.tolist() for c in store.chunks(2)] == [[1, 2], [3]]


def test_a_store_renamed_over_while_it_is_opened_is_read_as_the_file_that_was_checked(tmp_path, monkeypatch):
    """Was: the header (10 ids, checked) of the file first opened, the ids mapped from the file a rebuild by another
    process had just renamed over the same name (opened a second time): another text's ids, silently."""
    import attnkit.data.pipeline.token_store as token_store

    path = _store(tmp_path, np.arange(10)).path
    with TokenStoreWriter(tmp_path / "other.tokens", vocab_size=300) as w:
        w.append(np.arange(200, 300))
        w.finish({"test": 2})
    real = token_store._verify_blocks

    def verify_then_rebuilt_meanwhile(fd, header, end, where):
        real(fd, header, end, where)
        os.replace(tmp_path / "other.tokens", path)  # another process's rebuild, published atomically

    monkeypatch.setattr(token_store, "_verify_blocks", verify_then_rebuilt_meanwhile)
    store = TokenStore.open(path, fingerprint={"test": 1})
    assert store.tolist() == list(range(10))


def test_a_build_removes_the_partial_file_of_a_builder_that_was_killed(tmp_path):
    """Was: a run stopped by SIGTERM (a job's time limit) while it built a store left its partial file, as large as
    the store, in the cache for ever; the next build, under the lock that a live builder would hold, now removes
    it (and nothing else)."""
    from attnkit.data.pipeline.token_store import open_or_build

    path = tmp_path / "s.tokens"
    dead = tmp_path / "s.tokens.4242-0123abcd.tmp"
    dead.write_bytes(b"ATTNKIT-TOKENS" + b"\0" * 1000)
    kept = [tmp_path / "t.tokens.4242-0123abcd.tmp", tmp_path / "s.tokens.notes.tmp"]
    for file in kept:
        file.write_text("not a leftover of this store")

    def build(target):
        with TokenStoreWriter(target, vocab_size=300) as w:
            w.append([1, 2, 3])
            return w.finish({"test": 1})

    store, how = open_or_build(path, {"test": 1}, build)
    assert how == "built" and store.tolist() == [1, 2, 3]
    assert not dead.exists() and all(file.exists() for file in kept)
