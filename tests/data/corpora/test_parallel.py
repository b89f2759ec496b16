"""Reading and writing parallel text (attnkit.data.corpora.parallel): TSV, two aligned files, bad-input rules."""

from __future__ import annotations

import pytest

from attnkit.data.corpora.parallel import (ParallelCorpus, load_parallel, load_splits, load_train_valid, normalize_text,
                                   read_parallel_files, read_tsv, split_off_valid, write_tsv)

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


def test_a_back_translation_file_names_its_own_columns_when_strict(tmp_path):
    """Was: 'empty source side (pass strict=False ...)' for a missing translation: the wrong column, Python advice."""
    from attnkit.data.corpora.parallel import read_back_translations

    path = _write(tmp_path / "syn.tsv", "a b\tA B\n\tc d\n")
    with pytest.raises(ValueError, match=r"syn\.tsv:2: empty sentence side \(without strict checking such lines are "
                                         r"skipped and counted\)"):
        read_back_translations(path, strict=True)
    _write(path, "a b\tA B\nc d\n")
    with pytest.raises(ValueError, match=r"syn\.tsv:2: expected exactly one tab \(sentence<TAB>translation\), got 0"):
        read_back_translations(path, strict=True)


def test_tsv_accepts_crlf_line_ends(tmp_path):
    path = _write(tmp_path / "d.tsv", "Ja.\tYes.\r\nNein.\tNo.\r\n")
    assert read_tsv(path).pairs() == [("Ja.", "Yes."), ("Nein.", "No.")]


def test_tsv_that_is_not_utf8_is_refused(tmp_path):
    path = _write(tmp_path / "d.tsv", "Größe\tsize\n", encoding="latin-1")
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        read_tsv(path)



def test_utf16_or_binary_parallel_data_is_refused(tmp_path):
    # UTF-16 without a byte-order mark is valid UTF-8 full of NUL bytes: it must not read as garbled pairs
    pairs = "".join(f"Satz {i}.\tSentence {i}.\n" for i in range(20))
    (tmp_path / "u16.tsv").write_bytes(pairs.encode("utf-16-le"))
    with pytest.raises(ValueError, match=r"u16\.tsv' looks binary: NUL byte at byte offset 1"):
        load_train_valid(tmp_path / "u16.tsv")
    (tmp_path / "de.txt").write_text("Ja.\n", encoding="utf-8")
    (tmp_path / "en.txt").write_bytes(b"Yes.\x00\n")
    with pytest.raises(ValueError, match=r"en\.txt' looks binary: NUL byte at byte offset 4"):
        load_parallel([tmp_path / "de.txt", tmp_path / "en.txt"])

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


# --- a validation part split off training data -------------------------------------------------------------
def _numbered(n: int, repeat_source_every: int = 0) -> ParallelCorpus:
    sources = [f"satz {i % repeat_source_every if repeat_source_every else i}" for i in range(n)]
    return ParallelCorpus(sources, [f"sentence {i}" for i in range(n)], path="pairs.tsv")


def test_split_off_valid_is_a_seeded_tenth_with_a_cap_and_disjoint():
    train, valid, info = split_off_valid(_numbered(250))
    assert (len(train), len(valid)) == (225, 25) and info == {"pairs": 250, "valid": 25, "train": 225, "dropped": 0,
                                                             "fraction": 0.1, "max_pairs": 1000, "seed": 0}
    assert not set(train.pairs()) & set(valid.pairs()) and sorted(train.pairs() + valid.pairs()) == sorted(_numbered(250).pairs())
    assert train.pairs() == sorted(train.pairs(), key=lambda p: int(p[1].split()[1]))  # train keeps the file's order
    again_train, again_valid, _ = split_off_valid(_numbered(250))
    assert (again_train.pairs(), again_valid.pairs()) == (train.pairs(), valid.pairs())  # deterministic
    other = split_off_valid(_numbered(250), seed=1)[1]
    assert other.pairs() != valid.pairs()  # the seed decides which pairs
    assert len(split_off_valid(_numbered(20_000))[1]) == 1000  # the cap
    assert len(split_off_valid(_numbered(10))[1]) == 1  # the smallest corpus splits off one pair


def test_split_off_valid_drops_training_pairs_sharing_a_validation_source():
    corpus = _numbered(100, repeat_source_every=50)  # every source appears twice
    train, valid, info = split_off_valid(corpus)
    assert not {s for s, _ in train.pairs()} & {s for s, _ in valid.pairs()}
    assert info["dropped"] == len(corpus) - len(train) - len(valid) > 0


def test_split_off_valid_refuses_too_small_corpora_and_bad_arguments():
    with pytest.raises(ValueError, match=r"pairs.tsv holds 9 usable pairs \(0 malformed lines skipped\): too few to "
                                         r"split off a validation part \(needs at least 10\)"):
        split_off_valid(_numbered(9))
    with pytest.raises(ValueError, match="fraction must be a float in \\(0, 1\\), got 1.5"):
        split_off_valid(_numbered(50), fraction=1.5)
    with pytest.raises(ValueError, match="max_pairs must be an int >= 1, got 0"):
        split_off_valid(_numbered(50), max_pairs=0)
    same = ParallelCorpus(["gleich"] * 20, [f"t {i}" for i in range(20)], path="same.tsv")
    with pytest.raises(ValueError, match="nothing is left to train on"):
        split_off_valid(same)


def test_load_train_valid_splits_only_files_without_valid(tmp_path):
    write_tsv(tmp_path / "train.tsv", _numbered(30).pairs())
    write_tsv(tmp_path / "valid.tsv", PAIRS)
    train, valid, info = load_train_valid(tmp_path / "train.tsv")
    assert (len(train), len(valid), info["valid"]) == (27, 3, 3)
    assert load_train_valid(tmp_path)[1].pairs() == PAIRS and load_train_valid(tmp_path)[2] is None  # folder
    assert load_train_valid(tmp_path / "train.tsv", tmp_path / "valid.tsv")[1:] == (load_parallel(tmp_path / "valid.tsv"), None)


def test_load_train_valid_reads_a_folder_given_as_valid_for_its_valid_split(tmp_path):
    # valid=<prepared folder> is the folder's validation pairs, never its training pairs
    folder = tmp_path / "prepared"
    write_tsv(folder / "train.tsv", _numbered(30).pairs())
    write_tsv(folder / "valid.tsv", PAIRS)
    write_tsv(tmp_path / "mine.tsv", _numbered(12).pairs())
    train, valid, info = load_train_valid(tmp_path / "mine.tsv", folder)
    assert valid.pairs() == PAIRS and len(train) == 12 and info is None
    assert load_train_valid(tmp_path / "mine.tsv", folder, reverse=True)[1].pairs() == [(t, s) for s, t in PAIRS]


def test_every_pair_keeps_its_line_number_through_skips_swaps_and_splits(tmp_path):
    text = "kein Tab\n" + "".join(f"s{i}\tt{i}\n" for i in range(20)) + "\tleer\n"
    corpus = read_tsv(_write(tmp_path / "d.tsv", text))
    assert corpus.lines == list(range(2, 22)) and corpus.skipped_lines == [1, 22]
    assert corpus.where(3) == f"pair 3 (line 5 of {tmp_path / 'd.tsv'})"
    assert corpus.swapped().lines == corpus.lines
    train, valid, _ = split_off_valid(corpus)
    for part in (train, valid):
        assert [int(s[1:]) + 2 for s in part.sources] == part.lines
    files = read_parallel_files(_write(tmp_path / "a", "x\n\ny\n"), _write(tmp_path / "b", "1\n2\n3\n"))
    assert files.lines == [1, 3] and files.where(1).endswith("(line 3 of " + f"{tmp_path / 'a'} + {tmp_path / 'b'})")
    assert ParallelCorpus(["a"], ["b"]).where(0) == "pair 0"
    with pytest.raises(ValueError, match="one line number per pair, got 2 for 1 pairs"):
        ParallelCorpus(["a"], ["b"], [], "x", [1, 2])
