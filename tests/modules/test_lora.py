"""Tests for attnkit.modules.lora: LoRALinear, apply_lora, merge_lora, parameter selection.

Axis legend: B batch, T positions, C width, V vocabulary, r rank.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnkit.models.gpt import GPT
import helpers
from attnkit.modules.lora import (DEFAULT_TARGETS, LoRALinear, apply_lora, linear_names, lora_parameters,
                                  lora_state_dict, mark_only_lora_trainable, merge_lora)
from helpers import assert_close

V = 61


def tiny_gpt(**kw) -> GPT:
    return GPT(helpers.tiny_gpt_config("llama", **(dict(vocab_size=V, block_size=32, tie_embeddings=True) | kw))).eval()


def ids(B=2, T=12):
    return torch.randint(0, V, (B, T))


def randomize_lora(model: nn.Module, std: float = 0.05) -> None:
    """Non-zero B everywhere (a freshly applied adapter is exactly zero)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, LoRALinear):
                m.lora_B.normal_(0.0, std)


# -------------------------------------------------------------------------------------------------
# LoRALinear
# -------------------------------------------------------------------------------------------------

def test_lora_linear_starts_as_the_base_layer_and_computes_the_low_rank_update():
    base = nn.Linear(20, 12)
    ref = nn.Linear(20, 12)
    ref.load_state_dict(base.state_dict())
    layer = LoRALinear(base, rank=4, alpha=8.0)
    x = torch.randn(3, 5, 20)  # (B, T, C_in)
    assert torch.equal(layer(x), ref(x))  # B = 0: exactly the pretrained layer
    assert torch.count_nonzero(layer.lora_A) > 0 and torch.count_nonzero(layer.lora_B) == 0
    with torch.no_grad():
        layer.lora_B.normal_()
    expected = ref(x) + (x @ layer.lora_A.T @ layer.lora_B.T) * (8.0 / 4)
    assert_close(layer(x), expected, "float32")
    torch.testing.assert_close(layer.delta_weight(), layer.lora_B @ layer.lora_A * 2.0)


def test_lora_linear_reuses_and_freezes_the_base_tensors():
    base = nn.Linear(8, 6, bias=True)
    layer = LoRALinear(base, rank=2, alpha=2.0)
    assert layer.weight is base.weight and layer.bias is base.bias
    assert not layer.weight.requires_grad and not layer.bias.requires_grad
    assert layer.lora_A.shape == (2, 8) and layer.lora_B.shape == (6, 2)
    assert set(layer.state_dict()) == {"weight", "bias", "lora_A", "lora_B"}
    nobias = LoRALinear(nn.Linear(8, 6, bias=False), rank=2, alpha=2.0)
    assert nobias.bias is None and set(nobias.state_dict()) == {"weight", "lora_A", "lora_B"}


def test_lora_linear_merged_equals_unmerged():
    layer = LoRALinear(nn.Linear(16, 10), rank=3, alpha=5.0)
    with torch.no_grad():
        layer.lora_B.normal_()
    x = torch.randn(4, 16)
    lin = layer.merged()
    assert type(lin) is nn.Linear and lin.weight.requires_grad
    assert_close(lin(x), layer(x), "float32")


def test_lora_dropout_only_in_training_mode():
    layer = LoRALinear(nn.Linear(16, 16), rank=4, alpha=4.0, dropout=0.5)
    with torch.no_grad():
        layer.lora_B.normal_()
    x = torch.randn(8, 16)
    layer.eval()
    assert_close(layer(x), layer.merged()(x), "float32")
    layer.train()
    assert not torch.allclose(layer(x), layer.merged()(x), atol=1e-4)


def test_lora_linear_rejects_wrong_input_width():
    layer = LoRALinear(nn.Linear(16, 4), rank=2, alpha=2.0)
    with pytest.raises(ValueError, match=r"\(\.\.\., 16\), got \(2, 15\)"):
        layer(torch.randn(2, 15))


def test_lora_linear_rejects_a_non_linear_base():
    with pytest.raises(ValueError, match="wraps an nn.Linear, got Conv1d"):
        LoRALinear(nn.Conv1d(3, 3, 1), rank=2, alpha=2.0)


# -------------------------------------------------------------------------------------------------
# apply_lora on a GPT
# -------------------------------------------------------------------------------------------------

def test_zero_init_lora_leaves_gpt_outputs_unchanged():
    model = tiny_gpt()
    x = ids()
    before = model(x)
    names = apply_lora(model, rank=4, alpha=8.0)
    assert names == [f"blocks.{i}.attn.{t}" for i in range(2) for t in ("qkv_proj", "out_proj")]
    assert torch.equal(model(x), before)


def test_targets_select_layers_by_short_name_or_dotted_suffix():
    model = tiny_gpt()
    names = apply_lora(model, rank=2, alpha=2.0, targets=("w_gate", "blocks.1.attn.qkv_proj"))
    assert names == ["blocks.0.mlp.w_gate", "blocks.1.attn.qkv_proj", "blocks.1.mlp.w_gate"]
    adapted = [n for n, m in model.named_modules() if isinstance(m, LoRALinear)]
    assert adapted == names
    assert isinstance(model.blocks[0].attn.qkv_proj, nn.Linear)  # not chosen: untouched
    assert DEFAULT_TARGETS == ("qkv_proj", "out_proj")


def test_unknown_target_lists_the_available_linear_names():
    model = tiny_gpt()
    with pytest.raises(ValueError) as err:
        apply_lora(model, rank=2, alpha=2.0, targets=("q_proj",))
    msg = str(err.value)
    assert "['q_proj']" in msg
    for name in ("lm_head", "out_proj", "qkv_proj", "w_gate", "w_in", "w_out"):
        assert name in msg
    assert linear_names(model) == ["lm_head", "out_proj", "qkv_proj", "w_gate", "w_in", "w_out"]


@pytest.mark.parametrize("rank", [0, -1, 2.0, True])
def test_rank_must_be_a_positive_int(rank):
    with pytest.raises(ValueError, match="rank must be an int >= 1"):
        apply_lora(tiny_gpt(), rank=rank, alpha=4.0)


@pytest.mark.parametrize("alpha", [0, -2.0, float("nan")])
def test_alpha_must_be_positive(alpha):
    with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
        apply_lora(tiny_gpt(), rank=2, alpha=alpha)


def test_dropout_must_be_in_unit_interval():
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\), got 1.0"):
        apply_lora(tiny_gpt(), rank=2, alpha=2.0, dropout=1.0)


def test_empty_targets_rejected():
    with pytest.raises(ValueError, match="non-empty sequence"):
        apply_lora(tiny_gpt(), rank=2, alpha=2.0, targets=())


def test_tied_lm_head_refused():
    with pytest.raises(ValueError, match="tied to 'wte.weight'"):
        apply_lora(tiny_gpt(), rank=2, alpha=2.0, targets=("lm_head",))
    untied = tiny_gpt(tie_embeddings=False)
    assert apply_lora(untied, rank=2, alpha=2.0, targets=("lm_head",)) == ["lm_head"]


def test_a_model_on_the_meta_device_takes_adapters_and_still_refuses_a_tied_head():
    """Every meta tensor reports address 0, so each target was refused as tied to wte.weight."""
    with torch.device("meta"):
        model = tiny_gpt()
    assert "lm_head" not in apply_lora(model, rank=2, alpha=2.0)
    with torch.device("meta"):
        model = tiny_gpt()
    with pytest.raises(ValueError, match="tied to 'wte.weight'"):
        apply_lora(model, rank=2, alpha=2.0, targets=("lm_head",))


def test_applying_twice_refused():
    model = tiny_gpt()
    apply_lora(model, rank=2, alpha=2.0)
    with pytest.raises(ValueError, match="already has LoRA adapters"):
        apply_lora(model, rank=2, alpha=2.0)


def test_mark_only_lora_trainable_needs_adapters():
    with pytest.raises(ValueError, match="no LoRA adapters"):
        mark_only_lora_trainable(tiny_gpt())


# -------------------------------------------------------------------------------------------------
# training and merging
# -------------------------------------------------------------------------------------------------

def test_only_lora_parameters_get_gradients():
    model = tiny_gpt()
    apply_lora(model, rank=4, alpha=8.0, targets=("qkv_proj", "out_proj", "w_out"))
    n_trainable = mark_only_lora_trainable(model)
    lora = lora_parameters(model)
    assert len(lora) == 2 * 6  # (A, B) x (3 targets x 2 layers)
    assert n_trainable == sum(p.numel() for p in lora)
    model.train()
    x = ids()
    loss = nn.functional.cross_entropy(model(x).reshape(-1, V), torch.roll(x, -1, 1).reshape(-1))
    loss.backward()
    lora_ids = {id(p) for p in lora}
    for name, p in model.named_parameters():
        if id(p) in lora_ids:
            assert p.grad is not None, name
        else:
            assert not p.requires_grad and p.grad is None, name
    # B starts at zero, so only B gets a gradient at step 0 (dL/dA = scaling * B^T dL/dy x = 0)
    for m in model.modules():
        if isinstance(m, LoRALinear):
            assert torch.count_nonzero(m.lora_B.grad) > 0
            assert torch.count_nonzero(m.lora_A.grad) == 0


def test_merged_model_equals_unmerged_after_training_steps():
    model = tiny_gpt()
    apply_lora(model, rank=4, alpha=16.0, targets=("qkv_proj", "out_proj", "w_in", "w_gate", "w_out"))
    mark_only_lora_trainable(model)
    frozen_before = {k: v.clone() for k, v in model.state_dict().items() if "lora_" not in k}
    opt = torch.optim.AdamW(lora_parameters(model), lr=1e-2)
    model.train()
    losses = []
    x = ids(4, 16)
    y = torch.roll(x, -1, 1)
    for _ in range(8):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    # the pretrained weights never moved
    for k, v in model.state_dict().items():
        if "lora_" not in k:
            assert torch.equal(v, frozen_before[k]), k
    model.eval()
    probe = ids(3, 20)
    with torch.no_grad():
        unmerged = model(probe)
        merge_lora(model)
        merged = model(probe)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    assert set(model.state_dict()) == set(tiny_gpt().state_dict())  # a plain GPT again
    assert_close(merged, unmerged, "float32")
    # the merge changed the weights (the adapters learned something)
    assert not torch.equal(model.blocks[0].attn.qkv_proj.weight, frozen_before["blocks.0.attn.qkv_proj.weight"])


def test_merged_state_dict_loads_into_a_plain_gpt():
    model = tiny_gpt()
    apply_lora(model, rank=2, alpha=4.0)
    randomize_lora(model)
    x = ids()
    with torch.no_grad():
        expected = model(x)
    merge_lora(model)
    plain = tiny_gpt()
    plain.load_state_dict(model.state_dict())  # strict: same keys as a model that never had adapters
    with torch.no_grad():
        assert_close(plain(x), expected, "float32")


def test_lora_state_dict_has_only_adapter_tensors():
    model = tiny_gpt()
    apply_lora(model, rank=2, alpha=4.0)
    sd = lora_state_dict(model)
    assert sorted(sd) == sorted(f"blocks.{i}.attn.{t}.{w}" for i in range(2) for t in ("qkv_proj", "out_proj")
                                for w in ("lora_A", "lora_B"))
    # the full state dict is the plain model's keys plus the adapters
    assert set(model.state_dict()) == set(tiny_gpt().state_dict()) | set(sd)


def test_merge_without_adapters_is_a_no_op():
    model = tiny_gpt()
    x = ids()
    before = model(x)
    assert merge_lora(model) is model
    assert torch.equal(model(x), before)


def test_kv_cache_generation_works_with_adapters():
    # MultiHeadAttention reads out_proj.weight for the cache dtype/device; LoRALinear keeps that name
    from attnkit.generation import generate

    model = helpers.spread_weights(tiny_gpt(), matrices_only=True).eval()  # varied output, not one token repeated
    apply_lora(model, rank=2, alpha=4.0)
    randomize_lora(model, std=0.3)
    prompt = ids(1, 5)[0].tolist()
    with torch.no_grad():
        a = generate(model, [prompt], max_new_tokens=12, use_cache=True)
        b = generate(model, [prompt], max_new_tokens=12, use_cache=False)
    assert a == b and len(a[0]) == 12
    assert len(set(a[0])) > 3, a  # a degenerate model would make the comparison empty


def test_lora_dropout_acts_on_the_adapter_path_only():
    """In training, dropout applies to the adapter's input only: with B = 0 (a fresh adapter) the output is the
    frozen layer's, exactly, whatever the dropout draws."""
    torch.manual_seed(0)
    base = nn.Linear(8, 6)
    lora = LoRALinear(base, rank=2, alpha=4.0, dropout=0.5).train()
    x = torch.randn(5, 8)
    assert torch.equal(lora(x), base(x))


def test_a_rank_past_the_layers_smaller_side_is_refused_before_any_layer_is_wrapped():
    """Was: ``finetune --lora --lora-rank 9223372036854775808`` ended in a traceback from ``torch.empty`` ("Overflow
    when unpacking long long"), and 2**31 asked torch's allocator for 275 GB."""
    with pytest.raises(ValueError, match=r"^LoRA rank must be <= min\(C_in, C_out\) = 4 of the layer \(16 -> 4\), "
                                         r"got 5$"):
        LoRALinear(nn.Linear(16, 4), rank=5, alpha=2.0)
    assert LoRALinear(nn.Linear(16, 4), rank=4, alpha=2.0).rank == 4
    model = tiny_gpt()
    for rank in (2**63, 2**31):
        with pytest.raises(ValueError, match=rf"^LoRA rank must be <= min\(C_in, C_out\) = \d+ of '.*' \(.*\), "
                                             rf"got {rank}$"):
            apply_lora(model, rank=rank, alpha=2.0)
        assert not any(isinstance(m, LoRALinear) for m in model.modules())


def test_the_rank_is_bounded_by_the_smaller_side_either_way_and_checked_for_every_layer_first():
    with pytest.raises(ValueError, match=r"^LoRA rank must be <= min\(C_in, C_out\) = 4 of the layer \(4 -> 16\)"):
        LoRALinear(nn.Linear(4, 16), rank=5, alpha=2.0)
    model = nn.Sequential()
    model.add_module("wide", nn.Linear(16, 16))
    model.add_module("narrow", nn.Linear(16, 2))
    with pytest.raises(ValueError, match=r"^LoRA rank must be <= min\(C_in, C_out\) = 2 of 'narrow' \(16 -> 2\)"):
        apply_lora(model, rank=4, alpha=2.0, targets=("wide", "narrow"))
    assert not any(isinstance(m, LoRALinear) for m in model.modules())  # "wide" (first, rank 4 fits) kept too
