"""attnkit.viz.trace: forward-order module shapes with named axes, parameters, masks and head splits."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.models import build_model, count_parameters, get_preset
from attnkit.viz.trace import trace
from attnkit.viz.trace_axes import shape_text


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


def test_json_in_step_with_the_table(make_gpt):
    t = trace(make_gpt("gpt2"), torch.randint(0, 41, (2, 3)))
    for depth in (1, 3):
        data, table = json.loads(t.to_json(depth)), t.format(depth)
        lines = table.splitlines()
        assert data["legend"] == t.legend_lines(t.visible(depth))
        assert all(" ".join(text.split()[:4]) in " ".join(table.split()) for text in data["legend"])
        assert ("3C = 96" in table) == (depth == 3) == any(text.startswith("3C") for text in data["legend"])
        assert data["totals"] == t.totals.to_dict() and f"{data['totals']['mult_adds']:,}" in table
        for r in data["rows"]:
            line = next(x for x in lines if x.strip().startswith(f"{r['name'] or '(model)'} ({r['kind']}"))
            assert r["output"] in line and " | ".join(r["inputs"]) in line
            assert (f"{r['mult_adds']:,}" if r["mult_adds"] else "--") in line
            assert shape_text(r["output_shape"], r["output_axes"]) == r["output"]


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


# --------------------------------------------------------------------------------------------------
# named axes: packed and derived widths, position tables, no guesses on arbitrary modules
# --------------------------------------------------------------------------------------------------

def test_packed_widths_are_named_with_a_legend(make_gpt, make_transformer):
    gpt = trace(make_gpt("gpt2"), torch.randint(0, 41, (2, 11)))  # C = 32, H = 4, D = 8
    qkv = _row(gpt, "blocks.0.attn.qkv_proj")
    assert qkv.output == "B=2 T=11 3C=96" and qkv.output_axes == ["B", "T", "3C"]
    assert _row(gpt, "blocks.0.attn.out_proj").inputs == ["B=2 T=11 C=32"]
    assert "3C = 96: q | k | v packed side by side in qkv_proj's output (each H·D = C)" in gpt.format()

    llama = trace(make_gpt("llama"), torch.randint(0, 41, (1, 6)))  # H = 4, K = 2, D = 8: (4 + 2·2)·8 = 64
    assert _row(llama, "blocks.0.attn.qkv_proj").output == "B=1 T=6 (H+2K)·D=64"
    assert "(H+2K)·D = 64: q (H·D) | k (K·D) | v (K·D)" in llama.format()
    assert "3C" not in llama.format()

    seq = trace(make_transformer(), (torch.randint(1, 37, (2, 9)), torch.randint(1, 29, (2, 5))))
    assert _row(seq, "core.decoder.layers.0.cross_attn.q_proj").output == "B=2 T=5 C=32"
    assert _row(seq, "core.decoder.layers.0.cross_attn.kv_proj").output == "B=2 S=9 2C=64"
    assert _row(seq, "core.encoder.layers.0.self_attn.qkv_proj").output == "B=2 S=9 3C=96"
    lines = seq.legend_lines(seq.rows)
    assert any(line.startswith("2C = 64: k | v packed") for line in lines)
    assert not any(line.startswith("3C") for line in seq.legend_lines(seq.visible(2)))  # folded: not shown


def test_learned_position_table_is_T_by_C_even_when_B_equals_T(make_gpt):
    t = trace(make_gpt("gpt2"), torch.randint(0, 41, (4, 4)))  # B = T = 4: the (T, C) table has no batch axis
    wpe = _row(t, "wpe")
    assert wpe.inputs == ["T=4"] and wpe.output == "T=4 C=32" and wpe.output_axes == ["T", "C"]
    assert _row(t, "wte").output == "B=4 T=4 C=32"
    assert any(line.startswith("(T, C): position tables") for line in t.legend_lines(t.rows))


def test_seed000_sinusoidal_positions_appear_as_rows():
    model = build_model(get_preset("transformer-seed000"))
    t = trace(model, (torch.randint(0, 256, (3, 12)), torch.randint(0, 256, (3, 7))))
    names = [r.name for r in t.rows]
    assert names.index("src_embed.tok") < names.index("src_embed.pos") < names.index("core.encoder")
    assert names.index("tgt_embed.tok") < names.index("tgt_embed.pos") < names.index("core.decoder")
    src_pos, tgt_pos = _row(t, "src_embed.pos"), _row(t, "tgt_embed.pos")
    assert src_pos.call == tgt_pos.call == "forward_len" and src_pos.depth == 2
    assert src_pos.inputs == ["S=12"] and src_pos.output == "S=12 C=128" and src_pos.output_bytes == 12 * 128 * 4
    assert tgt_pos.inputs == ["T=7"] and tgt_pos.output == "T=7 C=128"
    table = t.format()
    assert "src_embed.pos (SinusoidalPositionalEncoding.forward_len)" in table
    assert "(S, C), (T, C): position tables" in table
    # the wrapper is gone afterwards: the class's method again, and the model computes as before
    assert "forward_len" not in vars(model.src_embed.pos) and "forward_len" not in vars(model.tgt_embed.pos)


def test_rotary_steps_are_rows(make_gpt):
    t = trace(make_gpt("llama"), torch.randint(0, 41, (2, 6)))
    rot = [r for r in t.rows if r.name == "blocks.1.attn.rotary"]
    assert [r.inputs for r in rot] == [["B=2 H=4 T=6 D=8", "T=6"], ["B=2 K=2 T=6 D=8", "T=6"]]
    assert [r.output for r in rot] == ["B=2 H=4 T=6 D=8", "B=2 K=2 T=6 D=8"]


def test_sequential_gets_plain_sizes_never_guessed_names():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    t = trace(model, torch.randn(2, 8))
    assert t.axes == {} and t.legend == {}
    assert [(r.inputs, r.output) for r in t.rows] == [
        (["(2, 8)"], "(2, 4)"), (["(2, 8)"], "(2, 16)"), (["(2, 16)"], "(2, 16)"), (["(2, 16)"], "(2, 4)")]
    assert all(n is None for r in t.rows for n in r.output_axes)
    table = t.format()
    assert table.splitlines()[0].startswith("Sequential: 212 parameters; no axis is known")
    for guess in ("B=", "T=", "L=", "C=", "S="):
        assert guess not in table
    with pytest.raises(ValueError, match="lengths names the length axes of an attnkit model"):
        trace(model, torch.randn(2, 8), lengths={"T": 8})



@pytest.mark.parametrize("lengths", [{"T": "11"}, {"X": 11}, {"T": 0}, {"T": True}, 11, {}])
def test_bad_lengths_are_refused(make_gpt, lengths):
    with pytest.raises(ValueError, match="lengths must map 'S' and/or 'T' to positive ints"):
        trace(make_gpt("gpt2"), torch.randint(0, 41, (2, 11)), lengths=lengths)


def test_scalar_input_gets_the_models_own_error(make_gpt):
    with pytest.raises(ValueError, match=r"idx must have shape \(B, T\), got 0-D"):
        trace(make_gpt("gpt2"), torch.tensor(3))

def test_encoder_decoder_of_equal_lengths_names_source_and_target(make_transformer):
    t = trace(make_transformer(), (torch.randint(1, 37, (2, 6)), torch.randint(1, 29, (2, 6))))  # S = T = 6
    assert _row(t, "").inputs == ["B=2 S=6", "B=2 T=6"]
    assert _row(t, "core.decoder.layers.1.cross_attn").inputs == ["B=2 T=6 C=32", "B=2 S=6 C=32"]
    assert _row(t, "core.encoder.layers.0.ff.w_in").output == "B=2 S=6 F=48"


# --------------------------------------------------------------------------------------------------
# mult-adds, memory, totals
# --------------------------------------------------------------------------------------------------

def test_linear_mult_adds_by_hand():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    t = trace(model, torch.randn(3, 5, 8))  # 15 rows
    first, relu, last = t.rows[1:]
    assert first.mult_adds == first.own_mult_adds == 15 * 8 * 16  # one per weight per row; the bias is no product
    assert relu.mult_adds == 0 and last.mult_adds == 15 * 16 * 4
    assert t.rows[0].mult_adds == 15 * 8 * 16 + 15 * 16 * 4 and t.rows[0].own_mult_adds == 0
    assert first.output_bytes == 15 * 16 * 4 and relu.output_bytes == 15 * 16 * 4


def test_attention_mult_adds_by_hand():
    from attnkit.modules.multi_head_attention import MultiHeadAttention

    B, T, C, H, K, D = 2, 5, 32, 4, 2, 8
    layer = MultiHeadAttention(C, H, num_kv_heads=K).eval()
    x = torch.randn(B, T, C)
    qkv = B * T * C * (H + 2 * K) * D  # 20,480
    scores_and_sum = B * H * T * T * (D + D)  # q·kᵀ and weights·v: 3,200
    out = B * T * (H * D) * C  # 10,240
    for inputs in (x, {"query": x, "need_weights": True}):  # fused kernel, then the explicit softmax
        t = trace(layer, inputs)
        row = t.rows[0]
        assert row.own_mult_adds == scores_and_sum
        assert row.mult_adds == qkv + scores_and_sum + out == 33_920
        assert _row(t, "qkv_proj").mult_adds == qkv and _row(t, "out_proj").mult_adds == out
        assert row.attention["products"].startswith("scores q·kᵀ and weighted sum of v: 3,200 mult-adds")


def test_cross_attention_mult_adds_by_hand(make_transformer):
    B, S, T, C, H, D = 2, 9, 5, 32, 4, 8
    t = trace(make_transformer(), (torch.randint(1, 37, (B, S)), torch.randint(1, 29, (B, T))))
    cross = _row(t, "core.decoder.layers.0.cross_attn")
    assert cross.own_mult_adds == B * H * T * S * 2 * D
    assert cross.mult_adds == B * T * C * C + B * S * C * 2 * C + B * H * T * S * 2 * D + B * T * C * C


def test_footer_totals(make_gpt):
    model = make_gpt("llama")  # untied, no buffers shared with parameters
    ids = torch.randint(0, 41, (2, 7))
    t = trace(model, ids)
    total = count_parameters(model)
    tot = t.totals
    assert tot.params == total == tot.trainable_params and tot.frozen_params == 0
    assert tot.param_bytes == 4 * total and tot.input_bytes == ids.numel() * 8
    assert tot.buffer_bytes == sum(b.numel() * b.element_size() for b in model.buffers()) > 0
    assert tot.mult_adds == t.rows[0].mult_adds == sum(r.own_mult_adds for r in t.rows)
    assert tot.total_bytes == tot.input_bytes + tot.activation_bytes + tot.param_bytes + tot.buffer_bytes
    # every row's mult-adds: its own plus those of the calls nested directly inside it
    for i, r in enumerate(t.rows):
        inside = []
        for s in t.rows[i + 1:]:
            if s.depth <= r.depth:
                break
            inside.append(s)
        assert r.mult_adds == r.own_mult_adds + sum(s.mult_adds for s in inside if s.depth == r.depth + 1)
    footer = t.format().splitlines()[-9:]
    assert footer[0] == f"Total params:            {total:,}"
    assert footer[2] == "Frozen params:           0"
    assert footer[3].startswith("Total mult-adds:") and f"{tot.mult_adds:,}" in footer[3]
    assert footer[8].startswith("Estimated total size:")


def test_forward_activation_size_counts_each_returned_tensor_once():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    t = trace(model, torch.randn(3, 8))
    # Linear, ReLU and Linear return new tensors; the Sequential returns the last one again
    assert t.totals.activation_bytes == (3 * 16 + 3 * 16 + 3 * 4) * 4
    assert t.totals.buffer_bytes == 0 and t.totals.input_bytes == 3 * 8 * 4


def test_lora_trainable_and_frozen_split(make_gpt):
    from attnkit.modules.lora import apply_lora, mark_only_lora_trainable

    model = make_gpt("gpt2")  # C = 32, 2 layers
    base = count_parameters(model)
    apply_lora(model, rank=4, targets=("qkv_proj", "out_proj"))
    mark_only_lora_trainable(model)
    t = trace(model, torch.randint(0, 41, (1, 5)))
    per_layer = 4 * (32 + 96) + 4 * (32 + 32)  # r · (in + out) for qkv_proj and out_proj
    assert t.totals.trainable_params == 2 * per_layer and t.totals.frozen_params == base
    qkv = _row(t, "blocks.0.attn.qkv_proj")
    assert qkv.kind == "LoRALinear" and qkv.trainable == 4 * (32 + 96) and qkv.params == 32 * 96 + 96 + 4 * (32 + 96)
    assert qkv.output == "B=1 T=5 3C=96"
    assert qkv.mult_adds == 5 * 32 * 96 + 5 * 32 * 4 + 5 * 4 * 96  # the frozen product plus A and B
    assert _row(t, "wte").trainable == 0
    table = t.format()
    header = next(line for line in table.splitlines() if line.startswith("module"))
    assert "trainable" in header.split()
    assert f"Trainable params:        {2 * per_layer:,}" in table and f"Frozen params:           {base:,}" in table


def test_products_without_a_formula_are_reported():
    layer = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(2, 5, 16)
    t = trace(layer, (x, x, x))
    # torch's fused inference kernel has no formula: the total is never silently short
    assert t.totals.mult_adds > 0 or any("attention" in name for name in t.uncounted)
    if t.uncounted:
        assert t.format().splitlines()[-1].startswith("Not counted (no formula): ")


@pytest.mark.parametrize("mode", ["reference", "weight_only", "dynamic"])
def test_quantized_linear_products_are_counted(make_gpt, mode):
    from attnkit.modules.quantized_linear import quantize_linear_layers

    model = make_gpt("gpt2")  # C = 32, F = 128
    quantize_linear_layers(model, mode=mode)
    t = trace(model, torch.randint(0, 41, (2, 5)))
    w_in = _row(t, "blocks.0.mlp.w_in")
    assert w_in.kind == "QuantizedLinear" and w_in.mult_adds == 2 * 5 * 32 * 128  # rows · in · out, as the Linear
    assert t.uncounted == {}  # weight packing is no product


def test_int8_kernel_probe_is_not_counted(monkeypatch):
    # QuantizedLinear probes the int8 kernel once per process, on its first call: not a product of the model
    from attnkit.modules import quantized_linear
    from attnkit.modules.quantized_linear import QuantizedLinear

    monkeypatch.setattr(quantized_linear, "_KERNEL_EXACT", None)  # as in a fresh process
    layer = QuantizedLinear.from_linear(torch.nn.Linear(16, 8), mode="dynamic")
    t = trace(layer, torch.randn(3, 16))
    assert t.totals.mult_adds == t.rows[0].mult_adds == 3 * 16 * 8


@pytest.mark.parametrize("S, T", [(7, 4), (6, 6)])
def test_shared_embeddings_decoder_call_is_tgt_embed_counted_once(make_transformer, S, T):
    # share_embeddings=True: tgt_embed IS src_embed. The decoder-side call must be named tgt_embed, run along T,
    # and show its parameters as tied (already counted at src_embed), so the top-level shares sum to 100%.
    model = make_transformer(src_vocab_size=29, tgt_vocab_size=29, share_embeddings=True)
    assert model.tgt_embed is model.src_embed
    t = trace(model, (torch.randint(1, 29, (2, S)), torch.randint(1, 29, (2, T))))
    top = [r for r in t.rows if r.depth == 1]
    assert [r.name for r in top if "embed" in r.name] == ["src_embed", "tgt_embed"]
    src, tgt = _row(t, "src_embed"), _row(t, "tgt_embed")
    assert src.inputs == [f"B=2 S={S}"] and src.output == f"B=2 S={S} C=32"
    assert tgt.inputs == [f"B=2 T={T}"] and tgt.output == f"B=2 T={T} C=32"
    assert src.params == 29 * 32 and not src.tied
    assert tgt.params == 0 and tgt.trainable == 0 and tgt.tied and tgt.share == 0.0
    assert _row(t, "tgt_embed.tok").params == 0 and _row(t, "tgt_embed.tok").tied
    assert not any(r.name.startswith("src_embed") and f"T={T}" in " ".join(r.inputs) and S != T for r in t.rows)
    assert sum(r.params for r in top) == t.total_params  # each tensor counted once
    assert "0 tied" in t.format(depth=1)


def test_unshared_embeddings_keep_their_parameters(make_transformer):
    t = trace(make_transformer(), (torch.randint(1, 37, (2, 5)), torch.randint(1, 29, (2, 4))))
    assert _row(t, "src_embed").params == 37 * 32 and _row(t, "tgt_embed").params == 29 * 32
    assert not _row(t, "tgt_embed").tied
    assert sum(r.params for r in t.rows if r.depth == 1) == t.total_params


def test_units_roll_over_as_printed():
    from attnkit.viz.trace_cost import human_bytes, human_count

    assert [human_bytes(n) for n in (999, 999_994, 999_999, 999_995_000, 1_500_000)] == \
        ["999 B", "999.99 kB", "1.00 MB", "1.00 GB", "1.50 MB"]
    assert [human_count(n) for n in (999_999, 1_234_567, 999_999_999, 999_995_000_000)] == \
        ["999,999", "1.23 M", "1.00 G", "1.00 T"]


def test_fused_attention_counts_the_value_head_dim_apart():
    """``B·H·T·S·(D + Dv)``: a fused kernel whose values have another head dim (CUDA's efficient attention)."""
    from attnkit.viz.trace_cost import _attention_mult_adds

    B, H, T, S, D, Dv = 2, 4, 3, 5, 8, 16
    q, k, v = torch.empty(B, H, T, D), torch.empty(B, H, S, D), torch.empty(B, H, S, Dv)
    assert _attention_mult_adds(q, k, v) == B * H * T * S * (D + Dv)
