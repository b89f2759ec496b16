"""Fetching Debian packages (attnkit.data.fetch): a pinned version the mirror no longer has fails clearly."""

from __future__ import annotations

import shutil

import pytest

from attnkit.data.fetch import FetchError, apt_download


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
