"""Suite-wide test settings.

Every test runs torch on one thread: the models in the tests are tiny, so a second thread costs more in
start-up and synchronisation than it saves, and on a loaded 2-core machine a thread waiting for a busy
core slows tiny-model steps by an order of magnitude. (Tests that need more set it themselves.)
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _torch_one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pytest_collection_modifyitems(config, items):
    """End-to-end command-line tests (tests/cli, and the ``test_cli_*.py`` files beside the package parts they
    drive, e.g. tests/viz/test_cli_trace.py: each runs `attnkit ...` commands that train, translate, sample or
    draw) are marked ``slow``. The README's test command runs them all; ``-m "not slow"`` skips them for a
    quick local run."""
    for item in items:
        if "cli" in item.path.parts[-2:-1] or item.path.name.startswith("test_cli_"):
            item.add_marker(pytest.mark.slow)
