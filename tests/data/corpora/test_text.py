"""Local text corpora (--data PATH): reading, folder concatenation, the split, and one test per bad input."""

import pytest

from attnkit.data.corpora.text import load_text_corpus, read_text_file, split_text

LINES = "".join(f"line number {i:03d} of the corpus\n" for i in range(200))


def test_file_split_last_tenth_at_line_boundary(tmp_path):
    p = tmp_path / "corpus.txt"
    p.write_text(LINES, encoding="utf-8")
    train, valid, info = load_text_corpus(str(p))
    assert train + valid == LINES
    assert train.endswith("\n")
    assert valid.startswith("line number")
    assert abs(len(valid) - 0.1 * len(LINES)) <= len("line number 000 of the corpus\n")
    assert info["kind"] == "file" and info["files"] == ["corpus.txt"]
    assert info["train_chars"] == len(train) and info["valid_chars"] == len(valid)


def test_path_object_and_custom_fraction(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text(LINES, encoding="utf-8")
    train, valid, _ = load_text_corpus(p, valid_fraction=0.5)
    assert train + valid == LINES and abs(len(train) - len(valid)) <= 31


def test_folder_sorted_and_concatenated(tmp_path):
    (tmp_path / "b.txt").write_text("second file\n" * 20, encoding="utf-8")
    (tmp_path / "a.txt").write_text("first file, no final newline", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.txt").write_text("third file\n" * 20, encoding="utf-8")
    (tmp_path / "notes.md").write_text("ignored", encoding="utf-8")
    (tmp_path / ".hidden.txt").write_text("ignored", encoding="utf-8")
    train, valid, info = load_text_corpus(tmp_path)
    assert info["kind"] == "folder" and info["files"] == ["a.txt", "b.txt", "sub/c.txt"]
    assert train + valid == "first file, no final newline\n" + "second file\n" * 20 + "third file\n" * 20


def test_utf8_text_kept_exactly_and_bom_dropped(tmp_path):
    text = "Naïve café\r\n東京 🎉\n" * 30
    p = tmp_path / "u.txt"
    p.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    train, valid, _ = load_text_corpus(p)
    assert train + valid == text


def test_split_without_newlines_cuts_at_the_mark():
    assert split_text("x" * 100, 0.1) == ("x" * 90, "x" * 10)


def test_split_uses_earlier_newline_when_none_after_the_mark():
    text = "a" * 85 + "\n" + "b" * 14 + "\n"
    train, valid = split_text(text, 0.1)
    assert (train, valid) == ("a" * 85 + "\n", "b" * 14 + "\n")


def test_split_cuts_at_the_mark_when_the_earlier_newline_would_give_valid_the_text():
    """A text ending in one long line: the newline before the mark would leave training 6 characters."""
    text = "Title\n" + "x" * 2000 + "\n"
    train, valid = split_text(text, 0.1)
    assert train + valid == text and len(valid) == len(text) - int(len(text) * 0.9)


# --- bad input: one test per rule ---------------------------------------------------------------------------
@pytest.mark.parametrize("name, content, message", [
    ("empty.txt", b"", r"empty\.txt' is empty \(0 bytes\)"),
    # 0xe9 = Latin-1 é, at byte offset 15
    ("latin1.txt", "Größe".encode("utf-8") + b" and caf\xe9\n",
     r"latin1\.txt' is not UTF-8 text: invalid byte 0xe9 at byte offset 15"),
    ("data.txt", b"GIF89a\x01\x00\x00", r"data\.txt' looks binary: NUL byte at byte offset 7"),
], ids=["empty", "not_utf8_names_the_byte_offset", "binary_names_the_nul_byte"])
def test_a_bad_file_is_refused_by_name(name, content, message, tmp_path):
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        load_text_corpus(p)


def test_bad_file_inside_a_folder_is_named(tmp_path):
    (tmp_path / "good.txt").write_text("fine\n", encoding="utf-8")
    (tmp_path / "bad.txt").write_bytes(b"ok\n\xff\xfe")
    with pytest.raises(ValueError, match=r"bad\.txt' is not UTF-8 text: invalid byte 0xff at byte offset 3"):
        load_text_corpus(tmp_path)


def test_folder_without_txt_files(tmp_path):
    (tmp_path / "readme.md").write_text("# hi", encoding="utf-8")
    with pytest.raises(ValueError, match=r"has no \.txt files \(found 0"):
        load_text_corpus(tmp_path)


def test_missing_path_lists_recipes(tmp_path):
    with pytest.raises(ValueError, match=r"neither an existing file or folder nor a data recipe.*shakespeare"):
        load_text_corpus(str(tmp_path / "nope.txt"))


def test_bom_only_file(tmp_path):
    p = tmp_path / "bom.txt"
    p.write_bytes(b"\xef\xbb\xbf")
    with pytest.raises(ValueError, match="only a byte-order mark"):
        read_text_file(p)


def test_valid_fraction_range(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text(LINES, encoding="utf-8")
    with pytest.raises(ValueError, match=r"valid_fraction must be in \(0, 1\), got 0"):
        load_text_corpus(p, valid_fraction=0)


def test_mt_recipe_is_not_a_text_corpus(monkeypatch):
    from pathlib import Path

    import attnkit.data.corpora.registry as registry

    registry._load_all()
    monkeypatch.setitem(registry._RECIPES, "dummy-mt",
                        registry.Recipe("dummy-mt", "mt", "a parallel corpus", lambda home, force=False: Path(home)))
    with pytest.raises(ValueError, match=r"'dummy-mt' is of kind 'mt', a language model needs kind 'lm'"):
        load_text_corpus("dummy-mt")
