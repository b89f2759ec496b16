"""LayerDrop's draw (``attnkit.modules.layer_drop``): the keep rate, no draw when off, the validation."""

from __future__ import annotations

import pytest
import torch

from attnkit.modules.layer_drop import check_layer_drop, kept_layers


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_each_layer_is_kept_with_probability_one_minus_p(p):
    torch.manual_seed(0)
    draws = torch.tensor([kept_layers(4, p, training=True) for _ in range(5000)])  # (draws, L)
    assert draws.shape == (5000, 4) and draws.dtype == torch.bool
    for rate in draws.float().mean(dim=0).tolist():  # every layer on its own
        assert rate == pytest.approx(1 - p, abs=0.03)
    assert len({tuple(row) for row in draws.tolist()}) > 1  # a new draw every pass


def test_evaluation_and_p_zero_run_every_layer_without_drawing():
    torch.manual_seed(3)
    state = torch.get_rng_state()
    assert kept_layers(3, 0.5, training=False) == [True, True, True]
    assert kept_layers(3, 0.0, training=True) == [True, True, True]
    assert torch.equal(torch.get_rng_state(), state)  # the dropout streams of a run without LayerDrop are untouched


def test_the_draw_follows_torchs_seed():
    torch.manual_seed(7)
    a = [kept_layers(6, 0.5, training=True) for _ in range(3)]
    torch.manual_seed(7)
    assert [kept_layers(6, 0.5, training=True) for _ in range(3)] == a


@pytest.mark.parametrize("bad", [1.0, -0.1, float("nan"), "0.1", None])
def test_check_layer_drop_names_the_value(bad):
    with pytest.raises(ValueError, match=r"Encoder layer_drop must be a"):
        check_layer_drop("Encoder layer_drop", bad)
    assert check_layer_drop("p", 0) == 0.0 and check_layer_drop("p", 0.25) == 0.25
