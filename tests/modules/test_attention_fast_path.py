"""The fast path with an all-False padding mask (nothing padded) equals the mask-free and the reference results."""

import torch

from attnkit.modules.attention import reference_attention, scaled_dot_product_attention
from helpers import assert_close


def test_all_false_padding_mask_changes_nothing():
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    no_pad = torch.zeros(2, 5, dtype=torch.bool)  # nothing padded
    out, _ = scaled_dot_product_attention(q, k, v, key_padding_mask=no_pad, is_causal=True)
    bare, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    ref, _ = reference_attention(q, k, v, key_padding_mask=no_pad, is_causal=True)
    assert_close(out, bare, "float32")
    assert_close(out, ref, "float32")


def test_real_padding_still_masks():
    q, k, v = (torch.randn(2, 3, 4, 8) for _ in range(3))
    pad = torch.zeros(2, 4, dtype=torch.bool)
    pad[1, 3] = True
    out, _ = scaled_dot_product_attention(q, k, v, key_padding_mask=pad)
    ref, _ = reference_attention(q, k, v, key_padding_mask=pad)
    assert_close(out, ref, "float32")
    bare, _ = scaled_dot_product_attention(q, k, v)
    assert not torch.allclose(out[1], bare[1])  # the padded key really was excluded


def test_dropout_on_the_cpu_takes_the_reference_path():
    """With dropout on the CPU the fast-path function runs the reference path: same seed, same output and gradients;
    the dropped weights are unbiased (the output's mean over many draws approaches the output without dropout)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 5, 8, generator=g, requires_grad=True) for _ in range(3))
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    torch.manual_seed(7)
    fast, weights = scaled_dot_product_attention(q, k, v, key_padding_mask=pad, is_causal=True, dropout_p=0.3)
    fast.sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    torch.manual_seed(7)
    ref, _ = reference_attention(q, k, v, key_padding_mask=pad, is_causal=True, dropout_p=0.3)
    ref.sum().backward()
    assert weights is None and torch.equal(fast, ref)
    for a, t in zip(grads, (q, k, v)):
        assert torch.equal(a, t.grad)
    with torch.no_grad():
        plain, _ = scaled_dot_product_attention(q, k, v, key_padding_mask=pad, is_causal=True)
        mean = torch.stack([scaled_dot_product_attention(q, k, v, key_padding_mask=pad, is_causal=True,
                                                         dropout_p=0.3)[0] for _ in range(4000)]).mean(0)
    assert (mean - plain).abs().max() < 0.05
