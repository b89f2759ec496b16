"""benchmarks/split_overlap.py counts held-out sentences with a near-duplicate in train: on tiny prepared folders
written here in the recipes' formats (de-en's ``<split>.tsv``, fortunes' ``%``-ended entries, en-mono's
``sentences.txt``), every count and example is checked against what the folder was built to hold."""

from __future__ import annotations

import json

import pytest

from benchmarks import split_overlap

from attnkit.data.corpora.fortunes import format_entries
from attnkit.data.corpora.parallel import write_tsv

TRAIN = [
    ("Ich habe keine Ahnung!", "I haven't a clue!"),  # source near test[0]
    ("Es ist schade drum.", "It’s (such) a shame."),  # target near test[1]
    ("Nicht schießen. Ich ergebe mich!", "Don’t shoot. I surrender!"),  # both near test[2]
    ("Er ist 5 Jahre alt.", "He is 5 years old."),  # both near test[3] (numbers folded)
    ("Das Haus ist rot.", "The house is red."),  # exactly test[5]'s target (a recipe keeps this at 0)
    ("Guten Morgen.", "Good morning."),
]
TEST = [
    ("Ich habe keine Ahnung.", "I have no idea."),
    ("Es ist ein Jammer!", "It's such a shame!"),
    ("Nicht schießen. Ich ergebe mich.", "Don’t shoot. I surrender."),
    ("Er ist 6 Jahre alt.", "He is 6 years old."),
    ("Der Hund schläft.", "The dog sleeps."),  # nowhere in train
    ("Das Gebäude ist rot.", "The house is red."),
    ("Guten Morgen", "I haven't a clue."),  # source near one train pair, target near another: no pair match
]
VALID = [("Guten Morgen!", "Good Morning!"), ("Gute Nacht.", "Good night.")]


@pytest.fixture
def de_en_like(tmp_path):
    folder = tmp_path / "de-en"
    for name, pairs in (("train", TRAIN * 3), ("valid", VALID), ("test", TEST)):  # train repeats pairs, as de-en
        write_tsv(folder / f"{name}.tsv", pairs)
    return folder


def test_pair_counts_on_a_de_en_folder(de_en_like):
    record = split_overlap.measure(de_en_like, examples=10)
    assert record["kind"] == "mt" and list(record["splits"]) == ["valid", "test"]
    assert record["splits"]["test"]["counts"] == {
        "pairs": 7, "exact_pair": 0, "exact_source": 0, "exact_target": 1,
        "source_key": 4,  # 0, 2, 3, 6
        "target_key": 5,  # 1, 2, 3, 5, 6
        "either_key": 6,  # all but 4
        "pair_key": 2,  # 2, 3 (not 6: its sides match two different train pairs)
    }
    assert record["splits"]["valid"]["counts"] == {
        "pairs": 2, "exact_pair": 0, "exact_source": 0, "exact_target": 0,
        "source_key": 1, "target_key": 1, "either_key": 1, "pair_key": 1}
    found = record["splits"]["test"]["examples"]
    # pair-key matches first, shortest first; the exact target match (test[5]) is no near-duplicate example
    assert [(m["match"], tuple(m["held_out"])) for m in found] == [
        ("pair", TEST[3]), ("pair", TEST[2]), ("source", TEST[6]), ("target", TEST[1]), ("source", TEST[0])]
    assert [tuple(m["train"]) for m in found] == [TRAIN[3], TRAIN[2], TRAIN[5], TRAIN[1], TRAIN[0]]


def test_keep_numbers_counts_another_number_as_another_sentence(de_en_like):
    counts = split_overlap.measure(de_en_like, fold_numbers=False)["splits"]["test"]["counts"]
    assert (counts["source_key"], counts["target_key"], counts["pair_key"]) == (3, 4, 1)


def test_the_table_and_json_of_the_script(de_en_like, tmp_path, capsys):
    out = tmp_path / "overlap.json"
    assert split_overlap.main([str(de_en_like), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| test | 7 | 0 / 0 / 1 | 4 (57.1%) | 5 (71.4%) | 6 (85.7%) | 2 (28.6%) |" in printed
    assert "`python benchmarks/split_overlap.py " in printed and " UTC; " in printed  # command, date, machine
    assert "- test (pair key): `Er ist 6 Jahre alt. ⇥ He is 6 years old.` ~ train `Er ist 5 Jahre alt." in printed
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["splits"]["test"]["counts"]["pair_key"] == 2 and "machine" in record


def test_entry_counts_on_a_fortunes_folder(tmp_path):
    folder = tmp_path / "fortunes"
    folder.mkdir()
    train = ["Any excuse will serve a tyrant. -- Aesop", "A day without sunshine\n  is like night.",
             "Give a woman an inch.", "* * *"]
    valid = ['"Any excuse will serve a tyrant."\n\t\t-- Aesop',  # near-duplicate
             "A day without\nsunshine is like night.",  # exact up to whitespace (the recipe's duplicate rule)
             "Everything should be made as simple as possible.",
             "~ ~ ~"]  # punctuation only: an empty key, which matches nothing (not the "* * *" of train)
    (folder / "train.txt").write_text(format_entries(train), encoding="utf-8")
    (folder / "valid.txt").write_text(format_entries(valid), encoding="utf-8")
    record = split_overlap.measure(folder)
    assert record["kind"] == "lm"
    assert record["splits"]["valid"]["counts"] == {"entries": 4, "exact": 1, "key": 2}
    assert record["splits"]["valid"]["examples"] == [{"held_out": valid[0], "train": train[0]}]
    assert "| valid | 4 | 1 | 2 (50.0%) |" in split_overlap.table(record)


def test_a_monolingual_folder_is_measured_against_another_recipes_held_out_english(de_en_like, tmp_path, capsys):
    mono = tmp_path / "en-mono"
    mono.mkdir()
    (mono / "sentences.txt").write_text("Good night!\nThe dog sleeps.\nA cat.\n", encoding="utf-8")
    record = split_overlap.measure(mono, held_out=de_en_like)
    assert record["splits"]["valid"]["counts"] == {"entries": 2, "exact": 0, "key": 1}
    assert record["splits"]["test"]["counts"] == {"entries": 7, "exact": 1, "key": 1}
    with pytest.raises(SystemExit) as exit_info:  # without --held-out: a usage error naming the flag
        split_overlap.main([str(mono)])
    assert exit_info.value.code == 2 and "--held-out" in capsys.readouterr().err


def test_a_folder_that_is_no_prepared_recipe_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        split_overlap.main([str(tmp_path)])
    assert exit_info.value.code == 2 and "not a prepared recipe" in capsys.readouterr().err


def test_an_example_shows_the_first_train_pair_with_the_key_and_never_an_exact_source_or_target():
    """An example shows the first train pair with the held-out pair's keys; a held-out pair whose closest match has
    the very same source (or target) text is counted but gives no example."""
    train = [("Hello!", "Hallo!"), ("hello", "hallo"), ("Good night", "Gute Nacht")]
    held = [("HELLO", "HALLO"), ("Good night", "Schlaf gut"), ("Sleep well", "Gute Nacht")]
    counts, found = split_overlap.pair_overlap(train, held, examples=5)
    assert found == [{"held_out": ["HELLO", "HALLO"], "train": ["Hello!", "Hallo!"], "match": "pair"}]
    assert counts["source_key"] == 2 and counts["target_key"] == 2 and counts["pair_key"] == 1
