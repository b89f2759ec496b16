"""Encoder-decoder Transformer: shapes, post-/pre-norm, norms, sharing/tying, cached decoding,
the seed-003 defects (not repeated), parity with torch.nn.Transformer, and input validation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnkit.models import DecoderCache, EncoderDecoder, Transformer, build_model
from helpers import assert_close



def _model(cfg, spread):
    return spread(build_model(cfg)).eval()


def _ids(B, L, V, low=1):
    return torch.randint(low, V, (B, L))  # low=1 keeps pad id 0 out unless a test wants padding


# --------------------------------------------------------------------------- variants
@pytest.mark.parametrize(
    "overrides",
    [
        dict(),  # paper: post-norm LayerNorm
        dict(norm_first=True),  # pre-norm (final norms on by default)
        dict(norm="rmsnorm"),
        dict(norm="rmsnorm", norm_first=True, activation="swiglu", bias=False),
        dict(position="learned", scale_embeddings=False),
    ],
    ids=["post-norm", "pre-norm", "post-rmsnorm", "pre-rmsnorm-swiglu", "learned-positions"],
)
def test_variants_run_and_decode_incrementally(overrides, tiny_transformer_config, spread):
    model = _model(tiny_transformer_config(**overrides), spread)
    src, tgt = _ids(3, 7, 23), _ids(3, 6, 19)
    with torch.no_grad():
        logits = model(src, tgt)
        assert logits.shape == (3, 6, 19) and torch.isfinite(logits).all()
        memory = model.encode(src)
        assert memory.shape == (3, 7, 32)
        cache = model.new_cache(3, 6)
        steps = [model.decode(tgt[:, t:t + 1], memory, cache=cache) for t in range(6)]
    assert_close(torch.cat(steps, dim=1), logits, "float32")


def test_post_and_pre_norm_structure(tiny_transformer_config):
    post = build_model(tiny_transformer_config())
    pre = build_model(tiny_transformer_config(norm_first=True))
    assert post.core.encoder.norm is None and post.core.decoder.norm is None
    assert pre.core.encoder.norm is not None and pre.core.decoder.norm is not None
    layer = post.core.decoder.layers[0]
    for name in ("self_attn", "cross_attn", "ff", "norm1", "norm2", "norm3", "dropout1", "dropout2", "dropout3"):
        assert hasattr(layer, name), name
    assert layer.cross_attn is not layer.self_attn and not layer.cross_attn.self_attention
    assert hasattr(layer.cross_attn, "q_proj") and hasattr(layer.cross_attn, "kv_proj")
    assert hasattr(layer.ff, "w_in") and hasattr(layer.ff, "w_out")


def test_post_norm_formula(tiny_transformer_config, spread):
    """One encoder layer computed by hand: x = norm1(x + sa(x)); x = norm2(x + ff(x)) (and the pre-norm form)."""
    for norm_first in (False, True):
        model = _model(tiny_transformer_config(norm_first=norm_first), spread)
        layer = model.core.encoder.layers[0]
        x = torch.randn(2, 5, 32)
        sa = lambda h: layer.self_attn(h)[0]  # noqa: E731
        if norm_first:
            h = x + sa(layer.norm1(x))
            expected = h + layer.ff(layer.norm2(h))
        else:
            h = layer.norm1(x + sa(x))
            expected = layer.norm2(h + layer.ff(h))
        torch.testing.assert_close(layer(x), expected)


def test_shared_embeddings_and_tied_output(tiny_transformer_config):
    model = build_model(tiny_transformer_config(tgt_vocab_size=23, share_embeddings=True, tie_output=True))
    assert model.tgt_embed is model.src_embed
    assert model.generator.weight is model.tgt_embed.tok.weight
    separate = build_model(tiny_transformer_config(tgt_vocab_size=23))
    assert separate.tgt_embed is not separate.src_embed
    assert separate.generator.weight is not separate.tgt_embed.tok.weight
    tied_only = build_model(tiny_transformer_config(tie_output=True))
    assert tied_only.generator.weight is tied_only.tgt_embed.tok.weight
    assert tied_only.tgt_embed is not tied_only.src_embed


def test_predict_proba_gives_probabilities(tiny_transformer_config, spread):
    model = _model(tiny_transformer_config(), spread)
    src, tgt = _ids(2, 6, 23), _ids(2, 4, 19)
    probs = model.predict_proba(src, tgt)
    assert probs.shape == (2, 4, 19) and (probs >= 0).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4))
    assert_close(probs.log(), torch.log_softmax(model(src, tgt), -1), "float32")
    # seed 000's greedy step: argmax of the last position
    assert probs[:, -1].argmax(-1).shape == (2,)


# --------------------------------------------------------------------------- seed-003 defects not repeated
def test_encoder_is_not_causal(tiny_transformer_config, spread):
    model = _model(tiny_transformer_config(), spread)
    src = _ids(1, 6, 23)
    changed = src.clone()
    changed[0, 5] = src[0, 5] % 22 + 1  # change only the last source token
    a, b = model.encode(src), model.encode(changed)
    assert (a[0, 0] - b[0, 0]).abs().max() > 1e-3  # the first position sees the last one


def test_decoder_reads_memory_through_cross_attention(tiny_transformer_config, spread):
    model = _model(tiny_transformer_config(), spread)
    src, tgt = _ids(2, 6, 23), _ids(2, 5, 19)
    base = model(src, tgt)
    other_src = src.clone()
    other_src[:, 0] = src[:, 0] % 22 + 1
    assert (model(other_src, tgt)[:, 0] - base[:, 0]).abs().max() > 1e-3  # the source matters, at every position
    with torch.no_grad():
        for layer in model.core.decoder.layers:
            layer.cross_attn.q_proj.weight.mul_(1.5)  # touching cross_attn (not self_attn) changes the output
    assert (model(src, tgt) - base).abs().max() > 1e-3


def test_every_decoder_layer_feeds_the_next(tiny_transformer_config, spread):
    model = _model(tiny_transformer_config(num_decoder_layers=3), spread)
    src, tgt = _ids(2, 6, 23), _ids(2, 5, 19)
    base = model(src, tgt)
    with torch.no_grad():  # seed 003 fed the *input* to every layer: the first layer's weights then did not matter
        model.core.decoder.layers[0].ff.w_out.weight.mul_(2.0)
    assert (model(src, tgt) - base).abs().max() > 1e-3


def test_decoder_self_attention_is_causal(tiny_transformer_config, spread):
    model = _model(tiny_transformer_config(), spread)
    src, tgt = _ids(2, 6, 23), _ids(2, 5, 19)
    changed = tgt.clone()
    changed[:, 3] = tgt[:, 3] % 18 + 1
    a, b = model(src, tgt), model(src, changed)
    assert_close(a[:, :3], b[:, :3], "float32")
    assert (a[:, 3:] - b[:, 3:]).abs().max() > 1e-3


# --------------------------------------------------------------------------- padding
def test_padding_masks_are_derived_from_pad_id(tiny_transformer_config, spread):
    model = _model(tiny_transformer_config(), spread)
    src = _ids(2, 7, 23)
    src[1, 5:] = 0  # right-padded second sentence
    tgt = _ids(2, 4, 19)
    derived = model(src, tgt)
    explicit = model(src, tgt, src_key_padding_mask=src == 0)
    torch.testing.assert_close(derived, explicit)
    alone = model(src[1:, :5], tgt[1:])
    assert_close(derived[1:], alone, "float32")  # padding changes nothing
    # without masking, the pads would be attended
    unmasked = model(src, tgt, src_key_padding_mask=torch.zeros(2, 7, dtype=torch.bool))
    assert (unmasked[1] - derived[1]).abs().max() > 1e-3


def test_cached_decoding_with_padded_source_and_target(tiny_transformer_config, spread):
    model = _model(tiny_transformer_config(), spread)
    src = _ids(2, 7, 23)
    src[0, 4:] = 0
    tgt = _ids(2, 5, 19)
    tgt[1, 3:] = 0  # finished hypothesis padded on the right
    with torch.no_grad():
        full = model(src, tgt)
        memory = model.encode(src)
        cache = model.new_cache(2, 5)
        steps = [model.decode(tgt[:, :2], memory, memory_key_padding_mask=model.padding_mask(src), cache=cache)]
        steps += [model.decode(tgt[:, t:t + 1], memory, cache=cache) for t in range(2, 5)]  # mask remembered
    assert_close(torch.cat(steps, dim=1), full, "float32")


def test_decoder_cache_reorder_for_beam_search(tiny_transformer_config, spread):
    model = _model(tiny_transformer_config(), spread)
    src, tgt = _ids(2, 6, 23), _ids(2, 4, 19)
    index = torch.tensor([1, 1, 0])  # e.g. beams: two from sentence 1, one from sentence 0
    with torch.no_grad():
        memory = model.encode(src)
        cache = model.new_cache(2, 4)
        assert isinstance(cache, DecoderCache)
        model.decode(tgt[:, :3], memory, cache=cache)
        cache.reorder(index)
        assert cache.batch_size == 3
        step = model.decode(tgt[index, 3:], memory[index], cache=cache)
        expected = model(src[index], tgt[index])[:, 3:]
    assert_close(step, expected, "float32")
    cache.reset()
    assert cache.length == 0 and all(c is None or c.length == 0 for c in cache.cross_attn)


def test_decoder_cache_reused_after_reset_for_a_longer_source(tiny_transformer_config, spread):
    # The cross-attention caches are sized by the first source; after reset() a longer source used to be
    # refused ("made for memory_len", a length the caller never gave), and a different memory without reset()
    # was silently replaced by the cached projections of the old one.
    model = _model(tiny_transformer_config(), spread)
    short, long, tgt = _ids(2, 4, 23), _ids(2, 7, 23), _ids(2, 3, 19)
    with torch.no_grad():
        cache = model.new_cache(2, 3)
        model.decode(tgt[:, :1], model.encode(short), cache=cache)
        with pytest.raises(ValueError, match=r"memory of length 4, got memory of length 7; reset\(\) the cache"):
            model.decode(tgt[:, 1:2], model.encode(long), cache=cache)
        cache.reset()
        memory = model.encode(long)
        steps = [model.decode(tgt[:, t:t + 1], memory, cache=cache) for t in range(3)]
        expected = model(long, tgt)
    assert_close(torch.cat(steps, dim=1), expected, "float32")


def test_decoder_cache_with_a_given_memory_len_refuses_a_longer_memory(tiny_transformer_config, spread):
    model = _model(tiny_transformer_config(), spread)
    with torch.no_grad():
        cache = model.new_cache(1, 2, memory_len=5)
        with pytest.raises(ValueError, match=r"made for memory_len = 5, got memory of length 7"):
            model.decode(_ids(1, 1, 19), model.encode(_ids(1, 7, 23)), cache=cache)


def test_a_decoding_step_that_fails_part_way_leaves_the_cache_as_it_was(tiny_transformer_config, spread):
    # The first decoder layer appended its keys/values before the cross-attention refused the memory (wrong dtype),
    # so the next steps decoded against a duplicated position: wrong logits and no error.
    model = _model(tiny_transformer_config(), spread)
    src, tgt = _ids(2, 6, 23), _ids(2, 4, 19)
    with torch.no_grad():
        memory = model.encode(src)
        cache = model.new_cache(2, 4)
        steps = [model.decode(tgt[:, :1], memory, cache=cache)]
        with pytest.raises(ValueError, match=r"key dtype must equal the query's torch.float32, got torch.float64"):
            model.decode(tgt[:, 1:2], memory.double(), cache=cache)
        assert [c.length for c in cache.self_attn] == [1] * len(cache)
        steps += [model.decode(tgt[:, t:t + 1], memory, cache=cache) for t in range(1, 4)]
        expected = model(src, tgt)
    assert_close(torch.cat(steps, dim=1), expected, "float32")


def test_embedding_level_decoder_step_with_a_bad_mask_leaves_the_cache_as_it_was():
    torch.manual_seed(0)
    core = EncoderDecoder(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=32,
                          dropout=0.0).eval()
    src, tgt = torch.randn(2, 5, 16), torch.randn(2, 3, 16)
    with torch.no_grad():
        memory = core.encode(src)
        cache = core.new_cache(2, 3)
        steps = [core.decode(tgt[:, :1], memory, cache=cache)]
        with pytest.raises(ValueError, match=r"attn_mask must have shape \(T, S\) = \(1, 5\), got \(1, 6\)"):
            core.decode(tgt[:, 1:2], memory, memory_mask=torch.zeros(1, 6, dtype=torch.bool),
                        tgt_key_padding_mask=torch.zeros(2, 1, dtype=torch.bool), cache=cache)
        assert cache.length == 1 and cache.tgt_padding is None
        steps += [core.decode(tgt[:, t:t + 1], memory, cache=cache) for t in range(1, 3)]
        expected = core.decode(tgt, memory)
    assert_close(torch.cat(steps, dim=1), expected, "float32")


# --------------------------------------------------------------------------- torch.nn.Transformer parity
@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_decoder_matches_torch_nn_transformer(norm_first):
    C, H, F = 32, 4, 48
    ref = nn.Transformer(d_model=C, nhead=H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=F,
                         dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # fresh, non-trivial norms and biases too
    ours = EncoderDecoder(d_model=C, nhead=H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=F,
                          dropout=0.0, norm_first=norm_first, encoder_final_norm=True, decoder_final_norm=True).eval()
    with torch.no_grad():
        for mine, theirs in zip(ours.encoder.layers, ref.encoder.layers):
            mine.self_attn.qkv_proj.weight.copy_(theirs.self_attn.in_proj_weight)
            mine.self_attn.qkv_proj.bias.copy_(theirs.self_attn.in_proj_bias)
            mine.self_attn.out_proj.load_state_dict(theirs.self_attn.out_proj.state_dict())
            mine.ff.w_in.load_state_dict(theirs.linear1.state_dict())
            mine.ff.w_out.load_state_dict(theirs.linear2.state_dict())
            mine.norm1.load_state_dict(theirs.norm1.state_dict())
            mine.norm2.load_state_dict(theirs.norm2.state_dict())
        for mine, theirs in zip(ours.decoder.layers, ref.decoder.layers):
            mine.self_attn.qkv_proj.weight.copy_(theirs.self_attn.in_proj_weight)
            mine.self_attn.qkv_proj.bias.copy_(theirs.self_attn.in_proj_bias)
            mine.self_attn.out_proj.load_state_dict(theirs.self_attn.out_proj.state_dict())
            w, b = theirs.multihead_attn.in_proj_weight, theirs.multihead_attn.in_proj_bias
            mine.cross_attn.q_proj.weight.copy_(w[:C])
            mine.cross_attn.q_proj.bias.copy_(b[:C])
            mine.cross_attn.kv_proj.weight.copy_(w[C:])
            mine.cross_attn.kv_proj.bias.copy_(b[C:])
            mine.cross_attn.out_proj.load_state_dict(theirs.multihead_attn.out_proj.state_dict())
            mine.ff.w_in.load_state_dict(theirs.linear1.state_dict())
            mine.ff.w_out.load_state_dict(theirs.linear2.state_dict())
            for k in (1, 2, 3):
                getattr(mine, f"norm{k}").load_state_dict(getattr(theirs, f"norm{k}").state_dict())
        ours.encoder.norm.load_state_dict(ref.encoder.norm.state_dict())
        ours.decoder.norm.load_state_dict(ref.decoder.norm.state_dict())

    src, tgt = torch.randn(2, 7, C), torch.randn(2, 5, C)
    src_pad = torch.zeros(2, 7, dtype=torch.bool)
    src_pad[1, 5:] = True
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    expected = ref(src, tgt, tgt_mask=causal, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad)
    got = ours(src, tgt, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad)
    assert_close(got, expected, "float32")


# --------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("name", ["transformer-base", "transformer-small"])
def test_backward_finite_for_transformer_presets(name):
    from attnkit.models import get_preset

    cfg = get_preset(name).replace(src_vocab_size=30, tgt_vocab_size=30, d_model=16, num_heads=4,
                                   num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=24, max_len=32)
    model = build_model(cfg).train()
    src, tgt = _ids(2, 6, 30), _ids(2, 5, 30)
    src[0, 4:] = 0
    loss = torch.nn.functional.cross_entropy(model(src, tgt[:, :-1]).reshape(-1, 30), tgt[:, 1:].reshape(-1))
    loss.backward()
    assert torch.isfinite(loss)
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n


# --------------------------------------------------------------------------- bad inputs
@pytest.fixture
def mt(tiny_transformer_config):
    return build_model(tiny_transformer_config()).eval()  # src vocab 23, tgt vocab 19


def test_rejects_src_id_out_of_range(mt):
    with pytest.raises(ValueError, match=r"src token ids must be in \[0, src_vocab_size\) = \[0, 23\), got id 23"):
        mt(torch.tensor([[1, 23]]), torch.tensor([[1]]))


def test_rejects_tgt_id_out_of_range(mt):
    with pytest.raises(ValueError, match=r"tgt token ids must be in \[0, tgt_vocab_size\) = \[0, 19\), got id 19"):
        mt(torch.tensor([[1, 2]]), torch.tensor([[1, 19]]))


def test_rejects_negative_id(mt):
    with pytest.raises(ValueError, match="got id -1"):
        mt(torch.tensor([[1, -1]]), torch.tensor([[1]]))


def test_rejects_float_ids(mt):
    with pytest.raises(ValueError, match="src must have dtype torch.int64 or torch.int32, got torch.float32"):
        mt(torch.rand(1, 3), torch.tensor([[1]]))


def test_rejects_batch_mismatch(mt):
    with pytest.raises(ValueError, match="same batch size, got src B = 2, tgt B = 3"):
        mt(_ids(2, 4, 23), _ids(3, 4, 19))


def test_rejects_src_mask_shape_mismatch(mt):
    with pytest.raises(ValueError, match=r"src_key_padding_mask must have shape \(B, S\) = \(2, 4\), got \(2, 5\)"):
        mt(_ids(2, 4, 23), _ids(2, 3, 19), src_key_padding_mask=torch.zeros(2, 5, dtype=torch.bool))


def test_rejects_tgt_mask_shape_mismatch(mt):
    with pytest.raises(ValueError, match=r"tgt_key_padding_mask must have shape \(B, T\) = \(2, 3\), got \(3, 3\)"):
        mt(_ids(2, 4, 23), _ids(2, 3, 19), tgt_key_padding_mask=torch.zeros(3, 3, dtype=torch.bool))


def test_rejects_memory_of_wrong_width(mt):
    with pytest.raises(ValueError, match=r"memory must have shape \(B, S, C\) with C = d_model = 32, got \(2, 4, 16\)"):
        mt.decode(_ids(2, 3, 19), torch.randn(2, 4, 16))


def test_rejects_memory_mask_shape_mismatch(mt):
    memory = mt.encode(_ids(2, 4, 23))
    with pytest.raises(ValueError, match=r"memory_key_padding_mask must have shape \(B, S\) = \(2, 4\), got \(2, 3\)"):
        mt.decode(_ids(2, 3, 19), memory, memory_key_padding_mask=torch.zeros(2, 3, dtype=torch.bool))


def test_rejects_source_longer_than_learned_positions(tiny_transformer_config):
    model = build_model(tiny_transformer_config(position="learned", max_len=8))
    with pytest.raises(ValueError, match="8"):
        model.encode(_ids(1, 9, 23))


def test_embedding_level_stack_rejects_bad_shapes():
    core = EncoderDecoder(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=8)
    with pytest.raises(ValueError, match=r"src must have shape \(B, L, C\) with C = d_model = 16, got \(2, 3, 8\)"):
        core(torch.randn(2, 3, 8), torch.randn(2, 3, 16))
    with pytest.raises(ValueError, match="same batch size, got src B = 2, tgt B = 1"):
        core(torch.randn(2, 3, 16), torch.randn(1, 3, 16))
    with pytest.raises(ValueError, match="d_model must be divisible by nhead, got d_model=10, nhead=4"):
        EncoderDecoder(d_model=10, nhead=4)


def test_rejects_wrong_config_type(tiny_gpt_config):
    with pytest.raises(ValueError, match="Transformer expects a TransformerConfig, got GPTConfig"):
        Transformer(tiny_gpt_config())


def test_attention_dropout_is_separate_from_residual_dropout():
    """attention_dropout=0 (the paper: dropout on sub-layer outputs and embeddings only) keeps the fused kernel."""
    from torch import nn as _nn

    from attnkit.models.configs import TransformerConfig as _TC
    from attnkit.models.transformer import Transformer as _T
    from attnkit.modules.multi_head_attention import MultiHeadAttention

    model = _T(_TC(src_vocab_size=20, tgt_vocab_size=20, d_model=16, num_heads=2, num_encoder_layers=1,
                   num_decoder_layers=1, dim_feedforward=32, dropout=0.3, attention_dropout=0.0))
    attn = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attn) == 3 and all(m.dropout == 0.0 for m in attn)
    assert {m.p for m in model.modules() if isinstance(m, _nn.Dropout)} == {0.3}
    default = _T(_TC(src_vocab_size=20, tgt_vocab_size=20, d_model=16, num_heads=2, num_encoder_layers=1,
                     num_decoder_layers=1, dim_feedforward=32, dropout=0.3))
    assert all(m.dropout == 0.3 for m in default.modules() if isinstance(m, MultiHeadAttention))  # as torch.nn


# --------------------------------------------------------------------------- LayerDrop
def _kept_only(model, src, tgt, enc_runs, dec_runs):
    """The model's forward pass with only the given encoder/decoder layers (the reference for LayerDrop)."""
    core = model.core
    x, pad = model.src_embed(src), model.padding_mask(src)
    for layer, runs in zip(core.encoder.layers, enc_runs):
        x = layer(x, None, pad) if runs else x
    memory = core.encoder.norm(x) if core.encoder.norm is not None else x
    y = model.tgt_embed(tgt)
    for layer, runs in zip(core.decoder.layers, dec_runs):
        y = layer(y, memory, None, None, model.padding_mask(tgt), pad) if runs else y
    y = core.decoder.norm(y) if core.decoder.norm is not None else y
    return model.generator(y)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_layer_drop_skips_whole_layers_in_training(norm_first, tiny_transformer_config, spread):
    cfg = tiny_transformer_config(norm_first=norm_first, num_encoder_layers=3, num_decoder_layers=3, layer_drop=0.5)
    model = spread(build_model(cfg)).train()  # dropout 0: the layer draws are the only randomness
    src, tgt = _ids(2, 7, 23), _ids(2, 6, 19)
    seen = set()
    for seed in range(12):
        torch.manual_seed(seed)
        enc_runs, dec_runs = (torch.rand(3) >= 0.5).tolist(), (torch.rand(3) >= 0.5).tolist()  # the model's draws
        torch.manual_seed(seed)
        out = model(src, tgt)
        with torch.no_grad():
            assert_close(out, _kept_only(model, src, tgt, enc_runs, dec_runs), "exact")
        seen.add((tuple(enc_runs), tuple(dec_runs)))
        model.zero_grad(set_to_none=True)
        out.square().mean().backward()
        # A skipped layer costs no backward pass: it has no gradient. (With no decoder layer the memory is not
        # read at all, and no encoder layer has one.)
        enc_used = [kept and any(dec_runs) for kept in enc_runs]
        for layers, runs in ((model.core.encoder.layers, enc_used), (model.core.decoder.layers, dec_runs)):
            for layer, used in zip(layers, runs):
                assert all((p.grad is not None) == used for p in layer.parameters())
    assert len(seen) > 3
    model.eval()  # evaluation runs every layer, unscaled: the same function as the model without LayerDrop
    plain = build_model(cfg.replace(layer_drop=0.0))
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert_close(model(src, tgt), plain.eval()(src, tgt), "exact")
        assert_close(model(src, tgt), _kept_only(model, src, tgt, [True] * 3, [True] * 3), "exact")


def test_cached_decoding_runs_every_layer_even_in_training_mode(tiny_transformer_config, spread):
    model = spread(build_model(tiny_transformer_config(layer_drop=0.9))).train()
    src, tgt = _ids(2, 5, 23), _ids(2, 4, 19)
    with torch.no_grad():
        model.eval()
        memory, full = model.encode(src), model(src, tgt)
        model.train()
        cache = model.new_cache(2, 4)
        steps = [model.decode(tgt[:, t:t + 1], memory, cache=cache) for t in range(4)]
    assert_close(torch.cat(steps, dim=1), full, "float32")
    assert all(c.length == 4 for c in cache.self_attn)  # every layer's cache grew at every step


def test_layer_drop_is_validated_and_round_trips(tiny_transformer_config):
    from attnkit.models.configs import TransformerConfig

    cfg = tiny_transformer_config(layer_drop=0.2)
    assert TransformerConfig.from_json(cfg.to_json()) == cfg and cfg.layer_drop == 0.2
    assert tiny_transformer_config().layer_drop == 0.0
    for bad in (1.0, -0.5, "0.1"):
        with pytest.raises(ValueError, match="TransformerConfig.layer_drop must be a"):
            tiny_transformer_config(layer_drop=bad)
    with pytest.raises(ValueError, match=r"Encoder layer_drop must be a finite number in \[0.0, 1.0\), got 1.0"):
        EncoderDecoder(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=8,
                       layer_drop=1.0)
