"""A text corpus read from disk in bounded memory: one scan, then any character range as a stream of blocks.

A local ``--data PATH`` (or a recipe's ``train.txt`` / ``valid.txt``) may be larger than memory. A
:class:`TextFiles` is the text of one or more files exactly as :func:`attnkit.data.corpora.text.read_text_source`
returns it (a leading byte-order mark dropped from each file; in a folder, each file ends with a newline), but it
is never held whole:

- :meth:`TextFiles.scan` reads it once, ``block_bytes`` at a time, and checks what
  :func:`~attnkit.data.corpora.text.read_text_file` checks, with the same messages and byte offsets (an empty file,
  a NUL byte, bytes that are not UTF-8). It returns a :class:`TextScan`: the number of characters and of UTF-8
  bytes, the sha256 of the text, its distinct characters (a character vocabulary needs no second pass) and an
  index of ``(file, byte offset, character offset)`` at every block, so that a read can start anywhere.
- :meth:`TextFiles.read` yields the characters ``[start, stop)`` as strings of at most one block each.
- :meth:`TextFiles.split` finds the train/valid cut of :func:`attnkit.data.corpora.text.split_text` (the same rule,
  :func:`~attnkit.data.corpora.text.split_point`) by reading only around the mark.
- :meth:`TextFiles.identity` names the files with their sizes and modification times: what a cache compares to
  notice a changed text without reading it.

There are no tensor axes in this file (text, not tensors).
"""

from __future__ import annotations

import bisect
import codecs
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from attnkit.data.corpora.text import split_point

__all__ = ["TextFiles", "TextScan", "BLOCK_BYTES"]

BLOCK_BYTES = 4 << 20  # bytes read at a time: the scan's and every read's working memory is a few times this
_BOM = b"\xef\xbb\xbf"
_MAX_CODE_POINT = 0x10FFFF
_MARK_SLICE = 1 << 20  # characters counted at a time


@dataclass(frozen=True)
class TextScan:
    """What one pass over a :class:`TextFiles` learned.

    ``index`` holds ``(file number, byte offset in that file, character offset in the whole text)`` at the start
    of each file and of each block read: every entry is on a character boundary.
    """

    n_chars: int
    n_bytes: int
    sha256: str
    chars: str
    index: tuple[tuple[int, int, int], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"n_chars": self.n_chars, "n_bytes": self.n_bytes, "sha256": self.sha256, "chars": self.chars,
                "index": [list(e) for e in self.index]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TextScan":
        """The scan back from :meth:`to_dict`; ``ValueError`` when a field is missing or of the wrong type."""
        try:
            index = tuple((int(f), int(b), int(c)) for f, b, c in d["index"])
            scan = cls(int(d["n_chars"]), int(d["n_bytes"]), str(d["sha256"]), str(d["chars"]), index)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"a text scan record needs n_chars, n_bytes, sha256, chars and index, got "
                             f"{sorted(d) if isinstance(d, dict) else type(d).__name__} ({err})") from None
        if not index or index[0] != (index[0][0], index[0][1], 0):
            raise ValueError(f"a text scan record's index must start at character 0, got {index[:1]}")
        return scan


class TextFiles:
    """The text of ``files`` joined in order; ``folder=True`` ends each file with a newline (when it lacks one).

    Args:
        files: the files, in reading order (at least one).
        folder: join as :func:`attnkit.data.corpora.text.read_text_source` joins a folder's files.
        block_bytes: bytes read at a time (default :data:`BLOCK_BYTES`).
    """

    def __init__(self, files: Sequence[str | os.PathLike], *, folder: bool = False, block_bytes: int | None = None):
        self.files = [Path(f) for f in files]
        if not self.files:
            raise ValueError("TextFiles needs at least one file, got none")
        block_bytes = BLOCK_BYTES if block_bytes is None else block_bytes
        if not isinstance(block_bytes, int) or block_bytes < 4:
            raise ValueError(f"block_bytes must be an int >= 4, got {block_bytes!r}")
        self.folder = bool(folder)
        self.block_bytes = block_bytes

    def identity(self) -> list[list[Any]]:
        """``[[absolute path, size, mtime_ns], ...]``: equal before and after unless a file was written (or a
        write kept its size and its modification time to the nanosecond)."""
        out = []
        for f in self.files:
            st = f.stat()
            out.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
        return out

    # -- the scan --------------------------------------------------------------------------------------------
    def scan(self, *, progress: bool = False) -> TextScan:
        """Read everything once: check it (``ValueError`` as :func:`~attnkit.data.corpora.text.read_text_file`
        raises it), count it, hash it, collect its characters and index it (see :class:`TextScan`)."""
        sha = hashlib.sha256()
        seen = np.zeros(_MAX_CODE_POINT + 1, dtype=bool)  # (code points,) which characters occur
        index: list[tuple[int, int, int]] = []
        n_chars = n_bytes = 0
        total = sum(f.stat().st_size for f in self.files)
        with tqdm(total=total, unit="B", unit_scale=True, desc="scanning text", disable=not progress) as bar:
            for i, path in enumerate(self.files):
                chars, nbytes, last = self._scan_file(i, path, sha, seen, index, n_chars, bar)
                n_chars, n_bytes = n_chars + chars, n_bytes + nbytes
                if self.folder and last != "\n":
                    sha.update(b"\n")
                    seen[10] = True
                    n_chars, n_bytes = n_chars + 1, n_bytes + 1
        chars = "".join(chr(c) for c in np.flatnonzero(seen).tolist())
        return TextScan(n_chars, n_bytes, sha.hexdigest(), chars, tuple(index))

    def _scan_file(self, i: int, path: Path, sha: Any, seen: np.ndarray, index: list, char_pos: int,
                   bar: Any) -> tuple[int, int, str]:
        """One file: ``(characters, UTF-8 bytes without the byte-order mark, its last character)``."""
        if path.is_dir():
            raise ValueError(f"{str(path)!r} is a folder; TextFiles takes files (read_text_source lists a folder's)")
        size = path.stat().st_size
        if size == 0:
            raise ValueError(f"{str(path)!r} is empty (0 bytes); expected UTF-8 text")
        decoder = codecs.getincrementaldecoder("utf-8")("strict")
        n_chars = n_bytes = 0
        last = ""
        bad: tuple[int, int, str] | None = None  # the first UTF-8 error, raised once no NUL byte came after it
        with open(path, "rb") as fh:
            offset = 3 if fh.read(3) == _BOM else 0
            fh.seek(offset)
            bar.update(offset)
            while True:
                raw = fh.read(self.block_bytes)
                final = len(raw) < self.block_bytes  # a short read of a regular file: its end
                bar.update(len(raw))
                nul = raw.find(b"\x00")
                if nul >= 0:
                    raise ValueError(f"{str(path)!r} looks binary: NUL byte at byte offset {offset + nul}; "
                                     f"expected UTF-8 text")
                if bad is None:
                    pending = len(decoder.getstate()[0])
                    index.append((i, offset - pending, char_pos + n_chars))
                    try:
                        text = decoder.decode(raw, final=final)
                    except UnicodeDecodeError as e:
                        bad = (offset - pending + e.start, e.object[e.start], e.reason)
                    else:
                        sha.update(raw)
                        n_bytes += len(raw)
                        n_chars += len(text)
                        if text:
                            last = text[-1]
                            _mark_chars(seen, raw, text)
                offset += len(raw)
                if final:
                    break
        if bad is not None:
            raise ValueError(f"{str(path)!r} is not UTF-8 text: invalid byte 0x{bad[1]:02x} at byte offset "
                             f"{bad[0]} ({bad[2]})")
        if n_chars == 0:
            raise ValueError(f"{str(path)!r} holds no text (only a byte-order mark)")
        return n_chars, n_bytes, last

    # -- reading ---------------------------------------------------------------------------------------------
    def read(self, scan: TextScan, start: int = 0, stop: int | None = None) -> Iterator[str]:
        """The characters ``[start, stop)`` of the text (default: to the end) as consecutive strings, each at most
        one block long. Raises ``ValueError`` when the files no longer decode (changed since ``scan``)."""
        stop = scan.n_chars if stop is None else stop
        if not 0 <= start <= stop <= scan.n_chars:
            raise ValueError(f"read needs 0 <= start <= stop <= {scan.n_chars}, got start {start}, stop {stop}")
        if start == stop:
            return
        k = bisect.bisect_right([e[2] for e in scan.index], start) - 1
        file_i, byte_off, pos = scan.index[k]
        for i in range(file_i, len(self.files)):
            for text in self._decode_file(i, byte_off if i == file_i else None):
                lo, hi = max(start - pos, 0), min(stop - pos, len(text))
                if lo < hi:
                    yield text[lo:hi]
                pos += len(text)
                if pos >= stop:
                    return

    def _decode_file(self, i: int, byte_off: int | None) -> Iterator[str]:
        """File ``i`` decoded from ``byte_off`` (None: its start, after any byte-order mark), block by block,
        ending with the folder's newline when the file lacks one."""
        path = self.files[i]
        decoder = codecs.getincrementaldecoder("utf-8")("strict")
        last = ""
        with open(path, "rb") as fh:
            if byte_off is None:
                byte_off = 3 if fh.read(3) == _BOM else 0
            fh.seek(byte_off)
            while True:
                raw = fh.read(self.block_bytes)
                try:
                    text = decoder.decode(raw, final=not raw)
                except UnicodeDecodeError as e:
                    raise ValueError(f"{str(path)!r} changed while it was read: {e.reason} at byte offset "
                                     f"{byte_off + e.start}") from None
                if text:
                    last = text[-1]
                    yield text
                if not raw:
                    break
                byte_off += len(raw)
        if self.folder and last != "\n":
            yield "\n"

    def find_after(self, scan: TextScan, i: int) -> int:
        """Offset of the first ``"\\n"`` at or after character ``i``, or -1."""
        pos = i
        for text in self.read(scan, min(i, scan.n_chars)):
            k = text.find("\n")
            if k >= 0:
                return pos + k
            pos += len(text)
        return -1

    def find_before(self, scan: TextScan, i: int) -> int:
        """Offset of the last ``"\\n"`` before character ``i``, or -1 (reads back one indexed block at a time)."""
        starts = [e[2] for e in scan.index] + [scan.n_chars]
        hi = min(i, scan.n_chars)
        for k in range(bisect.bisect_left(starts, hi) - 1, -1, -1):
            lo = starts[k]
            found = "".join(self.read(scan, lo, hi)).rfind("\n")
            if found >= 0:
                return lo + found
            hi = lo
        return -1

    def split(self, scan: TextScan, valid_fraction: float) -> int:
        """The character offset of the train/valid cut, by :func:`attnkit.data.corpora.text.split_point`'s rule."""
        return split_point(scan.n_chars, valid_fraction, lambda i: self.find_after(scan, i),
                           lambda i: self.find_before(scan, i))


def _mark_chars(seen: np.ndarray, raw: bytes, text: str) -> None:
    """Set ``seen[c]`` for every code point ``c`` of ``text`` (``raw`` is its UTF-8 encoding)."""
    ascii_only = raw.isascii()  # then one count per byte value: a fast path for the common case
    for i in range(0, len(text), _MARK_SLICE):  # bincount works on 8-byte integers: a slice at a time
        if ascii_only:
            counts = np.bincount(np.frombuffer(raw, dtype=np.uint8, count=min(_MARK_SLICE, len(raw) - i), offset=i))
        else:
            counts = np.bincount(np.frombuffer(text[i:i + _MARK_SLICE].encode("utf-32-le"), dtype="<u4"))
        seen[:counts.size] |= counts > 0
