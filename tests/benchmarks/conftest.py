"""Make the repository root importable (``benchmarks`` is a top-level folder, not an installed package)."""

import sys
from pathlib import Path

import pytest
import torch

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared: stay on one core
    yield
    torch.set_num_threads(threads)
