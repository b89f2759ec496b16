"""Atomic writes: the target is replaced whole, no other file is touched, the mode follows the umask."""

from __future__ import annotations

import os

import pytest

from attnkit.files import publish_folder, write_atomic, write_bytes_atomic, write_text_atomic


def test_a_users_file_named_like_the_old_temporary_is_left_alone(tmp_path):
    """The temporary file was ``<path>.tmp``: a user's ``fig.png.tmp`` was overwritten and then renamed away."""
    mine = tmp_path / "notes.txt.tmp"
    mine.write_text("keep me")
    write_text_atomic(tmp_path / "notes.txt", "new")
    write_bytes_atomic(tmp_path / "notes.txt", b"newer")
    assert mine.read_text() == "keep me" and (tmp_path / "notes.txt").read_bytes() == b"newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "notes.txt.tmp"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "state.json"
    target.write_text("old")

    def fail(tmp):
        with open(tmp, "w") as fh:
            fh.write("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, fail)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["state.json"]


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_the_file_gets_the_users_umask_even_from_a_writer_that_sets_0600(tmp_path, umask):
    def private(tmp):
        os.remove(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"x")
        os.close(fd)

    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "a.bin", private)
        write_text_atomic(tmp_path / "b.txt", "x")
    finally:
        os.umask(old)
    for name in ("a.bin", "b.txt"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_symlinked_target_stays_a_link_and_the_file_it_points_to_is_replaced(tmp_path):
    """The link was replaced by a new file, and the file it pointed to kept its old content."""
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "config.json"
    real.write_text("old")
    link = tmp_path / "config.json"
    link.symlink_to(real)
    write_text_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    assert [p.name for p in (tmp_path / "real").iterdir()] == ["config.json"]


def test_publishing_a_new_folder_leaves_a_users_folder_named_like_the_old_copy_alone(tmp_path):
    """``<path>.old`` was removed after every publish, also when ``path`` had not existed (nothing was moved there)."""
    (tmp_path / "model.old").mkdir()
    (tmp_path / "model.old" / "notes.txt").write_text("keep me")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "weights").write_text("w")
    publish_folder(tmp_path / "new", tmp_path / "model")
    assert (tmp_path / "model" / "weights").read_text() == "w"
    assert (tmp_path / "model.old" / "notes.txt").read_text() == "keep me"
