"""The ``en-mono`` recipe: WordNet's example sentences, the sentences among them written as the Ding test writes
them, none of de-en's evaluation sets; and (network) the real recipe from the Debian package."""

from __future__ import annotations

import json

import pytest

from attnkit.data.corpora import en_mono as m
from attnkit.data.corpora.parallel import read_tsv
from attnkit.data.corpora.registry import get_recipe, recipe_names

LINES = [
    "  1 This software and database is being provided to you, the LICENSEE, by \n",
    '01156834 41 v 01 litter 0 001 @ 01156115 v 0000 01 + 08 00 | throw away as refuse; "Please don\'t litter the '
    'sidewalk"; "the children littered the room"  \n',
    '00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 | that which is perceived; "a precise mind"  \n',
    "00002137 03 n 02 abstraction 0 abstract_entity 0 010 @ 00001740 n 0000 | a general concept  \n",
]


def test_examples_are_the_quoted_parts_of_the_glosses():
    assert m.wordnet_examples(LINES) == ["Please don't litter the sidewalk", "the children littered the room",
                                         "a precise mind"]


@pytest.mark.parametrize("text, expected", [
    ("Please don't litter the sidewalk", True),  # a capital letter
    ("he set a high valuation on friendship", True),  # a subject opens it
    ("the sky was leaden and thick", True),  # a finite verb
    ("what they are asking is robbery", True),
    ("a charming and vivacious hostess", False),  # a phrase
    ("loyal supporters", False),
    ("We moved", False),  # fewer than three words
    ("`smog' is a blend of `smoke' and `fog'", False),  # about words
])
def test_only_examples_that_read_as_sentences_are_kept(text, expected):
    assert m.is_sentence(text) is expected


def test_sentences_are_written_as_the_ding_test_writes_them():
    assert m.as_sentence("he doesn't know what's what") == "He doesn\u2019t know what\u2019s what."
    assert m.as_sentence("Where do you bank in this town?") == "Where do you bank in this town?"
    assert m.as_sentence("the 'quotes' stay;") == "The 'quotes' stay."
    assert m.sentence_key("He doesn\u2019t know.") == m.sentence_key("he doesn't know")


def test_selection_drops_phrases_duplicates_and_every_de_en_sentence():
    examples = ["the children were in the room", "The children were in the room", "a precise mind",
                "he set a high valuation on friendship", "She said the following", "they are going home now",
                "we made it up"]
    held_out = ["She said the following."]  # a de-en test reference
    translated = ["We made it up!"]  # already a de-en training target
    kept, counts = m.select_sentences(examples, held_out, translated, seed=0)
    assert sorted(kept) == ["He set a high valuation on friendship.", "The children were in the room.",
                            "They are going home now."]
    assert counts == {"examples": 7, "not_sentences": 1, "duplicates": 1, "in_de_en_eval_sets": 1,
                      "in_de_en_train": 1, "sentences": 3}
    assert m.select_sentences(examples, held_out, translated, seed=0)[0] == kept  # the order is seeded


def test_the_recipe_is_registered_as_monolingual():
    assert "en-mono" in recipe_names("mono")
    assert get_recipe("en-mono").fn is m.prepare_en_mono


@pytest.mark.network
def test_the_real_recipe(attnkit_test_home):
    from attnkit.data.corpora.registry import prepare

    folder = prepare("en-mono", home=attnkit_test_home)
    record = json.loads((folder / "SOURCE.json").read_text())
    assert record["package"] == m.PACKAGE and record["version"] == m.VERSION and record["sha256"] == m.DEB_SHA256
    assert "Princeton" in record["license"]
    sentences = (folder / m.OUTPUT).read_text(encoding="utf-8").splitlines()
    assert len(sentences) == record["counts"]["sentences"] == record["outputs"][m.OUTPUT]["lines"] > 20_000
    assert len({m.sentence_key(s) for s in sentences}) == len(sentences)
    assert all((s[:1].isupper() or s[:1].isdigit()) and s[-1] in ".!?" and "\t" not in s for s in sentences)
    assert 6 < record["counts"]["mean_words"] < 10  # short, like the Ding test's ~8 words
    de_en = attnkit_test_home / "data" / "de-en"
    for split in ("valid", "test", "test-docs"):
        evaluation = {m.sentence_key(t) for t in read_tsv(de_en / f"{split}.tsv").targets}
        assert not evaluation & {m.sentence_key(s) for s in sentences}, split


def test_the_cache_is_rebuilt_when_de_en_changes(tmp_path):
    """A new de-en (a Debian point release) may hold other evaluation sentences: en-mono is selected again."""
    from attnkit.data.fetch import sha256_file

    de_en, home = tmp_path / "de-en", tmp_path / "en-mono"
    de_en.mkdir()
    home.mkdir()
    outputs = {f"{s}.tsv": {"sha256": str(i) * 64} for i, s in enumerate(("valid", "test", "test-docs", "train"))}
    (de_en / "SOURCE.json").write_text(json.dumps({"outputs": outputs}))
    (home / "sentences.txt").write_text("A sentence.\n")
    record = {"recipe_version": m.RECIPE_VERSION,
              "outputs": {"sentences.txt": {"sha256": sha256_file(home / "sentences.txt")}},
              "deduplicated_against": {"de_en_outputs": m._de_en_outputs(de_en)}}
    (home / "SOURCE.json").write_text(json.dumps(record))
    assert m._cached_ok(home, de_en)
    outputs["test-docs.tsv"]["sha256"] = "f" * 64
    (de_en / "SOURCE.json").write_text(json.dumps({"outputs": outputs}))
    assert not m._cached_ok(home, de_en)
