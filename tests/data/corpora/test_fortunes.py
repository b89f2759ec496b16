"""The fortunes recipe (attnkit.data.corpora.fortunes): parsing, cleaning, the split, the output format, the recipe.

Everything here is offline except ``test_real_recipe_end_to_end`` (marked ``network``), which runs the real
recipe into the test cache (``attnkit_test_home``): the first run fetches the 0.8 MB ``.deb`` with apt-get.
"""

from __future__ import annotations

import json

import pytest

from attnkit.data.corpora import fortunes as f

SAMPLE = """\
A day without sunshine is like night.
%
Everything should be made as simple as possible, but not simpler.   
		-- Albert Einstein
%

  Two roads diverged in a wood, and I --
  I took the one less traveled by.

		-- Robert Frost
%
%
Calm down, it's *____\b\b\b\bonly* ones and zeroes.
%
You don\u00e2\u0080\u0099t say. Caf\u00e9 au lait.\a\a
%
A day without sunshine is like night.
%
The last entry has no separator after it."""


def test_parse_entries_and_cleaning():
    entries = f.parse_fortunes(SAMPLE)
    assert entries == [
        "A day without sunshine is like night.",
        "Everything should be made as simple as possible, but not simpler.\n\t\t-- Albert Einstein",
        "  Two roads diverged in a wood, and I --\n  I took the one less traveled by.\n\n\t\t-- Robert Frost",
        "Calm down, it's *only* ones and zeroes.",
        "You don\u2019t say. Caf\u00e9 au lait.",
        "A day without sunshine is like night.",
        "The last entry has no separator after it.",
    ]


@pytest.mark.parametrize("raw,clean", [
    ("_\bw_\bo_\br_\bd", "word"),          # underlined
    ("b\bbo\bol\bld\bd", "bold"),          # bold (each letter struck twice)
    ("I\b_t", "It"),                       # underscore struck after the letter
    ("*_______\b\b\b\b\b\b\bfriends*", "*friends*"),
    ("\bx", "x"),                          # backspace at the start of a line goes nowhere
    ("no backspace", "no backspace"),
])
def test_strip_overstrike(raw, clean):
    assert f.strip_overstrike(raw) == clean


@pytest.mark.parametrize("raw,clean", [
    ("don\u00e2\u0080\u0099t", "don\u2019t"),              # UTF-8 read as Latin-1: repaired
    ("[\u00e2\u0088\u0097]", "[\u2217]"),
    ("don\u00c3\u00a2\u00c2\u0080\u00c2\u0099t", "don\u2019t"),  # mangled twice
    ("caf\u00e9 cr\u00e8me", "caf\u00e9 cr\u00e8me"),          # genuine Latin-1 letters: unchanged
    ("\u2019 and \u00e2\u0080\u0099 caf\u00e9", "\u2019 and \u2019 caf\u00e9"),  # mixed: only the mojibake
    ("\u00e0\u0080\u0080", "\u00e0\u0080\u0080"),      # shaped like UTF-8 but invalid (overlong): unchanged
    ("plain ascii", "plain ascii"),
])
def test_fix_mojibake(raw, clean):
    assert f.fix_mojibake(raw) == clean


def test_parse_rejects_bytes():
    with pytest.raises(ValueError, match="expects the file's text as a str, got bytes"):
        f.parse_fortunes(b"a\n%\nb")


def _fortune_dir(tmp_path):
    d = tmp_path / "usr/share/games/fortunes"
    d.mkdir(parents=True)
    (d / "wisdom").write_text(SAMPLE, encoding="utf-8")
    (d / "wisdom.dat").write_bytes(b"\x00\x00\x00\x02binary index")
    (d / "wisdom.u8").symlink_to("wisdom")
    (d / "art").write_text("  /\\_/\\\n ( o.o )\n%\n  > ^ <\n", encoding="utf-8")
    (d / "ascii-art").write_text("###\n%\n###\n", encoding="utf-8")
    many = "".join(f"Fortune number {i}: naïve café {i * i}.\n%\n" for i in range(40))
    (d / "numbers").write_text(many, encoding="utf-8")
    return d


def test_fortune_files_skip_indexes_links_and_art(tmp_path):
    d = _fortune_dir(tmp_path)
    assert [p.name for p in f.fortune_files(d)] == ["numbers", "wisdom"]


def test_collect_deduplicates(tmp_path):
    entries, per_file, dups = f.collect_entries(_fortune_dir(tmp_path))
    assert per_file == {"numbers": 40, "wisdom": 7}
    assert dups == 1 and len(entries) == 46 and len(set(entries)) == 46


def test_collect_drops_a_fortune_wrapped_otherwise_in_another_file(tmp_path):
    # the same fortune in two files, wrapped at other places and indented otherwise (as the real package has it):
    # kept once, so it cannot land in both train and valid
    d = tmp_path / "fortunes"
    d.mkdir()
    (d / "a").write_text("Live within your income, even if you\nhave to borrow to do so.\n%\nOther one.\n%\n",
                         encoding="utf-8")
    (d / "b").write_text("  Live within your income, even if you have to\n  borrow to do so.\n%\n", encoding="utf-8")
    entries, per_file, dups = f.collect_entries(d)
    assert entries == ["Live within your income, even if you\nhave to borrow to do so.", "Other one."]
    assert per_file == {"a": 2, "b": 1} and dups == 1


def test_split_is_deterministic_disjoint_and_complete():
    entries = [f"entry {i}" for i in range(200)]
    train, valid = f.split_entries(entries, valid_fraction=0.05, seed=7)
    assert len(valid) == 10 and len(train) == 190
    assert sorted(train + valid) == sorted(entries)
    assert f.split_entries(entries, valid_fraction=0.05, seed=7) == (train, valid)
    other_train, other_valid = f.split_entries(entries, valid_fraction=0.05, seed=8)
    assert other_valid != valid
    assert train != entries[10:]  # shuffled, not a prefix cut


def test_split_needs_two_entries():
    with pytest.raises(ValueError, match="at least 2 entries .* got 1"):
        f.split_entries(["only one"])


def test_split_fraction_range():
    with pytest.raises(ValueError, match=r"valid_fraction must be in \(0, 1\), got 1.5"):
        f.split_entries(["a", "b"], valid_fraction=1.5)


def test_build_writes_fortune_format_and_record(tmp_path):
    d = _fortune_dir(tmp_path)
    out = tmp_path / "out"
    record = f.build_fortunes(d, out, source={"package": "fortunes", "version": "test"})
    train_text = (out / "train.txt").read_text(encoding="utf-8")
    assert train_text.endswith("\n%\n")
    train, valid = f.read_entries(out / "train.txt"), f.read_entries(out / "valid.txt")
    # the files round-trip to exactly the entries, split as split_entries says
    entries, _, _ = f.collect_entries(d)
    assert (train, valid) == f.split_entries(entries)
    assert len(valid) == 2 and len(train) == 44
    saved = json.loads((out / "SOURCE.json").read_text(encoding="utf-8"))
    assert saved == record
    assert saved["counts"] == {"files": 2, "entries_parsed": 47, "duplicates_removed": 1, "entries": 46,
                               "train": 44, "valid": 2}
    assert saved["version"] == "test" and "BSD" in saved["license"]
    assert saved["outputs"]["train.txt"]["entries"] == 44
    assert "\b" not in train_text + (out / "valid.txt").read_text(encoding="utf-8")


def test_cached_folder_is_reused(tmp_path, monkeypatch):
    """A built folder is returned as is, without fetching; a damaged output triggers a rebuild."""
    d = _fortune_dir(tmp_path)
    home = tmp_path / "home"
    f.build_fortunes(d, home)

    def no_network(*a, **k):
        raise AssertionError("must not fetch")

    monkeypatch.setattr(f, "apt_download", no_network)
    assert f.prepare_fortunes(home) == home
    (home / "valid.txt").write_text("tampered\n%\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="must not fetch"):
        f.prepare_fortunes(home)


def test_registered_as_lm_recipe():
    from attnkit.data.corpora.registry import get_recipe, recipe_names

    assert "fortunes" in recipe_names(kind="lm")
    assert get_recipe("fortunes").fn is f.prepare_fortunes


@pytest.mark.network
def test_real_recipe_end_to_end(attnkit_test_home):
    """Runs the real recipe (fetches the ~0.8 MB .deb with apt-get the first time, then cached)."""
    from attnkit.data.corpora.registry import prepare

    root = prepare("fortunes", home=attnkit_test_home)
    record = json.loads((root / "SOURCE.json").read_text(encoding="utf-8"))
    counts = record["counts"]
    assert record["package"] == "fortunes" and len(record["sha256"]) == 64
    assert 13_000 <= counts["entries"] <= 15_000
    assert counts["entries"] == counts["train"] + counts["valid"]
    assert counts["valid"] == round(0.05 * counts["entries"])
    assert "art" not in record["entries_per_file"] and "ascii-art" not in record["entries_per_file"]
    assert "computers" in record["entries_per_file"]
    train, valid = f.read_entries(root / "train.txt"), f.read_entries(root / "valid.txt")
    assert (len(train), len(valid)) == (counts["train"], counts["valid"])
    assert not {" ".join(e.split()) for e in train} & {" ".join(e.split()) for e in valid}  # not even rewrapped
    text = (root / "train.txt").read_text(encoding="utf-8")
    assert 2_000_000 <= len(text) <= 2_600_000
    # no control characters but tab and newline, no mojibake left
    assert not {c for c in text if ord(c) < 32 and c not in "\t\n"}
    assert "\u00e2\u0080" not in text


def test_parse_splits_lines_at_a_lone_cr_and_one_separator_rule():
    """Was: a file with old-Mac line ends (a lone CR) was one entry, '%' lines and all, with the CRs removed."""
    assert f.parse_fortunes("One.\r%\rTwo\r  -- me\r%\r") == ["One.", "Two\n  -- me"]
    assert f.is_separator("% \t\f\xa0") and not f.is_separator(" %") and not f.is_separator("%%")
    assert f.has_separators("text\r%\rmore") and not f.has_separators("100% sure\n 50%\n")


def test_split_leaves_at_least_one_training_entry():
    """A large valid_fraction of a small list still leaves one entry to train on."""
    train, valid = f.split_entries(["a", "b"], valid_fraction=0.9)
    assert len(train) == 1 and len(valid) == 1 and sorted(train + valid) == ["a", "b"]
