"""Shared fixtures for the attnkit.models tests.

(``--import-mode=importlib``: helpers are handed out as fixtures, not imported from here.)
"""

from __future__ import annotations

import pytest
import torch

from attnkit.models import GPTConfig, TransformerConfig
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

    def make(kind: str = "gpt2", **overrides) -> GPTConfig:
        if kind == "gpt2":
            base = dict(vocab_size=61, block_size=24, n_layer=2, n_head=4, n_embd=32)
        elif kind == "llama":
            base = dict(vocab_size=61, block_size=24, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=48,
                        activation="swiglu", norm="rmsnorm", bias=False, position="rope", tie_embeddings=False)
        else:
            raise ValueError(kind)
        base.update(overrides)
        return GPTConfig(**base)

    return make


@pytest.fixture
def tiny_transformer_config():
    """Factory of tiny encoder-decoder configs (dropout 0, pad_id 0)."""

    def make(**overrides) -> TransformerConfig:
        base = dict(src_vocab_size=23, tgt_vocab_size=19, d_model=32, num_heads=4, num_encoder_layers=2,
                    num_decoder_layers=2, dim_feedforward=48, dropout=0.0, max_len=64)
        base.update(overrides)
        return TransformerConfig(**base)

    return make
