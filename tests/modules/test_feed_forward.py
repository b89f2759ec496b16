"""FeedForward against torch.nn.functional compositions (atol=rtol=1e-5 in float32)."""

import pytest
import torch
import torch.nn.functional as F

from attnkit.modules import ACTIVATIONS, FeedForward
from attnkit.modules.dropout import dropout
from helpers import TOLERANCES

TOL = TOLERANCES["float32"]

TORCH_ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "leaky_relu": torch.nn.LeakyReLU(),
    "elu": torch.nn.ELU(),
}


@pytest.mark.parametrize("activation", list(TORCH_ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
def test_plain_activations_match_torch(activation, bias):
    ff = FeedForward(8, 20, activation=activation, bias=bias).eval()
    x = torch.randn(2, 3, 8) * 2
    act = TORCH_ACTIVATIONS[activation]
    exp = F.linear(act(F.linear(x, ff.w_in.weight, ff.w_in.bias)), ff.w_out.weight, ff.w_out.bias)
    torch.testing.assert_close(ff(x), exp, **TOL)
    assert ff.w_gate is None
    assert (ff.w_in.bias is None) == (not bias) and (ff.w_out.bias is None) == (not bias)


@pytest.mark.parametrize("activation,gate_fn", [("swiglu", F.silu), ("geglu", F.gelu)])
def test_gated_variants(activation, gate_fn):
    ff = FeedForward(8, 20, activation=activation, bias=False, out_dim=6).eval()
    x = torch.randn(4, 8)
    # out = W_out (act(W_gate x) * (W_in x))
    exp = (gate_fn(x @ ff.w_gate.weight.T) * (x @ ff.w_in.weight.T)) @ ff.w_out.weight.T
    out = ff(x)
    assert out.shape == (4, 6)
    torch.testing.assert_close(out, exp, **TOL)
    assert ff.w_gate.weight.shape == (20, 8) and ff.w_out.weight.shape == (6, 20)


def test_dropout_acts_in_training_only():
    ff = FeedForward(8, 64, activation="relu", dropout=0.5)
    x = torch.randn(16, 8)
    ff.eval()
    exp = ff.w_out(F.relu(ff.w_in(x)))
    torch.testing.assert_close(ff(x), exp, **TOL)
    ff.train()
    torch.manual_seed(0)
    y1 = ff(x)
    torch.manual_seed(0)
    # the same dropout mask written out: dropout on the hidden activations, then w_out
    h = dropout(F.relu(ff.w_in(x)), p=0.5, training=True)  # attnkit.modules.dropout (see test_dropout.py)
    torch.testing.assert_close(y1, ff.w_out(h), **TOL)
    assert not torch.allclose(y1, exp)


def test_activation_names_listed():
    assert ACTIVATIONS == ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "leaky_relu", "elu",
                           "swiglu", "geglu")


def test_unknown_activation_lists_valid_names():
    with pytest.raises(ValueError) as err:
        FeedForward(8, 16, activation="mish")
    message = str(err.value)
    assert "'mish'" in message
    for name in ACTIVATIONS:
        assert repr(name) in message


def test_feed_forward_wrong_width():
    with pytest.raises(ValueError, match=r"C = 8, got shape \(3, 5\)"):
        FeedForward(8, 16)(torch.randn(3, 5))


@pytest.mark.parametrize("p, message", [(1.0, r"^dropout must be a number in \[0, 1\), got 1.0$"),
                                        ("0.1", r"^dropout must be a number in \[0, 1\), got '0.1'$")])
def test_dropout_outside_zero_one_or_not_a_number_is_refused(p, message):
    with pytest.raises(ValueError, match=message):
        FeedForward(8, 16, dropout=p)


@pytest.mark.parametrize("kwargs, message", [
    (dict(dim=8.0, hidden_dim=16), r"FeedForward dim must be an int >= 1, got 8\.0 \(float\)"),
    (dict(dim=8, hidden_dim=0), r"FeedForward hidden_dim must be an int >= 1, got 0"),
    (dict(dim=8, hidden_dim=16, out_dim=0), r"FeedForward out_dim must be an int >= 1, got 0"),
])
def test_sizes_must_be_positive_ints(kwargs, message):
    # out_dim=0 used to build a layer with an empty output, a float a TypeError inside torch
    with pytest.raises(ValueError, match=message):
        FeedForward(**kwargs)
