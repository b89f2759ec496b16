"""Dropout on the residual branches in training (the paper's section 5.4, GPT-2's resid_pdrop), against each layer's
documented formula written out with its own sub-layers and attnkit's dropout under the same seed.

Axis legend: B batch, T target length, S source length, C width.
"""

from __future__ import annotations

import pytest
import torch

from attnkit.models.configs import GPTConfig
from attnkit.models.encoder_decoder import DecoderLayer, EncoderLayer
from attnkit.models.gpt import Block
from attnkit.modules.dropout import dropout

P = 0.3
B, T, S, C = 2, 5, 6, 16


def _same_draws(fn, seed=7):
    torch.manual_seed(seed)
    return fn()


def _by_hand(x, sublayers, norm_first):
    """The layer's formula: each (norm, sublayer) pair as a residual branch with dropout."""
    h = x
    for norm, sublayer in sublayers:
        h = h + dropout(sublayer(norm(h)), P) if norm_first else norm(h + dropout(sublayer(h), P))
    return h


def test_gpt_block_drops_out_both_residual_branches():
    """x = x + drop(attn(ln_1(x))); x = x + drop(mlp(ln_2(x)))."""
    torch.manual_seed(0)
    block = Block(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=C, dropout=P,
                            attention_dropout=0.0)).train()
    x = torch.randn(B, T, C)

    def by_hand():
        h = x + dropout(block.attn(block.ln_1(x), is_causal=True)[0], P)
        return h + dropout(block.mlp(block.ln_2(h)), P)

    with torch.no_grad():
        got = _same_draws(lambda: block(x))
        expected = _same_draws(by_hand)
        undropped = block.eval()(x)
    assert not torch.allclose(got, undropped)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_drops_out_both_residual_branches(norm_first):
    """post-norm: x = norm(x + drop(sublayer(x))); pre-norm: x = x + drop(sublayer(norm(x)))."""
    torch.manual_seed(0)
    layer = EncoderLayer(C, 2, dim_feedforward=32, dropout=P, attention_dropout=0.0, norm_first=norm_first).train()
    x = torch.randn(B, S, C)
    sublayers = [(layer.norm1, lambda h: layer.self_attn(h)[0]), (layer.norm2, layer.ff)]

    with torch.no_grad():
        got = _same_draws(lambda: layer(x))
        expected = _same_draws(lambda: _by_hand(x, sublayers, norm_first))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_drops_out_its_three_residual_branches(norm_first):
    torch.manual_seed(0)
    layer = DecoderLayer(C, 2, dim_feedforward=32, dropout=P, attention_dropout=0.0, norm_first=norm_first).train()
    x, memory = torch.randn(B, T, C), torch.randn(B, S, C)
    sublayers = [(layer.norm1, lambda h: layer.self_attn(h, is_causal=True)[0]),
                 (layer.norm2, lambda h: layer.cross_attn(h, memory, memory)[0]),
                 (layer.norm3, layer.ff)]

    with torch.no_grad():
        got = _same_draws(lambda: layer(x, memory))
        expected = _same_draws(lambda: _by_hand(x, sublayers, norm_first))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
