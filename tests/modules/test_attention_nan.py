"""NaN propagates through attention (both paths alike); all-masked rows stay zero whatever their inputs."""

import pytest
import torch

from attnkit.modules.attention import reference_attention, scaled_dot_product_attention
from helpers import assert_close

T = 5
NAN = float("nan")


def _qkv(seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, 2, T, 8, generator=g) for _ in range(3))


def _dead_row_mask():
    mask = torch.zeros(T, T, dtype=torch.bool)
    mask[3] = True  # query 3 may attend nothing
    return mask


MASKS = {"none": {}, "causal": {"is_causal": True}, "mask": {"attn_mask": _dead_row_mask()},
         "padding": {"key_padding_mask": torch.tensor([[False] * T, [True, True] + [False] * (T - 2)])}}


def _nan_rows(out):
    return out.isnan().any(dim=-1)  # (B, H, T)


def _both(q, k, v, **kw):
    fast, _ = scaled_dot_product_attention(q, k, v, **kw)
    ref, _ = reference_attention(q, k, v, **kw)
    return fast, ref


@pytest.mark.parametrize("masks", list(MASKS))
def test_nan_query_gives_nan_row_in_both_paths(masks):
    q, k, v = _qkv()
    q[1, 0, 2, 3] = NAN
    fast, ref = _both(q, k, v, **MASKS[masks])
    expected = torch.zeros(2, 2, T, dtype=torch.bool)
    expected[1, 0, 2] = True
    assert torch.equal(_nan_rows(fast), expected)
    assert torch.equal(_nan_rows(ref), expected)
    ok = ~expected[..., None]
    assert_close(fast.masked_fill(~ok, 0), ref.masked_fill(~ok, 0), "float32")


@pytest.mark.parametrize("masks", list(MASKS))
@pytest.mark.parametrize("which", ["k", "v"])
def test_nan_key_or_value_reaches_every_row_that_attends_it(masks, which):
    q, k, v = _qkv(1)
    position = 2  # attended by rows 2.. under the causal mask, by every live row otherwise
    (k if which == "k" else v)[0, 1, position, 0] = NAN
    fast, ref = _both(q, k, v, **MASKS[masks])
    for out in (fast, ref):
        rows = _nan_rows(out)[0, 1]
        assert not _nan_rows(out)[1].any() and not _nan_rows(out)[0, 0].any()  # other batch rows/heads untouched
        live = [t for t in range(T) if not (masks == "mask" and t == 3)]
        if masks == "causal":
            live = [t for t in live if t >= position]
        assert rows[live].all(), (which, masks, rows)


def test_all_masked_row_is_zero_even_with_nan_values():
    q, k, v = _qkv(2)
    v[:, :, 0] = NAN
    mask = _dead_row_mask()
    fast, ref = _both(q, k, v, attn_mask=mask)
    for out in (fast, ref):
        assert torch.equal(out[:, :, 3], torch.zeros_like(out[:, :, 3]))
        assert _nan_rows(out)[:, :, [0, 1, 2, 4]].all()


def test_finite_inputs_stay_finite_with_dead_rows():
    q, k, v = _qkv(3)
    fast, ref = _both(q, k, v, attn_mask=_dead_row_mask(), is_causal=True)
    assert torch.isfinite(fast).all() and torch.isfinite(ref).all()
    assert_close(fast, ref, "float32")
