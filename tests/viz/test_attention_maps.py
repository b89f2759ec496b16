"""Captured attention weights are the model's real weights: equal to a manual computation and to a direct
``MultiHeadAttention(need_weights=True, average_attn_weights=False)`` call on the layer's input; capturing
leaves the logits (to float rounding) and the model (exactly) unchanged; GPT, Llama-style and encoder-decoder."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.viz import (
    AttentionCapture,
    attention_maps,
    capture_attention,
    select_attention,
    seq2seq_attention_maps,
)
from helpers import assert_close

EXACT = dict(atol=1e-6, rtol=0)  # same arithmetic, same inputs: only rounding of the softmax
LOOSE = dict(atol=1e-5, rtol=0)  # fused kernel vs explicit softmax / cached vs full recomputation


def _ids(T: int, V: int = 41, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, V, (1, T), generator=torch.Generator().manual_seed(seed))


def _record_inputs(modules):
    """Forward hooks storing each module's output (used on ln_1: the attention layer's input)."""
    seen, handles = {}, []
    for name, m in modules.items():
        handles.append(m.register_forward_hook(lambda mod, a, out, name=name: seen.__setitem__(name, out.detach())))
    return seen, handles


# --------------------------------------------------------------------------- GPT
def test_first_layer_equals_the_formula_by_hand(make_gpt):
    model = make_gpt("gpt2")
    ids = _ids(9)
    maps = attention_maps(model, ids)
    assert len(maps) == 2 and maps[0].shape == (4, 9, 9)

    block = model.blocks[0]
    with torch.no_grad():
        x = model.wte(ids) + model.wpe(torch.arange(9))  # (1, T, C) (dropout is off in eval mode)
        h = block.ln_1(x)
        q, k, _ = block.attn.qkv_proj(h).split(32, dim=-1)  # (1, T, C) each
        q = q.view(1, 9, 4, 8).transpose(1, 2)  # (1, H, T, D)
        k = k.view(1, 9, 4, 8).transpose(1, 2)  # (1, H, T, D)
        scores = q @ k.transpose(-2, -1) / math.sqrt(8)  # (1, H, T, T)
        future = torch.triu(torch.ones(9, 9, dtype=torch.bool), diagonal=1)
        expected = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)[0]  # (H, T, T)
    torch.testing.assert_close(maps[0], expected, **EXACT)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_every_layer_equals_a_direct_call_with_need_weights(kind, make_gpt):
    model = make_gpt(kind)
    ids = _ids(11)
    names = [f"blocks.{i}.attn" for i in range(2)]
    seen, handles = _record_inputs({n: b.ln_1 for n, b in zip(names, model.blocks)})
    try:
        with torch.no_grad(), capture_attention(model) as cap:
            model(ids)
    finally:
        for hd in handles:
            hd.remove()
    for name, block in zip(names, model.blocks):
        with torch.no_grad():
            _, direct = block.attn(seen[name], is_causal=True, need_weights=True, average_attn_weights=False)
        captured = cap.last(name)
        assert captured.shape == (1, 4, 11, 11) and len(cap.records[name]) == 1
        torch.testing.assert_close(captured, direct, **EXACT)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_rows_sum_to_one_and_the_future_gets_exactly_zero(kind, make_gpt):
    maps = attention_maps(make_gpt(kind), _ids(10))
    future = torch.triu(torch.ones(10, 10, dtype=torch.bool), diagonal=1)
    for w in maps:
        torch.testing.assert_close(w.sum(-1), torch.ones(4, 10), **EXACT)
        assert torch.all(w[:, future] == 0)
        assert torch.all(w[:, ~future] > 0)  # softmax: every allowed key gets some weight
        assert w.dtype == torch.float32 and w.device.type == "cpu"


def test_capturing_does_not_change_the_logits_and_leaves_no_hooks(make_gpt):
    model = make_gpt("gpt2")
    ids = _ids(12)
    with torch.no_grad():
        before = model(ids)
        with capture_attention(model):
            during = model(ids)
        after = model(ids)
    torch.testing.assert_close(during, before, **LOOSE)  # reference path instead of the fused kernel
    assert torch.equal(after, before)  # hooks gone: the very same computation as before
    for block in model.blocks:
        assert not block.attn._forward_hooks and not block.attn._forward_pre_hooks


def test_hooks_removed_when_the_forward_raises(make_gpt):
    model = make_gpt("gpt2")
    with pytest.raises(ValueError, match="vocab_size"):
        with capture_attention(model):
            model(torch.tensor([[1, 2, 41]]))  # id 41 is out of range
    for block in model.blocks:
        assert not block.attn._forward_hooks and not block.attn._forward_pre_hooks


def test_caller_still_gets_what_it_asked_for(make_gpt):
    attn = make_gpt("gpt2").blocks[0].attn
    x = torch.randn(2, 5, 32)
    with torch.no_grad(), AttentionCapture({"a": attn}) as cap:
        _, none = attn(x, is_causal=True)
        _, averaged = attn(x, is_causal=True, need_weights=True)
        _, per_head = attn(x, is_causal=True, need_weights=True, average_attn_weights=False)
    assert none is None
    assert averaged.shape == (2, 5, 5) and per_head.shape == (2, 4, 5, 5)
    assert len(cap.records["a"]) == 3
    torch.testing.assert_close(averaged, cap.records["a"][0].mean(dim=1), **EXACT)
    torch.testing.assert_close(per_head, cap.records["a"][2], **EXACT)


def test_nested_captures_both_record_and_the_model_still_gets_none(make_gpt):
    model = make_gpt("gpt2")
    attn = model.blocks[0].attn
    x = torch.randn(1, 6, 32)
    with torch.no_grad(), capture_attention(model) as outer, AttentionCapture({"inner": attn}) as inner:
        _, weights = attn(x, is_causal=True)
    assert weights is None
    assert_close(inner.last("inner"), outer.last("blocks.0.attn"), "exact")
    assert not attn._forward_hooks and not attn._forward_pre_hooks


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_cached_decoding_records_the_new_token_over_the_whole_past(kind, make_gpt):
    model = make_gpt(kind)
    ids = _ids(8)
    full = attention_maps(model, ids)
    cache = model.new_cache(1, 8)
    with torch.no_grad(), capture_attention(model, names=["blocks.1.attn"]) as cap:
        model(ids[:, :7], cache=cache)  # prefill 7 tokens
        model(ids[:, 7:], cache=cache)  # one new token attends over all 8 keys
    prefill, step = cap.records["blocks.1.attn"]
    assert prefill.shape == (1, 4, 7, 7) and step.shape == (1, 4, 1, 8)
    torch.testing.assert_close(prefill[0], full[1][:, :7, :7], **LOOSE)
    torch.testing.assert_close(step[0], full[1][:, 7:, :], **LOOSE)


def test_training_flag_is_restored_and_dropout_is_off_while_capturing(make_gpt):
    model = make_gpt("gpt2", dropout=0.5).train()
    ids = _ids(6)
    a, b = attention_maps(model, ids), attention_maps(model, ids)
    assert model.training
    assert_close(a[0], b[0], "exact")  # eval mode inside: no random dropout


# --------------------------------------------------------------------------- encoder-decoder
def test_seq2seq_maps_shapes_and_structure(make_transformer):
    model = make_transformer()
    src, tgt = [3, 9, 4, 12, 7, 2], [1, 5, 8, 6]
    seq = seq2seq_attention_maps(model, src, tgt)
    assert [w.shape for w in seq.encoder] == [(4, 6, 6)] * 2
    assert [w.shape for w in seq.decoder] == [(4, 4, 4)] * 2
    assert [w.shape for w in seq.cross] == [(4, 4, 6)] * 2
    future = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    for enc, dec, cross in zip(seq.encoder, seq.decoder, seq.cross):
        for w in (enc, dec, cross):
            torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), **EXACT)
        assert torch.all(dec[:, future] == 0)  # the decoder's self-attention is causal
        # seed 003 masked the encoder and the cross-attention causally too: here the first query sees the last key
        assert torch.all(enc[:, 0, -1] > 0)
        assert torch.all(cross[:, 0, -1] > 0)


def test_cross_attention_equals_a_direct_call(make_transformer):
    model = make_transformer()
    src, tgt = torch.tensor([[3, 9, 4, 12, 7]]), torch.tensor([[1, 5, 8]])
    layer = model.core.decoder.layers[1]
    seen = {}
    handle = layer.cross_attn.register_forward_pre_hook(
        lambda mod, args: seen.update(query=args[0].detach(), memory=args[1].detach()))
    try:
        seq = seq2seq_attention_maps(model, src, tgt)
    finally:
        handle.remove()
    with torch.no_grad():
        _, direct = layer.cross_attn(seen["query"], seen["memory"], seen["memory"], need_weights=True,
                                     average_attn_weights=False)
    torch.testing.assert_close(seq.cross[1], direct[0], **EXACT)


def test_padded_source_keys_get_zero_weight(make_transformer):
    model = make_transformer()  # pad_id = 0
    seq = seq2seq_attention_maps(model, [3, 9, 4, 0, 0], [1, 5, 8])
    for enc, cross in zip(seq.encoder, seq.cross):
        assert torch.all(enc[:, :, 3:] == 0) and torch.all(cross[:, :, 3:] == 0)
        assert torch.all(cross[:, :, :3] > 0)


def test_seq2seq_kind_by_name(make_transformer):
    seq = seq2seq_attention_maps(make_transformer(), [3, 4, 5], [1, 2])
    assert seq.kind("cross") is seq.cross
    with pytest.raises(ValueError, match=r"one of 'encoder', 'decoder', 'cross', got 'self'"):
        seq.kind("self")


# --------------------------------------------------------------------------- selection and bad inputs
def test_select_attention_defaults_to_the_last_layer_and_picks_heads():
    maps = [torch.rand(3, 4, 5), torch.rand(3, 4, 5)]
    assert select_attention(maps) is maps[1]
    assert_close(select_attention(maps, layer=0, head=2), maps[0][2], "exact")


def test_layer_out_of_range_names_the_range():
    with pytest.raises(ValueError, match=r"layer must be in \[0, 2\) \(the model has 2 layers\), got 5"):
        select_attention([torch.rand(3, 4, 4)] * 2, layer=5)


def test_negative_layer_rejected():
    with pytest.raises(ValueError, match=r"layer must be in \[0, 2\).*got -1"):
        select_attention([torch.rand(3, 4, 4)] * 2, layer=-1)


def test_head_out_of_range_names_the_range():
    with pytest.raises(ValueError, match=r"head must be in \[0, 3\) \(layer 0 has 3 heads\), got 3"):
        select_attention([torch.rand(3, 4, 4)], layer=0, head=3)


def test_attention_maps_wants_one_sequence(make_gpt):
    with pytest.raises(ValueError, match=r"one sequence, shape \(L,\) or \(1, L\), got \(2, 5\)"):
        attention_maps(make_gpt(), torch.randint(0, 41, (2, 5)))


def test_attention_maps_rejects_float_ids(make_gpt):
    with pytest.raises(ValueError, match="integer token ids .*got torch.float32"):
        attention_maps(make_gpt(), torch.rand(5))


def test_attention_maps_rejects_an_encoder_decoder(make_transformer):
    with pytest.raises(ValueError, match="expects a GPT .*got Transformer; use seq2seq_attention_maps"):
        attention_maps(make_transformer(), [1, 2, 3])


def test_seq2seq_maps_reject_a_gpt(make_gpt):
    with pytest.raises(ValueError, match="expects an encoder-decoder Transformer, got GPT"):
        seq2seq_attention_maps(make_gpt(), [1, 2], [1, 2])


def test_capture_needs_attention_layers():
    with pytest.raises(ValueError, match="Linear contains no MultiHeadAttention"):
        capture_attention(torch.nn.Linear(2, 2))


def test_capture_unknown_name_lists_the_available_ones(make_gpt):
    with pytest.raises(ValueError, match=r"no attention module named \['blocks.9.attn'\]; available: "
                                         r"\['blocks.0.attn', 'blocks.1.attn'\]"):
        capture_attention(make_gpt(), names=["blocks.9.attn"])


def test_capture_rejects_other_modules():
    with pytest.raises(ValueError, match="module 'x' must be a MultiHeadAttention, got Linear"):
        AttentionCapture({"x": torch.nn.Linear(2, 2)})


def test_last_of_a_module_never_called(make_gpt):
    model = make_gpt()
    with capture_attention(model) as cap:
        pass
    with pytest.raises(ValueError, match="'blocks.0.attn' was not called inside the capture"):
        cap.last("blocks.0.attn")
