"""The fast dropout mask against the reference (torch.nn.functional.dropout): same keep rate, scale, expectation
and gradient rule; identity in eval mode."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.modules.dropout import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_fast_and_reference_masks_agree_in_distribution(p):
    torch.manual_seed(0)
    x = torch.full((200_000,), 2.0)
    fast, ref = dropout(x, p), F.dropout(x, p, training=True)
    for y in (fast, ref):
        kept = y != 0
        assert kept.float().mean().item() == pytest.approx(1 - p, abs=0.005)  # keep rate 1 - p
        assert torch.allclose(y[kept], torch.tensor(2.0 / (1 - p)))  # kept values scaled by 1 / (1 - p)
        assert y.mean().item() == pytest.approx(2.0, rel=0.01)  # unbiased
    assert not torch.equal(fast != 0, ref != 0)  # different random streams, as documented


def test_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(1)
    x = torch.randn(64, 32, requires_grad=True)
    y = dropout(x, 0.25)
    y.sum().backward()
    kept = (y != 0).float()
    torch.testing.assert_close(x.grad, kept / 0.75)


def test_module_eval_mode_edge_probabilities_and_dtype():
    x = torch.randn(4, 8)
    m = Dropout(0.5)
    assert isinstance(m, torch.nn.Dropout)
    assert torch.equal(m.eval()(x), x)
    assert torch.equal(dropout(x, 0.0), x) and torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    assert dropout(x.bfloat16(), 0.5).dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"must be in \[0, 1\], got 1.5"):
        dropout(x, 1.5)
    torch.manual_seed(2)
    a = m.train()(x)
    torch.manual_seed(2)
    assert torch.equal(a, Dropout(0.5)(x))  # reproducible from the global seed (resumable runs rely on it)
