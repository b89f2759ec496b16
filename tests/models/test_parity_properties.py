"""Property-based parity (hypothesis) of the models against their references, on drawn small configurations that
the fixed-case tests (``tests/interop/test_torch_nn.py``, ``tests/interop/test_hf.py``) leave out.

* ``EncoderDecoder`` (``attnkit.interop.torch_nn.from_torch``) and ``torch.nn.Transformer``: widths, heads, layer
  counts, ``norm_first``, relu/gelu, bias on/off, ``batch_first`` both ways, ``layer_norm_eps``, bool/float
  ``src_mask``/``tgt_mask``/``memory_mask``, padding masks, ``tgt_is_causal`` both ways (attnkit's decoder is
  causal by default and combines an explicit ``tgt_mask`` with it: torch gets the combined mask), with and without
  autograd (torch's encoder takes its nested-tensor fast path only without it).
* ``GPT`` (``attnkit.interop.hf.from_hf``) and transformers' ``GPT2LMHeadModel`` / ``LlamaForCausalLM``: widths, heads,
  grouped-query ratios, a free ``head_dim``, ``rope_theta``, activations, biases, tied/untied embeddings, left or
  right padding with an attention mask and explicit positions, and KV-cache decoding (prefill, then one token at a time,
  appended or written into ``cache_position`` slots) against the full forward.

Float64 (the reference's weights are float32 values, exact in float64). torch.nn parity is to rounding (1e-9); HF's
Llama computes its RoPE tables in float32 whatever the model dtype (as attnkit's ``RotaryEmbedding`` does), so HF
parity is checked relative to the logits' scale.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attnkit.interop.torch_nn import from_torch
from attnkit.modules.masks import causal_mask
from helpers import random_hf_causal_lm, spread_weights

TOL = dict(rtol=1e-9, atol=1e-9)


def _additive(mask: torch.Tensor) -> torch.Tensor:
    if mask.is_floating_point():
        return mask
    return torch.zeros(mask.shape, dtype=torch.float64).masked_fill(mask, float("-inf"))


def _random_mask(g, shape, kind, p):
    """A bool or float ``shape`` mask; key 0 is always allowed so no query row is fully masked (torch: NaN)."""
    blocked = torch.rand(shape, generator=g) < p
    blocked[..., 0] = False
    if kind == "bool":
        return blocked
    return torch.randn(shape, generator=g, dtype=torch.float64).masked_fill(blocked, float("-inf"))


# ---------------------------------------------------------------------------------------------------- nn.Transformer
@st.composite
def transformer_case(draw):
    H = draw(st.sampled_from([1, 2, 4]))
    return dict(
        H=H, E=H * draw(st.sampled_from([2, 4])), F=draw(st.sampled_from([3, 8])),
        enc=draw(st.integers(1, 2)), dec=draw(st.integers(1, 2)),
        norm_first=draw(st.booleans()), activation=draw(st.sampled_from(["relu", "gelu"])), bias=draw(st.booleans()),
        batch_first=draw(st.booleans()), eps=draw(st.sampled_from([1e-5, 1e-3])),
        B=draw(st.integers(1, 3)), S=draw(st.integers(1, 6)), T=draw(st.integers(1, 5)),
        src_mask=draw(st.sampled_from([None, "bool", "float"])),
        tgt_mask=draw(st.sampled_from([None, "bool", "float"])),
        memory_mask=draw(st.sampled_from([None, "bool", "float"])), padding=draw(st.booleans()),
        tgt_is_causal=draw(st.booleans()), grad=draw(st.booleans()), p=draw(st.sampled_from([0.2, 0.5])),
        seed=draw(st.integers(0, 2**16)),
    )


@settings(max_examples=40, deadline=None, derandomize=True)
@given(transformer_case())
def test_encoder_decoder_matches_torch_transformer(c):
    B, S, T, E = c["B"], c["S"], c["T"], c["E"]
    g = torch.Generator().manual_seed(c["seed"])
    ref = nn.Transformer(E, c["H"], num_encoder_layers=c["enc"], num_decoder_layers=c["dec"], dim_feedforward=c["F"],
                         dropout=0.0, activation=c["activation"], layer_norm_eps=c["eps"], batch_first=c["batch_first"],
                         norm_first=c["norm_first"], bias=c["bias"], dtype=torch.float64)
    spread_weights(ref, std=0.4, seed=c["seed"]).eval()
    ours = from_torch(ref).eval()
    assert next(ours.parameters()).dtype == torch.float64

    src = torch.randn(B, S, E, generator=g, dtype=torch.float64)
    tgt = torch.randn(B, T, E, generator=g, dtype=torch.float64)
    # the masks use each kind consistently (torch refuses a bool padding mask beside a float attn_mask)
    src_mask = None if c["src_mask"] is None else _random_mask(g, (S, S), c["src_mask"], c["p"])
    memory_mask = None if c["memory_mask"] is None else _random_mask(g, (T, S), c["memory_mask"], c["p"])
    tgt_mask = None if c["tgt_mask"] is None else _random_mask(g, (T, T), c["tgt_mask"], c["p"])
    src_kpm = tgt_kpm = None
    if c["padding"]:  # right padding, at least one real position per row
        src_len = torch.randint(1, S + 1, (B,), generator=g)
        tgt_len = torch.randint(1, T + 1, (B,), generator=g)
        src_kpm = torch.arange(S)[None, :] >= src_len[:, None]
        tgt_kpm = torch.arange(T)[None, :] >= tgt_len[:, None]

    torch_tgt_mask = tgt_mask
    if c["tgt_is_causal"]:  # attnkit: causal combined with tgt_mask
        torch_tgt_mask = causal_mask(T) if tgt_mask is None else _additive(tgt_mask) + _additive(causal_mask(T))
        if tgt_mask is not None and tgt_mask.dtype == torch.bool:
            torch_tgt_mask = tgt_mask | causal_mask(T)

    def like(mask, other):  # torch wants a padding mask of its attn_mask's kind
        if mask is None or other is None or not other.is_floating_point():
            return mask
        return _additive(mask)

    def t(a):
        return a if c["batch_first"] else a.transpose(0, 1)

    # torch 2.13's fused encoder-layer fast path (eval, no autograd, batch_first) gives NaN with any float src_mask
    # (``nn.TransformerEncoderLayer(4, 2, 3, batch_first=True).eval()`` under no_grad, ``src_mask=torch.randn(S, S)``):
    # torch's bug, not a reference; its plain path (autograd on) is the reference there
    with torch.set_grad_enabled(c["grad"] or c["src_mask"] == "float"):
        want = ref(t(src), t(tgt), src_mask=src_mask, tgt_mask=torch_tgt_mask, memory_mask=memory_mask,
                   src_key_padding_mask=like(src_kpm, src_mask), tgt_key_padding_mask=like(tgt_kpm, torch_tgt_mask),
                   memory_key_padding_mask=like(src_kpm, memory_mask))
        got = ours(src, tgt, src_mask=src_mask, tgt_mask=tgt_mask, memory_mask=memory_mask,
                   src_key_padding_mask=src_kpm, tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=src_kpm,
                   tgt_is_causal=c["tgt_is_causal"])
    torch.testing.assert_close(got, t(want), **TOL)
    if not c["tgt_is_causal"]:
        return
    # the decoder with its cache, one target position at a time (each mask cut to the query and the keys so far)
    with torch.no_grad():
        memory = ours.encoder(src, src_mask, src_kpm)
        cache = ours.new_cache(B, T, memory_len=S)
        steps = [ours.decoder(tgt[:, i:i + 1], memory, None if tgt_mask is None else tgt_mask[i:i + 1, :i + 1],
                              None if memory_mask is None else memory_mask[i:i + 1],
                              None if tgt_kpm is None else tgt_kpm[:, :i + 1], src_kpm, True, cache=cache)
                 for i in range(T)]
    torch.testing.assert_close(torch.cat(steps, dim=1), t(want), **TOL)


# ---------------------------------------------------------------------------------------------------- HF
transformers = pytest.importorskip("transformers")


@st.composite
def hf_case(draw):
    family = draw(st.sampled_from(["gpt2", "llama"]))
    H = draw(st.sampled_from([1, 2, 4]))
    c = dict(family=family, V=draw(st.integers(11, 40)), layers=draw(st.integers(1, 2)), H=H,
             tied=draw(st.booleans()), B=draw(st.integers(1, 3)), T=draw(st.integers(2, 9)),
             padding=draw(st.sampled_from(["none", "left", "right"])), prefill=draw(st.integers(1, 8)),
             seed=draw(st.integers(0, 2**16)))
    if family == "gpt2":
        c.update(D=draw(st.sampled_from([2, 4, 8])), F=draw(st.sampled_from([None, 12])),
                 act=draw(st.sampled_from(["gelu_new", "gelu", "relu", "silu", "tanh"])),
                 eps=draw(st.sampled_from([1e-5, 1e-3])))
    else:
        K = draw(st.sampled_from([k for k in (1, 2, 4) if H % k == 0]))
        D = draw(st.sampled_from([2, 4, 8]))
        c.update(K=K, D=D, C=draw(st.sampled_from([H * D, 12])), F=draw(st.sampled_from([8, 20])),
                 theta=draw(st.sampled_from([10000.0, 500.0, 1e6])), bias=draw(st.booleans()),
                 act=draw(st.sampled_from(["silu", "gelu"])), eps=draw(st.sampled_from([1e-6, 1e-3])))
    return c


@settings(max_examples=25, deadline=None, derandomize=True)
@given(hf_case())
def test_gpt_matches_transformers_with_padding_and_cache(c):
    hf, ours = random_hf_causal_lm(c)
    cfg = ours.config
    assert cfg.tie_embeddings == c["tied"]
    if c["family"] == "llama":
        assert (cfg.kv_heads, cfg.head_size, cfg.rope_theta) == (c["K"], c["D"], c["theta"])
    g = torch.Generator().manual_seed(c["seed"])
    B, T = c["B"], c["T"]
    idx = torch.randint(0, c["V"], (B, T), generator=g)
    pads = torch.randint(0, T, (B,), generator=g) if c["padding"] != "none" else torch.zeros(B, dtype=torch.long)
    if c["padding"] == "right":
        pad = torch.arange(T)[None, :] >= T - pads[:, None]  # (B, T) True = padding
        position_ids = torch.arange(T)[None, :].expand(B, T)
    else:  # on the left, positions counted from the first real token
        pad = torch.arange(T)[None, :] < pads[:, None]
        position_ids = (torch.arange(T)[None, :] - pads[:, None]).clamp(min=0)
    real = ~pad
    with torch.no_grad():
        want = hf(input_ids=idx, attention_mask=real.long(), position_ids=position_ids).logits
        got = ours(idx, key_padding_mask=pad if c["padding"] != "none" else None, position_ids=position_ids)
        # the same positions by default: counted from each row's first real token
        got_default = ours(idx, key_padding_mask=pad if c["padding"] != "none" else None)
        # prefill, then one token at a time through the cache
        n = min(c["prefill"], T)
        cache = ours.new_cache(B, T)
        steps = [ours(idx[:, :n], key_padding_mask=pad[:, :n], cache=cache)]
        for i in range(n, T):
            steps.append(ours(idx[:, i:i + 1], key_padding_mask=pad[:, :i + 1], cache=cache))
        cached = torch.cat(steps, dim=1)
        # the fixed-shape decoding step (torch.compile's): slots given by cache_position, masks over all max_len slots
        cache = ours.new_cache(B, T)
        steps = [ours(idx[:, :n], key_padding_mask=pad, cache=cache, cache_position=torch.arange(n))]
        for i in range(n, T):
            steps.append(ours(idx[:, i:i + 1], key_padding_mask=pad, cache=cache, cache_position=torch.tensor([i])))
        slotted = torch.cat(steps, dim=1)
    scale = want[real].abs().max()
    assert want[real].std() > 0.01  # logits not all equal: the comparison is not vacuous
    tol = dict(rtol=0.0, atol=1e-6 * float(scale)) if c["family"] == "llama" else TOL
    torch.testing.assert_close(got[real], want[real], **tol)
    torch.testing.assert_close(got_default[real], got[real], **TOL)
    torch.testing.assert_close(cached[real], got[real], **TOL)
    torch.testing.assert_close(slotted[real], got[real], **TOL)
    assert torch.isfinite(got).all() and torch.isfinite(cached).all()
