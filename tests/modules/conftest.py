"""Shared helpers for the attnkit.modules tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    # fresh but reproducible random weights/inputs in every test (one thread: see tests/conftest.py)
    torch.manual_seed(1234)
