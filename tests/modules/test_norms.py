"""RMSNorm and LayerNorm against torch.nn.LayerNorm and the explicit RMS formula (atol=rtol=1e-5 in float32)."""

import pytest
import torch
from torch import nn

from attnkit.modules import LayerNorm, RMSNorm, build_norm
from helpers import TOLERANCES

TOL = TOLERANCES["float32"]


@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_matches_torch(bias):
    ours = LayerNorm(12, eps=1e-5, bias=bias)
    ref = nn.LayerNorm(12, eps=1e-5, bias=bias)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(12))
        ref.weight.copy_(ours.weight)
        if bias:
            ours.bias.copy_(torch.randn(12))
            ref.bias.copy_(ours.bias)
    x = torch.randn(3, 5, 12) * 3 + 1
    torch.testing.assert_close(ours(x), ref(x), **TOL)
    assert (ours.bias is None) == (not bias)
    assert set(dict(ours.named_parameters())) == ({"weight", "bias"} if bias else {"weight"})


def test_rmsnorm_matches_explicit_formula():
    norm = RMSNorm(8, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(8))
    x = torch.randn(2, 4, 8) * 2
    # y = x / sqrt(mean(x^2) + eps) * gamma, one vector at a time
    exp = torch.empty_like(x)
    for b in range(2):
        for t in range(4):
            vec = x[b, t]
            rms = torch.sqrt((vec * vec).sum() / 8 + 1e-6)
            exp[b, t] = vec / rms * norm.weight
    torch.testing.assert_close(norm(x), exp, **TOL)


def test_rmsnorm_computes_in_float32_and_casts_back():
    norm = RMSNorm(16).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(16))
    x = (torch.randn(3, 16) * 1e-3).to(torch.bfloat16)  # tiny values: a bf16 mean square would be coarse
    y = norm(x)
    assert y.dtype == torch.bfloat16
    x32 = x.float()
    exp = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16) * norm.weight
    assert torch.equal(y, exp)


def test_rmsnorm_without_affine_has_no_parameters():
    norm = RMSNorm(8, elementwise_affine=False)
    assert list(norm.parameters()) == []
    x = torch.randn(5, 8)
    torch.testing.assert_close(norm(x).pow(2).mean(-1), torch.ones(5), atol=1e-4, rtol=1e-4)


def test_build_norm():
    assert isinstance(build_norm("layernorm", 8, eps=1e-6, bias=False), LayerNorm)
    ln = build_norm("layernorm", 8, eps=1e-6, bias=False)
    assert ln.eps == 1e-6 and ln.bias is None
    rms = build_norm("rmsnorm", 8, eps=1e-5)
    assert isinstance(rms, RMSNorm) and rms.eps == 1e-5


def test_build_norm_unknown_kind():
    with pytest.raises(ValueError, match=r"\('layernorm', 'rmsnorm'\), got 'batchnorm'"):
        build_norm("batchnorm", 8)


def test_norm_wrong_width():
    with pytest.raises(ValueError, match=r"C = 8, got shape \(2, 6\)"):
        RMSNorm(8)(torch.randn(2, 6))


@pytest.mark.parametrize("cls", [RMSNorm, LayerNorm])
@pytest.mark.parametrize("eps", [-1e-5, float("nan"), float("inf"), "1e-5"])
def test_norm_eps_must_be_a_non_negative_number(cls, eps):
    # a negative eps made the output NaN, silently
    with pytest.raises(ValueError, match=rf"{cls.__name__} eps must be a"):
        cls(8, eps=eps)


@pytest.mark.parametrize("eps", [1.0, 0.0])
def test_layernorm_uses_its_own_eps(eps):
    """A large eps visibly shrinks the output of a small-variance input (mutation check: torch's default 1e-5
    passed instead of the layer's eps)."""
    x = torch.randn(4, 6) * 0.1
    ours, ref = LayerNorm(6, eps=eps), nn.LayerNorm(6, eps=eps)
    torch.testing.assert_close(ours(x), ref(x), **TOL)
    expected = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    torch.testing.assert_close(ours(x), expected, **TOL)
