"""Token labels: byte-level BPE pieces decoded to the characters they spell (GPT-2's tokenizer, GPT-2's construction
from ranks, attnkit's trained BPE, characters), their raw form for hover texts, and whitespace made visible.

Axis legend: ``N`` tokens.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.data.tokenizers.gpt2_tokenizer import GPT2_EOT, gpt2_tokenizer, tokenizer_from_ranks
from attnkit.viz.labels import CONTINUES, text_labels, token_labels, token_pieces, token_titles, visible

# o + the first byte of an umlaut is frequent here, and there is no "ß" and no emoji: in "groß" the first byte of
# "ß" joins the "o" before it ("oÃ") and its second byte ("Ł") stays alone; an emoji falls apart into its 4 bytes
GERMAN = ["Koöln und Zoürich, Boälle und Moöwe: die Koöche von Zoüge"] * 10


@pytest.fixture(scope="module")
def german_bpe() -> BPETokenizer:
    return BPETokenizer.train(GERMAN, 300, special_tokens=["<pad>", "<bos>", "<eos>"])


@pytest.fixture(scope="module")
def ranks_bpe() -> BPETokenizer:
    """A byte-level BPE built the way attnkit builds GPT-2's (``tokenizer_from_ranks``), from 5 merges."""
    ranks = {bytes([b]): b for b in range(256)}
    for word in (b"gr", b"o\xc3", b" \xf0", b" \xf0\x9f", b"\x98\x80"):  # each = two lower-ranked parts
        ranks[word] = len(ranks)
    return BPETokenizer(tokenizer_from_ranks(ranks, {GPT2_EOT: len(ranks)}), bos=GPT2_EOT, eos=GPT2_EOT)


def _pieces(tok, ids):
    return [tok.id_to_token(i) for i in ids]


def test_attnkit_bpe_a_split_sharp_s_and_emoji(german_bpe):
    ids = german_bpe.encode(" groß 😀")
    assert _pieces(german_bpe, ids) == ["Ġ", "g", "r", "oÃ", "Ł", "Ġ", "ð", "Ł", "ĺ", "Ģ"]  # the split to label
    assert text_labels(german_bpe, ids) == ["·", "g", "r", "o◌", "ß", "·", "◌", "◌", "◌", "😀"]
    # each on its own (next-token candidates): the bytes that are no character by themselves in hex
    assert token_labels(german_bpe, ids) == ["·", "g", "r", "o‹c3›", "‹9f›", "·", "‹f0›", "‹9f›", "‹98›", "‹80›"]
    titles = token_titles(german_bpe, ids)
    assert titles[3] == f'id {ids[3]} · piece "oÃ" · bytes 6f c3'
    assert titles[4] == f'id {ids[4]} · piece "Ł" · bytes 9f'


def test_gpt2_construction_from_ranks(ranks_bpe):
    ids = ranks_bpe.encode(" groß 😀")
    assert _pieces(ranks_bpe, ids) == ["Ġ", "gr", "oÃ", "Ł", "ĠðŁ", "ĺĢ"]
    assert text_labels(ranks_bpe, ids) == ["·", "gr", "o◌", "ß", "·◌", "😀"]
    assert token_labels(ranks_bpe, ids) == ["·", "gr", "o‹c3›", "‹9f›", "·‹f09f›", "‹9880›"]
    assert [p.data for p in token_pieces(ranks_bpe, ids)] == [b" ", b"gr", b"o\xc3", b"\x9f", b" \xf0\x9f",
                                                              b"\x98\x80"]


def _test_home() -> Path:
    """The tests' download cache (as tests/data's ``attnkit_test_home``): outside the work tree, kept between runs."""
    return Path(os.environ.get("ATTNKIT_TEST_HOME") or Path.home() / ".cache" / "attnkit-tests").expanduser()


@pytest.mark.network
def test_gpt2_sharp_s_and_emoji_over_several_pieces():
    gpt2 = gpt2_tokenizer(home=_test_home())
    ids = gpt2.encode("Das ist groß.")
    assert _pieces(gpt2, ids) == ["D", "as", "Ġis", "t", "Ġgro", "ÃŁ", "."]  # GPT-2 has "ß" as one token
    assert text_labels(gpt2, ids) == ["D", "as", "·is", "t", "·gro", "ß", "."]
    ids = gpt2.encode("I like 😀 and 🤖!")
    assert _pieces(gpt2, ids) == ["I", "Ġlike", "ĠðŁĺ", "Ģ", "Ġand", "ĠðŁ", "¤", "ĸ", "!"]
    assert text_labels(gpt2, ids) == ["I", "·like", "·◌", "😀", "·and", "·◌", "◌", "🤖", "!"]
    assert token_titles(gpt2, ids)[2] == 'id 30325 · piece "ĠðŁĺ" · bytes 20 f0 9f 98'
    assert token_labels(gpt2, ids)[2:4] == ["·‹f09f98›", "‹80›"]
    assert text_labels(gpt2, [50256] + ids[:2]) == ["<|endoftext…", "I", "·like"]
    assert token_titles(gpt2, [50256]) == ['id 50256 · special "<|endoftext|>"']


def test_a_special_token_cuts_the_text(german_bpe):
    first, second = german_bpe.encode("ß")  # "Ã", "Ł"
    bos = german_bpe.token_to_id("<bos>")
    assert text_labels(german_bpe, [first, bos, second]) == ["‹c3›", "<bos>", "‹9f›"]
    assert text_labels(german_bpe, [bos, first, second]) == ["<bos>", CONTINUES, "ß"]
    assert token_pieces(german_bpe, [bos])[0].data is None and token_pieces(german_bpe, [bos])[0].special


def test_a_user_defined_token_is_plain_text(german_bpe):
    """Added tokens (a GGUF model's user-defined ones) are stored as text, not in the byte alphabet, where "ß" would
    be the byte df."""
    from tokenizers import AddedToken, Tokenizer

    backend = Tokenizer.from_str(german_bpe.backend.to_str())
    backend.add_tokens([AddedToken("Straße", special=False, normalized=False)])
    tok = BPETokenizer(backend)
    ids = tok.encode("die Straße")
    assert text_labels(tok, ids)[-1] == token_labels(tok, ids)[-1] == "Straße"
    assert token_titles(tok, ids)[-1] == f'id {ids[-1]} · piece "Straße" · bytes 53 74 72 61 c3 9f 65'


def test_an_unfinished_character_at_the_end_shows_its_bytes(german_bpe):
    ids = german_bpe.encode("ü😀")[:-1]  # the emoji without its last byte
    assert text_labels(german_bpe, ids)[-3:] == ["‹f0›", "‹9f›", "‹98›"]


def test_characters_need_no_decoding():
    tok = CharTokenizer.train("aß 😀\n\x1b")
    ids = tok.encode("ß 😀\n\x1b")
    assert text_labels(tok, ids) == token_labels(tok, ids) == ["ß", "·", "😀", "↵", "‹1b›"]
    assert token_titles(tok, ids)[:2] == [f'id {ids[0]} · piece "ß" · bytes c3 9f',
                                          f'id {ids[1]} · piece " " · bytes 20']
    assert token_titles(tok, ids)[3] == f'id {ids[3]} · piece "\\n" · bytes 0a'


def test_no_tokenizer_and_bad_arguments():
    assert text_labels(None, [3, 14]) == token_labels(None, [3, 14]) == ["3", "14"]
    assert token_titles(None, [3]) == ['id 3 · piece "3" · bytes 33']
    with pytest.raises(ValueError, match="max_chars must be an int >= 2, got 1"):
        text_labels(None, [1], max_chars=1)
    with pytest.raises(ValueError, match="max_chars must be an int >= 2, got 1"):
        token_labels(None, [1], max_chars=1)


def test_long_labels_are_cut(german_bpe):
    ids = german_bpe.encode(" Koöche")
    assert "".join(text_labels(german_bpe, ids, max_chars=200)) == "·Koöche"
    assert all(len(lab) <= 3 for lab in text_labels(german_bpe, ids, max_chars=3))


def test_visible_control_characters():
    assert visible("a\x00\x7f") == "a‹00›‹7f›"
    assert visible("\tx ") == "⇥x·"


def test_invisible_and_reordering_characters_are_shown():
    # a right-to-left override would reverse the labels and text after it on the page; a C1 control or a line
    # separator draws nothing or breaks the line; a lone zero-width space would be an empty label
    assert visible("ab\u202ecd") == "ab‹U+202E›cd"
    assert visible("x\x85\u2028") == "x‹U+0085›‹U+2028›"
    assert visible("\u200b") == "‹U+200B›"
    assert visible("👨\u200d👩") == "👨\u200d👩"  # a joiner inside an emoji sequence stays
    tok = CharTokenizer.train("a\u202e\u2028")
    assert text_labels(tok, tok.encode("a\u202e")) == ["a", "‹U+202E›"]
    assert token_titles(tok, tok.encode("\u202e\u2028")) == ['id 2 · piece "\\u202e" · bytes e2 80 ae',
                                                          'id 1 · piece "\\u2028" · bytes e2 80 a8']


_UNDO = {"·": " ", "↵": "\n", "⇥": "\t", "␍": "\r"}


@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="·↵⇥␍◌‹›∅…")
               | st.sampled_from(" \n\t"), max_size=30))
def test_labels_spell_the_text(german_bpe, text):
    """Joined, without the ◌ marks and with the whitespace marks undone, the labels are the text; every label of a
    token that holds bytes of an unfinished character ends in ◌."""
    ids = german_bpe.encode(text)
    labels = text_labels(german_bpe, ids, max_chars=10_000)
    joined = "".join(labels).replace(CONTINUES, "")
    joined = re.sub(r"‹U\+([0-9A-F]+)›", lambda m: chr(int(m.group(1), 16)), joined)  # code points shown
    assert "".join(_UNDO.get(c, c) for c in joined) == text
    done = 0  # how many bytes of the text are whole characters so far
    for p, label in zip(token_pieces(german_bpe, ids), labels):
        before = done
        done += len(p.data)
        cut = text.encode()[:done]
        open_char = cut.decode("utf-8", "ignore").encode() != cut  # the bytes so far end inside a character
        assert label.endswith(CONTINUES) == open_char, (text, before, label)


# --------------------------------------------------------------------------- SentencePiece style (byte fallback)
def _sentencepiece_bpe(style: str) -> BPETokenizer:
    """A Llama-2-/Mistral-style ``tokenizer.json`` built here (nothing downloaded): BPE with byte fallback
    (``<0x00>``..``<0xFF>``), ``▁`` for a space, and the decoder of that family."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    merges = [("▁", "S"), ("▁S", "t"), ("▁St", "r"), ("▁Str", "a"), ("▁", "t"), ("▁t", "h"), ("▁th", "e"),
              ("▁", "c"), ("▁c", "a"), ("▁ca", "f")]
    for a, b in merges:
        for piece in (a, b, a + b):
            vocab.setdefault(piece, len(vocab))
    for ch in "abcdefghijklmnopqrstuvwxyzST":
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if style == "llama2":  # Llama 2, Mistral 7B v0.1: the space marker put in by the normalizer, stripped at the end
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    else:  # a Metaspace pre-tokenizer and decoder (prepend_scheme "first")
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁",
                                                                                     prepend_scheme="first",
                                                                                     split=False)])
    return BPETokenizer(tok, bos="<s>", eos="</s>", unk="<unk>")


@pytest.mark.parametrize("style", ["llama2", "metaspace"])
def test_sentencepiece_byte_fallback_pieces(style):
    # "ß" was two '�' and the space before "the" was lost: '<0xC3>' '<0x9F>' and '▁' were not recognised
    tok = _sentencepiece_bpe(style)
    ids = tok.encode("Straße the")
    assert _pieces(tok, ids) == ["▁Stra", "<0xC3>", "<0x9F>", "e", "▁the"]
    assert tok.decode(ids) == "Straße the"
    assert text_labels(tok, ids) == ["Stra", CONTINUES, "ß", "e", "·the"]
    assert token_labels(tok, ids) == ["·Stra", "‹c3›", "‹9f›", "e", "·the"]  # each alone: its space shown
    assert [p.data for p in token_pieces(tok, ids)] == [b" Stra", b"\xc3", b"\x9f", b"e", b" the"]
    assert token_titles(tok, ids)[1] == f'id {ids[1]} · piece "<0xC3>" · bytes c3'
    # a special token is not text, and the text after it still starts without the decoder's space
    with_bos = [tok.bos_id, *ids]
    assert text_labels(tok, with_bos) == ["<s>", "Stra", CONTINUES, "ß", "e", "·the"]
    # as a checkpoint stores the tokenizer and `viz attention --ckpt` loads it again
    from attnkit.data.tokenizers.tokenizer import tokenizer_from_dict

    again = tokenizer_from_dict(tok.to_dict())
    assert text_labels(again, again.encode("Straße the")) == ["Stra", CONTINUES, "ß", "e", "·the"]


@pytest.mark.parametrize("style", ["llama2", "metaspace"])
@pytest.mark.parametrize("text", ["Straße the", "the café 😀 naïve", "a\nb  c", "Tt ß", "ß", "the\tend "])
def test_sentencepiece_labels_spell_the_text(style, text):
    tok = _sentencepiece_bpe(style)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    labels = text_labels(tok, ids, max_chars=10_000)
    if _pieces(tok, ids)[0] == "▁":  # only the space the decoder drops: the token spells nothing
        assert labels[0] == "∅"
        labels = labels[1:]
    joined = "".join(labels).replace(CONTINUES, "")
    assert "".join(_UNDO.get(c, c) for c in joined) == text
    assert "\ufffd" not in "".join(labels)
