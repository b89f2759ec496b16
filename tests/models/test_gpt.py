"""GPT (decoder-only): GPT-2 and Llama configurations, KV cache, left padding, input validation,
gradients, initialisation, naming."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.models import GPT, GPTCache, GPTConfig, build_model, get_preset
from helpers import assert_close



def _model(cfg, spread):
    return spread(build_model(cfg)).eval()


# --------------------------------------------------------------------------- shapes and structure
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_forward_shape_and_int32_ids(kind, tiny_gpt_config, spread):
    model = _model(tiny_gpt_config(kind), spread)
    idx = torch.randint(0, 61, (3, 9))
    logits = model(idx)
    assert logits.shape == (3, 9, 61) and logits.dtype == torch.float32
    torch.testing.assert_close(model(idx.to(torch.int32)), logits)


def test_gpt2_and_llama_layouts(tiny_gpt_config):
    g = build_model(tiny_gpt_config("gpt2"))
    keys = set(g.state_dict())
    for k in ["wte.weight", "wpe.weight", "blocks.0.ln_1.weight", "blocks.0.ln_1.bias", "blocks.0.attn.qkv_proj.weight",
              "blocks.0.attn.qkv_proj.bias", "blocks.0.attn.out_proj.weight", "blocks.0.ln_2.weight",
              "blocks.0.mlp.w_in.weight", "blocks.0.mlp.w_out.bias", "ln_f.weight", "ln_f.bias", "lm_head.weight"]:
        assert k in keys, k
    assert g.lm_head.weight is g.wte.weight and g.rotary is None
    assert g.blocks[0].attn.qkv_proj.weight.shape == (3 * 32, 32)

    ll = build_model(tiny_gpt_config("llama"))
    keys = set(ll.state_dict())
    assert "wpe.weight" not in keys and ll.wpe is None
    assert "blocks.1.mlp.w_gate.weight" in keys
    assert not any(k.endswith("bias") for k in keys)  # Llama: no biases, RMSNorm has none either
    assert ll.lm_head.weight is not ll.wte.weight
    # GQA: 4 query heads, 2 kv heads of width 8 -> (4 + 2*2) * 8 output rows
    assert ll.blocks[0].attn.qkv_proj.weight.shape == ((4 + 2 * 2) * 8, 32)
    assert ll.blocks[0].attn.rotary is ll.rotary  # one shared rotary table
    assert not any("rotary" in k or "cos" in k for k in keys)  # tables are not checkpointed


@pytest.mark.parametrize("position", ["sinusoidal", "none"])
def test_other_position_kinds_run(position, tiny_gpt_config, spread):
    model = _model(tiny_gpt_config("gpt2", position=position), spread)
    idx = torch.randint(0, 61, (2, 7))
    assert torch.isfinite(model(idx)).all()
    full = model(idx)
    cache = model.new_cache(2, 8)
    inc = torch.cat([model(idx[:, :3], cache=cache), model(idx[:, 3:], cache=cache)], dim=1)
    assert_close(inc, full, "float32")


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_causality(kind, tiny_gpt_config, spread):
    model = _model(tiny_gpt_config(kind), spread)
    idx = torch.randint(0, 61, (2, 10))
    changed = idx.clone()
    changed[:, 6] = (changed[:, 6] + 1) % 61
    a, b = model(idx), model(changed)
    assert_close(a[:, :6], b[:, :6], "float32")  # the past never sees the future
    assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-3  # but the change does propagate forward


# --------------------------------------------------------------------------- KV cache
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_incremental_decoding_equals_full_forward(kind, tiny_gpt_config, spread):
    model = _model(tiny_gpt_config(kind), spread)
    idx = torch.randint(0, 61, (2, 12))
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache(2, 16)
        assert isinstance(cache, GPTCache) and cache.length == 0 and len(cache) == 2
        pieces = [model(idx[:, :5], cache=cache)]  # prompt
        pieces += [model(idx[:, t:t + 1], cache=cache) for t in range(5, 9)]  # one token at a time
        pieces.append(model(idx[:, 9:], cache=cache))  # a chunk of 3 after the cache
        assert cache.length == 12
    assert_close(torch.cat(pieces, dim=1), full, "float32")


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_cache_position_decoding_equals_full_forward(kind, tiny_gpt_config, spread):
    """Writing into given cache slots and attending over all max_len slots (the fixed-shape path a
    compiled step uses) gives the full forward's logits; cache.length is left alone."""
    model = _model(tiny_gpt_config(kind), spread)
    idx = torch.randint(0, 61, (2, 12))
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache(2, 16)
        # stale values in the unfilled slots must not leak in (they are masked, not zero)
        for layer in cache:
            layer.k_cache.normal_()
            layer.v_cache.normal_()
        pieces = [model(idx[:, :5], cache=cache)]
        for t in range(5, 9):
            pieces.append(model(idx[:, t:t + 1], cache=cache, cache_position=torch.tensor([t])))
        # several new tokens at once: causal among themselves, all earlier slots visible
        pieces.append(model(idx[:, 9:], cache=cache, cache_position=torch.arange(9, 12)))
        assert cache.length == 5
    assert_close(torch.cat(pieces, dim=1), full, "float32")


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_cache_position_with_left_padding(kind, tiny_gpt_config, spread):
    """Left-padded rows: the padding mask covers all max_len slots; positions come from the mask."""
    model = _model(tiny_gpt_config(kind), spread)
    rows = [torch.randint(1, 61, (n,)) for n in (6, 2)]
    T, S = 6, 12
    idx = torch.zeros(2, T, dtype=torch.long)
    mask = torch.ones(2, T, dtype=torch.bool)
    for b, r in enumerate(rows):
        idx[b, T - len(r):] = r
        mask[b, T - len(r):] = False
    new = torch.randint(1, 61, (2, 3))
    with torch.no_grad():
        cache = model.new_cache(2, S)
        model(idx, key_padding_mask=mask, cache=cache)
        slot_mask = torch.nn.functional.pad(mask, (0, S - T))  # (B, S): later slots are real tokens
        outs = [model(new[:, t:t + 1], key_padding_mask=slot_mask, cache=cache, cache_position=torch.tensor([T + t]))
                for t in range(3)]
        outs = torch.cat(outs, dim=1)
        for b, r in enumerate(rows):
            alone = model(torch.cat([r, new[b]])[None])[0, -3:]
            assert_close(outs[b], alone, "float32")


def test_rejects_bad_cache_position(tiny_gpt_config):
    model = build_model(tiny_gpt_config("gpt2")).eval()
    idx = torch.randint(0, 61, (1, 1))
    cache = model.new_cache(1, 8)
    with pytest.raises(ValueError, match="cache_position needs a cache"):
        model(idx, cache_position=torch.tensor([0]))
    with pytest.raises(ValueError, match=r"int64 tensor of shape \(T,\) = \(1,\), got torch.int32 \(1,\)"):
        model(idx, cache=cache, cache_position=torch.tensor([0], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"cache_position must be in \[0, cache.max_len\) = \[0, 8\), got \[8\]"):
        model(idx, cache=cache, cache_position=torch.tensor([8]))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(B, S\) = \(1, 8\)"):
        model(idx, cache=cache, cache_position=torch.tensor([3]), key_padding_mask=torch.zeros(1, 4, dtype=torch.bool))


def test_cache_reorder_follows_the_batch(tiny_gpt_config, spread):
    model = _model(tiny_gpt_config("llama"), spread)
    idx = torch.randint(0, 61, (3, 8))
    index = torch.tensor([2, 0, 0, 1])
    with torch.no_grad():
        cache = model.new_cache(3, 10)
        model(idx[:, :6], cache=cache)
        cache.reorder(index)
        assert cache.batch_size == 4
        step = model(idx[index, 6:], cache=cache)
        expected = model(idx[index])[:, 6:]
    assert_close(step, expected, "float32")
    cache.reset()
    assert cache.length == 0


# --------------------------------------------------------------------------- left padding
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_left_padded_batch_matches_single_rows(kind, tiny_gpt_config, spread):
    model = _model(tiny_gpt_config(kind), spread)
    rows = [torch.randint(1, 61, (n,)) for n in (7, 4, 1)]
    T = max(len(r) for r in rows)
    idx = torch.zeros(len(rows), T, dtype=torch.long)
    mask = torch.ones(len(rows), T, dtype=torch.bool)
    for b, r in enumerate(rows):
        idx[b, T - len(r):] = r
        mask[b, T - len(r):] = False
    with torch.no_grad():
        logits = model(idx, key_padding_mask=mask)
        assert torch.isfinite(logits).all()  # fully padded query rows give zeros, not NaN
        for b, r in enumerate(rows):
            alone = model(r[None])
            assert_close(logits[b, T - len(r):], alone[0], "float32")

        # the same with a cache: prompt, then 3 new tokens per row (mask grows with the cache)
        new = torch.randint(1, 61, (len(rows), 3))
        cache = model.new_cache(len(rows), T + 3)
        model(idx, key_padding_mask=mask, cache=cache)
        outs = []
        for t in range(3):
            mask = torch.cat([mask, torch.zeros(len(rows), 1, dtype=torch.bool)], dim=1)
            outs.append(model(new[:, t:t + 1], key_padding_mask=mask, cache=cache))
        outs = torch.cat(outs, dim=1)
        for b, r in enumerate(rows):
            alone = model(torch.cat([r, new[b]])[None])[0, -3:]
            assert_close(outs[b], alone, "float32")


def test_explicit_position_ids(tiny_gpt_config, spread):
    model = _model(tiny_gpt_config("gpt2"), spread)
    idx = torch.randint(0, 61, (2, 5))
    default = model(idx)
    torch.testing.assert_close(model(idx, position_ids=torch.arange(5)), default)
    torch.testing.assert_close(model(idx, position_ids=torch.arange(5).expand(2, 5)), default)
    shifted = model(idx, position_ids=torch.arange(3, 8))
    assert (shifted - default).abs().max() > 1e-3


# --------------------------------------------------------------------------- fast path
def test_training_forward_builds_no_causal_mask(tiny_gpt_config, monkeypatch):
    """Without padding, causality comes from the fused kernel's is_causal: no T x T mask is built."""
    import attnkit.modules.attention as attention

    def forbidden(*args, **kwargs):
        raise AssertionError("a causal mask tensor was materialised on the training fast path")

    monkeypatch.setattr(attention, "causal_mask", forbidden)
    for kind in ("gpt2", "llama"):
        model = build_model(tiny_gpt_config(kind)).train()
        loss = model(torch.randint(0, 61, (2, 16))).logsumexp(-1).mean()
        loss.backward()
        # an all-False padding mask is the same as none: still the fast path
        model(torch.randint(0, 61, (2, 16)), key_padding_mask=torch.zeros(2, 16, dtype=torch.bool))


# --------------------------------------------------------------------------- gradients for every family
@pytest.mark.parametrize("name", ["gpt2", "gpt2-medium", "gpt2-seed002", "gpt2-xl-seed002", "llama-tiny",
                                  "smollm2-135m", "char-small"])
def test_backward_finite_for_every_gpt_preset_family(name):
    # the preset's architecture at a tiny size (keep head counts, shrink widths)
    cfg = get_preset(name)
    shrink = dict(vocab_size=50, block_size=16, n_layer=2, dropout=0.1)
    if cfg.n_kv_head is not None:
        shrink.update(n_head=cfg.n_head, n_kv_head=cfg.n_kv_head, n_embd=cfg.n_head * 4, ffn_hidden=24)
    else:
        shrink.update(n_head=4, n_embd=16)
    cfg = cfg.replace(**shrink)
    model = build_model(cfg).train()
    idx = torch.randint(0, 50, (2, 16))
    logits = model(idx)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 50), idx[:, 1:].reshape(-1))
    loss.backward()
    assert torch.isfinite(loss)
    for n, p in model.named_parameters():
        assert p.grad is not None, n
        assert torch.isfinite(p.grad).all(), n
    assert any(p.grad.abs().sum() > 0 for p in model.parameters())


# --------------------------------------------------------------------------- initialisation
def test_gpt2_style_initialisation():
    cfg = get_preset("gpt2", vocab_size=500, block_size=64, n_layer=8, n_head=4, n_embd=64)
    model = build_model(cfg)
    assert abs(model.wte.weight.std().item() - 0.02) < 0.002
    assert abs(model.wpe.weight.std().item() - 0.02) < 0.003
    resid = 0.02 / math.sqrt(2 * 8)
    out_w = torch.cat([b.attn.out_proj.weight.flatten() for b in model.blocks])
    down_w = torch.cat([b.mlp.w_out.weight.flatten() for b in model.blocks])
    assert abs(out_w.std().item() - resid) < 0.1 * resid
    assert abs(down_w.std().item() - resid) < 0.1 * resid
    qkv = torch.cat([b.attn.qkv_proj.weight.flatten() for b in model.blocks])
    assert abs(qkv.std().item() - 0.02) < 0.002
    assert all((b.attn.qkv_proj.bias == 0).all() and (b.ln_1.weight == 1).all() for b in model.blocks)


# --------------------------------------------------------------------------- bad inputs
@pytest.fixture
def gpt(tiny_gpt_config):
    return build_model(tiny_gpt_config("gpt2")).eval()  # vocab 61, block 24


def test_rejects_token_id_at_vocab_size(gpt):
    with pytest.raises(ValueError, match=r"\[0, vocab_size\) = \[0, 61\), got id 61"):
        gpt(torch.tensor([[1, 2, 61]]))


def test_rejects_negative_token_id(gpt):
    with pytest.raises(ValueError, match=r"vocab_size\) = \[0, 61\), got id -3"):
        gpt(torch.tensor([[1, -3, 2]]))


def test_rejects_float_ids(gpt):
    with pytest.raises(ValueError, match="torch.int64 or torch.int32, got torch.float32"):
        gpt(torch.rand(1, 4))


def test_rejects_one_dimensional_ids(gpt):
    with pytest.raises(ValueError, match=r"shape \(B, T\), got 1-D shape \(4,\)"):
        gpt(torch.tensor([1, 2, 3, 4]))


def test_rejects_sequence_longer_than_block_size(gpt):
    with pytest.raises(ValueError, match="block_size = 24 with learned positions, got 25"):
        gpt(torch.randint(0, 61, (1, 25)))


def test_rejects_cache_going_past_block_size(gpt):
    cache = gpt.new_cache(1)
    gpt(torch.randint(0, 61, (1, 20)), cache=cache)
    with pytest.raises(ValueError, match=r"cached 20 \+ new 5 = 25"):
        gpt(torch.randint(0, 61, (1, 5)), cache=cache)


def test_rejects_padding_mask_of_wrong_shape(gpt):
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(B, S\) = \(2, 5\).*got \(2, 4\)"):
        gpt(torch.randint(0, 61, (2, 5)), key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))


def test_rejects_padding_mask_of_wrong_dtype(gpt):
    with pytest.raises(ValueError, match="bool tensor .* got torch.int64"):
        gpt(torch.randint(0, 61, (2, 5)), key_padding_mask=torch.zeros(2, 5, dtype=torch.long))


def test_rejects_cache_with_other_batch_size(gpt):
    cache = gpt.new_cache(3, 10)
    with pytest.raises(ValueError, match="cache batch size must equal idx batch size B = 2, got 3"):
        gpt(torch.randint(0, 61, (2, 5)), cache=cache)


def test_rejects_position_ids_of_wrong_shape(gpt):
    with pytest.raises(ValueError, match=r"position_ids must have shape \(B, T\) = \(2, 5\) or \(T,\) = \(5,\), got \(4,\)"):
        gpt(torch.randint(0, 61, (2, 5)), position_ids=torch.arange(4))


def test_rejects_cache_larger_than_learned_positions(gpt):
    with pytest.raises(ValueError, match="max_len must be <= block_size = 24 with learned positions, got 30"):
        gpt.new_cache(1, 30)


def test_rejects_wrong_config_type(tiny_transformer_config):
    with pytest.raises(ValueError, match="GPT expects a GPTConfig, got TransformerConfig"):
        GPT(tiny_transformer_config())


@pytest.mark.parametrize("position", ["learned", "rope"])
def test_forward_traces_as_one_graph_for_torch_compile(position):
    """Input checks must not force host syncs (graph breaks) when the model is compiled."""
    import torch._dynamo

    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=1, n_head=2, n_embd=16, position=position)
    model = GPT(cfg)
    idx = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    report = torch._dynamo.explain(model)(idx)
    assert report.graph_break_count == 0, [str(b.reason)[:120] for b in report.break_reasons]
    assert report.graph_count == 1


def test_attention_dropout_reaches_every_attention_layer():
    from attnkit.modules.multi_head_attention import MultiHeadAttention

    model = GPT(GPTConfig(vocab_size=30, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.2,
                          attention_dropout=0.0))
    assert [m.dropout for m in model.modules() if isinstance(m, MultiHeadAttention)] == [0.0, 0.0]
    assert model.blocks[0].resid_drop.p == 0.2
