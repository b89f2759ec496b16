"""Shared fixtures for the data tests.

``attnkit_test_home``: the cache folder used by tests that fetch real packages (marked ``network``). It is
``$ATTNKIT_TEST_HOME`` if set, else ``~/.cache/attnkit-tests``: outside the work tree, so a fresh clone (as CI
uses) still finds what an earlier run fetched and the real-recipe tests take about a second after the first
fetch, and separate from the user's own ``~/.cache/attnkit`` so tests never touch it. Pass it explicitly
(``home=attnkit_test_home``); the fixture does not change ``$ATTNKIT_HOME`` for other tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def attnkit_test_home() -> Path:
    home = Path(os.environ.get("ATTNKIT_TEST_HOME") or Path.home() / ".cache" / "attnkit-tests").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home
