"""BPETokenizer: byte-level training, exact round trips, special tokens, wrapping, serialisation."""

from pathlib import Path

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import models, pre_tokenizers

from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer, byte_level_pre_tokenizer, bytes_to_unicode
from attnkit.data.tokenizers.tokenizer import decode_stream, load_tokenizer, save_tokenizer, tokenizer_from_dict

CORPUS = [
    "To be, or not to be, that is the question:",
    "Whether 'tis nobler in the mind to suffer",
    "The slings and arrows of outrageous fortune,",
    "Or to take arms against a sea of troubles",
    "Der Himmel über Berlin ist grau. Straße, Größe, Äpfel.",
    "Ein Computer ist kein Mensch, aber ein Film ist ein Film.",
] * 20
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train(CORPUS, 400, special_tokens=SPECIALS)


def test_special_tokens_first_and_roles_inferred(tok):
    assert [tok.token_to_id(t) for t in SPECIALS] == [0, 1, 2, 3]
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.special_ids == [0, 1, 2, 3]


def test_explicit_roles():
    t = BPETokenizer.train(CORPUS, 300, special_tokens=["<|endoftext|>", "<x>"], eos="<x>")
    assert t.eos_id == 1 and t.bos_id is None and t.pad_id is None and t.unk_id is None


def test_vocab_size_and_merges_learned(tok):
    assert 256 + len(SPECIALS) < tok.vocab_size <= 400
    ids = tok.encode("To be, or not to be")
    assert len(ids) < len("To be, or not to be")  # merges shorten frequent text
    assert all(0 <= i < tok.vocab_size for i in ids)


def test_every_byte_is_in_the_vocabulary(tok):
    # even bytes the corpus never had (e.g. 0x00, emoji bytes) have their own token
    for b, ch in bytes_to_unicode().items():
        assert tok.token_to_id(ch) is not None, b


def test_no_prefix_space_added(tok):
    assert tok.decode(tok.encode("Hello")) == "Hello"
    assert tok.id_to_token(tok.encode("T")[0]) == "T"  # not "ĠT"


@settings(max_examples=60, deadline=None)
@given(text=st.text())
def test_round_trip_arbitrary_unicode(tok, text):
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("text", [
    "", " ", "   leading and trailing   ", "\n\n\n", "\t\r\n\x00\x7f", "emoji 🎉👩‍👩‍👧 and 日本語",
    "<pad>literal specials<eos> inside<bos>", "a" * 1000, "Straße—Größe…",
])
def test_round_trip_edge_cases(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_literal_special_tokens_encode_to_their_id(tok):
    ids = tok.encode("x<eos>y")
    assert tok.eos_id in ids
    assert tok.decode(ids, skip_special_tokens=True) == "xy"


def test_encode_batch_matches_encode(tok):
    texts = ["To be", "", "Größe 🎉", "or not"]
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]


def test_encode_batch_rejects_non_str(tok):
    with pytest.raises(ValueError, match="item 1 is int"):
        tok.encode_batch(["a", 3])


def test_save_load_identical_encodings(tok, tmp_path):
    again = load_tokenizer(save_tokenizer(tok, tmp_path / "bpe.json"))
    sample = " ".join(CORPUS[:6]) + " 🎉 <eos>"
    assert again.encode(sample) == tok.encode(sample)
    assert again.vocab_size == tok.vocab_size
    assert (again.pad_id, again.bos_id, again.eos_id, again.unk_id) == (0, 1, 2, 3)


def test_to_dict_holds_the_tokenizers_json(tok):
    d = tok.to_dict()
    assert d["type"] == "bpe" and d["eos"] == "<eos>"
    assert d["tokenizer"]["model"]["type"] == "BPE"
    # from_dict also accepts the raw Tokenizer.to_str() string
    again = tokenizer_from_dict(dict(d, tokenizer=tok.backend.to_str()))
    assert again.encode("to be") == tok.encode("to be")


def test_wrap_existing_tokenizer_with_roles():
    # a tiny hand-made word-level tokenizer stands in for e.g. a GGUF or MT tokenizer
    backend = tokenizers.Tokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, "</s>": 2, "hi": 3}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    t = BPETokenizer(backend, bos="<s>", eos=2, unk="<unk>")
    assert (t.bos_id, t.eos_id, t.unk_id, t.pad_id) == (1, 2, 0, None)
    assert t.encode("hi there", add_bos=True, add_eos=True) == [1, 3, 0, 2]
    assert t.vocab_size == 4


def test_wrap_rejects_missing_role_token():
    backend = tokenizers.Tokenizer(models.BPE())
    with pytest.raises(ValueError, match=r"eos token '<eos>' is not in the vocabulary"):
        BPETokenizer(backend, eos="<eos>")


def test_wrap_rejects_non_tokenizer():
    with pytest.raises(ValueError, match="wraps a tokenizers.Tokenizer, got dict"):
        BPETokenizer({})


def test_train_vocab_size_too_small():
    with pytest.raises(ValueError, match=r"vocab_size must be an int in \[256 bytes \+ 4 special tokens = 260, "
                                         r"4,194,304\], got 259"):
        BPETokenizer.train(CORPUS, 259, special_tokens=SPECIALS)
    with pytest.raises(ValueError, match=r"4,194,304\], got 99999999999"):  # the trainer would abort the process
        BPETokenizer.train(CORPUS, 99999999999, special_tokens=SPECIALS)


def test_train_role_must_be_a_special_token():
    with pytest.raises(ValueError, match=r"eos='</s>' must be one of special_tokens"):
        BPETokenizer.train(CORPUS, 300, special_tokens=SPECIALS, eos="</s>")


def test_train_duplicate_special_tokens():
    with pytest.raises(ValueError, match="must be distinct"):
        BPETokenizer.train(CORPUS, 300, special_tokens=["<pad>", "<pad>"])


@pytest.mark.parametrize("specials, match", [
    ("<eos>", r"special_tokens must be a list of token strings, e.g. \['<eos>'\], got the str '<eos>'"),
    (["<eos>", ""], r"special_tokens must be non-empty strings, got '' in"),
    ([5], r"special_tokens must be non-empty strings, got 5 in \[5\]"),
])
def test_train_refuses_special_tokens_that_are_not_a_list_of_strings(specials, match):
    """Was: a string taken as the list of its characters ("e" and "o" became special tokens, which decoding with
    skip_special_tokens dropped from the text: "hello" -> "hll"), an empty token accepted, and a TypeError."""
    with pytest.raises(ValueError, match=match):
        BPETokenizer.train(CORPUS, 300, special_tokens=specials)


def test_train_rejects_non_string_items():
    with pytest.raises(ValueError, match="item 1 is bytes"):
        BPETokenizer.train(["ok", b"bytes"], 300)


def test_train_is_deterministic():
    a = BPETokenizer.train(CORPUS, 350, special_tokens=SPECIALS)
    b = BPETokenizer.train(iter(CORPUS), 350, special_tokens=SPECIALS)
    assert a.backend.to_str() == b.backend.to_str()


def test_spelled_out_pre_tokenizer_equals_builtin_byte_level():
    builtin = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    ours = byte_level_pre_tokenizer()
    for text in CORPUS[:6] + ["it's  we'll   x\n\n  y 1234 ?!? éé 🎉 \t\t end  "]:
        assert ours.pre_tokenize_str(text) == builtin.pre_tokenize_str(text)


def test_bytes_to_unicode_is_a_bijection_of_printable_characters():
    m = bytes_to_unicode()
    assert sorted(m) == list(range(256))
    assert len(set(m.values())) == 256
    assert m[ord(" ")] == "Ġ" and m[ord("\n")] == "Ċ" and m[ord("A")] == "A"
    assert all(ch.isprintable() and not ch.isspace() for ch in m.values())


def test_a_lone_surrogate_is_named_not_called_a_non_str(tok):
    """Was: "cannot encode the text: TextInputSequence must be str" (and "TextEncodeInput must be Union[...]" for a
    batch) of a str: the backend's words for text UTF-8 cannot encode, such as a surrogate-escaped byte of argv."""
    match = r"cannot tokenize a lone surrogate, '\\udce9' at character 3 of the text \(near 'caf\\udce9 au lait'\)"
    with pytest.raises(ValueError, match=match):
        tok.encode("caf\udce9 au lait")
    with pytest.raises(ValueError, match=match):
        tok.encode_batch(["fine", "caf\udce9 au lait"])


def test_training_on_a_lone_surrogate_names_the_text_and_the_character():
    """Was: a raw UnicodeEncodeError from the backend ("'utf-8' codec can't encode character '\\ud800' in position
    1"), naming neither the text nor where in it (the position was that of a 1 MiB piece, not of the text)."""
    with pytest.raises(ValueError, match=r"lone surrogate, '\\ud800' at character 1 of training text 1 "):
        BPETokenizer.train(["fine", "x\ud800y"], 300)
    long = "line\n" * 300_000 + "x\udc00"  # past the first 1 MiB piece: the position is the text's
    with pytest.raises(ValueError, match=r"'\\udc00' at character 1500001 of the training text "):
        BPETokenizer.train(long, 300)


def test_train_refuses_a_bool_min_frequency():
    """Was: min_frequency=True was taken as 1 (every pair merged, however rare)."""
    with pytest.raises(ValueError, match=r"min_frequency must be an int >= 1, got True \(bool\)"):
        BPETokenizer.train("abc abc", 300, min_frequency=True)


def test_a_tokenizer_saved_with_truncation_and_padding_neither_truncates_nor_pads(tok, tmp_path):
    """Was: a tokenizer.json saved with truncation or padding on (``enable_truncation(max_length=8)``) cut every
    text at 8 ids and padded it to 16 with pad ids, where transformers encodes the whole text unless asked."""
    text = " ".join(CORPUS[:3])
    backend = tokenizers.Tokenizer.from_str(tok.backend.to_str())
    backend.enable_truncation(max_length=8)
    backend.enable_padding(length=16, pad_id=0, pad_token="<pad>")
    path = tmp_path / "tokenizer.json"
    backend.save(str(path))
    for wrapped in (BPETokenizer(backend, pad="<pad>"), BPETokenizer.from_file(path, pad="<pad>")):
        assert wrapped.encode(text) == tok.encode(text) and wrapped.decode(wrapped.encode(text)) == text
        assert wrapped.encode_batch([text, "To"]) == [tok.encode(text), tok.encode("To")]
    assert backend.truncation["max_length"] == 8 and backend.padding["length"] == 16  # the caller's object kept


@pytest.mark.parametrize("on", ["truncation", "padding"])
def test_a_tokenizer_saved_with_only_truncation_or_only_padding_is_wrapped_without_it(tok, on):
    """Either setting alone is turned off too (the test above sets both)."""
    text = " ".join(CORPUS[:3])
    backend = tokenizers.Tokenizer.from_str(tok.backend.to_str())
    if on == "truncation":
        backend.enable_truncation(max_length=4)
    else:
        backend.enable_padding(length=len(tok.encode(text)) + 8, pad_id=0, pad_token="<pad>")
    wrapped = BPETokenizer(backend, pad="<pad>")
    assert wrapped.encode(text) == tok.encode(text)
    assert wrapped.encode_batch([text, "To"]) == [tok.encode(text), tok.encode("To")]
    assert wrapped.backend.truncation is None and wrapped.backend.padding is None
    assert (backend.truncation, backend.padding) != (None, None)  # the caller's object kept


@pytest.mark.parametrize("texts", [None, 5, b"To be", bytearray(b"To be"), Path("corpus.txt")])
def test_train_refuses_what_is_not_text(texts):
    """Was: a TypeError ("'NoneType' object is not iterable", "'PosixPath' object ..."), and for bytes "item 0 is
    int"."""
    with pytest.raises(ValueError, match=f"texts must be a string or an iterable of strings, got "
                                         f"{type(texts).__name__}"):
        BPETokenizer.train(texts, 300)


def test_skip_special_tokens_drops_a_role_token_the_backend_does_not_mark_special(tok):
    """Was: a tokenizer.json that adds its eos (named by tokenizer_config.json) as an ordinary token kept it in
    decode(skip_special_tokens=True): "hi<|im_end|>", where transformers gives "hi" (and it is in special_ids)."""
    backend = tokenizers.Tokenizer.from_str(tok.backend.to_str())
    backend.add_tokens([tokenizers.AddedToken("<|im_end|>", special=False, normalized=False)])
    wrapped = BPETokenizer(backend, eos="<|im_end|>", pad="<pad>")
    ids = wrapped.encode("To be<|im_end|><pad> or")
    assert wrapped.eos_id in ids and wrapped.eos_id in wrapped.special_ids
    assert wrapped.decode(ids, skip_special_tokens=True) == "To be or"
    assert "".join(decode_stream(wrapped, ids, skip_special_tokens=True)) == "To be or"
    assert wrapped.decode(ids) == "To be<|im_end|><pad> or"
    assert tok.decode(tok.encode("To be<eos> or"), skip_special_tokens=True) == "To be or"
