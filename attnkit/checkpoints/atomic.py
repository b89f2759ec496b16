"""Crash-safe file writing: write to a temporary name, flush to disk, then rename over the target.

A rename within one filesystem is atomic: a reader (or a resumed run after a crash) sees either the old
file or the complete new one, never a half-written file. No tensors here, so no shapes to document.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


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


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write a text file via ``<path>.tmp`` + ``os.replace`` so readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Binary twin of :func:`write_text_atomic`."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def publish_folder(tmp: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Put the finished folder ``tmp`` in the place of ``path`` so that, at every instant, either the old or the
    new complete folder exists (or the old one as ``<path>.old``): a directory cannot be renamed over a non-empty
    one, so an existing ``path`` is moved aside first and removed after. Returns ``path``."""
    tmp, path = Path(tmp), Path(path)
    old = path.with_name(path.name + ".old")
    if path.exists():
        if old.exists():
            shutil.rmtree(old)
        os.rename(path, old)
    os.rename(tmp, path)
    fsync_dir(path.parent)
    if old.exists():
        shutil.rmtree(old)
    return path
