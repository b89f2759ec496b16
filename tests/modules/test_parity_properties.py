"""Property-based parity (hypothesis) of attention against torch's own: drawn configurations that the fixed-case
parity tests (``test_attention.py``, ``test_multi_head_attention.py``, ``tests/interop/test_torch_nn.py``) leave out.

* attnkit's ``scaled_dot_product_attention`` (fast path), ``reference_attention`` and
  ``torch.nn.functional.scaled_dot_product_attention``: grouped-query heads, an explicit ``scale``, 2-/3-/4-D bool and
  float masks (``-inf`` entries, whole ``-inf`` rows), ``key_padding_mask``, ``is_causal`` with ``T != S`` (attnkit is
  bottom-right aligned, torch's ``is_causal`` top-left: torch is given the bottom-right mask explicitly).
* ``MultiHeadAttention`` (built by ``attnkit.interop.torch_nn.from_torch``) and ``torch.nn.MultiheadAttention``:
  ``batch_first`` both ways, ``kdim``/``vdim``, bias on/off, bool/float ``attn_mask`` 2-D and 3-D, ``key_padding_mask``
  (fully padded rows included), ``need_weights`` with ``average_attn_weights`` both ways, ``is_causal`` with the
  causal mask (torch's hint).

Float64 throughout, so agreement is to rounding (1e-10). Where torch has no defined answer (a query row whose keys are
all masked: torch gives NaN) only the rows torch defines are compared, and attnkit's rows must be zeros (its
contract, docs/design.md "Conventions").
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attnkit.interop.torch_nn import from_torch
from attnkit.modules.attention import reference_attention, scaled_dot_product_attention
from attnkit.modules.masks import causal_mask

TOL = dict(rtol=1e-10, atol=1e-10)  # float64: the same sums in another order
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


def _blocked(mask: torch.Tensor | None) -> torch.Tensor | None:
    """Bool "may not attend" of a bool mask or the ``-inf`` entries of a float one."""
    if mask is None:
        return None
    return torch.isneginf(mask) if mask.is_floating_point() else mask


def _additive(mask: torch.Tensor) -> torch.Tensor:
    """A bool (True = may not attend) or float mask as an additive float64 mask."""
    if mask.is_floating_point():
        return mask
    return torch.zeros(mask.shape, dtype=torch.float64).masked_fill(mask, float("-inf"))


# ---------------------------------------------------------------------------------------------------- SDPA
@st.composite
def sdpa_case(draw):
    B, K = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    H = K * draw(st.sampled_from([1, 2, 3]))
    T, S = draw(st.integers(1, 6)), draw(st.integers(1, 7))
    D, Dv = draw(st.sampled_from([2, 4, 8])), draw(st.sampled_from([3, 4, 8]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    q = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, K, S, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, K, S, Dv, generator=g, dtype=torch.float64)
    kw = {"is_causal": draw(st.booleans()), "scale": draw(st.sampled_from([None, 0.3, 1.7, -0.5]))}
    form = draw(st.sampled_from(["none", "2d", "3d", "4d"]))
    if form != "none":
        four = (draw(st.sampled_from([1, B])), draw(st.sampled_from([1, H])), T, S)
        shape = {"2d": (T, S), "3d": (B, T, S), "4d": four}[form]
        p = draw(st.sampled_from([0.0, 0.3, 0.6, 1.0]))
        blocked = torch.rand(shape, generator=g) < p
        if draw(st.booleans()):  # float: added scores, -inf where blocked
            kw["attn_mask"] = torch.randn(shape, generator=g, dtype=torch.float64).masked_fill(blocked, float("-inf"))
        else:
            kw["attn_mask"] = blocked
    if draw(st.booleans()):
        lengths = torch.tensor([draw(st.integers(0, S)) for _ in range(B)])  # 0: only padding
        kw["key_padding_mask"] = torch.arange(S)[None, :] >= lengths[:, None]
    return q, k, v, kw


def _torch_sdpa(q, k, v, *, attn_mask=None, key_padding_mask=None, is_causal=False, scale=None):
    """torch's math result for attnkit's arguments: one additive float64 mask (B, H|1, T, S) with attnkit's rules,
    bottom-right causal, given to ``F.scaled_dot_product_attention``; and the (B, H, T) rows it leaves undefined."""
    B, H, T, _ = q.shape
    S = k.shape[2]
    mask = torch.zeros(B, 1, T, S, dtype=torch.float64)
    if attn_mask is not None:
        m = _additive(attn_mask)
        mask = mask + (m if m.dim() == 4 else m[:, None] if m.dim() == 3 else m[None, None])
    if key_padding_mask is not None:
        mask = mask + _additive(key_padding_mask)[:, None, None, :]
    if is_causal:
        mask = mask + _additive(causal_mask(T, S))
    mask = mask.expand(B, H, T, S)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=k.shape[1] != H)
    dead = torch.isneginf(mask).all(-1)  # (B, H, T)
    return out, dead


@SETTINGS
@given(sdpa_case())
def test_sdpa_fast_and_reference_paths_match_torch(case):
    q, k, v, kw = case
    gqa = k.shape[1] != q.shape[1]
    want, dead = _torch_sdpa(q, k, v, **kw)
    fast, none = scaled_dot_product_attention(q, k, v, enable_gqa=gqa, **kw)
    ref, weights = reference_attention(q, k, v, enable_gqa=gqa, **kw)
    assert none is None
    live = ~dead
    torch.testing.assert_close(fast[live], want[live], **TOL)
    torch.testing.assert_close(ref[live], want[live], **TOL)
    assert (fast[dead] == 0).all() and (ref[dead] == 0).all() and (weights[dead] == 0).all()
    # the weights: softmax of the scaled, masked scores, as torch's math spells it
    H = q.shape[1]
    kk = k.repeat_interleave(H // k.shape[1], dim=1)
    scale = 1 / math.sqrt(q.shape[-1]) if kw["scale"] is None else kw["scale"]
    scores = q @ kk.transpose(-2, -1) * scale
    B, _, T, S = scores.shape
    mask = torch.zeros(B, 1, T, S, dtype=torch.float64)
    m = kw.get("attn_mask")
    if m is not None:
        m = _additive(m)
        mask = mask + (m if m.dim() == 4 else m[:, None] if m.dim() == 3 else m[None, None])
    if kw.get("key_padding_mask") is not None:
        mask = mask + _additive(kw["key_padding_mask"])[:, None, None, :]
    if kw["is_causal"]:
        mask = mask + _additive(causal_mask(T, S))
    want_w = torch.softmax(scores + mask, dim=-1)
    torch.testing.assert_close(weights[live], want_w[live], **TOL)


# ---------------------------------------------------------------------------------------------------- MHA
@st.composite
def mha_case(draw):
    H = draw(st.sampled_from([1, 2, 4]))
    E = H * draw(st.sampled_from([2, 3, 4]))
    kind = draw(st.sampled_from(["self", "self_distinct_kv", "cross", "cross_kdim", "cross_kdim_vdim"]))
    kdim, vdim = {"self": (None, None), "self_distinct_kv": (None, None), "cross": (None, None),
                  "cross_kdim": (5, 5), "cross_kdim_vdim": (5, 7)}[kind]
    bias = draw(st.booleans())
    batch_first = draw(st.booleans())
    B, T = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    S = T if kind == "self" else draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**16))
    mask_form = draw(st.sampled_from(["none", "bool2d", "float2d", "bool3d", "float3d", "causal"]))
    if kind != "self" and mask_form == "causal":
        mask_form = "bool2d"
    p = draw(st.sampled_from([0.0, 0.3, 0.6]))
    kpm_lengths = draw(st.none() | st.lists(st.integers(0, S), min_size=B, max_size=B))  # 0: fully padded
    need_weights = draw(st.booleans())
    average = draw(st.booleans())
    return dict(H=H, E=E, kind=kind, kdim=kdim, vdim=vdim, bias=bias, batch_first=batch_first, B=B, T=T, S=S,
                seed=seed, mask_form=mask_form, p=p, kpm_lengths=kpm_lengths, need_weights=need_weights,
                average=average)


@SETTINGS
@given(mha_case())
def test_multi_head_attention_matches_torch_multihead_attention(c):
    B, T, S, E, H = c["B"], c["T"], c["S"], c["E"], c["H"]
    g = torch.Generator().manual_seed(c["seed"])
    ref = nn.MultiheadAttention(E, H, bias=c["bias"], kdim=c["kdim"], vdim=c["vdim"], batch_first=c["batch_first"],
                                dtype=torch.float64).eval()
    with torch.no_grad():
        for p_ in ref.parameters():  # torch zeroes the biases: random ones, so a misplaced bias shows
            p_.copy_(torch.randn(p_.shape, generator=g, dtype=torch.float64) * 0.5)
    ours = from_torch(ref, self_attention=c["kind"].startswith("self")).eval()
    assert next(ours.parameters()).dtype == torch.float64

    x = torch.randn(B, T, E, generator=g, dtype=torch.float64)
    if c["kind"] == "self":
        key = value = x
    else:
        key = torch.randn(B, S, c["kdim"] or E, generator=g, dtype=torch.float64)
        value = key if c["kind"] in ("cross", "cross_kdim") and c["vdim"] == c["kdim"] and c["seed"] % 2 else \
            torch.randn(B, S, c["vdim"] or E, generator=g, dtype=torch.float64)

    form = c["mask_form"]
    attn_mask = torch_mask = None
    is_causal = False
    if form == "causal":
        attn_mask, torch_mask, is_causal = None, causal_mask(T, S), True
    elif form != "none":
        shape = (T, S) if form.endswith("2d") else (B, H, T, S)
        blocked = torch.rand(shape, generator=g) < c["p"]
        m = torch.randn(shape, generator=g, dtype=torch.float64).masked_fill(blocked, float("-inf")) \
            if form.startswith("float") else blocked
        attn_mask = m  # ours: (T, S) or (B, H, T, S); torch's 3-D mask is (B * H, T, S)
        torch_mask = m if m.dim() == 2 else m.reshape(B * H, T, S)
    kpm = torch_kpm = None
    if c["kpm_lengths"] is not None:
        kpm = torch.arange(S)[None, :] >= torch.tensor(c["kpm_lengths"])[:, None]  # (B, S) True = padding
        torch_kpm = _additive(kpm) if torch_mask is not None and torch_mask.is_floating_point() else kpm

    def t(a):  # to torch's layout
        return a if c["batch_first"] else a.transpose(0, 1)

    want, want_w = ref(t(x), t(key), t(value), attn_mask=torch_mask, key_padding_mask=torch_kpm,
                       need_weights=c["need_weights"], average_attn_weights=c["average"], is_causal=is_causal)
    want = t(want)
    q_in = (x, None, None) if c["kind"] == "self" else (x, key, value)
    got, got_w = ours(*q_in, attn_mask=attn_mask, key_padding_mask=kpm, is_causal=is_causal,
                      need_weights=c["need_weights"], average_attn_weights=c["average"])

    # rows (B, H, T) whose every key is masked: torch gives NaN there, attnkit zeros
    blocked = torch.zeros(B, H, T, S, dtype=torch.bool)
    if torch_mask is not None:
        b = _blocked(torch_mask)
        blocked = blocked | (b[None, None] if b.dim() == 2 else b.reshape(B, H, T, S))
    if kpm is not None:
        blocked = blocked | kpm[:, None, None, :]
    dead_head = blocked.all(-1)  # (B, H, T)
    dead_any = dead_head.any(1)  # (B, T): such a row reaches the output through out_proj
    torch.testing.assert_close(got[~dead_any], want[~dead_any], **TOL)
    assert torch.isfinite(got).all()
    if dead_head.all(1).any():  # every head dead: attention output zero, so out_proj's bias alone
        expect = torch.zeros(E, dtype=torch.float64) if ours.out_proj.bias is None else ours.out_proj.bias.detach()
        for b, i in dead_head.all(1).nonzero().tolist():
            torch.testing.assert_close(got[b, i], expect, **TOL)
    if not c["need_weights"]:
        assert got_w is None
        return
    assert got_w.shape == ((B, T, S) if c["average"] else (B, H, T, S))
    if c["average"]:
        torch.testing.assert_close(got_w[~dead_any], want_w[~dead_any], **TOL)
    else:
        torch.testing.assert_close(got_w[~dead_head], want_w[~dead_head], **TOL)
        assert (got_w[dead_head] == 0).all()
