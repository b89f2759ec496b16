"""The back-translation tag ``<bt>``: one special token of the joint BPE (id 4), never split, written before each
synthetic source, and present in the encoded source batches that the model reads."""

from __future__ import annotations

import pytest

from attnkit.data.pipeline.mt_batching import BT_TAG, MT_SPECIAL_TOKENS, encode_pairs, tag_sources, train_joint_bpe
from attnkit.data.pipeline.mt_store import encode_pairs_stored

GERMAN = ["Das Haus ist groß.", "Er lobte ihre Kochkunst.", "Wir gehen heute nicht mit.", "Bitte warte hier."]
ENGLISH = ["The house is big.", "He praised her cooking.", "We are not going along today.", "Please wait here."]


@pytest.fixture(scope="module")
def tok():
    return train_joint_bpe(GERMAN * 10, ENGLISH * 10, 300, extra_specials=(BT_TAG,))


def test_the_tag_is_special_id_4_after_the_usual_four(tok):
    assert [tok.token_to_id(t) for t in (*MT_SPECIAL_TOKENS, BT_TAG)] == [0, 1, 2, 3, 4]
    without = train_joint_bpe(GERMAN * 10, ENGLISH * 10, 300)
    assert without.token_to_id(BT_TAG) is None  # only runs with synthetic pairs have it


@pytest.mark.parametrize("text", ["Das Haus ist groß.", "x", "Bitte warte hier.", "<bt", "bt>"])
def test_a_tagged_source_is_the_tag_id_then_the_sentence_as_if_alone(tok, text):
    (tagged,) = tag_sources([text])
    assert tagged == BT_TAG + text
    assert tok.encode(tagged) == [4] + tok.encode(text)
    assert tok.decode(tok.encode(tagged)) == tagged  # it round-trips as text
    assert tok.decode(tok.encode(tagged), skip_special_tokens=True) == text


def test_the_tag_is_never_split_wherever_it_stands(tok):
    for text in ("<bt><bt>", "Haus<bt>Haus", " <bt> ", "a<bt>"):
        assert tok.encode(text).count(4) == text.count(BT_TAG)
        pieces = [tok.id_to_token(i) for i in tok.encode(text) if i != 4]
        assert not any("bt" in p for p in pieces), pieces


def test_the_token_store_keeps_the_tag_first_in_each_tagged_source(tok, tmp_path):
    sources = GERMAN + tag_sources(GERMAN)
    stored = encode_pairs_stored(tok, sources, ENGLISH * 2, max_src_len=32, cache_dir=tmp_path)
    listed = encode_pairs(tok, sources, ENGLISH * 2, max_src_len=32)
    assert [list(s) for s in stored.src] == listed.src
    for i in range(len(GERMAN)):
        assert stored.src[i][0] != 4 and 4 not in stored.src[i]
        assert stored.src[len(GERMAN) + i] == [4] + stored.src[i]
