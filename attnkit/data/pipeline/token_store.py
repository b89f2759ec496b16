"""The token store: a corpus's token ids in one file on disk, read through a memory map.

A corpus is tokenized once (:mod:`attnkit.data.pipeline.store_encoding` streams it in) into a file of the smallest
unsigned type that holds the vocabulary (:func:`smallest_dtype`: ``uint8`` up to 256 ids, ``uint16`` up to 65,536,
else ``uint32``), so a corpus of ``N`` tokens costs ``N``, ``2N`` or ``4N`` bytes of disk and, being memory-mapped,
only the pages a batch touches in memory (``int64`` tensors in memory cost ``8N`` bytes, and more while they are
built). Batches convert only their own windows to ``int64`` (:meth:`TokenStore.__getitem__`).

The file (little-endian)::

    [0, 64)                    "ATTNKIT-TOKENS" and zeros
    [64, 64 + N·w)             the ids, N values of w bytes
    (to a multiple of 8)       D + 1 document offsets as uint64, when the store holds D documents (MT: sentences)
    (then)                     the header: UTF-8 JSON (dtype, N, D, vocabulary size, largest id, the sha256 of every
                               block of ``block_bytes`` of the part above, the fingerprint, free-form meta)
    the last 48 bytes          header length (uint64), sha256 of the header (32 bytes), b"ATKTOKS1"

The header is written last, so a store is written in one pass; it goes to a temporary name in the same folder,
is flushed to disk and renamed over the target (a reader sees the old file or the whole new one, never half), under
a lock file so that two processes never build the same store at once (the second waits, then opens the first's).

:meth:`TokenStore.open` refuses (:class:`StoreError`, a ``ValueError``) anything but a whole, intact store of the
expected fingerprint: a wrong magic, a truncated or extended file (the sizes in the header must add up to the file's),
a header whose sha256 differs, a block whose sha256 differs (``verify=True`` reads every block, ``pread`` in
threads: bounded memory and no page of the map is touched), a largest id outside the vocabulary. The cache around
it (:func:`open_or_build`) then builds the store again: a damaged file costs time, never wrong ids.

Axes: ``N`` tokens in the store, ``D`` documents, ``B`` windows in a batch, ``L`` window length.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import re
import struct
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from attnkit.checks import check_int

__all__ = ["TokenStore", "TokenStoreWriter", "StoreError", "smallest_dtype", "open_or_build", "STORE_SUFFIX"]

MAGIC = b"ATTNKIT-TOKENS\x00\x00"
FOOTER_MAGIC = b"ATKTOKS1"
PREAMBLE = 64
FOOTER = struct.Struct("<Q32s8s")  # header length, sha256 of the header, magic
FORMAT = 1
BLOCK_BYTES = 16 << 20
STORE_SUFFIX = ".tokens"


class StoreError(ValueError):
    """A store file that cannot be used as it is (missing, damaged, or of another text or tokenizer)."""


def smallest_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned little-endian dtype holding ids ``0 .. vocab_size - 1``: uint8, uint16 or uint32."""
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or not 1 <= vocab_size <= 2**32:
        raise ValueError(f"vocab_size must be an int in [1, 2**32], got {vocab_size!r}")
    for dt in ("<u1", "<u2", "<u4"):
        if vocab_size <= np.iinfo(dt).max + 1:
            return np.dtype(dt)
    raise AssertionError("unreachable")


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class TokenStoreWriter:
    """Writes a store in one pass: :meth:`append` ids (with their documents' lengths for a document store), then
    :meth:`finish`. Used as a context manager, an exception removes the temporary file.

    Args:
        path: the store's final name.
        vocab_size: ids must be in ``[0, vocab_size)``; the dtype is :func:`smallest_dtype`'s.
        documents: whether every :meth:`append` names its documents (then the store has document offsets).
    """

    def __init__(self, path: str | os.PathLike, *, vocab_size: int, documents: bool = False):
        self.path = Path(path)
        self.dtype = smallest_dtype(vocab_size)
        self.vocab_size = vocab_size
        self.documents = documents
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        self._fh = open(self._tmp, "wb")
        self._fh.write(MAGIC.ljust(PREAMBLE, b"\x00"))
        self._blocks: list[str] = []
        self._block = hashlib.sha256()
        self._block_fill = 0
        self._doc_lengths: list[np.ndarray] = []
        self.n_tokens = 0
        self.max_id = -1

    def __enter__(self) -> "TokenStoreWriter":
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is not None:
            self.abort()

    def _write(self, data: bytes | memoryview) -> None:
        """Write ``data`` after the preamble, hashing it block by block."""
        view = memoryview(data).cast("B")
        self._fh.write(view)
        while len(view):
            take = min(BLOCK_BYTES - self._block_fill, len(view))
            self._block.update(view[:take])
            self._block_fill += take
            view = view[take:]
            if self._block_fill == BLOCK_BYTES:
                self._blocks.append(self._block.hexdigest())
                self._block, self._block_fill = hashlib.sha256(), 0

    def append(self, ids: np.ndarray | list[int], doc_lengths: np.ndarray | list[int] | None = None) -> None:
        """Append ids (any integer array ``(n,)`` in ``[0, vocab_size)``); for a document store, the lengths of
        the documents they make up, in order (they must add up to ``n``).

        Shape: ``ids (n,)``, ``doc_lengths (d,)`` with ``sum = n``.
        """
        arr = np.asarray(ids)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise ValueError(f"append expects a 1-D integer array of ids, got shape {arr.shape} dtype {arr.dtype}")
        if arr.size:
            lo, hi = int(arr.min()), int(arr.max())
            if lo < 0 or hi >= self.vocab_size:
                raise ValueError(f"ids must be in [0, {self.vocab_size}), got min {lo} max {hi}")
            self.max_id = max(self.max_id, hi)
        if self.documents:
            if doc_lengths is None:
                raise ValueError("a document store needs doc_lengths with every append")
            lengths = np.asarray(doc_lengths, dtype=np.int64)
            if lengths.ndim != 1 or (lengths.size and int(lengths.min()) < 0) or int(lengths.sum()) != arr.size:
                raise ValueError(f"doc_lengths must be >= 0 and add up to the {arr.size} ids, got "
                                 f"{lengths.size} lengths summing to {int(lengths.sum())}")
            self._doc_lengths.append(lengths)
        elif doc_lengths is not None:
            raise ValueError("doc_lengths given to a store made with documents=False")
        self._write(np.ascontiguousarray(arr, dtype=self.dtype))
        self.n_tokens += arr.size

    def finish(self, fingerprint: dict[str, Any], meta: dict[str, Any] | None = None) -> "TokenStore":
        """Write the document offsets and the header, flush to disk, rename into place; returns the store."""
        docs_offset = n_docs = None
        if self.documents:
            pad = (-(PREAMBLE + self.n_tokens * self.dtype.itemsize)) % 8
            self._write(b"\x00" * pad)
            docs_offset = PREAMBLE + self.n_tokens * self.dtype.itemsize + pad
            lengths = np.concatenate(self._doc_lengths) if self._doc_lengths else np.zeros(0, np.int64)
            offsets = np.zeros(lengths.size + 1, dtype="<u8")
            np.cumsum(lengths, out=offsets[1:])
            n_docs = int(lengths.size)
            self._write(offsets)
        if self._block_fill:
            self._blocks.append(self._block.hexdigest())
        header = {"format": FORMAT, "dtype": self.dtype.str, "n_tokens": self.n_tokens, "n_docs": n_docs,
                  "docs_offset": docs_offset, "vocab_size": self.vocab_size, "max_id": self.max_id,
                  "block_bytes": BLOCK_BYTES, "blocks": self._blocks, "fingerprint": fingerprint,
                  "meta": meta or {}}
        blob = json.dumps(header, sort_keys=True, ensure_ascii=True).encode("ascii")
        self._fh.write(blob)
        self._fh.write(FOOTER.pack(len(blob), hashlib.sha256(blob).digest(), FOOTER_MAGIC))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        os.replace(self._tmp, self.path)
        _fsync_folder(self.path.parent)
        return TokenStore.open(self.path, fingerprint=fingerprint, verify=False)

    def abort(self) -> None:
        """Close and remove the temporary file (nothing happens to an existing store)."""
        with contextlib.suppress(OSError):
            self._fh.close()
        with contextlib.suppress(OSError):
            self._tmp.unlink()


class TokenStore:
    """An opened store: its ids as a read-only memory map, indexable like a 1-D ``torch.long`` tensor.

    ``store[i]`` is an int; ``store[a:b]`` and ``store[index]`` (an integer tensor or array of positions, any
    shape) are ``torch.long`` tensors read from a map (only those ids are converted). ``numel()`` / ``len()``
    is ``N``; ``ids`` a raw map ``(N,)``; ``document(d)`` the ids of document ``d``; ``content_id``
    ``"store:<sha256>"`` names the ids (not the file) for a training run's resume checks.

    Shape: ``ids (N,)``; ``doc_offsets (D + 1,)`` or None; ``store[index]`` has the shape of ``index``.
    """

    def __init__(self, path: Path, header: dict[str, Any], fh: Any, doc_offsets: np.ndarray | None):
        self.path = path
        self.header = header
        self._fh = fh  # held open: the maps below read this file even if a rebuild renames another over its name
        self._n = int(header["n_tokens"])
        self.doc_offsets = doc_offsets
        self.dtype = np.dtype(header["dtype"])
        self.vocab_size = int(header["vocab_size"])
        self.max_id = int(header["max_id"])
        self.fingerprint = header["fingerprint"]
        self.meta = header["meta"]
        blob = json.dumps([header["dtype"], header["n_tokens"], header["n_docs"], header["blocks"]]).encode()
        self.content_id = "store:" + hashlib.sha256(blob).hexdigest()[:32]

    # -- opening ---------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike, *, fingerprint: dict[str, Any] | None = None,
             verify: bool = True) -> "TokenStore":
        """Open a store, refusing (:class:`StoreError`) a damaged one or, with ``fingerprint``, one of another
        text or tokenizer. ``verify`` checks the sha256 of every block (reads the whole file once)."""
        path = Path(path)
        try:  # one open file for the checks and the maps: a rebuild may rename another store over the name
            fh = open(path, "rb")
        except OSError as err:
            raise StoreError(f"token store {path} cannot be read: {err}") from None
        try:
            header, end = _read_header(fh, os.fstat(fh.fileno()).st_size, path)
            if verify:
                _verify_blocks(fh.fileno(), header, end, path)
            if fingerprint is not None and header["fingerprint"] != json.loads(json.dumps(fingerprint)):
                raise StoreError(f"token store {path} was made from another text or tokenizer")
        except OSError as err:
            fh.close()
            raise StoreError(f"token store {path} cannot be read: {err}") from None
        except BaseException:
            fh.close()
            raise
        n = header["n_tokens"]
        docs = None
        if header["n_docs"] is not None:
            docs = np.memmap(fh, dtype="<u8", mode="r", offset=header["docs_offset"], shape=(header["n_docs"] + 1,))
            if int(docs[0]) != 0 or int(docs[-1]) != n:
                fh.close()
                raise StoreError(f"token store {path}: its document offsets run from {int(docs[0])} to "
                                 f"{int(docs[-1])}, expected 0 to {n}")
        return cls(path, header, fh, docs)

    @property
    def ids(self) -> np.ndarray:
        """The ids ``(N,)`` as a new read-only memory map at each access (``madvise(MADV_RANDOM)``: no read-ahead
        around a window). A map lives as long as the array taken from it, so the pages a batch touched leave this
        process's resident memory with the batch, and a long run's RSS does not grow towards the store's size."""
        if self._n == 0:
            return np.zeros(0, dtype=self.dtype)
        ids = np.memmap(self._fh, dtype=self.dtype, mode="r", offset=PREAMBLE, shape=(self._n,))
        if hasattr(mmap, "MADV_RANDOM"):
            ids._mmap.madvise(mmap.MADV_RANDOM)
        return ids

    # -- reading ---------------------------------------------------------------------------------------------
    def numel(self) -> int:
        return self._n

    def __len__(self) -> int:
        return self.numel()

    @property
    def shape(self) -> tuple[int]:
        return (self.numel(),)

    ndim = 1

    @property
    def n_docs(self) -> int | None:
        return None if self.doc_offsets is None else int(self.doc_offsets.shape[0]) - 1

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            return int(self.ids[index])
        if isinstance(index, slice):
            return torch.from_numpy(np.array(self.ids[index], dtype=np.int64))
        if isinstance(index, torch.Tensor):
            index = index.numpy()
        positions = np.asarray(index)
        if positions.dtype.kind not in "iu":
            raise ValueError(f"a token store is indexed by an int, a slice or integer positions, got {positions.dtype}")
        return torch.from_numpy(self.ids[positions].astype(np.int64))

    def tolist(self) -> list[int]:
        return self.ids.tolist()

    def document(self, d: int) -> np.ndarray:
        """The ids of document ``d`` (a view of the map; ``-1`` is the last document, as for a list).

        Shape: ``(length of d,)``.
        """
        if self.doc_offsets is None:
            raise ValueError(f"token store {self.path} holds no documents")
        n = self.n_docs
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not -n <= d < n:
            raise ValueError(f"document index must be an int in [-{n}, {n}), got {d!r}")
        d = int(d) % n  # (offsets[-1] to offsets[0] would be an empty slice, not the last document)
        return self.ids[int(self.doc_offsets[d]):int(self.doc_offsets[d + 1])]

    def chunks(self, size: int = 1 << 22) -> Iterator[np.ndarray]:
        """The ids in order, ``size`` at a time, as ``int64`` arrays (copies: bounded memory)."""
        check_int("chunk size", size, minimum=1)
        for start in range(0, self.numel(), size):
            yield self[start:start + size].numpy()

    def __repr__(self) -> str:
        return (f"TokenStore({str(self.path)!r}, {self.numel():,} ids as {self.dtype.name}, vocab "
                f"{self.vocab_size:,}" + (f", {self.n_docs:,} documents" if self.doc_offsets is not None else "") + ")")


def _read_header(fh: Any, size: int, path: Path) -> tuple[dict[str, Any], int]:
    """The header of an open store file of ``size`` bytes and where its ids and offsets end, after every check
    that needs no hashing of the ids."""
    if size < PREAMBLE + FOOTER.size:
        raise StoreError(f"token store {path} is truncated: {size} bytes, less than an empty store")
    if fh.read(len(MAGIC)) != MAGIC:
        raise StoreError(f"token store {path} does not start with {MAGIC!r}: not a token store")
    fh.seek(size - FOOTER.size)
    length, digest, magic = FOOTER.unpack(fh.read(FOOTER.size))
    if magic != FOOTER_MAGIC or not PREAMBLE <= size - FOOTER.size - length:
        raise StoreError(f"token store {path} is truncated or damaged: its last bytes are not a store footer")
    fh.seek(size - FOOTER.size - length)
    blob = fh.read(length)
    if hashlib.sha256(blob).digest() != digest:
        raise StoreError(f"token store {path} is damaged: its header's sha256 differs from the one recorded")
    try:
        header = json.loads(blob)
        dtype = np.dtype(header["dtype"])
        n, docs = int(header["n_tokens"]), header["n_docs"]
        ok = (header["format"] == FORMAT and dtype.kind == "u" and isinstance(header["blocks"], list)
              and header["block_bytes"] == BLOCK_BYTES and n >= 0
              and (0 <= header["max_id"] < header["vocab_size"] if n else header["max_id"] == -1))
    except (ValueError, KeyError, TypeError) as err:
        raise StoreError(f"token store {path} has an unreadable header ({err})") from None
    if not ok or dtype != smallest_dtype(int(header["vocab_size"])):
        raise StoreError(f"token store {path} has a header of another format or with ids outside its vocabulary")
    payload = PREAMBLE + n * dtype.itemsize
    if docs is not None:
        if header["docs_offset"] != payload + (-payload) % 8:
            raise StoreError(f"token store {path}: its document offsets are not where its ids end")
        payload = header["docs_offset"] + (int(docs) + 1) * 8
    if payload + length + FOOTER.size != size:
        raise StoreError(f"token store {path} is {size} bytes, its header describes "
                         f"{payload + length + FOOTER.size}: truncated or damaged")
    if len(header["blocks"]) != -(-(payload - PREAMBLE) // BLOCK_BYTES):
        raise StoreError(f"token store {path}: its header lists {len(header['blocks'])} block checksums for "
                         f"{payload - PREAMBLE} bytes")
    return header, payload


def _verify_blocks(fd: int, header: dict[str, Any], end: int, path: Path) -> None:
    """Compare the sha256 of every block of ``[PREAMBLE, end)`` with the header's, reading with ``pread`` in a
    few threads."""

    def check(k: int) -> bool:
        start = PREAMBLE + k * BLOCK_BYTES
        size = min(BLOCK_BYTES, end - start)
        if hasattr(os, "pread"):
            data = os.pread(fd, size, start)
        else:  # not POSIX: one thread (below) moves the shared file position
            os.lseek(fd, start, os.SEEK_SET)
            data = os.read(fd, size)
        return hashlib.sha256(data).hexdigest() == header["blocks"][k]

    workers = max(1, min(os.cpu_count() or 1, 8)) if hasattr(os, "pread") else 1
    with ThreadPoolExecutor(workers) as pool:
        for k, good in enumerate(pool.map(check, range(len(header["blocks"])))):
            if not good:
                raise StoreError(f"token store {path} is damaged: block {k} (bytes "
                                 f"{PREAMBLE + k * BLOCK_BYTES}..) differs from its recorded sha256")


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[bool]:
    """An exclusive lock on ``<path>.lock``; yields whether it is held (False where ``fcntl`` is missing)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the atomic rename still keeps readers safe
        yield False
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _remove_stale_writes(path: Path) -> None:
    """Remove the temporary files of builds of ``path`` that never finished (:class:`TokenStoreWriter`'s
    ``<name>.<pid>-<hex>.tmp``, left by a builder killed by SIGTERM or ``kill -9``: partial stores, as large as the
    store). Call it holding the build lock: a builder that is alive holds it, so every such file is a dead one's."""
    stale = re.compile(re.escape(path.name) + r"\.\d+-[0-9a-f]{8}\.tmp")
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            if stale.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def open_or_build(path: str | os.PathLike, fingerprint: dict[str, Any],
                  build: Callable[[Path], TokenStore], *, verify: bool = True) -> tuple[TokenStore, str]:
    """The store at ``path`` if it is intact and of ``fingerprint``, else ``build(path)``'s (which writes it with a
    :class:`TokenStoreWriter`). Returns ``(store, how)``: ``"reused"``, ``"built"`` or ``"rebuilt (<why>)"``.

    Building happens under a lock file, and the store is looked at again once the lock is held: of several
    processes that want the same store (DDP ranks on one machine, two runs), one builds and the others open. The
    partial files that builders killed before they finished left are removed under the lock.
    """
    path = Path(path)
    with contextlib.suppress(StoreError):
        return TokenStore.open(path, fingerprint=fingerprint, verify=verify), "reused"
    with _build_lock(path) as locked:
        if locked:
            _remove_stale_writes(path)
        try:
            return TokenStore.open(path, fingerprint=fingerprint, verify=verify), "reused"
        except StoreError as err:
            why = None if not path.exists() else str(err)
        store = build(path)
    return store, "built" if why is None else f"rebuilt ({why})"
