"""attnkit.viz.trace: forward-order module shapes with named axes, parameters, masks and head splits."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.models import build_model, count_parameters, get_preset
from attnkit.viz.trace import trace


def _row(t, name):
    rows = [r for r in t.rows if r.name == name]
    assert rows, f"no row named {name!r} in {[r.name for r in t.rows]}"
    return rows[0]


def test_gpt2_rows_in_forward_order_with_named_shapes(make_gpt):
    model = make_gpt("gpt2")  # vocab 41, 2 layers, 4 heads, width 32, tied head
    ids = torch.randint(0, 41, (2, 11))
    t = trace(model, ids)
    names = [r.name for r in t.rows]
    order = ["", "wte", "wpe", "blocks.0", "blocks.0.ln_1", "blocks.0.attn", "blocks.0.attn.qkv_proj",
             "blocks.0.attn.out_proj", "blocks.0.ln_2", "blocks.0.mlp", "blocks.1", "ln_f", "lm_head"]
    positions = [names.index(n) for n in order]
    assert positions == sorted(positions)
    assert _row(t, "").inputs == ["B=2 T=11"] and _row(t, "").output == "B=2 T=11 V=41"
    assert _row(t, "wte").output == "B=2 T=11 C=32"
    assert _row(t, "blocks.0.mlp.c_fc" if "blocks.0.mlp.c_fc" in names else "blocks.0.mlp.w_in").output \
        == "B=2 T=11 F=128"
    assert _row(t, "blocks.1").input_shapes == [[2, 11, 32]] and _row(t, "lm_head").output_shape == [2, 11, 41]
    assert {r.dtype for r in t.rows} == {"float32"}
    assert t.rows[0].depth == 0 and _row(t, "blocks.0.attn.qkv_proj").depth == 3


def test_parameters_and_shares(make_gpt):
    model = make_gpt("gpt2")
    t = trace(model, torch.randint(0, 41, (1, 5)))
    total = count_parameters(model)
    assert t.total_params == total and _row(t, "").params == total and _row(t, "").share == 1.0
    top = [r for r in t.rows if r.depth == 1]
    assert sum(r.params for r in top) == total  # each tensor counted once
    head = _row(t, "lm_head")
    assert head.params == 0 and head.tied  # tied to wte: counted there
    assert _row(t, "wte").params == 41 * 32
    assert _row(t, "blocks.0").share == pytest.approx(_row(t, "blocks.0").params / total)


def test_attention_mask_and_head_split_gpt(make_gpt):
    t = trace(make_gpt("gpt2"), torch.randint(0, 41, (2, 11)))
    att = _row(t, "blocks.1.attn").attention
    assert att["mask"].startswith("causal")
    assert att["heads"] == "(B, T, C) -> (B, H, T, D)  B=2 T=11 C=32 H=4 D=8"
    assert _row(t, "blocks.1.ln_1").attention is None


def test_llama_grouped_query_and_rotary_inside_attention(make_gpt):
    t = trace(make_gpt("llama"), torch.randint(0, 41, (1, 6)))
    att = _row(t, "blocks.0.attn").attention
    assert "K=2" in att["heads"] and "2 query heads share each key/value head" in att["heads"]
    rot = [r for r in t.rows if r.name == "blocks.0.attn.rotary"]
    assert len(rot) == 2  # applied to q and to k
    assert rot[0].inputs[0] == "B=1 H=4 T=6 D=8" and rot[1].inputs[0] == "B=1 K=2 T=6 D=8"
    assert t.axes["K"] == 2


def test_encoder_decoder_masks_and_cross_attention(make_transformer):
    model = make_transformer()  # pad_id 0
    src = torch.randint(1, 37, (2, 9))
    src[1, 6:] = 0  # three padded source positions in row 1
    tgt = torch.randint(1, 29, (2, 5))
    t = trace(model, (src, tgt))
    assert t.axes["S"] == 9 and t.axes["T"] == 5
    enc = _row(t, "core.encoder.layers.0.self_attn")
    assert enc.inputs == ["B=2 S=9 C=32"] and enc.output == "B=2 S=9 C=32"
    assert enc.attention["mask"] == "key_padding_mask (B=2 S=9), 3 padded keys"  # not causal
    assert enc.attention["heads"].startswith("(B, S, C) -> (B, H, S, D)  B=2 S=9")
    dec = _row(t, "core.decoder.layers.1.self_attn")
    assert dec.attention["mask"].startswith("causal") and dec.output == "B=2 T=5 C=32"
    cross = _row(t, "core.decoder.layers.0.cross_attn")
    assert cross.inputs == ["B=2 T=5 C=32", "B=2 S=9 C=32"]
    assert cross.attention["mask"] == "key_padding_mask (B=2 S=9), 3 padded keys"
    assert cross.attention["heads"].startswith("q (B, T, C) -> (B, H, T, D)") and "S=9" in cross.attention["heads"]
    assert _row(t, "generator").output == "B=2 T=5 V=29"


def test_seed000_configuration():
    model = build_model(get_preset("transformer-seed000"))
    t = trace(model, (torch.randint(0, 256, (3, 12)), torch.randint(0, 256, (3, 7))))
    assert _row(t, "").output == "B=3 T=7 V=256"
    heads = _row(t, "core.decoder.layers.2.cross_attn").attention["heads"]
    assert heads.startswith("q (B, T, C) -> (B, H, T, D)  B=3 T=7 C=128 H=4 D=32")
    assert _row(t, "core.encoder.layers.0.self_attn").attention["mask"].startswith("none")
    assert len([r for r in t.rows if r.kind == "EncoderLayer"]) == 2
    assert len([r for r in t.rows if r.kind == "DecoderLayer"]) == 3


def test_depth_folds_deeper_calls(make_gpt):
    t = trace(make_gpt("gpt2"), torch.randint(0, 41, (1, 4)))
    shallow = t.format(depth=1)
    assert "blocks.0 (Block)" in shallow and "blocks.0.attn" not in shallow and "mask:" not in shallow
    assert "blocks.0.attn.qkv_proj" in t.format()
    assert [r.name for r in t.visible(0)] == [""]
    with pytest.raises(ValueError, match="depth must be >= 0"):
        t.format(depth=-1)


def test_json(make_gpt):
    t = trace(make_gpt("gpt2"), torch.randint(0, 41, (2, 3)))
    data = json.loads(t.to_json(depth=2))
    assert data["model"] == "GPT" and data["axes"]["B"] == 2 and data["axes"]["T"] == 3
    assert [r["name"] for r in data["rows"]] == [r.name for r in t.visible(2)]
    assert data["rows"][0]["output_shape"] == [2, 3, 41]


def test_model_is_unchanged(make_gpt):
    model = make_gpt("gpt2").train()
    ids = torch.randint(0, 41, (2, 7))
    model.eval()
    before = model(ids)
    model.train()
    trace(model, ids)
    assert model.training  # flag restored
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    model.eval()
    assert torch.equal(model(ids), before)


def test_hooks_removed_when_forward_raises(make_gpt):
    model = make_gpt("gpt2")
    with pytest.raises(ValueError):
        trace(model, torch.full((1, 3), 41))  # id == vocab size
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_bad_inputs(make_gpt):
    with pytest.raises(ValueError, match="nn.Module"):
        trace("not a model", torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="no tensor"):
        trace(make_gpt("gpt2"), [])
    with pytest.raises(ValueError, match="tensor, a tuple/list or a dict"):
        trace(make_gpt("gpt2"), 3)
