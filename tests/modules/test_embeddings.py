"""Token and Transformer embeddings (seed 004) without the seed's defects."""

import math

import pytest
import torch

from attnkit.modules import (LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TokenEmbedding,
                             TransformerEmbedding, sinusoidal_table)
from helpers import TOLERANCES

TOL = TOLERANCES["float32"]


def test_token_embedding_lookup_and_padding_idx():
    emb = TokenEmbedding(11, 6, padding_idx=0)
    assert torch.all(emb.weight[0] == 0)
    ids = torch.tensor([[1, 0, 10], [4, 4, 0]])
    out = emb(ids)
    assert torch.equal(out, emb.weight[ids])
    out.sum().backward()
    assert torch.all(emb.weight.grad[0] == 0)  # the padding row is never updated


@pytest.mark.parametrize("bad", [-1, 11])
def test_token_ids_outside_vocab(bad):
    emb = TokenEmbedding(11, 6)
    with pytest.raises(ValueError, match=rf"\[0, 11\), got range \[{min(bad, 1)}, {max(bad, 1)}\]"):
        emb(torch.tensor([1, bad]))


def test_token_ids_must_be_integers():
    with pytest.raises(ValueError, match=r"integer tensor, got torch.float32"):
        TokenEmbedding(5, 2)(torch.tensor([1.0]))


@pytest.mark.parametrize("scale", [False, True])
def test_sinusoidal_sum_uses_sequence_axis(scale):
    # batch 5 > sequence 3: seed 004 would have taken the 5 (batch) as the length
    emb = TransformerEmbedding(20, 8, max_len=16, position="sinusoidal", scale=scale).eval()
    ids = torch.randint(0, 20, (5, 3))
    out = emb(ids)
    factor = math.sqrt(8) if scale else 1.0
    exp = emb.tok.weight[ids] * factor + sinusoidal_table(3, 8)[None]
    assert out.shape == (5, 3, 8)
    torch.testing.assert_close(out, exp, **TOL)
    assert isinstance(emb.pos, SinusoidalPositionalEncoding)


def test_learned_positions_and_per_row_position_ids():
    emb = TransformerEmbedding(20, 8, max_len=6, position="learned").eval()
    assert isinstance(emb.pos, LearnedPositionalEmbedding)
    ids = torch.randint(0, 20, (2, 4))
    pos = torch.tensor([[0, 0, 1, 2], [0, 1, 2, 3]])  # row 0 left-padded by one
    out = emb(ids, position_ids=pos)
    torch.testing.assert_close(out, emb.tok.weight[ids] + emb.pos.weight[pos], **TOL)


@pytest.mark.parametrize("shape", [(3, 4), (2, 1, 4), (4, 1)])
def test_position_ids_shape_checked(shape):
    # (2, 1, 4) used to broadcast into a (2, 2, 4, C) output silently, (3, 4) to fail inside torch
    emb = TransformerEmbedding(20, 8, max_len=6)
    with pytest.raises(ValueError, match=r"position_ids must have shape \(T,\) = \(4,\) or the ids' shape \(2, 4\)"):
        emb(torch.randint(0, 20, (2, 4)), position_ids=torch.zeros(shape, dtype=torch.long))


def test_no_positions():
    emb = TransformerEmbedding(20, 8, max_len=6, position="none")
    assert emb.pos is None
    ids = torch.randint(0, 20, (2, 9))  # no length limit without a position table
    assert torch.equal(emb(ids), emb.tok.weight[ids])


def test_dropout_in_training_only():
    emb = TransformerEmbedding(20, 64, max_len=8, dropout=0.5)
    ids = torch.randint(0, 20, (2, 5))
    emb.eval()
    clean = emb(ids)
    emb.train()
    noisy = emb(ids)
    dropped = noisy == 0
    assert dropped.any()
    torch.testing.assert_close(noisy[~dropped], clean[~dropped] * 2, **TOL)


def test_buffers_follow_to():
    emb = TransformerEmbedding(20, 8, max_len=6).to(torch.float64)
    assert emb.pos.pe.dtype == torch.float64
    assert emb(torch.randint(0, 20, (2, 4))).dtype == torch.float64


def test_sequence_longer_than_learned_table():
    emb = TransformerEmbedding(20, 8, max_len=6, position="learned")
    with pytest.raises(ValueError, match=r"max_len = 6, got 7"):
        emb(torch.randint(0, 20, (2, 7)))


def test_unknown_position_kind():
    with pytest.raises(ValueError, match=r"^position must be one of \['sinusoidal', 'learned', 'none'\], got 'rope'$"):
        TransformerEmbedding(20, 8, max_len=6, position="rope")


@pytest.mark.parametrize("make, message", [
    (lambda: TokenEmbedding(10.0, 4), r"TokenEmbedding vocab_size must be an int >= 1, got 10\.0 \(float\)"),
    (lambda: TokenEmbedding(10, 0), r"TokenEmbedding dim must be an int >= 1, got 0"),
    (lambda: TokenEmbedding(10, 4, padding_idx=True), r"padding_idx must be an int >= 0 or None, got True \(bool\)"),
    (lambda: TokenEmbedding(10, 4, padding_idx=10), r"padding_idx must be in \[0, vocab_size\) = \[0, 10\), got 10"),
    (lambda: LearnedPositionalEmbedding(8.0, 4), r"LearnedPositionalEmbedding max_len must be an int >= 1, got 8\.0"),
    (lambda: SinusoidalPositionalEncoding(4, max_len=2.5), r"SinusoidalPositionalEncoding max_len must be an int >= 1"),
])
def test_sizes_must_be_ints(make, message):
    # floats used to fail inside torch with a TypeError, a bool padding_idx was taken as 0 or 1
    with pytest.raises(ValueError, match=message):
        make()
