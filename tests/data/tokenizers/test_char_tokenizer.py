"""CharTokenizer: sorted character vocabulary, exact round trips, clear errors for unknown characters."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.data.tokenizers.tokenizer import load_tokenizer, save_tokenizer

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"


def test_vocabulary_is_sorted_distinct_characters():
    tok = CharTokenizer.train(TEXT)
    assert tok.chars == sorted(set(TEXT))
    assert tok.vocab_size == len(set(TEXT))
    assert tok.encode("\n")[0] == 0  # "\n" has the lowest code point here
    assert tok.token_to_id("a") == tok.chars.index("a")
    assert tok.token_to_id("Z") is None
    assert tok.id_to_token(tok.token_to_id("S")) == "S"
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.unk_id) == (None, None, None, None)


def test_encode_decode_known_ids():
    tok = CharTokenizer(["b", "a", "c"])
    assert tok.encode("cab") == [2, 0, 1]
    assert tok.decode([0, 1, 2, 2]) == "abcc"


def test_train_on_several_texts():
    tok = CharTokenizer.train(["ab", "bc\n"])
    assert tok.chars == ["\n", "a", "b", "c"]


@settings(max_examples=50, deadline=None)
@given(st.text(min_size=1))
def test_round_trip_arbitrary_text(text):
    tok = CharTokenizer.train(text)
    ids = tok.encode(text)
    assert len(ids) == len(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


def test_save_load_identical_encodings(tmp_path):
    tok = CharTokenizer.train(TEXT + "ünïcødé 🎭")
    again = load_tokenizer(save_tokenizer(tok, tmp_path / "char.json"))
    assert again.chars == tok.chars
    assert again.encode(TEXT + "🎭") == tok.encode(TEXT + "🎭")


def test_unknown_characters_are_named_with_count():
    tok = CharTokenizer.train(TEXT)
    with pytest.raises(ValueError) as e:
        tok.encode("Speak, 🎭 speak! Zounds! ")
    msg = str(e.value)
    # distinct unknown characters by repr, and how many
    assert "'🎭'" in msg and "'!'" in msg and "'Z'" in msg and "'u'" not in msg
    # 3 distinct unknown characters ('!', 'Z', '🎭'), 4 occurrences ('!' twice)
    assert msg.startswith("3 distinct character(s)")
    assert "(4 occurrence(s) in a text of 24 characters)" in msg
    # what to do, for a prompt as for training data (it spoke of training alone, also to `attnkit sample`)
    assert msg.endswith("a character-level tokenizer knows only the characters of the text it was built from: use "
                        "only those (in a prompt), or build it from all the text it must encode (train and valid)")


def test_unknown_characters_message_capped_at_ten():
    tok = CharTokenizer.train("a")
    with pytest.raises(ValueError) as e:
        tok.encode("bcdefghijklmnop")
    msg = str(e.value)
    assert msg.startswith("15 distinct character(s)")
    assert "'k'" in msg and "'l'" not in msg and "and 5 more" in msg


def test_empty_training_text():
    with pytest.raises(ValueError, match="empty text"):
        CharTokenizer.train("")


def test_vocabulary_entries_must_be_single_characters():
    with pytest.raises(ValueError, match="single character, got 'ab'"):
        CharTokenizer(["ab"])


def test_vocabulary_entries_must_be_distinct():
    with pytest.raises(ValueError, match=r"duplicates \['a'\]"):
        CharTokenizer(["a", "b", "a"])


def test_id_to_token_out_of_range():
    with pytest.raises(ValueError, match=r"\[0, 3\), got 3"):
        CharTokenizer("abc").id_to_token(3)


def test_a_file_with_chars_out_of_id_order_is_refused(tmp_path):
    """Was: loaded re-sorted, so every id differed from the file's ("b" was id 0 there, id 1 once loaded)."""
    path = tmp_path / "tok.json"
    path.write_text('{"type": "char", "chars": ["b", "a", "c"]}', encoding="utf-8")
    with pytest.raises(ValueError, match="'chars' must be its vocabulary in id order.*got 'b' before 'a'"):
        load_tokenizer(path)
    path.write_text('{"type": "char", "chars": ["a", "b", "c"]}', encoding="utf-8")
    assert load_tokenizer(path).encode("bca") == [1, 2, 0]


def test_a_vocabulary_with_a_lone_surrogate_is_saved_and_loads_back(tmp_path):
    """Was: save_tokenizer failed with a UnicodeEncodeError naming no file (UTF-8 cannot hold a lone surrogate)."""
    tok = CharTokenizer.train("ab\ud800")
    back = load_tokenizer(save_tokenizer(tok, tmp_path / "tok.json"))
    assert back.to_dict() == tok.to_dict() and back.encode("b\ud800a") == tok.encode("b\ud800a")
    assert '"\u00e9"' in save_tokenizer(CharTokenizer.train("caf\u00e9"), tmp_path / "t2.json").read_text("utf-8")
    # (other text stays readable: written as UTF-8, not as escapes)


@pytest.mark.parametrize("text", [None, 5, b"To be", bytearray(b"To be"), Path("corpus.txt")])
def test_train_refuses_what_is_not_text(text):
    """Was: a TypeError ("'NoneType' object is not iterable"), and for bytes "item 0 is int"."""
    with pytest.raises(ValueError, match=f"CharTokenizer.train expects a string or an iterable of strings, got "
                                         f"{type(text).__name__}"):
        CharTokenizer.train(text)
