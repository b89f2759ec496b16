"""Tiny random models for the generation tests (real attnkit GPT and Transformer), as fixtures.

(The tests run with ``--import-mode=importlib``, where a conftest cannot be imported, so the helpers are
handed out as fixtures: ``make_gpt``, ``make_transformer``, ``make_sources``, ``mt_ids``.)

The weights are re-drawn with a larger spread than the training initialisation (std 0.02 makes a
random tied-embedding GPT repeat its last token forever): with std 0.3 the next-token distribution
depends on the context, so greedy and sampled outputs are varied and the tests can tell things apart.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from attnkit.models.transformer import Transformer
import helpers

VOCAB = 40
PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10], [11, 12, 13, 14]]  # different lengths -> left padding


def spread_weights(model: torch.nn.Module, seed: int, std: float = 0.3) -> torch.nn.Module:
    return helpers.spread_weights(model, std=std, seed=seed, matrices_only=True).eval()


def gpt_config(kind: str, *, vocab_size: int = VOCAB, block_size: int = 32, dropout: float = 0.0) -> GPTConfig:
    return helpers.tiny_gpt_config(kind, vocab_size=vocab_size, block_size=block_size, dropout=dropout)


def _make_gpt(kind: str, *, seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    return spread_weights(GPT(gpt_config(kind, **kw)), seed)


@pytest.fixture(params=["gpt2", "llama"])
def gpt(request) -> GPT:
    return _make_gpt(request.param, seed=1)


# ---- encoder-decoder ---------------------------------------------------------------------------------
PAD, BOS, EOS = 0, 1, 2
SRC_VOCAB, TGT_VOCAB = 30, 24


def _make_transformer(*, seed: int = 0, eos_bias: float = 0.0, norm_first: bool = True) -> Transformer:
    """A 2+2-layer random Transformer; ``eos_bias`` added to the EOS logit makes sentences end at varied points.

    Pre-norm by default: a random post-norm stack's output barely depends on its input (the final
    LayerNorm of every layer washes the residual out), so it would predict one token everywhere.
    """
    torch.manual_seed(seed)
    cfg = helpers.tiny_transformer_config(src_vocab_size=SRC_VOCAB, tgt_vocab_size=TGT_VOCAB, dim_feedforward=64,
                                          max_len=5000, norm_first=norm_first, pad_id=PAD)
    model = spread_weights(Transformer(cfg), seed, std=0.5)
    with torch.no_grad():
        model.generator.bias.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(seed + 1))
        model.generator.bias[EOS] += eos_bias
        model.generator.bias[PAD] -= 30.0  # never generate padding or BOS
        model.generator.bias[BOS] -= 30.0
    return model


def _make_sources(lengths: list[int], *, seed: int = 0) -> torch.Tensor:
    """Right-padded random sources (ids in [3, SRC_VOCAB)) of the given lengths."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths)), PAD, dtype=torch.long)
    for b, n in enumerate(lengths):
        src[b, :n] = torch.randint(3, SRC_VOCAB, (n,), generator=g)
    return src


@pytest.fixture
def make_gpt():
    """``make_gpt(kind, *, seed=0, vocab_size=40, block_size=32, dropout=0.0)`` with kind "gpt2" or "llama"."""
    return _make_gpt


@pytest.fixture
def make_transformer():
    """``make_transformer(*, seed=0, eos_bias=0.0, norm_first=True)``."""
    return _make_transformer


@pytest.fixture
def make_sources():
    """``make_sources(lengths, *, seed=0)`` -> right-padded ``(B, S)`` LongTensor."""
    return _make_sources


@pytest.fixture
def mt_ids():
    """Special ids and vocabulary sizes of ``make_transformer`` models."""
    return SimpleNamespace(pad=PAD, bos=BOS, eos=EOS, src_vocab=SRC_VOCAB, tgt_vocab=TGT_VOCAB)


@pytest.fixture
def prompts():
    """Prompts of different lengths (the batch needs left padding)."""
    return [list(p) for p in PROMPTS]
