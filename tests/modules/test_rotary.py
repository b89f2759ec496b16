"""Rotary embeddings against the complex-number formula (HF Llama rotate_half pairing), atol=1e-5."""

import pytest
import torch

from attnkit.modules import RotaryEmbedding, rotate_half
from helpers import assert_close


def rope_complex(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Oracle in float64: pair (x_i, x_{i+D/2}) as the complex number x_i + i x_{i+D/2} and multiply by
    exp(i * pos * theta^(-2i/D)). positions: (B, T)."""
    D = x.shape[-1]
    half = D // 2
    freqs = theta ** (-torch.arange(half, dtype=torch.float64) * 2 / D)  # (D/2,)
    angle = positions.double()[:, None, :, None] * freqs  # (B, 1, T, D/2)
    z = torch.complex(x[..., :half].double(), x[..., half:].double())
    r = z * torch.polar(torch.ones_like(angle), angle)
    return torch.cat([r.real, r.imag], dim=-1).float()


@pytest.mark.parametrize("theta", [10000.0, 500000.0])
def test_matches_complex_formula(theta):
    rope = RotaryEmbedding(8, max_len=64, theta=theta)
    x = torch.randn(2, 3, 10, 8)
    positions = torch.stack([torch.arange(10), torch.arange(10) + 5])  # (B, T): different per row
    assert_close(rope(x, positions), rope_complex(x, positions, theta), "float32")
    # (T,) positions are shared by every row
    shared = rope(x, torch.arange(10))
    assert_close(shared, rope_complex(x, torch.arange(10).expand(2, 10), theta), "float32")


def test_rotate_half():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert torch.equal(rotate_half(x), torch.tensor([-3.0, -4.0, 1.0, 2.0]))


def test_dot_products_depend_on_relative_position_only():
    rope = RotaryEmbedding(16)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    def score(m, n):
        return (rope(q, torch.tensor([m])) * rope(k, torch.tensor([n]))).sum()
    assert_close(score(7, 3), score(14, 10), "float32")
    assert_close(score(2, 2), (q * k).sum(), "float32")


def test_cache_grows_and_follows_to():
    rope = RotaryEmbedding(4, max_len=2)
    assert "cos_cached" not in rope.state_dict() and "inv_freq" not in rope.state_dict()
    x = torch.randn(1, 1, 3, 4)
    out = rope(x, torch.tensor([0, 5, 9]))  # beyond the initial table
    assert rope.cos_cached.shape[0] >= 10
    assert_close(out, rope_complex(x, torch.tensor([[0, 5, 9]]), 10000.0), "float32")
    rope = rope.to(torch.float64)
    assert rope.cos_cached.dtype == torch.float64 and rope.inv_freq.dtype == torch.float64
    assert rope(x.double(), torch.arange(3)).dtype == torch.float64


def test_odd_head_dim_rejected():
    with pytest.raises(ValueError, match=r"positive even int, got 7"):
        RotaryEmbedding(7)


@pytest.mark.parametrize("theta", [0.0, -10000.0, float("nan"), float("inf"), "10000"])
def test_theta_must_be_a_positive_finite_number(theta):
    # theta = 0 or negative made every rotated value NaN, silently
    with pytest.raises(ValueError, match=r"RotaryEmbedding theta must be a"):
        RotaryEmbedding(8, theta=theta)


@pytest.mark.parametrize("kwargs, message", [
    (dict(head_dim=8.0), r"head_dim must be a positive even int, got 8\.0"),
    (dict(head_dim=8, max_len=2.5), r"max_len must be an int >= 1, got 2\.5 \(float\)"),
    (dict(head_dim=8, max_len=0), r"max_len must be an int >= 1, got 0"),
])
def test_sizes_must_be_ints(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RotaryEmbedding(**kwargs)


def test_position_ids_shape_checked():
    rope = RotaryEmbedding(4)
    with pytest.raises(ValueError, match=r"\(B, T\) = \(2, 3\) or \(T,\), got \(2, 4\)"):
        rope(torch.randn(2, 1, 3, 4), torch.zeros(2, 4, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_tables_grown_after_a_half_precision_cast_are_computed_in_float32(dtype):
    """After .to(bfloat16) the table grown past max_len was computed in bfloat16: at position 3000 cos was off by
    about 2 (and shift by as much)."""
    ref = RotaryEmbedding(8, max_len=4)
    rope = RotaryEmbedding(8, max_len=4).to(dtype)
    positions = torch.tensor([10, 300, 1000, 3000])
    cos, sin = rope.cos_sin(positions)
    want_cos, want_sin = ref.cos_sin(positions)
    assert cos.dtype == dtype
    assert (cos.float() - want_cos).abs().max() < 1e-2 and (sin.float() - want_sin).abs().max() < 1e-2
    x = torch.randn(1, 1, 2, 8)
    delta = torch.tensor([-1000])
    assert (rope.shift(x.to(dtype), delta).float() - ref.shift(x, delta)).abs().max() < 5e-2


@pytest.mark.parametrize("delta", [torch.tensor([True, False]), torch.tensor([1.0, 2.0])])
def test_shift_takes_integer_amounts_only(delta):
    """Was: a bool delta was taken as 1 and 0 positions."""
    rope = RotaryEmbedding(8)
    with pytest.raises(ValueError, match=r"delta must be an integer tensor of shape \(B,\) = \(2,\)"):
        rope.shift(torch.randn(2, 1, 3, 8), delta)


@pytest.mark.parametrize("delta", [3, -5])
def test_shift_moves_rotated_vectors_to_the_later_or_earlier_position(delta):
    """shift(rope(x at p), d) == rope(x at p + d) (mutation check: the opposite rotation gave p - d)."""
    rope = RotaryEmbedding(8, max_len=64)
    x = torch.randn(2, 3, 4, 8)
    p = torch.arange(10, 14)
    shifted = rope.shift(rope(x, p), torch.tensor([delta, delta]))
    assert_close(shifted, rope(x, p + delta), "float32")
