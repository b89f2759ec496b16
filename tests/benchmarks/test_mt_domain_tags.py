"""benchmarks/mt_domain_tags.py: the tagged copies of a prepared de-en folder (the domain-tag probe's data)."""

from __future__ import annotations

from benchmarks.mt_domain_tags import TAGS, write_tagged

from attnkit.data.corpora.parallel import read_tsv, write_tsv


def test_training_sources_are_tagged_by_domain_and_the_test_sets_by_their_register(tmp_path):
    prepared = tmp_path / "de-en"
    prepared.mkdir()
    dialogue = ("Ich komme morgen.", "I will come tomorrow.")
    docs = ("Dieses Paket enthält Bibliotheken.", "This package contains libraries.")
    write_tsv(prepared / "train.tsv", [dialogue, docs, dialogue])  # repeated pairs keep their repeats
    write_tsv(prepared / "in-domain.tsv", [dialogue])
    write_tsv(prepared / "valid.tsv", [("Das ist gut.", "That is good.")])
    write_tsv(prepared / "test.tsv", [("Er lacht.", "He laughs.")])
    write_tsv(prepared / "test-docs.tsv", [("Das Programm liest Dateien.", "The program reads files.")])

    counts = write_tagged(prepared, tmp_path / "out")

    nat, doc = TAGS["natural"], TAGS["docs"]
    assert read_tsv(tmp_path / "out" / "train_tag.tsv", strict=True).pairs() == [
        (f"{nat} Ich komme morgen.", "I will come tomorrow."),
        (f"{doc} Dieses Paket enthält Bibliotheken.", "This package contains libraries."),
        (f"{nat} Ich komme morgen.", "I will come tomorrow.")]
    assert read_tsv(tmp_path / "out" / "valid_tag.tsv", strict=True).pairs() == [(f"{nat} Das ist gut.", "That is good.")]
    assert read_tsv(tmp_path / "out" / "test_tag.tsv", strict=True).pairs() == [(f"{nat} Er lacht.", "He laughs.")]
    assert read_tsv(tmp_path / "out" / "test-docs_tag.tsv", strict=True).pairs() == [
        (f"{doc} Das Programm liest Dateien.", "The program reads files.")]
    assert counts == {"train": {"natural": 2, "docs": 1}, "valid": {"natural": 1}, "test": {"natural": 1},
                      "test-docs": {"docs": 1}}
