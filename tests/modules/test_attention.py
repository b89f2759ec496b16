"""scaled_dot_product_attention: reference path vs fast path, mask rules, fully masked rows, GQA, validation.

Tolerance: the two paths (and the explicit formulas below) agree within atol=rtol=1e-5 in float32.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import attnkit.modules.attention as attention_mod
from attnkit.modules import causal_mask, merge_masks, reference_attention, scaled_dot_product_attention
from helpers import TOLERANCES

TOL = TOLERANCES["float32"]
B, H = 2, 4


def qkv(T, S, K=H, D=8, Dv=8, dtype=torch.float32, grad=False):
    q = torch.randn(B, H, T, D, dtype=dtype, requires_grad=grad)
    k = torch.randn(B, K, S, D, dtype=dtype, requires_grad=grad)
    v = torch.randn(B, K, S, Dv, dtype=dtype, requires_grad=grad)
    return q, k, v


def explicit_attention(q, k, v, additive_mask=None, scale=None):
    """softmax(q k^T * scale + mask) v, one (batch, head) at a time; K < H handled as h // (H // K)."""
    Bq, Hq, T, D = q.shape
    K = k.shape[1]
    scale = 1 / math.sqrt(D) if scale is None else scale
    out = torch.empty(Bq, Hq, T, v.shape[-1])
    for b in range(Bq):
        for h in range(Hq):
            g = h // (Hq // K)
            s = q[b, h] @ k[b, g].T * scale
            if additive_mask is not None:
                s = s + additive_mask.expand(Bq, Hq, T, k.shape[2])[b, h]
            out[b, h] = torch.softmax(s, -1) @ v[b, g]
    return out


def both_paths(*args, **kwargs):
    out_ref, w = scaled_dot_product_attention(*args, need_weights=True, **kwargs)
    out_fast, w_none = scaled_dot_product_attention(*args, need_weights=False, **kwargs)
    assert w_none is None and w is not None
    return out_ref, out_fast, w


def with_key0_allowed(mask):
    if mask.dtype == torch.bool:
        mask[..., 0] = False
    else:
        mask[..., 0] = 0.0
    return mask


MASK_CASES = {
    "none": lambda T, S: {},
    "bool_2d": lambda T, S: {"attn_mask": with_key0_allowed(torch.rand(T, S) < 0.4)},
    "bool_3d": lambda T, S: {"attn_mask": with_key0_allowed(torch.rand(B, T, S) < 0.4)},
    "bool_4d": lambda T, S: {"attn_mask": with_key0_allowed(torch.rand(B, H, T, S) < 0.4)},
    "float_2d": lambda T, S: {"attn_mask": torch.randn(T, S)},
    "float_4d_neginf": lambda T, S: {
        "attn_mask": with_key0_allowed(torch.randn(B, H, T, S).masked_fill(torch.rand(B, H, T, S) < 0.4, float("-inf")))},
    "kpm": lambda T, S: {"key_padding_mask": torch.arange(S)[None, :] >= torch.tensor([[S], [S - 2]])},
    "kpm_float_mask": lambda T, S: {"attn_mask": torch.randn(B, T, S),
                                    "key_padding_mask": torch.arange(S)[None, :] >= torch.tensor([[S], [S - 3]])},
    "causal": lambda T, S: {"is_causal": True},
    "causal_kpm_bool": lambda T, S: {"is_causal": True, "attn_mask": torch.rand(T, S) < 0.2,
                                     "key_padding_mask": torch.arange(S)[None, :] >= torch.tensor([[S], [S - 1]])},
}


@pytest.mark.parametrize("case", list(MASK_CASES))
@pytest.mark.parametrize("T,S", [(5, 5), (3, 7)])
@pytest.mark.parametrize("K", [4, 2, 1])
def test_reference_and_fast_paths_agree(case, T, S, K):
    q, k, v = qkv(T, S, K=K, Dv=6)
    kwargs = MASK_CASES[case](T, S)
    if kwargs.get("is_causal") and "attn_mask" in kwargs:
        kwargs["attn_mask"][:, 0] = False  # causal + random mask: key 0 always allowed
    out_ref, out_fast, w = both_paths(q, k, v, enable_gqa=K != H, **kwargs)
    torch.testing.assert_close(out_fast, out_ref, **TOL)
    assert w.shape == (B, H, T, S)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, T), **TOL)  # no dead rows in these cases


def test_matches_explicit_formula_with_float_mask_and_scale():
    q, k, v = qkv(4, 6)
    mask = torch.randn(B, 1, 4, 6)
    exp = explicit_attention(q, k, v, mask, scale=0.3)
    out_ref, out_fast, _ = both_paths(q, k, v, attn_mask=mask, scale=0.3)
    torch.testing.assert_close(out_ref, exp, **TOL)
    torch.testing.assert_close(out_fast, exp, **TOL)


def test_bool_mask_polarity_true_means_may_not_attend():
    q, k, v = qkv(3, 5)
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[:, 2:] = True  # only keys 0 and 1 allowed
    additive = torch.zeros(3, 5).masked_fill(mask, float("-inf"))
    exp = explicit_attention(q, k, v, additive)
    out_ref, out_fast, w = both_paths(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out_ref, exp, **TOL)
    torch.testing.assert_close(out_fast, exp, **TOL)
    assert torch.all(w[..., 2:] == 0)


def test_causal_bottom_right_aligned_when_S_greater_than_T():
    T, S = 3, 7
    q, k, v = qkv(T, S)
    # query i may see keys j <= i + (S - T)
    allowed = torch.tensor([[j <= i + (S - T) for j in range(S)] for i in range(T)])
    additive = torch.zeros(T, S).masked_fill(~allowed, float("-inf"))
    exp = explicit_attention(q, k, v, additive)
    out_ref, out_fast, w = both_paths(q, k, v, is_causal=True)
    torch.testing.assert_close(out_ref, exp, **TOL)
    torch.testing.assert_close(out_fast, exp, **TOL)
    assert torch.equal(w[0, 0] > 0, allowed)


def test_fast_path_passes_is_causal_to_torch_without_building_a_mask(monkeypatch):
    seen = []
    real_sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real_sdpa(*args, **kwargs)

    def no_mask(*args, **kwargs):
        raise AssertionError("causal_mask must not be built on the fast path when S == T and no other mask")

    monkeypatch.setattr(attention_mod.F, "scaled_dot_product_attention", spy)
    monkeypatch.setattr(attention_mod, "causal_mask", no_mask)
    q, k, v = qkv(6, 6)
    out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert seen and seen[0]["is_causal"] is True and seen[0].get("attn_mask") is None
    monkeypatch.undo()
    exp, _ = reference_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, exp, **TOL)


DEAD_ROW_CASES = {
    # query 1 has every key masked by a bool mask
    "bool": lambda T, S: {"attn_mask": torch.zeros(T, S, dtype=torch.bool).index_fill_(0, torch.tensor([1]), True)},
    # the same with -inf in a float mask (and finite values elsewhere)
    "float": lambda T, S: {"attn_mask": torch.randn(B, H, T, S).index_fill_(2, torch.tensor([1]), float("-inf"))},
    # batch row 1 is all padding
    "padding": lambda T, S: {"key_padding_mask": torch.tensor([[False] * S, [True] * S])},
    # causal with S < T: the first T - S queries have no key at all
    "causal_S_lt_T": lambda T, S: {"is_causal": True},
}


@pytest.mark.parametrize("case", list(DEAD_ROW_CASES))
@pytest.mark.parametrize("K", [4, 2])
def test_fully_masked_rows_give_zeros_and_finite_grads_on_both_paths(case, K):
    T, S = (6, 4) if case == "causal_S_lt_T" else (4, 5)
    kwargs = DEAD_ROW_CASES[case](T, S)
    for need_weights in (True, False):
        q, k, v = qkv(T, S, K=K, grad=True)
        out, w = scaled_dot_product_attention(q, k, v, need_weights=need_weights, enable_gqa=K != H, **kwargs)
        assert torch.isfinite(out).all()
        if case == "padding":
            dead = (slice(1, 2), slice(None), slice(None))
        elif case == "causal_S_lt_T":
            dead = (slice(None), slice(None), slice(0, T - S))
        else:
            dead = (slice(None), slice(None), slice(1, 2))
        assert torch.all(out[dead] == 0)
        assert out.abs().sum() > 0  # the other rows are not zero
        if need_weights:
            assert torch.all(w[dead] == 0) and torch.isfinite(w).all()
        (out * torch.randn_like(out)).sum().backward()
        for t in (q, k, v):
            assert torch.isfinite(t.grad).all()
        assert torch.all(q.grad[dead] == 0)  # dead queries receive no gradient


@pytest.mark.parametrize("case", list(DEAD_ROW_CASES) + ["no_dead_row"])
def test_attention_that_must_not_read_the_mask_back_gives_the_same_result(case):
    """Inside checks_on_device (a GPU's training updates) the dead rows are handled without testing on the host
    whether there are any: the same outputs and gradients, with and without dead rows."""
    from attnkit.checks import checks_on_device

    T, S = (6, 4) if case == "causal_S_lt_T" else (4, 5)
    kwargs = ({"attn_mask": torch.rand(T, S) < 0.3} if case == "no_dead_row" else DEAD_ROW_CASES[case](T, S))
    if case == "no_dead_row":
        kwargs["attn_mask"][:, 0] = False
    results = []
    for on_device in (False, True):
        torch.manual_seed(0)
        q, k, v = qkv(T, S, grad=True)
        with checks_on_device(on_device):
            out, _ = scaled_dot_product_attention(q, k, v, need_weights=False, **kwargs)
        out.sum().backward()
        results.append((out.detach(), q.grad, k.grad, v.grad))
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, **TOL)


def test_fully_masked_paths_agree_on_live_rows():
    T, S = 4, 5
    q, k, v = qkv(T, S)
    mask = torch.rand(B, H, T, S) < 0.5
    mask[:, :, 2] = True  # dead row
    mask[:, :, [0, 1, 3], 0] = False
    out_ref, out_fast, _ = both_paths(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out_fast, out_ref, **TOL)


def test_merge_masks_keeps_broadcast_shapes_and_kinds():
    kpm = torch.tensor([[False, True, False], [False, False, True]])
    m = merge_masks(None, kpm, 2, 4, 5, 3, torch.float32)
    assert m.shape == (2, 1, 1, 3) and m.dtype == torch.bool
    am = torch.rand(5, 3) < 0.5
    m = merge_masks(am, kpm, 2, 4, 5, 3, torch.float32)
    assert m.dtype == torch.bool and m.shape == (2, 1, 5, 3)
    assert torch.equal(m, am[None, None] | kpm[:, None, None, :])
    fm = torch.randn(2, 5, 3)
    m = merge_masks(fm, kpm, 2, 4, 5, 3, torch.float64)
    assert m.dtype == torch.float64 and m.shape == (2, 1, 5, 3)
    exp = fm[:, None].double().masked_fill(kpm[:, None, None, :], float("-inf"))
    assert torch.equal(m, exp)
    assert merge_masks(None, None, 2, 4, 5, 3, torch.float32) is None


def test_half_precision_reference_uses_float32_softmax():
    q, k, v = qkv(4, 4, dtype=torch.bfloat16)
    out, w = reference_attention(q, k, v, is_causal=True)
    assert out.dtype == torch.bfloat16 and w.dtype == torch.bfloat16
    exp = explicit_attention(q.float(), k.float(), v.float(), torch.zeros(4, 4).masked_fill(causal_mask(4), float("-inf")))
    torch.testing.assert_close(out.float(), exp, atol=3e-2, rtol=3e-2)  # bf16 has ~3 significant digits



def test_float16_reference_adds_a_finfo_min_mask_without_overflowing():
    """A row masked entirely by float16's finfo.min (HF's additive masks): in float16 the sum overflowed to -inf
    and the reference path gave NaN where the fast path and torch give finite values."""
    torch.manual_seed(0)
    k = torch.full((1, 1, 2, 8), 4.0, dtype=torch.float16) + torch.rand(1, 1, 2, 8, dtype=torch.float16)
    q = -k.flip(2)  # row 0's scores are both about -50: plus finfo.min, past float16's range
    v = torch.randn(1, 1, 2, 8, dtype=torch.float16)
    mask = torch.zeros(2, 2, dtype=torch.float16)
    mask[0] = torch.finfo(torch.float16).min
    out, _ = reference_attention(q, k, v, attn_mask=mask)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask.float())
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), want, atol=1e-2, rtol=1e-2)

# ------------------------------------------------------------------ validation: one test per rule
@pytest.mark.parametrize("masks, message", [
    ({"attn_mask": torch.zeros(5, 3, dtype=torch.bool)}, r"\(T, S\) = \(3, 5\), got \(5, 3\)"),
    ({"attn_mask": torch.zeros(8, 3, 5, dtype=torch.bool)}, r"\(B, T, S\) = \(2, 3, 5\), got \(8, 3, 5\)"),
    ({"attn_mask": torch.zeros(5, dtype=torch.bool)}, r"got 1-D shape \(5,\)"),
    ({"attn_mask": torch.zeros(3, 5, dtype=torch.int64)}, r"bool .* or floating point .*got torch.int64"),
    ({"key_padding_mask": torch.zeros(2, 3, dtype=torch.bool)}, r"\(B, S\) = \(2, 5\), got \(2, 3\)"),
    ({"key_padding_mask": torch.zeros(2, 5, dtype=torch.uint8)}, r"key_padding_mask must be bool .*got torch.uint8"),
], ids=["attn_mask_wrong_shape", "attn_mask_3d_wrong_batch", "attn_mask_wrong_rank",
        "attn_mask_integer_dtype", "key_padding_mask_wrong_shape", "key_padding_mask_integer_dtype"])
def test_bad_masks_are_refused_by_name(masks, message):
    q, k, v = qkv(3, 5)
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(q, k, v, **masks)


def test_qkv_dtype_mismatch():
    q, k, v = qkv(3, 5)
    with pytest.raises(ValueError, match=r"expected torch.float32 \(q\), got k torch.float64"):
        scaled_dot_product_attention(q, k.double(), v)


def test_qkv_batch_mismatch():
    q, k, v = qkv(3, 5)
    with pytest.raises(ValueError, match=r"B = 2 \(q\), got k 1"):
        scaled_dot_product_attention(q, k[:1], v)


def test_gqa_heads_must_divide():
    q = torch.randn(B, 4, 3, 8)
    k = v = torch.randn(B, 3, 5, 8)
    with pytest.raises(ValueError, match=r"H % K == 0, got H = 4, K = 3"):
        scaled_dot_product_attention(q, k, v, enable_gqa=True)


def test_gqa_requires_enable_gqa():
    q, k, v = qkv(3, 5, K=2)
    with pytest.raises(ValueError, match=r"K = 2 heads but q has H = 4"):
        scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("fn", [reference_attention, scaled_dot_product_attention])
def test_dropout_p_must_be_a_probability(fn):
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"^dropout_p must be a number in \[0, 1\), got 1.0$"):
        fn(q, q, q, dropout_p=1.0)
    with pytest.raises(ValueError, match=r"^dropout_p must be a number in \[0, 1\), got '0.1'$"):
        fn(q, q, q, dropout_p="0.1")


@pytest.mark.parametrize("fn", [reference_attention, scaled_dot_product_attention])
@pytest.mark.parametrize("scale", [float("nan"), float("inf"), "0.5", True, torch.tensor(0.5)],
                         ids=["nan", "inf", "str", "bool", "tensor"])
def test_scale_must_be_a_finite_number(fn, scale):
    # A NaN scale gave zeros on the fast path and NaN on the reference path; inf gave NaN; a string a TypeError.
    q, k, v = qkv(3, 5)
    with pytest.raises(ValueError, match=r"^scale must be None \(1 / sqrt\(D\)\) or a finite number, got "):
        fn(q, k, v, scale=scale)


@pytest.mark.parametrize("fn", [reference_attention, scaled_dot_product_attention])
@pytest.mark.parametrize("is_causal", [None, 1, "yes", torch.tensor(True)], ids=["none", "int", "str", "tensor"])
def test_is_causal_must_be_a_bool(fn, is_causal):
    q, k, v = qkv(3, 5)
    with pytest.raises(ValueError, match=r"^is_causal must be a bool, got "):
        fn(q, k, v, is_causal=is_causal)


def test_float16_reference_path_stays_finite_where_q_k_overflows_float16():
    # q . k above 65504 made the float16 scores inf and the weights NaN on the reference path (need_weights=True,
    # or dropout on the CPU), where the fused kernel, accumulating in float32, gives the finite answer.
    torch.manual_seed(0)
    q = torch.randn(1, 2, 4, 64) * 40
    k, v = q.clone(), torch.randn(1, 2, 4, 64)
    want = F.scaled_dot_product_attention(q, k, v)
    h = [t.half() for t in (q, k, v)]
    out_ref, weights = scaled_dot_product_attention(*h, need_weights=True)
    out_fast, _ = scaled_dot_product_attention(*h)
    assert torch.isfinite(out_ref).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(out_ref, want.half())  # float16's default tolerances
    torch.testing.assert_close(out_ref, out_fast)


@pytest.mark.parametrize("need_weights", [True, False])
def test_float_mask_plus_causal_that_masks_a_whole_row_gives_zeros(need_weights):
    """A float attn_mask of -inf on the only key causality leaves a query (key 0 for query 0) makes that row fully
    masked: the causal part must count as -inf too, so the row is zeros, not attention to the future keys."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    mask = torch.zeros(3, 3)
    mask[0, 0] = float("-inf")
    out, _ = scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True, need_weights=need_weights)
    assert torch.equal(out[:, :, 0], torch.zeros(1, 2, 4))
    ref, _ = scaled_dot_product_attention(q, k, v, attn_mask=mask.isneginf() | causal_mask(3), need_weights=True)
    assert torch.allclose(out, ref, atol=1e-6)
