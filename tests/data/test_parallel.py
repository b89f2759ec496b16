"""Reading and writing parallel text (attnkit.data.parallel): TSV, two aligned files, bad-input rules."""

from __future__ import annotations

import pytest

from attnkit.data.parallel import (ParallelCorpus, load_parallel, load_splits, normalize_text, read_parallel_files,
                                   read_tsv, write_tsv)

PAIRS = [
    ("Er lobte ihre Kochkunst.", "He praised her cooking."),
    ("Ist heute Post gekommen?", "Did we get any mail today?"),
    ("Größe und Maße ändern", "Change size and dimensions"),
]


def _write(path, text: str, encoding: str = "utf-8"):
    path.write_bytes(text.encode(encoding))
    return path


# --- normalisation ------------------------------------------------------------------------------------------
def test_normalize_text_collapses_whitespace_and_invisible_characters():
    assert normalize_text("  Er\tlobte\n ihre\u00a0 Koch\u00adkunst.\u200b ") == "Er lobte ihre Kochkunst."


def test_normalize_text_composes_unicode():
    decomposed = "Gro\u0308\u00dfe"  # o + combining diaeresis
    assert normalize_text(decomposed) == "Größe" and len(normalize_text(decomposed)) == 5


def test_normalize_text_rejects_non_strings():
    with pytest.raises(ValueError, match="expects a str, got int"):
        normalize_text(3)


# --- TSV ------------------------------------------------------------------------------------------------------
def test_write_then_read_tsv_round_trips(tmp_path):
    path = tmp_path / "train.tsv"
    assert write_tsv(path, PAIRS) == 3
    corpus = read_tsv(path)
    assert corpus.pairs() == PAIRS and corpus.skipped == 0 and len(corpus) == 3
    assert not (tmp_path / "train.tsv.tmp").exists()


def test_write_tsv_normalises_tabs_and_newlines_inside_text(tmp_path):
    path = tmp_path / "x.tsv"
    write_tsv(path, [("eins\tzwei\ndrei", "one\r\ntwo   three")])
    assert path.read_text(encoding="utf-8") == "eins zwei drei\tone two three\n"
    assert read_tsv(path).pairs() == [("eins zwei drei", "one two three")]


def test_write_tsv_refuses_an_empty_side(tmp_path):
    with pytest.raises(ValueError, match="pair 1 has an empty side"):
        write_tsv(tmp_path / "x.tsv", [("a b", "c d"), (" \t", "e")])
    assert not (tmp_path / "x.tsv").exists() and not (tmp_path / "x.tsv.tmp").exists()


def test_tsv_line_without_tab_is_skipped_and_counted(tmp_path):
    path = _write(tmp_path / "d.tsv", "Hallo Welt.\tHello world.\nkein Tab hier\nJa.\tYes.\n")
    corpus = read_tsv(path)
    assert corpus.pairs() == [("Hallo Welt.", "Hello world."), ("Ja.", "Yes.")]
    assert corpus.skipped == 1 and corpus.skipped_lines == [2]


def test_tsv_line_without_tab_is_refused_with_its_line_number_when_strict(tmp_path):
    path = _write(tmp_path / "d.tsv", "Hallo Welt.\tHello world.\nkein Tab hier\n")
    with pytest.raises(ValueError, match=r"d\.tsv:2: expected exactly one tab .* got 0"):
        read_tsv(path, strict=True)


def test_tsv_line_with_two_tabs_is_skipped_or_refused(tmp_path):
    path = _write(tmp_path / "d.tsv", "a\tb\tc\nJa.\tYes.\n")
    assert read_tsv(path).skipped_lines == [1]
    with pytest.raises(ValueError, match=r":1: expected exactly one tab .* got 2"):
        read_tsv(path, strict=True)


def test_tsv_empty_side_is_skipped_and_counted(tmp_path):
    path = _write(tmp_path / "d.tsv", "Ja.\tYes.\n\tnur Ziel\nnur Quelle\t  \n")
    corpus = read_tsv(path)
    assert corpus.pairs() == [("Ja.", "Yes.")] and corpus.skipped_lines == [2, 3]


def test_tsv_empty_side_is_refused_with_its_line_number_when_strict(tmp_path):
    path = _write(tmp_path / "d.tsv", "Ja.\tYes.\nnur Quelle\t  \n")
    with pytest.raises(ValueError, match=r"d\.tsv:2: empty target side"):
        read_tsv(path, strict=True)


def test_tsv_accepts_crlf_line_ends(tmp_path):
    path = _write(tmp_path / "d.tsv", "Ja.\tYes.\r\nNein.\tNo.\r\n")
    assert read_tsv(path).pairs() == [("Ja.", "Yes."), ("Nein.", "No.")]


def test_tsv_that_is_not_utf8_is_refused(tmp_path):
    path = _write(tmp_path / "d.tsv", "Größe\tsize\n", encoding="latin-1")
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        read_tsv(path)


def test_missing_file_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_tsv(tmp_path / "nope.tsv")


# --- two aligned files ----------------------------------------------------------------------------------------
def test_two_aligned_files(tmp_path):
    de = _write(tmp_path / "train.de", "".join(s + "\n" for s, _ in PAIRS))
    en = _write(tmp_path / "train.en", "".join(t + "\n" for _, t in PAIRS))
    assert read_parallel_files(de, en).pairs() == PAIRS


def test_two_files_of_different_lengths_are_refused_with_both_counts(tmp_path):
    de = _write(tmp_path / "a.de", "eins\nzwei\ndrei\n")
    en = _write(tmp_path / "a.en", "one\ntwo\n")
    with pytest.raises(ValueError, match=r"a\.de has 3, .*a\.en has 2"):
        read_parallel_files(de, en)


def test_two_files_empty_line_is_skipped_or_refused(tmp_path):
    de = _write(tmp_path / "a.de", "eins\n\ndrei\n")
    en = _write(tmp_path / "a.en", "one\ntwo\nthree\n")
    corpus = read_parallel_files(de, en)
    assert corpus.pairs() == [("eins", "one"), ("drei", "three")] and corpus.skipped_lines == [2]
    with pytest.raises(ValueError, match=r"a\.de:2: empty line"):
        read_parallel_files(de, en, strict=True)


# --- dispatch ---------------------------------------------------------------------------------------------------
def test_load_parallel_accepts_a_folder_a_tsv_or_two_files(tmp_path):
    write_tsv(tmp_path / "train.tsv", PAIRS)
    write_tsv(tmp_path / "valid.tsv", PAIRS[:1])
    assert load_parallel(tmp_path).pairs() == PAIRS
    assert load_parallel(tmp_path, split="valid").pairs() == PAIRS[:1]
    assert load_parallel(tmp_path / "train.tsv").pairs() == PAIRS
    de = _write(tmp_path / "x.de", "eins\n")
    en = _write(tmp_path / "x.en", "one\n")
    assert load_parallel([de, en]).pairs() == [("eins", "one")]
    assert set(load_splits(tmp_path)) == {"train", "valid"}


def test_load_parallel_refuses_three_paths_and_unknown_splits(tmp_path):
    with pytest.raises(ValueError, match="got 3 paths"):
        load_parallel([tmp_path / "a", tmp_path / "b", tmp_path / "c"])
    with pytest.raises(ValueError, match="split must be one of"):
        load_parallel(tmp_path, split="dev")


def test_load_splits_needs_train_tsv(tmp_path):
    with pytest.raises(FileNotFoundError, match="no train.tsv"):
        load_splits(tmp_path)


def test_parallel_corpus_refuses_unaligned_lists():
    with pytest.raises(ValueError, match="got 2 sources and 1 targets"):
        ParallelCorpus(["a", "b"], ["c"])
