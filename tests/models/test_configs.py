"""GPTConfig / TransformerConfig validation (one case per rule), JSON round trips, presets."""

from __future__ import annotations

import json

import pytest

from attnkit.models import (
    PRESETS,
    GPTConfig,
    TransformerConfig,
    config_from_dict,
    config_from_json,
    get_preset,
)
from attnkit.models.configs import ACTIVATIONS


# --------------------------------------------------------------------------- GPTConfig rules
@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        (dict(n_embd=30, n_head=4), ["n_embd must be divisible by n_head", "n_embd=30", "n_head=4"]),
        (dict(n_head=6, n_kv_head=4, n_embd=48), ["n_head must be divisible by n_kv_head", "n_head=6", "n_kv_head=4"]),
        (dict(norm="batchnorm"), ["norm", "'layernorm'", "'rmsnorm'", "'batchnorm'"]),
        (dict(activation="swish"), ["activation", "'gelu_tanh'", "'swish'"]),
        (dict(position="alibi"), ["position", "'rope'", "'alibi'"]),
        (dict(vocab_size=0), ["vocab_size", ">= 1", "got 0"]),
        (dict(block_size=-8), ["block_size", "got -8"]),
        (dict(n_layer=0), ["n_layer", "got 0"]),
        (dict(n_head=0), ["n_head", "got 0"]),
        (dict(n_embd=-1), ["n_embd", "got -1"]),
        (dict(n_kv_head=0), ["n_kv_head", "got 0"]),
        (dict(head_dim=0), ["head_dim", "got 0"]),
        (dict(ffn_hidden=0), ["ffn_hidden", "got 0"]),
        (dict(n_layer=2.5), ["n_layer", "int", "2.5"]),
        (dict(n_layer=True), ["n_layer", "True", "bool"]),
        (dict(norm_eps=0.0), ["norm_eps", "got 0.0"]),
        (dict(rope_theta=-1.0), ["rope_theta", "got -1.0"]),
        (dict(dropout=1.0), ["dropout", "[0.0, 1.0)", "got 1.0"]),
        (dict(dropout=-0.1), ["dropout", "got -0.1"]),
        (dict(bias="yes"), ["bias", "bool", "'yes'"]),
        (dict(tie_embeddings=1), ["tie_embeddings", "bool", "1"]),
        (dict(position="rope", n_embd=36, n_head=4), ["rotary", "even head dim", "head_dim=9"]),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_gpt_config_rejects(kwargs, fragments):
    with pytest.raises(ValueError) as err:
        GPTConfig(**kwargs)
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))


def test_gpt_config_resolved_sizes():
    c = GPTConfig(n_embd=64, n_head=8)
    assert (c.kv_heads, c.head_size, c.ffn_size, c.is_gated) == (8, 8, 256, False)
    c = GPTConfig(n_embd=64, n_head=8, n_kv_head=2, head_dim=16, ffn_hidden=100, activation="swiglu")
    assert (c.kv_heads, c.head_size, c.ffn_size, c.is_gated) == (2, 16, 100, True)
    # explicit head_dim lifts the divisibility requirement (seed-000 style heads)
    assert GPTConfig(n_embd=30, n_head=4, head_dim=8).head_size == 8


def test_gpt_config_defaults_scale_with_overrides():
    # ffn_hidden/head_dim stay None in the config so that changing n_embd rescales them
    c = get_preset("gpt2", n_embd=128, n_head=4)
    assert c.ffn_hidden is None and c.ffn_size == 512 and c.head_size == 32


# --------------------------------------------------------------------------- TransformerConfig rules
@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        (dict(d_model=30, num_heads=4), ["d_model must be divisible by num_heads", "d_model=30", "num_heads=4"]),
        (dict(norm="groupnorm"), ["norm", "'groupnorm'"]),
        (dict(activation="mish"), ["activation", "'mish'"]),
        (dict(position="rope"), ["position", "'sinusoidal'", "'rope'"]),
        (dict(src_vocab_size=0), ["src_vocab_size", "got 0"]),
        (dict(tgt_vocab_size=-5), ["tgt_vocab_size", "got -5"]),
        (dict(num_encoder_layers=0), ["num_encoder_layers", "got 0"]),
        (dict(num_decoder_layers=0), ["num_decoder_layers", "got 0"]),
        (dict(dim_feedforward=0), ["dim_feedforward", "got 0"]),
        (dict(max_len=0), ["max_len", "got 0"]),
        (dict(dropout=1.5), ["dropout", "got 1.5"]),
        (dict(norm_eps=-1e-5), ["norm_eps", "got -1e-05"]),
        (dict(norm_first="no"), ["norm_first", "bool"]),
        (dict(encoder_final_norm=0), ["encoder_final_norm", "bool"]),
        (dict(share_embeddings=True, src_vocab_size=10, tgt_vocab_size=12),
         ["share_embeddings", "src_vocab_size == tgt_vocab_size", "10", "12"]),
        (dict(pad_id=10, src_vocab_size=10, tgt_vocab_size=12), ["pad_id", "[0, 10)", "got 10"]),
        (dict(pad_id=-1), ["pad_id", "got -1"]),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_transformer_config_rejects(kwargs, fragments):
    base = dict(src_vocab_size=16, tgt_vocab_size=16)
    base.update(kwargs)
    with pytest.raises(ValueError) as err:
        TransformerConfig(**base)
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))


def test_transformer_final_norm_defaults_follow_norm_first():
    post = TransformerConfig(src_vocab_size=8, tgt_vocab_size=8)
    pre = TransformerConfig(src_vocab_size=8, tgt_vocab_size=8, norm_first=True)
    forced = TransformerConfig(src_vocab_size=8, tgt_vocab_size=8, encoder_final_norm=True, decoder_final_norm=False)
    assert (post.use_encoder_final_norm, post.use_decoder_final_norm) == (False, False)
    assert (pre.use_encoder_final_norm, pre.use_decoder_final_norm) == (True, True)
    assert (forced.use_encoder_final_norm, forced.use_decoder_final_norm) == (True, False)


# --------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_round_trips_through_json(name):
    cfg = PRESETS[name]
    text = cfg.to_json()
    assert json.loads(text)["model_type"] in ("gpt", "transformer")
    back = type(cfg).from_json(text)
    assert back == cfg
    assert back.to_dict() == cfg.to_dict()
    assert config_from_json(text) == cfg  # dispatch on model_type
    assert config_from_dict(cfg.to_dict()) == cfg


def test_round_trip_with_non_default_values():
    cfg = GPTConfig(vocab_size=77, block_size=40, n_layer=3, n_head=6, n_kv_head=3, n_embd=48, head_dim=10,
                    ffn_hidden=130, activation="geglu", norm="rmsnorm", norm_eps=3e-6, bias=False, position="rope",
                    rope_theta=123456.5, tie_embeddings=False, dropout=0.25)
    assert GPTConfig.from_json(cfg.to_json()) == cfg
    tcfg = TransformerConfig(src_vocab_size=30, tgt_vocab_size=31, d_model=24, num_heads=3, num_encoder_layers=1,
                             num_decoder_layers=4, dim_feedforward=50, dropout=0.0, activation="gelu", norm="rmsnorm",
                             norm_eps=1e-6, norm_first=True, encoder_final_norm=False, decoder_final_norm=True,
                             max_len=99, position="learned", tie_output=True, scale_embeddings=False, bias=False,
                             pad_id=None)
    assert TransformerConfig.from_json(tcfg.to_json()) == tcfg


def test_ints_given_for_floats_round_trip_exactly():
    cfg = GPTConfig(rope_theta=10000, norm_eps=1, dropout=0)
    assert isinstance(cfg.rope_theta, float) and isinstance(cfg.dropout, float)
    assert GPTConfig.from_json(cfg.to_json()) == cfg


def test_from_dict_rejects_unknown_keys_and_wrong_type():
    d = GPTConfig().to_dict()
    d["n_layers"] = 3  # typo of n_layer
    with pytest.raises(ValueError, match=r"unknown keys \['n_layers'\]"):
        GPTConfig.from_dict(d)
    with pytest.raises(ValueError, match="expects model_type 'gpt', got 'transformer'"):
        GPTConfig.from_dict(PRESETS["transformer-small"].to_dict())
    with pytest.raises(ValueError, match="model_type in"):
        config_from_dict({"n_layer": 2})
    with pytest.raises(ValueError, match="invalid JSON"):
        GPTConfig.from_json("{not json")


def test_from_dict_names_missing_required_keys_and_an_unhashable_model_type():
    """Both raised TypeError (a missing positional argument; an unhashable dict key), which callers that catch
    ValueError let through as a traceback."""
    with pytest.raises(ValueError, match=r"missing the required keys \['src_vocab_size', 'tgt_vocab_size'\]"):
        config_from_dict({"model_type": "transformer"})
    with pytest.raises(ValueError, match=r"model_type in \['gpt', 'transformer'\], got \['gpt'\]"):
        config_from_dict({"model_type": ["gpt"]})


def test_replace_validates_again():
    with pytest.raises(ValueError, match="n_embd must be divisible by n_head"):
        GPTConfig().replace(n_embd=100)
    with pytest.raises(ValueError, match="no fields"):
        GPTConfig().replace(layers=2)


# --------------------------------------------------------------------------- presets
def test_presets_match_their_descriptions():
    base = get_preset("transformer-base")
    assert (base.d_model, base.num_heads, base.num_encoder_layers, base.num_decoder_layers, base.dim_feedforward,
            base.dropout, base.src_vocab_size, base.tgt_vocab_size, base.share_embeddings) == \
        (512, 8, 6, 6, 2048, 0.1, 37000, 37000, True)
    assert base.norm_first is False  # the paper is post-norm
    small = get_preset("transformer-small")
    assert (small.d_model, small.num_heads, small.num_encoder_layers, small.dim_feedforward) == (256, 4, 3, 1024)
    s = get_preset("smollm2-135m")
    assert (s.n_layer, s.n_embd, s.n_head, s.kv_heads, s.ffn_size, s.rope_theta, s.tie_embeddings, s.vocab_size,
            s.block_size, s.norm, s.norm_eps, s.activation, s.position, s.bias) == \
        (30, 576, 9, 3, 1536, 100000.0, True, 49152, 8192, "rmsnorm", 1e-5, "swiglu", "rope", False)
    xl = get_preset("gpt2-xl-seed002")
    assert (xl.n_layer, xl.n_head, xl.n_embd, xl.vocab_size, xl.tie_embeddings) == (48, 25, 1600, 50304, False)
    char = get_preset("char-small", vocab_size=65)
    assert char.vocab_size == 65 and 4 <= char.n_layer <= 6 and 128 <= char.n_embd <= 384
    assert 128 <= char.block_size <= 256
    llama = get_preset("llama-tiny")
    assert llama.position == "rope" and llama.kv_heads < llama.n_head and not llama.bias


def test_get_preset_overrides_do_not_touch_the_registry():
    a = get_preset("gpt2", n_layer=2)
    assert a.n_layer == 2 and PRESETS["gpt2"].n_layer == 12


def test_unknown_preset_lists_names():
    with pytest.raises(ValueError) as err:
        get_preset("gpt5")
    assert "'gpt5'" in str(err.value) and "gpt2-medium" in str(err.value) and "transformer-base" in str(err.value)


def test_activation_names_match_the_feed_forward_module():
    from attnkit.modules.feed_forward import ACTIVATIONS as MODULE_ACTIVATIONS

    assert set(ACTIVATIONS) == set(MODULE_ACTIVATIONS)


def test_norm_and_position_names_match_the_modules():
    from attnkit.models.configs import NORMS, TRANSFORMER_POSITIONS
    from attnkit.modules.embeddings import POSITION_KINDS
    from attnkit.modules.norms import NORM_KINDS

    assert set(NORMS) == set(NORM_KINDS) and set(TRANSFORMER_POSITIONS) == set(POSITION_KINDS)


@pytest.mark.parametrize("make", [lambda **kw: GPTConfig(n_layer=1, n_head=2, n_embd=8, **kw),
                                  lambda **kw: TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, **kw)])
def test_attention_dropout_defaults_to_dropout_and_is_validated(make):
    assert make(dropout=0.2).attn_dropout == 0.2  # None: the attention weights get the same dropout
    cfg = make(dropout=0.2, attention_dropout=0.0)
    assert cfg.attn_dropout == 0.0
    assert config_from_json(cfg.to_json()) == cfg
    with pytest.raises(ValueError, match="attention_dropout"):
        make(attention_dropout=1.5)


@pytest.mark.parametrize("name", [["gpt2"], {"gpt2": 1}, None, 3])
def test_get_preset_refuses_a_name_that_is_not_a_string(name):
    # a list or dict raised TypeError (unhashable) instead of the ValueError listing the presets
    with pytest.raises(ValueError, match=r"^unknown preset .*; expected one of \['gpt2', "):
        get_preset(name)
