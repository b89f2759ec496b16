"""MultiHeadAttention against torch.nn.MultiheadAttention(batch_first=True), plus caches, GQA and validation.

Tolerance: outputs and attention weights agree with torch within atol=rtol=1e-5 (float32).
Weights are copied by hand here (torch's ``in_proj_weight`` rows are [q; k; v]).
"""

import pytest
import torch
from torch import nn

from attnkit.modules import KVCache, MultiHeadAttention, RotaryEmbedding, causal_mask
from helpers import TOLERANCES, assert_close

TOL = TOLERANCES["float32"]
B, T, S, E, H = 2, 5, 7, 16, 4


def copy_from_torch(ref: nn.MultiheadAttention, ours: MultiHeadAttention) -> None:
    """Copy torch.nn.MultiheadAttention weights into our layout (by hand, for the test)."""
    E = ref.embed_dim
    with torch.no_grad():
        if ref._qkv_same_embed_dim:
            w = ref.in_proj_weight  # (3E, E) rows [q; k; v]
            if ours.self_attention:
                ours.qkv_proj.weight.copy_(w)
            else:
                ours.q_proj.weight.copy_(w[:E])
                ours.kv_proj.weight.copy_(w[E:])
        else:
            ours.q_proj.weight.copy_(ref.q_proj_weight)
            if ours.kdim == ours.vdim:
                ours.kv_proj.weight.copy_(torch.cat([ref.k_proj_weight, ref.v_proj_weight]))
            else:
                ours.k_proj.weight.copy_(ref.k_proj_weight)
                ours.v_proj.weight.copy_(ref.v_proj_weight)
        if ref.in_proj_bias is not None:
            b = ref.in_proj_bias  # (3E,) [q; k; v]
            if ours.self_attention:
                ours.qkv_proj.bias.copy_(b)
            else:
                ours.q_proj.bias.copy_(b[:E])
                if ours.kdim == ours.vdim:
                    ours.kv_proj.bias.copy_(b[E:])
                else:
                    ours.k_proj.bias.copy_(b[E:2 * E])
                    ours.v_proj.bias.copy_(b[2 * E:])
        ours.out_proj.weight.copy_(ref.out_proj.weight)
        if ref.out_proj.bias is not None:
            ours.out_proj.bias.copy_(ref.out_proj.bias)


def make_pair(kind: str, bias: bool = True):
    """(torch module, our module, kdim, vdim) with random weights (biases too: torch inits them to 0)."""
    kdim, vdim = {"self": (E, E), "cross": (E, E), "cross_kv": (12, 12), "cross_kdim_vdim": (12, 10)}[kind]
    ref = nn.MultiheadAttention(E, H, bias=bias, kdim=kdim, vdim=vdim, batch_first=True).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    ours = MultiHeadAttention(E, H, kdim=kdim, vdim=vdim, bias=bias, self_attention=(kind == "self")).eval()
    copy_from_torch(ref, ours)
    return ref, ours, kdim, vdim


def random_bool_mask(*shape):
    m = torch.rand(shape) < 0.35
    m[..., 0] = False  # every query keeps key 0, so no row is fully masked (torch would give NaN)
    return m


def random_float_mask(*shape):
    m = torch.randn(shape)
    m = m.masked_fill(torch.rand(shape) < 0.3, float("-inf"))
    m[..., 0] = 0.5  # key 0 always allowed
    return m


MASKS = ["none", "bool2d", "float2d", "bool3d", "float3d", "bool3d_bth", "float3d_bth"]


def build_masks(mask_kind: str, L: int, S_: int):
    """Returns (our attn_mask, torch attn_mask). torch 3-D masks are (B*H, L, S)."""
    if mask_kind == "none":
        return None, None
    make = random_bool_mask if mask_kind.startswith("bool") else random_float_mask
    if mask_kind.endswith("2d"):
        m = make(L, S_)
        return m, m
    if mask_kind.endswith("_bth"):  # ours (B, T, S): the same mask for every head
        m = make(B, L, S_)
        return m, m[:, None].expand(B, H, L, S_).reshape(B * H, L, S_)
    m = make(B, H, L, S_)  # ours (B, H, T, S)
    return m, m.reshape(B * H, L, S_)


@pytest.mark.parametrize("kind", ["self", "cross", "cross_kv", "cross_kdim_vdim"])
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("use_kpm", [False, True])
def test_matches_torch_outputs_and_weights(kind, mask_kind, use_kpm):
    ref, ours, kdim, vdim = make_pair(kind)
    q = torch.randn(B, T, E)
    if kind == "self":
        k = v = q
        S_ = T
    else:
        S_ = S
        k = torch.randn(B, S_, kdim)
        v = torch.randn(B, S_, vdim)
    ours_mask, torch_mask = build_masks(mask_kind, T, S_)
    kpm = None
    if use_kpm:
        lengths = torch.tensor([S_, S_ - 2])
        kpm = torch.arange(S_)[None, :] >= lengths[:, None]  # (B, S) True = padding
    torch_kpm = kpm
    if kpm is not None and ours_mask is not None and ours_mask.is_floating_point():
        # torch wants both masks of one kind; ours mixes a bool padding mask with a float attn_mask
        torch_kpm = torch.zeros(kpm.shape).masked_fill(kpm, float("-inf"))
    for average in (True, False):
        exp_out, exp_w = ref(q, k, v, attn_mask=torch_mask, key_padding_mask=torch_kpm, need_weights=True,
                             average_attn_weights=average)
        out, w = ours(q, None if kind == "self" else k, None if kind == "self" else v, attn_mask=ours_mask,
                      key_padding_mask=kpm, need_weights=True, average_attn_weights=average)
        torch.testing.assert_close(out, exp_out, **TOL)
        torch.testing.assert_close(w, exp_w, **TOL)
        assert w.shape == ((B, T, S_) if average else (B, H, T, S_))
    # the fast path (no weights) gives the same output
    out_fast, w_none = ours(q, None if kind == "self" else k, None if kind == "self" else v, attn_mask=ours_mask,
                            key_padding_mask=kpm)
    assert w_none is None
    torch.testing.assert_close(out_fast, exp_out, **TOL)


@pytest.mark.parametrize("bias", [True, False])
def test_matches_torch_without_bias_and_causal(bias):
    ref, ours, _, _ = make_pair("self", bias=bias)
    x = torch.randn(B, T, E)
    mask = causal_mask(T)
    exp, exp_w = ref(x, x, x, attn_mask=mask, need_weights=True)
    out, w = ours(x, is_causal=True, need_weights=True)
    torch.testing.assert_close(out, exp, **TOL)
    torch.testing.assert_close(w, exp_w, **TOL)
    out2, _ = ours(x, x, x, is_causal=True)  # torch-style call mha(x, x, x)
    torch.testing.assert_close(out2, exp, **TOL)
    if not bias:
        assert ours.qkv_proj.bias is None and ours.out_proj.bias is None


def test_self_attention_weights_on_separate_key_value_match_torch():
    # torch's packed (self-attention) module may also be called with distinct key/value tensors
    ref, ours, _, _ = make_pair("self")
    q, k, v = torch.randn(B, T, E), torch.randn(B, S, E), torch.randn(B, S, E)
    exp, _ = ref(q, k, v)
    out, _ = ours(q, k, v)
    torch.testing.assert_close(out, exp, **TOL)


def test_parameter_layout():
    m = MultiHeadAttention(16, 4, num_kv_heads=2, head_dim=6)
    assert m.qkv_proj.weight.shape == ((4 + 2 * 2) * 6, 16)
    assert m.out_proj.weight.shape == (16, 4 * 6)
    c = MultiHeadAttention(16, 4, kdim=10, vdim=10, self_attention=False, out_dim=9, out_bias=False)
    assert c.q_proj.weight.shape == (16, 16) and c.kv_proj.weight.shape == (32, 10)
    assert c.out_proj.weight.shape == (9, 16) and c.out_proj.bias is None and c.q_proj.bias is not None
    s = MultiHeadAttention(16, 4, kdim=10, vdim=6, self_attention=False)
    assert s.k_proj.weight.shape == (16, 10) and s.v_proj.weight.shape == (16, 6)
    assert not hasattr(s, "kv_proj")


def test_seed000_head_dim_independent_of_embed_dim():
    """Seed 000: MultiHeadAttention(dim_emb, dim_head, dim_out, head_num) = concat of per-head attentions @ W."""
    C, D, Hh, out_dim = 10, 6, 3, 8  # H * D = 18 != C
    m = MultiHeadAttention(C, Hh, head_dim=D, out_dim=out_dim, bias=False).eval()
    x = torch.randn(2, 4, C)
    out, _ = m(x)
    assert out.shape == (2, 4, out_dim)
    # explicit per-head computation from the packed weight
    wq, wk, wv = m.qkv_proj.weight.split(Hh * D)
    heads = []
    for h in range(Hh):
        sl = slice(h * D, (h + 1) * D)
        q, k, v = x @ wq[sl].T, x @ wk[sl].T, x @ wv[sl].T
        heads.append(torch.softmax(q @ k.transpose(-1, -2) / D**0.5, dim=-1) @ v)
    exp = torch.cat(heads, dim=-1) @ m.out_proj.weight.T
    torch.testing.assert_close(out, exp, **TOL)


def gqa_reference(m: MultiHeadAttention, x: torch.Tensor, causal: bool) -> torch.Tensor:
    """GQA written out head by head: query head h uses kv head h // (H // K)."""
    Bx, Tx, _ = x.shape
    Hh, K, D = m.num_heads, m.num_kv_heads, m.head_dim
    q, k, v = m.qkv_proj(x).split([Hh * D, K * D, K * D], dim=-1)
    outs = []
    for h in range(Hh):
        g = h // (Hh // K)
        qh, kh, vh = q[..., h * D:(h + 1) * D], k[..., g * D:(g + 1) * D], v[..., g * D:(g + 1) * D]
        s = qh @ kh.transpose(-1, -2) / D**0.5
        if causal:
            s = s.masked_fill(causal_mask(Tx), float("-inf"))
        outs.append(torch.softmax(s, -1) @ vh)
    return m.out_proj(torch.cat(outs, -1))


@pytest.mark.parametrize("K", [1, 2])
def test_grouped_query_attention_matches_per_head_formula(K):
    m = MultiHeadAttention(16, 4, num_kv_heads=K).eval()
    x = torch.randn(2, 6, 16)
    for need_weights in (False, True):
        out, _ = m(x, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(out, gqa_reference(m, x, True), **TOL)


@pytest.mark.parametrize("K", [4, 2])
@pytest.mark.parametrize("use_rope", [False, True])
def test_kv_cache_incremental_equals_full(K, use_rope):
    rope = RotaryEmbedding(4, max_len=4) if use_rope else None  # small table: growth is exercised too
    m = MultiHeadAttention(16, 4, num_kv_heads=K, rotary=rope).eval()
    x = torch.randn(2, 9, 16)
    full, _ = m(x, is_causal=True)
    cache = m.new_cache(2, 9)
    assert isinstance(cache, KVCache)
    pieces = []
    with torch.no_grad():
        out, _ = m(x[:, :4], is_causal=True, kv_cache=cache)  # prompt of 4 tokens
        pieces.append(out)
        for t in range(4, 9):  # then one token at a time
            out, w = m(x[:, t:t + 1], is_causal=True, kv_cache=cache, need_weights=True)
            assert w.shape == (2, 1, t + 1)
            pieces.append(out)
    assert cache.length == 9
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, **TOL)


def test_rope_left_padding_with_per_row_position_ids():
    """A left-padded row with shifted position_ids gives the same outputs as the unpadded row alone."""
    m = MultiHeadAttention(16, 4, rotary=RotaryEmbedding(4)).eval()
    x = torch.randn(1, 5, 16)
    alone, _ = m(x, is_causal=True)
    pad = 2
    xb = torch.cat([torch.cat([torch.randn(1, pad, 16), x], 1), torch.randn(1, 7, 16)], 0)  # (2, 7, 16)
    kpm = torch.zeros(2, 7, dtype=torch.bool)
    kpm[0, :pad] = True
    position_ids = torch.stack([(torch.arange(7) - pad).clamp(min=0), torch.arange(7)])  # (2, 7)
    out, _ = m(xb, is_causal=True, key_padding_mask=kpm, position_ids=position_ids)
    torch.testing.assert_close(out[0, pad:], alone[0], **TOL)


def test_cross_attention_static_kv_cache_projects_memory_once():
    m = MultiHeadAttention(16, 4, self_attention=False, kdim=12, vdim=12).eval()
    x, mem = torch.randn(2, 4, 16), torch.randn(2, 6, 12)
    kpm = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    full, _ = m(x, mem, mem, key_padding_mask=kpm)
    cache = m.new_cache(2, 6)
    calls = []
    handle = m.kv_proj.register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad():
        steps = [m(x[:, :1], mem, mem, key_padding_mask=kpm, kv_cache=cache, static_kv=True)[0]]
        for t in range(1, 4):
            steps.append(m(x[:, t:t + 1], None, None, key_padding_mask=kpm, kv_cache=cache, static_kv=True)[0])
    handle.remove()
    assert len(calls) == 1 and cache.length == 6
    torch.testing.assert_close(torch.cat(steps, 1), full, **TOL)


def test_attention_dropout_only_in_training():
    m = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 6, 16)
    m.train()
    _, w = m(x, need_weights=True, average_attn_weights=False)
    assert (w == 0).any() and (w != 0).any()  # some weights dropped, some kept
    # survivors are rescaled by 1 / (1 - p): row sums are no longer 1
    assert not torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)))
    out1, _ = m(x)
    out2, _ = m(x)
    assert not torch.allclose(out1, out2)  # fast path uses dropout as well
    m.eval()
    _, w = m(x, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 6), **TOL)
    assert_close(m(x)[0], m(x)[0], "exact")


# ------------------------------------------------------------------ validation: one test per rule
def test_embed_dim_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match=r"embed_dim=10, num_heads=4"):
        MultiHeadAttention(10, 4)


def test_num_heads_not_divisible_by_num_kv_heads():
    with pytest.raises(ValueError, match=r"num_heads=4, num_kv_heads=3"):
        MultiHeadAttention(16, 4, num_kv_heads=3)


def test_query_key_dtype_mismatch():
    m = MultiHeadAttention(16, 4, self_attention=False)
    with pytest.raises(ValueError, match=r"torch.float32, got torch.float64"):
        m(torch.randn(2, 3, 16), torch.randn(2, 5, 16, dtype=torch.float64))


def test_query_key_batch_mismatch():
    m = MultiHeadAttention(16, 4, self_attention=False)
    with pytest.raises(ValueError, match=r"B = 2, got 3"):
        m(torch.randn(2, 3, 16), torch.randn(3, 5, 16))


def test_query_width_mismatch():
    m = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"C=16\), got \(2, 3, 12\)"):
        m(torch.randn(2, 3, 12))


def test_key_padding_mask_shape_checked_through_module():
    m = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"\(B, S\) = \(2, 3\), got \(2, 5\)"):
        m(torch.randn(2, 3, 16), key_padding_mask=torch.zeros(2, 5, dtype=torch.bool))


def test_self_attention_rejects_kdim():
    with pytest.raises(ValueError, match=r"kdim == vdim == embed_dim = 16, got kdim=8"):
        MultiHeadAttention(16, 4, kdim=8)


def test_kv_cache_overflow_through_module():
    m = MultiHeadAttention(16, 4).eval()
    cache = m.new_cache(1, 3)
    with torch.no_grad():
        m(torch.randn(1, 2, 16), kv_cache=cache, is_causal=True)
        with pytest.raises(ValueError, match=r"max_len = 3, cached 2 \+ new 2"):
            m(torch.randn(1, 2, 16), kv_cache=cache, is_causal=True)


@pytest.mark.parametrize("bad", [
    dict(key_padding_mask=torch.zeros(2, 1, dtype=torch.bool)),  # covers the new key only, not cached + new
    dict(attn_mask=torch.zeros(1, 3, dtype=torch.bool)),
    dict(is_causal=None),
], ids=["key_padding_mask", "attn_mask", "is_causal"])
def test_a_refused_step_leaves_the_kv_cache_as_it_was(bad):
    # The new keys/values were appended before attention refused the mask: the cache kept them, and every later
    # step attended that position twice (wrong outputs, no error).
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 4, 16)
    with torch.no_grad():
        full, _ = m(x, is_causal=True)
        cache = m.new_cache(2, 4)
        steps = [m(x[:, :1], kv_cache=cache, is_causal=True)[0]]
        with pytest.raises(ValueError, match=r"shape \(B, S\) = \(2, 2\)|shape \(T, S\) = \(1, 2\)|is_causal must"):
            m(x[:, 1:2], kv_cache=cache, **{"is_causal": True, **bad})
        assert cache.length == 1
        steps += [m(x[:, t:t + 1], kv_cache=cache, is_causal=True)[0] for t in range(1, 4)]
    assert_close(torch.cat(steps, dim=1), full, "float32")


@pytest.mark.parametrize("p", [-0.1, 1.0, "0.1", None])
def test_dropout_must_be_a_probability(p):
    with pytest.raises(ValueError, match=r"^dropout must be a number in \[0, 1\), got "):
        MultiHeadAttention(8, 2, dropout=p)


@pytest.mark.parametrize("kwargs, message", [
    (dict(embed_dim=16.0, num_heads=4), r"embed_dim must be an int >= 1, got 16\.0 \(float\)"),
    (dict(embed_dim=16, num_heads=True), r"num_heads must be an int >= 1, got True \(bool\)"),
    (dict(embed_dim=16, num_heads=4, num_kv_heads=2.0), r"num_kv_heads must be an int >= 1 or None, got 2\.0"),
    (dict(embed_dim=16, num_heads=4, head_dim=0), r"head_dim must be an int >= 1, got 0"),
    (dict(embed_dim=16, num_heads=4, kdim=0, self_attention=False), r"kdim must be an int >= 1, got 0"),
    (dict(embed_dim=16, num_heads=4, out_dim=0), r"out_dim must be an int >= 1, got 0"),
])
def test_sizes_must_be_positive_ints(kwargs, message):
    # a zero width used to build a layer with empty outputs, a float a TypeError inside torch
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**kwargs)


# ------------------------------------------------------------------ adapted projections
@pytest.mark.parametrize("self_attention", [True, False])
def test_separate_key_value_go_through_an_adapted_projection(self_attention):
    # With key != value the packed projection's weight used to be sliced by hand, which skipped a LoRA
    # adapter (and failed on an int8 layer, which has no weight): the adapter must count as after merging.
    from attnkit.modules.lora import apply_lora, merge_lora

    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4, self_attention=self_attention).eval()
    (name,) = apply_lora(m, rank=2, targets=("qkv_proj" if self_attention else "kv_proj",))
    nn.init.normal_(m.get_submodule(name).lora_B)  # a non-zero update
    x, key, value = torch.randn(2, 3, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    with torch.no_grad():
        adapted, _ = m(x, key, value)
        merged, _ = merge_lora(m)(x, key, value)
    assert_close(adapted, merged, "float32")
