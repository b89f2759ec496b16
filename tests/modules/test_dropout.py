"""The fast dropout mask against the reference (torch.nn.functional.dropout): same keep rate, expectation and
gradient rule, the scale matched to the 16-bit keep rate; the 16-bit lanes unbiased; identity in eval mode."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.modules.dropout import MIN_LANE_P, Dropout, cpu_keep_mask, dropout, keep_threshold


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_fast_and_reference_masks_agree_in_distribution(p):
    torch.manual_seed(0)
    x = torch.full((200_000,), 2.0)
    fast, ref = dropout(x, p), F.dropout(x, p, training=True)
    for y, scale in ((fast, keep_threshold(p)[1]), (ref, 1 / (1 - p))):
        kept = y != 0
        assert kept.float().mean().item() == pytest.approx(1 - p, abs=0.005)  # keep rate 1 - p
        assert torch.allclose(y[kept], torch.tensor(2.0 * scale))  # kept values scaled by 1 / keep rate
        assert y.mean().item() == pytest.approx(2.0, rel=0.01)  # unbiased
    assert keep_threshold(p)[1] == pytest.approx(1 / (1 - p), rel=2e-5)
    assert not torch.equal(fast != 0, ref != 0)  # different random streams, as documented


def test_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(1)
    x = torch.randn(64, 32, requires_grad=True)
    y = dropout(x, 0.25)
    y.sum().backward()
    kept = (y != 0).float()
    torch.testing.assert_close(x.grad, kept * keep_threshold(0.25)[1])
    assert keep_threshold(0.25)[1] == 1 / 0.75  # 0.25 is on the 16-bit grid: no rounding


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


@pytest.mark.parametrize("p", [MIN_LANE_P, 0.1, 1 / 3, 0.5, 0.9, 1 - MIN_LANE_P])
def test_keep_threshold_rounds_p_to_the_16_bit_grid_and_scales_by_the_rounded_keep_rate(p):
    threshold, scale = keep_threshold(p)
    kept_values = 32768 - threshold  # the signed 16-bit values r >= threshold
    drop_rate = 1 - kept_values / 65536
    assert abs(drop_rate - p) <= 0.5 / 65536  # p rounded to the nearest multiple of 1/65536
    assert abs(drop_rate - p) <= 0.002 * min(p, 1 - p)  # at most 0.2% of p or 1 - p in the lane range
    assert scale * kept_values / 65536 == pytest.approx(1.0, rel=1e-15)  # expectation exactly 1


@pytest.mark.parametrize("p", [0.0, MIN_LANE_P / 2, 1 - MIN_LANE_P / 2, 1.0, -0.1])
def test_keep_threshold_refuses_p_off_the_lane_range(p):
    with pytest.raises(ValueError, match=r"needs p in \[0.00390625, 0.99609375\], got"):
        keep_threshold(p)


def test_every_16_bit_lane_of_a_draw_is_unbiased():
    # p = 0.5 keeps r >= 0: a draw whose 64-bit words lacked the sign bit (0..2**63-1) would keep every element of
    # one lane in four; each lane position must keep half, and neighbours must be independent
    torch.manual_seed(3)
    n = 400_000
    kept = cpu_keep_mask((n,), 0.5) != 0
    for lane in range(4):
        assert kept[lane::4].float().mean().item() == pytest.approx(0.5, abs=0.005)
    both = (kept[:-1] & kept[1:]).float().mean().item()
    assert both == pytest.approx(0.25, abs=0.005)


@pytest.mark.parametrize("shape", [(1,), (3,), (3, 5, 7), (2, 0, 4)])
def test_mask_of_any_size_and_shape(shape):
    torch.manual_seed(4)
    x = torch.ones(shape)
    y = dropout(x, 0.5)
    assert y.shape == x.shape
    assert set(y.unique().tolist()) <= {0.0, 2.0}
    assert dropout(x.bfloat16(), 0.5).dtype == torch.bfloat16


def test_rates_off_the_lane_range_keep_the_float_mask():
    torch.manual_seed(5)
    p = 0.001  # below 1/256: the 16-bit grid would move it by 1.7%, so the float uniforms draw it
    y = dropout(torch.ones(400_000), p)
    kept = y != 0
    assert torch.allclose(y[kept], torch.tensor(1 / (1 - p)))
    assert (~kept).float().mean().item() == pytest.approx(p, abs=3e-4)


def test_the_mask_draws_from_the_global_generator():
    torch.manual_seed(6)
    a = cpu_keep_mask((1001,), 0.3)
    b = cpu_keep_mask((1001,), 0.3)
    torch.manual_seed(6)
    assert torch.equal(a, cpu_keep_mask((1001,), 0.3)) and not torch.equal(a, b)


def test_every_dropout_in_the_models_is_attnkits():
    from attnkit.models import GPT, GPTConfig, Transformer, TransformerConfig
    from attnkit.modules.lora import LoRALinear

    models = [GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8, dropout=0.1)),
              Transformer(TransformerConfig(src_vocab_size=8, tgt_vocab_size=8, d_model=8, num_heads=2,
                                            num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16,
                                            dropout=0.1)),
              LoRALinear(torch.nn.Linear(4, 4), 2, 4.0, dropout=0.1)]
    for model in models:
        drops = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
        assert drops and all(type(m) is Dropout for m in drops), (type(model).__name__, drops)
