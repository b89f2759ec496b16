"""benchmarks/token_store.py's own pieces, offline: sizes, the generated corpora, the record's tables (the
measurements themselves are the benchmark's; see benchmarks/records/data/token_store.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import benchmarks.token_store as bench


def test_sizes_are_decimal_and_bad_ones_are_refused():
    assert [bench.parse_size(s) for s in ("10M", "1.5G", "2k", "7")] == [10_000_000, 1_500_000_000, 2_000, 7]
    with pytest.raises(ValueError, match="a size is a number with K, M or G"):
        bench.parse_size("ten megabytes")


def test_a_corpus_is_whole_lines_up_to_its_size(tmp_path):
    lines = [f"line {i} of the corpus" for i in range(50)]
    path = tmp_path / "c.txt"
    written = bench.write_corpus(path, 3000, lines, seed=1)
    text = path.read_text(encoding="utf-8")
    assert written == len(text.encode()) and 3000 <= written < 3000 + 30 and text.endswith("\n")
    assert set(text.splitlines()) <= set(lines)  # rounds of shuffled lines, each line whole
    again = tmp_path / "d.txt"
    bench.write_corpus(again, 3000, lines, seed=1)
    assert again.read_text(encoding="utf-8") == text  # the seed makes it reproducible


def test_the_committed_record_renders_its_tables():
    record = json.loads((Path(bench.__file__).parent / "records/data/token_store.json").read_text())
    text = bench.render(record)
    assert text.startswith("# Token store: memory and tokenization throughput")
    assert text.count("\n| 10 MB |") == 2 and "store / datasets" in text


def test_a_throughput_only_record_has_no_memory_table():
    record = json.loads((Path(bench.__file__).parent / "records/data/token_store_amd.json").read_text())
    text = bench.render(record)
    assert "before the store (in memory)" not in text and text.count("\n| 1,000 MB |") == 1
    assert "store / datasets" in text
