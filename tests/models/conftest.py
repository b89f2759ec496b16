"""Shared fixtures for the attnkit.models tests.

(``--import-mode=importlib``: helpers are handed out as fixtures, not imported from here.)
"""

from __future__ import annotations

import pytest
import torch

import helpers
from helpers import spread_weights


@pytest.fixture(autouse=True)
def _seed():
    # fresh but reproducible random weights/inputs in every test (one thread: see tests/conftest.py)
    torch.manual_seed(1234)


def _spread(model: torch.nn.Module, std: float = 0.3, seed: int = 0) -> torch.nn.Module:
    """Redraw every parameter (matrices, biases, norm gains) so outputs depend strongly on every input.

    With the training init (std 0.02) logits are nearly uniform and a parity check would pass too easily.
    """
    return spread_weights(model, std=std, seed=seed)


@pytest.fixture
def spread():
    return _spread


@pytest.fixture
def tiny_gpt_config():
    """Factory of tiny GPT configs: ``"gpt2"`` (learned/LayerNorm/gelu_tanh/bias/tied) or ``"llama"``
    (RoPE/RMSNorm/SwiGLU/GQA 4:2/no bias/untied)."""

    return helpers.tiny_gpt_config


@pytest.fixture
def tiny_transformer_config():
    """Factory of tiny encoder-decoder configs (dropout 0, pad_id 0)."""

    return helpers.tiny_transformer_config
