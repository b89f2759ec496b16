"""Shared helpers for the attnkit.modules tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_and_threads():
    # fresh but reproducible random weights/inputs in every test; one thread keeps the shared CPU calm
    torch.manual_seed(1234)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
