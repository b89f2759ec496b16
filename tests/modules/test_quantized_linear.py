"""Int8 QuantizedLinear: the fast modes agree with the readable reference, and with fp32 within the rounding bound."""

import pytest
import torch
from torch import nn

from attnkit.modules.quantized_linear import MODES, QuantizedLinear, quantize_linear_layers, quantize_weight


def test_quantize_weight_error_bound():
    w = torch.randn(48, 40)
    q, scale = quantize_weight(w)
    assert q.dtype == torch.int8 and scale.shape == (48,)
    assert int(q.abs().max()) <= 127
    err = (q.float() * scale[:, None] - w).abs()
    assert bool((err <= scale[:, None] / 2 + 1e-7).all())  # round-to-nearest: half a step at most


def test_zero_row_gets_finite_scale():
    w = torch.randn(4, 8)
    w[2] = 0.0
    q, scale = quantize_weight(w)
    assert bool(torch.isfinite(scale).all()) and bool((q[2] == 0).all())


@pytest.mark.parametrize("mode", ["dynamic", "weight_only"])
def test_fast_modes_match_reference(mode):
    lin = nn.Linear(64, 96)
    x = torch.randn(3, 5, 64)
    ref = QuantizedLinear.from_linear(lin, mode="reference")
    fast = QuantizedLinear.from_linear(lin, mode=mode)
    with torch.no_grad():
        y_ref, y = ref(x), fast(x)
    assert y.shape == (3, 5, 96)
    # weight_only: same int8 weights, fp32 activations -> only summation order differs.
    # dynamic: activations are rounded to 8 bits (one scale per call): error ~ |x|max/255 * sum|w| per output.
    tol = 1e-4 if mode == "weight_only" else 0.05 * float(y_ref.abs().max())
    torch.testing.assert_close(y, y_ref, atol=tol, rtol=0)


def test_reference_close_to_fp32_linear():
    lin = nn.Linear(32, 16, bias=False)
    x = torch.randn(7, 32)
    q = QuantizedLinear.from_linear(lin, mode="reference")
    with torch.no_grad():
        # |x W^T - x Wq^T| <= sum_k |x_k| * scale / 2
        bound = (x.abs().sum(-1, keepdim=True) * q.scale[None] / 2)
        assert bool(((q(x) - lin(x)).abs() <= bound + 1e-6).all())
    assert q.bias is None


def test_state_dict_round_trip():
    lin = nn.Linear(16, 8)
    q = QuantizedLinear.from_linear(lin)
    q2 = QuantizedLinear(16, 8)
    q2.load_state_dict(q.state_dict())
    x = torch.randn(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(q2(x), q(x))


def test_quantize_linear_layers_replaces_and_unties():
    emb = nn.Embedding(50, 16)
    model = nn.ModuleDict({"emb": emb, "body": nn.Sequential(nn.Linear(16, 16), nn.ReLU()), "head": nn.Linear(16, 50, bias=False)})
    model["head"].weight = emb.weight  # tied
    n = quantize_linear_layers(model, mode="reference", skip=())
    assert n == 2
    assert isinstance(model["body"][0], QuantizedLinear) and isinstance(model["head"], QuantizedLinear)
    assert isinstance(model["emb"].weight, nn.Parameter)  # embedding keeps its fp32 table


def test_skip_leaves_fp32():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    assert quantize_linear_layers(model, skip=("1",)) == 1
    assert isinstance(model[1], nn.Linear)


def test_bad_mode():
    with pytest.raises(ValueError, match="mode must be one of"):
        QuantizedLinear(4, 4, mode="int4")
    assert "dynamic" in MODES


def test_bad_input_width():
    q = QuantizedLinear.from_linear(nn.Linear(8, 4))
    with pytest.raises(ValueError, match="last axis K = 8"):
        with torch.no_grad():
            q(torch.randn(2, 7))


def test_bad_input_dtype():
    q = QuantizedLinear.from_linear(nn.Linear(8, 4))
    with pytest.raises(ValueError, match="float32 input, got torch.float64"):
        with torch.no_grad():
            q(torch.randn(2, 8, dtype=torch.float64))


def test_requires_grad_input_refused():
    q = QuantizedLinear.from_linear(nn.Linear(8, 4))
    with pytest.raises(ValueError, match="inference-only"):
        q(torch.randn(2, 8, requires_grad=True))


def test_from_linear_type_check():
    with pytest.raises(ValueError, match="expects an nn.Linear"):
        QuantizedLinear.from_linear(nn.Conv1d(2, 2, 1))
