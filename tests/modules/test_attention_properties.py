"""Property-based checks (hypothesis) of attention and masks: random shapes, masks and padding.

Invariants: finite inputs give finite outputs (no NaN, even with all-masked rows), all-masked rows are
exactly zero, the fast path equals the reference, and masks from lengths match masks from ids.
Example counts are kept small so the file runs in seconds.
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.modules.attention import reference_attention, scaled_dot_product_attention
from attnkit.modules.masks import causal_mask, padding_mask

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)


@st.composite
def attention_case(draw):
    B, K = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    H = K * draw(st.integers(1, 2))
    T, S, D = draw(st.integers(1, 6)), draw(st.integers(1, 6)), draw(st.sampled_from([2, 4, 8]))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(B, H, T, D, generator=g), torch.randn(B, K, S, D, generator=g), torch.randn(B, K, S, D, generator=g)
    kw = {"enable_gqa": K != H, "is_causal": draw(st.booleans())}
    form = draw(st.sampled_from(["none", "2d", "3d", "4d", "float"]))
    p = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))  # 1.0: every key masked
    if form == "2d":
        kw["attn_mask"] = torch.rand(T, S, generator=g) < p
    elif form == "3d":
        kw["attn_mask"] = torch.rand(B, T, S, generator=g) < p
    elif form == "4d":
        kw["attn_mask"] = torch.rand(B, draw(st.sampled_from([1, H])), T, S, generator=g) < p
    elif form == "float":
        kw["attn_mask"] = torch.randn(T, S, generator=g).masked_fill(torch.rand(T, S, generator=g) < p, float("-inf"))
    if draw(st.booleans()):
        lengths = [draw(st.integers(0, S)) for _ in range(B)]  # 0: a row of only padding
        kw["key_padding_mask"] = padding_mask(lengths, max_len=S)
    return q, k, v, kw


def _blocked(kw, B, H, T, S):
    """(B, H, T, S) bool: which keys each query may not attend, from the same rules, spelled out."""
    blocked = torch.zeros(B, H, T, S, dtype=torch.bool)
    m = kw.get("attn_mask")
    if m is not None:
        m = torch.isneginf(m) if m.is_floating_point() else m
        blocked |= m if m.dim() == 4 else (m[:, None] if m.dim() == 3 else m[None, None])
    if kw.get("key_padding_mask") is not None:
        blocked |= kw["key_padding_mask"][:, None, None, :]
    if kw["is_causal"]:
        blocked |= causal_mask(T, S)[None, None]
    return blocked


@SETTINGS
@given(attention_case())
def test_finite_in_finite_out_dead_rows_zero_and_paths_agree(case):
    q, k, v, kw = case
    B, H, T, _ = q.shape
    S = k.shape[2]
    ref, weights = reference_attention(q, k, v, **kw)
    fast, _ = scaled_dot_product_attention(q, k, v, **kw)
    assert torch.isfinite(ref).all() and torch.isfinite(fast).all() and torch.isfinite(weights).all()
    dead = _blocked(kw, B, H, T, S).all(dim=-1)  # (B, H, T)
    assert (ref[dead] == 0).all() and (fast[dead] == 0).all() and (weights[dead] == 0).all()
    sums = weights.sum(-1)[~dead]
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0)
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-4)


@SETTINGS
@given(st.lists(st.integers(0, 7), min_size=1, max_size=5), st.integers(0, 3))
def test_padding_mask_from_lengths_equals_from_ids(lengths, extra):
    S = max(lengths) + extra
    ids = torch.full((len(lengths), S), 0, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.arange(1, n + 1)
    from_lengths = padding_mask(lengths, max_len=S)
    assert torch.equal(from_lengths, padding_mask(ids=ids, pad_id=0))
    assert from_lengths.sum().item() == len(lengths) * S - sum(lengths)


@SETTINGS
@given(st.integers(1, 8), st.integers(0, 8))
def test_causal_mask_is_bottom_right_aligned(T, extra):
    S = T + extra
    m = causal_mask(T, S)
    for i in range(T):
        assert m[i].tolist() == [j > i + extra for j in range(S)]


@SETTINGS
@given(st.integers(1, 3), st.lists(st.integers(1, 4), min_size=1, max_size=4), st.booleans(), st.integers(0, 2**16),
       st.lists(st.integers(0, 3), min_size=3, max_size=3))
def test_cached_chunks_equal_one_causal_pass(B, chunks, rope, seed, pads):
    """Self-attention fed chunk by chunk through a KV cache = one causal pass (with left padding)."""
    from attnkit.modules.multi_head_attention import MultiHeadAttention
    from attnkit.modules.rotary import RotaryEmbedding

    torch.manual_seed(seed)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2, rotary=RotaryEmbedding(4) if rope else None).eval()
    T = sum(chunks)
    x = torch.randn(B, T, 16)
    pad = padding_mask([T - min(p, T - 1) for p in pads[:B]], max_len=T).flip(1)  # left padding, >= 1 real token
    positions = ((~pad).long().cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        full, _ = mha(x, is_causal=True, key_padding_mask=pad, position_ids=positions)
        cache, outs, start = mha.new_cache(B, T), [], 0
        for n in chunks:
            end = start + n
            out, _ = mha(x[:, start:end], is_causal=True, key_padding_mask=pad[:, :end], kv_cache=cache,
                         position_ids=positions[:, start:end])
            outs.append(out)
            start = end
    real = ~pad  # padding query rows attend only padding keys: all-masked, zero in both
    torch.testing.assert_close(torch.cat(outs, 1)[real], full[real], atol=1e-5, rtol=1e-4)
    assert torch.isfinite(full).all()
