"""Crash-safe file writing: write to a temporary name, flush to disk, then rename over the target.

A rename within one filesystem is atomic: a reader (or a resumed run after a crash) sees either the old
file or the complete new one, never a half-written file. No tensors here, so no shapes to document.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Callable


def fsync_file(path: str | os.PathLike) -> None:
    """Force a file's content to disk."""
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def fsync_dir(path: str | os.PathLike) -> None:
    """Force a folder's entries (e.g. a rename) to disk; best effort where the OS does not allow it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """``write(tmp)`` a file in ``path``'s folder, flush it to disk, then rename it over ``path``.

    The temporary name is unique and hidden (``.<name>.<pid>.<random>.tmp``) and is created with ``open(..., "xb")``,
    so no file of the user's is touched and the result has the user's umask like any file they create (a writer
    that replaces the file it writes, as safetensors' ``save_file`` does with 0600, is given that mode back). The
    temporary file is removed if ``write`` fails. A ``path`` that is a symbolic link stays one: the file it points
    to is the one replaced.
    """
    path = Path(os.path.realpath(path))
    while True:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            with open(tmp, "xb"):
                break
        except FileExistsError:
            continue
    try:
        mode = os.stat(tmp).st_mode & 0o7777  # 0o666 & ~umask
        write(str(tmp))
        if os.stat(tmp).st_mode & 0o7777 != mode:
            os.chmod(tmp, mode)
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write a UTF-8 text file with :func:`write_atomic` so readers never see half a file."""
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    write_atomic(path, write)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Binary twin of :func:`write_text_atomic`."""
    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    write_atomic(path, write)


def publish_folder(tmp: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Put the finished folder ``tmp`` in the place of ``path`` so that, at every instant, either the old or the
    new complete folder exists (or the old one as ``<path>.old``): a directory cannot be renamed over a non-empty
    one, so an existing ``path`` is moved aside first and removed after. An ``<path>.old`` left by a crash is
    removed only when ``path`` exists (the caller checks that it is not a folder of the user's). Returns ``path``."""
    tmp, path = Path(tmp), Path(path)
    old = path.with_name(path.name + ".old")
    moved = path.exists()
    if moved:
        if old.exists():
            shutil.rmtree(old)
        os.rename(path, old)
    os.rename(tmp, path)
    fsync_dir(path.parent)
    if moved:
        shutil.rmtree(old)
    return path
