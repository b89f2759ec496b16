"""The shared Tokenizer interface: serialisation dispatch, special-token framing, id validation, streaming."""

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.data.tokenizers.tokenizer import (StreamDecoder, decode_stream, load_tokenizer, save_tokenizer, tokenizer_from_dict,
                                    tokenizer_types)

TEXT = ("Sweet lovers love the spring. 🌸 Naïve café — 東京 — crème brûlée!\n"
        "Hey, ho, the wind and the rain.\n\n  indented   line\twith\ttabs\n") * 5


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.train(TEXT, 300, special_tokens=["<pad>", "<bos>", "<eos>", "<unk>"], min_frequency=2)


@pytest.fixture(scope="module")
def char():
    return CharTokenizer.train(TEXT)


def test_known_types():
    assert {"char", "bpe"} <= set(tokenizer_types())


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_save_load_dispatches_on_type(kind, char, bpe, tmp_path):
    tok = {"char": char, "bpe": bpe}[kind]
    path = save_tokenizer(tok, tmp_path / "tok.json")
    d = json.loads(path.read_text(encoding="utf-8"))
    assert d["type"] == kind
    again = load_tokenizer(path)
    assert type(again) is type(tok)
    assert again.encode(TEXT) == tok.encode(TEXT)
    assert again.vocab_size == tok.vocab_size
    assert (again.bos_id, again.eos_id, again.pad_id, again.unk_id) == (tok.bos_id, tok.eos_id, tok.pad_id, tok.unk_id)
    assert not list(tmp_path.glob("*.tmp"))  # atomic write left no temporary file


def test_save_is_atomic_and_leaves_other_files_alone(tmp_path, monkeypatch):
    (tmp_path / "tok.json.tmp").write_text("my notes")  # a file of the user's next to the target
    first = CharTokenizer.train("hello")
    save_tokenizer(first, tmp_path / "tok.json")
    import attnkit.files

    def full(path):  # the new file is written, then flushing it fails
        raise OSError("disk full")

    monkeypatch.setattr(attnkit.files, "fsync_file", full)
    with pytest.raises(OSError, match="disk full"):
        save_tokenizer(CharTokenizer.train("world"), tmp_path / "tok.json")
    monkeypatch.undo()
    assert load_tokenizer(tmp_path / "tok.json").to_dict() == first.to_dict()  # the old file, whole
    assert (tmp_path / "tok.json.tmp").read_text() == "my notes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok.json", "tok.json.tmp"]


def test_from_dict_unknown_type_lists_known():
    with pytest.raises(ValueError, match=r"unknown tokenizer type 'wordpiece'.*bpe.*char"):
        tokenizer_from_dict({"type": "wordpiece"})


def test_from_dict_without_type():
    with pytest.raises(ValueError, match="'type' field"):
        tokenizer_from_dict({"chars": ["a"]})


def test_load_missing_file(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_tokenizer(tmp_path / "nope.json")


def test_load_corrupt_file(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not valid UTF-8 JSON"):
        load_tokenizer(p)


def test_add_bos_eos(bpe):
    ids = bpe.encode("hey", add_bos=True, add_eos=True)
    assert ids[0] == bpe.bos_id == 1 and ids[-1] == bpe.eos_id == 2
    assert ids[1:-1] == bpe.encode("hey")


def test_add_bos_without_bos_token(char):
    with pytest.raises(ValueError, match="no bos token"):
        char.encode("hey", add_bos=True)


def test_add_eos_without_eos_token(char):
    with pytest.raises(ValueError, match="no eos token"):
        char.encode("hey", add_eos=True)


def test_encode_rejects_non_str(char, bpe):
    for tok in (char, bpe):
        with pytest.raises(ValueError, match="expects a str, got bytes"):
            tok.encode(b"hey")


@pytest.mark.parametrize("bad", [[-1], [10**6], [1.5], ["3"]])
def test_decode_rejects_bad_ids(bad, char, bpe):
    for tok in (char, bpe):
        with pytest.raises(ValueError, match=r"\[0, \d+\)|must be integers"):
            tok.decode(bad)


def test_decode_rejects_out_of_range_in_long_sequence(char):
    ids = char.encode(TEXT) + [char.vocab_size]
    with pytest.raises(ValueError, match=rf"\[0, {char.vocab_size}\), got {char.vocab_size}"):
        char.decode(ids)


def test_decode_accepts_numpy_and_torch(char, bpe):
    for tok in (char, bpe):
        ids = tok.encode(TEXT)
        assert tok.decode(np.array(ids)) == TEXT
        assert tok.decode(torch.tensor(ids)) == TEXT


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_stream_decoder_pieces_join_to_decode(kind, char, bpe):
    tok = {"char": char, "bpe": bpe}[kind]
    ids = tok.encode(TEXT)
    pieces = list(decode_stream(tok, ids))
    assert "".join(pieces) == tok.decode(ids) == TEXT
    assert all(p and "\ufffd" not in p for p in pieces)


def test_stream_decoder_never_splits_multibyte_characters(bpe):
    # an emoji alone is 4 UTF-8 bytes; with a small byte-level vocabulary it is several tokens
    text = "a🌸b🎉c"
    ids = bpe.encode(text)
    assert len(ids) > 5  # the emoji really is split over byte tokens
    sd = StreamDecoder(bpe)
    pieces = [sd.push(i) for i in ids]
    pieces.append(sd.flush())
    assert "".join(pieces) == text
    # every piece is whole characters: no replacement characters, and the emoji arrive in one piece each
    assert "\ufffd" not in "".join(pieces)
    assert "🌸" in pieces or any("🌸" in p for p in pieces)
    emitted = [p for p in pieces if p]
    for p in emitted:
        p.encode("utf-8")  # would fail on a lone surrogate


def test_stream_decoder_holds_incomplete_bytes_until_flush(bpe):
    ids = bpe.encode("🎉")
    sd = StreamDecoder(bpe)
    assert sd.push(ids[:-1]) == ""  # the character is not complete yet
    assert sd.flush() == "\ufffd"  # ended mid-character: shown as a replacement character


def test_stream_decoder_accepts_chunks_and_tensors(char):
    ids = torch.tensor(char.encode("Hey, ho"))
    sd = StreamDecoder(char)
    out = sd.push(ids[:3]) + sd.push(ids[3]) + sd.push(ids[4:].tolist()) + sd.flush()
    assert out == "Hey, ho"


def test_stream_decoder_validates_ids(char):
    with pytest.raises(ValueError, match=r"\[0, "):
        StreamDecoder(char).push(char.vocab_size)


@settings(max_examples=40, deadline=None)
@given(text=st.text())
def test_stream_decoding_arbitrary_text(bpe, text):
    ids = bpe.encode(text)
    pieces = list(decode_stream(bpe, ids))
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces) or "\ufffd" in text


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_encode_batch_refuses_one_string(kind, char, bpe):
    """Was: encode_batch("abc") encoded each character as a text of its own: three lists of ids, no error."""
    tok = {"char": char, "bpe": bpe}[kind]
    text = "abc"
    with pytest.raises(ValueError, match=r"encode_batch expects a list of texts, got one str \('abc'\); pass \[text\]"):
        tok.encode_batch(text)
    assert tok.encode_batch(t for t in [text]) == [tok.encode(text)]  # any iterable of texts, a generator too


def test_load_a_folder_says_it_is_a_folder(tmp_path):
    """Was: "tokenizer file '...' does not exist" of a folder that does exist."""
    with pytest.raises(ValueError, match="is a folder, not a file"):
        load_tokenizer(tmp_path)


def test_a_stream_after_a_context_keeps_the_space_a_sentencepiece_decoder_drops_at_the_start():
    """Was: the first piece was decoded alone, so ``once upon a`` + ``▁time`` streamed as ``once upon atime``."""
    from attnkit.data.tokenizers.tokenizer import decode_after
    from helpers import metaspace_tokenizer

    tok = metaspace_tokenizer()
    prompt, more = tok.encode("once upon a"), tok.encode(" time there was")
    assert tok.decode(more) == "time there was"  # the decoder's rule at the start of a text
    assert decode_after(tok, prompt, more) == " time there was" == tok.decode(prompt + more)[len("once upon a"):]
    sd = StreamDecoder(tok, context=prompt)
    for _ in range(2):  # flush goes back to the context: the next stream continues the prompt too
        assert "".join(sd.push(i) for i in more) + sd.flush() == " time there was"
    assert decode_after(tok, [], more) == "time there was"
    char = CharTokenizer.train("abc ")
    ids = char.encode("ab c")
    assert "".join(decode_stream(char, ids)) == decode_after(char, char.encode("c"), ids)


def test_stream_decoder_and_decode_stream_skip_special_tokens(bpe):
    ids = [bpe.bos_id] + bpe.encode("hello world") + [bpe.eos_id]
    assert "".join(decode_stream(bpe, ids, skip_special_tokens=True)) == "hello world"
    sd = StreamDecoder(bpe, skip_special_tokens=True)
    assert "".join(sd.push(i) for i in ids) + sd.flush() == "hello world"
    kept = "".join(decode_stream(bpe, ids))  # the default keeps them
    assert kept.startswith("<bos>") and kept.endswith("<eos>")


def test_a_long_stream_keeps_only_its_decoding_window():
    """Was: StreamDecoder kept every id pushed since it was made (a whole validation split, counted by ``eval lm``'s
    bits per byte, or a long generation); the ids before its left context are dropped, and the pieces still join
    to the text of all ids."""
    tok = CharTokenizer.train("abcdefgh é")
    ids = tok.encode("abc défgh " * 2_000)
    sd = StreamDecoder(tok)
    pieces = [sd.push(ids[i:i + 7]) for i in range(0, len(ids), 7)]
    assert len(sd._ids) <= 14  # (the last two pushes at most)
    assert "".join(pieces) + sd.flush() == tok.decode(ids)
