"""Learned absolute positions: lookup and the max_len limit."""

import pytest
import torch

from attnkit.modules import LearnedPositionalEmbedding


def test_lookup_is_row_selection():
    emb = LearnedPositionalEmbedding(10, 4)
    ids = torch.tensor([[0, 3], [9, 9]])
    out = emb(ids)
    assert out.shape == (2, 2, 4)
    assert torch.equal(out, emb.weight[ids])
    assert torch.equal(emb.forward_len(5), emb.weight[:5])
    assert [n for n, _ in emb.named_parameters()] == ["weight"]


def test_gradients_reach_the_table():
    emb = LearnedPositionalEmbedding(6, 3)
    emb(torch.tensor([1, 1, 4])).sum().backward()
    assert torch.equal(emb.weight.grad[:, 0], torch.tensor([0.0, 2.0, 0.0, 0.0, 1.0, 0.0]))


def test_position_out_of_range_names_max_len():
    emb = LearnedPositionalEmbedding(8, 4)
    with pytest.raises(ValueError, match=r"max_len\) = \[0, 8\), got range \[0, 8\]"):
        emb(torch.tensor([0, 8]))


def test_sequence_longer_than_table():
    emb = LearnedPositionalEmbedding(8, 4)
    with pytest.raises(ValueError, match=r"max_len = 8, got 9"):
        emb.forward_len(9)
