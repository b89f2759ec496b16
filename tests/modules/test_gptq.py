"""GPTQ rounding: RTN when inputs are uncorrelated, smaller output error when they are correlated, and
``quantize_linear_layers(..., calibration=)`` on a real (tiny) GPT."""

import copy

import pytest
import torch

from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from attnkit.modules.gptq import gptq_round, input_hessians
from attnkit.modules.quantized_linear import QuantizedLinear, quantize_linear_layers, quantize_weight


def test_equals_rtn_for_uncorrelated_inputs():
    w = torch.randn(24, 40)
    codes, scale = gptq_round(w, torch.eye(40, dtype=torch.float64), damp=0.0)
    rtn_codes, rtn_scale = quantize_weight(w)
    assert torch.equal(codes, rtn_codes) and torch.allclose(scale, rtn_scale)  # no cross terms to use


def test_smaller_output_error_for_correlated_inputs():
    w = torch.randn(24, 40)
    x = torch.randn(512, 40) @ torch.randn(40, 40)  # (M, K) correlated inputs
    codes, scale = gptq_round(w, (x.T @ x / len(x)).double(), block=16)  # several blocks of columns
    rtn_codes, rtn_scale = quantize_weight(w)
    out_err = lambda c, s: (x @ (w - c.float() * s[:, None]).T).pow(2).mean().item()  # noqa: E731
    assert codes.dtype == torch.int8 and int(codes.abs().max()) <= 127
    assert torch.allclose(scale, rtn_scale)  # same format: only the int8 values differ
    assert out_err(codes, scale) < 0.7 * out_err(rtn_codes, rtn_scale)


def test_zero_inputs_are_ignored():
    w = torch.randn(8, 6)
    x = torch.randn(100, 6)
    x[:, 2] = 0.0  # an input that is always zero: its Hessian row/column is zero
    codes, scale = gptq_round(w, (x.T @ x / len(x)).double())
    assert bool((codes[:, 2] == 0).all()) and bool(torch.isfinite(scale).all())


def test_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"weight \(N, K\) and hessian \(K, K\); got weight \(4, 6\), hessian \(5, 5\)"):
        gptq_round(torch.randn(4, 6), torch.eye(5, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"gptq_round block must be an int >= 1, got 0"):
        gptq_round(torch.randn(4, 6), torch.eye(6, dtype=torch.float64), block=0)
    # was: a NaN damp passed the check and failed later inside torch's Cholesky factorisation
    with pytest.raises(ValueError, match=r"gptq_round damp must be a finite number in \[0.0, inf\), got nan"):
        gptq_round(torch.randn(4, 6), torch.eye(6, dtype=torch.float64), damp=float("nan"))
    # was: integer weights were rounded as if scaled, NaN or inf ones gave garbage codes without a word
    with pytest.raises(ValueError, match=r"float weight and hessian, got torch.int64 and torch.float64"):
        gptq_round(torch.ones(4, 6, dtype=torch.int64), torch.eye(6, dtype=torch.float64))
    w = torch.randn(4, 6)
    w[0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"finite weight and hessian, got NaN or inf"):
        gptq_round(w, torch.eye(6, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"finite weight and hessian, got NaN or inf"):
        gptq_round(torch.randn(4, 6), torch.full((6, 6), float("nan"), dtype=torch.float64))


def _gpt():
    cfg = GPTConfig(vocab_size=50, block_size=32, n_layer=2, n_head=2, n_embd=32, dropout=0.0)
    model = GPT(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3)
    return model


def test_input_hessians_are_the_inputs_second_moments():
    model = _gpt()
    batches = [torch.randint(0, 50, (12,)).tolist(), torch.randint(0, 50, (7,)).tolist()]
    seen = []
    handle = model.blocks[0].mlp.w_out.register_forward_hook(lambda m, i, o: seen.append(i[0].reshape(-1, 128)))
    hessians = input_hessians(model, batches)
    handle.remove()
    x = torch.cat(seen).double()  # (19, 128)
    assert set(hessians) == {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    torch.testing.assert_close(hessians["blocks.0.mlp.w_out"], x.T @ x / 19)
    with pytest.raises(ValueError, match="at least one non-empty sequence"):
        input_hessians(model, [[]])


def test_calibration_ids_must_be_integers():
    # was: float ids were truncated to integers (1.5 read as token 1) without a word
    with pytest.raises(ValueError, match=r"token ids must be integers, got torch.float32 values \[1.5, 2.0, 3.0\]"):
        input_hessians(_gpt(), [[1.5, 2.0, 3.0]])


def test_quantize_linear_layers_with_calibration():
    """On text like the calibration text, GPTQ's logits are closer to fp32's than plain rounding's."""
    model = _gpt()
    g = torch.Generator().manual_seed(0)
    calibration = [torch.randint(0, 25, (32,), generator=g).tolist() for _ in range(8)]  # ids < 25 only
    rtn, gptq = copy.deepcopy(model), copy.deepcopy(model)
    assert quantize_linear_layers(rtn, mode="reference") == quantize_linear_layers(
        gptq, mode="reference", calibration=calibration) == 9  # 4 per block + the head
    assert all(isinstance(m, QuantizedLinear) for m in (gptq.lm_head, gptq.blocks[1].mlp.w_in))
    test = torch.randint(0, 25, (4, 32), generator=g)
    with torch.no_grad():
        ref = model(test)
        err_rtn = (rtn(test) - ref).pow(2).mean().item()
        err_gptq = (gptq(test) - ref).pow(2).mean().item()
    assert err_gptq < 0.8 * err_rtn


def test_a_layer_the_calibration_does_not_reach_keeps_round_to_nearest():
    # was: its Hessian was all zero, GPTQ took every input for a dead one and set all its weights to 0
    model = _gpt()
    model.value_head = torch.nn.Linear(32, 1)  # not used by the LM forward
    weight = model.value_head.weight.detach().clone()
    quantize_linear_layers(model, mode="reference", calibration=[list(range(20))])
    codes, scale = quantize_weight(weight)
    assert torch.equal(model.value_head.weight_int8, codes) and torch.equal(model.value_head.scale, scale)


def test_calibration_as_a_tensor_or_a_generator():
    # was: a (B, T) tensor raised torch's "Boolean value of Tensor ... is ambiguous", and a generator was used up by
    # the emptiness check, so every layer silently got round-to-nearest instead of GPTQ
    model = _gpt()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50, (4, 16), generator=g)
    expected = input_hessians(model, ids.tolist())
    for batches in (ids, (row for row in ids.tolist()), list(ids), ids.numpy()):
        got = input_hessians(model, batches)
        assert all(torch.equal(got[name], expected[name]) for name in expected)
    gptq, rtn = copy.deepcopy(model), copy.deepcopy(model)
    quantize_linear_layers(gptq, mode="reference", calibration=(row for row in ids.tolist()))
    quantize_linear_layers(rtn, mode="reference")
    assert not torch.equal(gptq.lm_head.weight_int8, rtn.lm_head.weight_int8)


@pytest.mark.parametrize("batches, message", [
    (torch.arange(5), r"calibration as a tensor must be 2-D \(B, T\) token ids, got shape \(5,\)"),
    ([1, 2, 3], r"calibration must be sequences of token ids \(e.g. \[\[1, 2, 3\]\]\), got an item 1"),
    ("hello", r"calibration must be sequences of token ids \(e.g. \[\[1, 2, 3\]\]\), got str"),
    ([[[1, 2]]], r"calibration sequences must hold token ids \(ints\), got a row of shape \(1, 2\)"),
])
def test_calibration_of_the_wrong_shape(batches, message):
    with pytest.raises(ValueError, match=message):
        input_hessians(_gpt(), batches)


def test_hessian_that_is_not_positive_definite():
    # was: torch's LinAlgError from the Cholesky factorisation
    x = torch.randn(4, 10)
    with pytest.raises(ValueError, match=r"positive definite once damped, got one that is not with damp = 0.0"):
        gptq_round(torch.randn(3, 10), (x.T @ x / 4).double(), damp=0.0)
    with pytest.raises(ValueError, match=r"positive definite once damped, got one that is not with damp = 0.01"):
        gptq_round(torch.randn(3, 10), -torch.eye(10, dtype=torch.float64))
