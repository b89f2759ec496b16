"""Parameter counts: exact totals of the presets (built on the meta device), the per-module breakdown,
tied weights counted once, and the analytic formulas cross-checked against real tiny models."""

from __future__ import annotations

import pytest

from attnkit.models import (
    analytic_parameter_count,
    analytic_total,
    build_model,
    count_parameters,
    format_parameter_table,
    get_preset,
    parameter_table,
    tied_parameters,
)


@pytest.mark.parametrize(
    "name, total",
    [
        ("gpt2", 124_439_808),
        ("gpt2-seed002", 163_109_376),
        ("gpt2-xl", 1_557_611_200),
        ("gpt2-xl-seed002", 1_638_172_800),
        ("smollm2-135m", 134_515_008),  # the published SmolLM2-135M size
    ],
)
def test_preset_totals(name, total):
    cfg = get_preset(name)
    model = build_model(cfg, device="meta")  # shapes only: nothing is allocated
    assert next(model.parameters()).device.type == "meta"
    assert count_parameters(model) == total
    assert count_parameters(cfg) == total  # a config is built on meta for you
    assert analytic_total(cfg) == total


def test_seed002_breakdown_matches_the_walkthrough():
    rows = parameter_table(get_preset("gpt2-seed002"))
    assert rows == [
        ("wte", 38_633_472),
        ("wpe", 786_432),
        ("blocks", 85_054_464),
        ("ln_f", 1_536),
        ("lm_head", 38_633_472),
    ]
    # one block of the walk-through: 7,087,872
    per_block = dict(parameter_table(get_preset("gpt2-seed002"), depth=2))
    assert per_block["blocks.0"] == 7_087_872 and per_block["blocks.11"] == 7_087_872


def test_format_parameter_table_is_aligned_with_separators():
    text = format_parameter_table(get_preset("gpt2-seed002"))
    lines = text.splitlines()
    assert "38,633,472" in text and "163,109,376" in text
    assert lines[-1].startswith("total") and lines[-1].endswith("163,109,376")
    widths = {len(line) for line in lines}
    assert len(widths) == 1, text  # every row has the same width: right-aligned numbers
    # tied model: lm_head absent from the rows, mentioned once as tied
    tied = format_parameter_table(get_preset("gpt2"))
    assert "124,439,808" in tied and "(lm_head.weight is wte.weight, counted once)" in tied
    assert not any(line.startswith("lm_head ") for line in tied.splitlines())


def test_tied_weights_counted_once(tiny_gpt_config):
    tied = build_model(tiny_gpt_config("gpt2", tie_embeddings=True))
    untied = build_model(tiny_gpt_config("gpt2", tie_embeddings=False))
    assert tied.lm_head.weight is tied.wte.weight
    assert tied_parameters(tied) == [("lm_head.weight", "wte.weight")]
    assert tied_parameters(untied) == []
    V, C = tied.config.vocab_size, tied.config.n_embd
    assert count_parameters(untied) - count_parameters(tied) == V * C
    # the naive sum over all names would count the shared matrix twice
    naive = sum(p.numel() for _, p in tied.named_parameters(remove_duplicate=False))
    assert naive - count_parameters(tied) == V * C


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(tie_embeddings=False),
        dict(position="rope", norm="rmsnorm", activation="swiglu", bias=False, n_kv_head=2, ffn_hidden=40),
        dict(position="sinusoidal", activation="geglu", n_kv_head=1, head_dim=6),
        dict(position="none", norm="rmsnorm", bias=True, head_dim=12),
    ],
)
def test_analytic_gpt_count_matches_real_tiny_models(tiny_gpt_config, overrides):
    cfg = tiny_gpt_config("gpt2", **overrides)
    model = build_model(cfg)  # a real, allocated model
    assert analytic_parameter_count(cfg) == parameter_table(model)
    assert analytic_total(cfg) == count_parameters(model)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(share_embeddings=True, tgt_vocab_size=23, tie_output=True),
        dict(norm_first=True, norm="rmsnorm", bias=False, position="learned"),
        dict(activation="swiglu", encoder_final_norm=True, decoder_final_norm=False, tie_output=True),
    ],
)
def test_analytic_transformer_count_matches_real_tiny_models(tiny_transformer_config, overrides):
    cfg = tiny_transformer_config(**overrides)
    model = build_model(cfg)
    assert analytic_parameter_count(cfg) == parameter_table(model)
    assert analytic_total(cfg) == count_parameters(model)


def test_meta_count_equals_real_count_for_a_small_preset():
    cfg = get_preset("char-small", vocab_size=65)
    assert count_parameters(build_model(cfg, device="meta")) == count_parameters(build_model(cfg))


def test_trainable_only_and_bad_arguments(tiny_gpt_config):
    model = build_model(tiny_gpt_config("gpt2"))
    total = count_parameters(model)
    model.wpe.weight.requires_grad_(False)
    assert count_parameters(model, trainable_only=True) == total - model.wpe.weight.numel()
    with pytest.raises(ValueError, match="depth must be an int >= 1, got 0"):
        parameter_table(model, depth=0)
    with pytest.raises(ValueError, match="expected an nn.Module or a GPTConfig/TransformerConfig, got dict"):
        count_parameters({"n_layer": 2})
