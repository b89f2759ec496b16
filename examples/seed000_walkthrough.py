"""Seed 000, step by step, with attnkit's modules: where a reader of seed 000 starts.

Run it:  python examples/seed000_walkthrough.py      (a few seconds on a CPU; prints every shape)
Open it as a notebook: Jupyter (with jupytext) or VS Code read the ``# %%`` cells.
The map from this text to attnkit's files and tests: docs/from-the-seeds.md, section 1. The next seeds:
examples/seed001_multihead_attention.py, seed002_gpt2.py, seed002_finetune_jokes.py, seed003_encoder_decoder.py,
seed004_embeddings.py; and, as the Annotated Transformer does, annotated_lr_schedule.py,
annotated_label_smoothing.py and annotated_copy_task.py.

Seed 000 builds a Transformer one module at a time and prints shapes by hand. This script follows it in the
same order — RMSNorm, the SiLU feed-forward, single-head attention, MultiHeadAttention with per-head
dimensions, the loop positional encoding, generate_mask_mat, encoder and decoder, the whole Transformer
returning probabilities, greedy next-token choice — with the seed's own example configuration, and calls the
attnkit module that implements each step. Where the seed goes wrong (a loop over every element, ids drawn one
past the vocabulary, a mask built but never passed, a decoder that attends to itself when given no encoder
output), the script says so and does it right.

Axis legend: B batch, S source length, T target length, C model width (the seed's dim_emb), H heads
(head_num), D head dim (dim_head), F feed-forward width, V vocabulary.
"""

# %%
from __future__ import annotations

import math

import torch

from _walkthrough import command_line, error_of, section, setup, show
from attnkit.models import build_model, get_preset
from attnkit.modules import (FeedForward, MultiHeadAttention, RMSNorm, causal_mask, generate_mask_mat,
                             positional_encoding, reference_attention)
from attnkit.viz.trace import model_axes

setup(seed=0)
command_line()  # --help; it draws no figures, so it takes no --out

# the seed's example configuration
encoder_num, decoder_num = 2, 3
vocab_size, dim_emb, dim_head, head_num = 256, 128, 32, 4
batch, input_seq_len, output_seq_len = 3, 12, 7
x = torch.randn(batch, input_seq_len, dim_emb)  # stands for embedded tokens

# %% [markdown]
# ## 1. RMSNorm / 归一化
#
# Divide each vector by its root mean square and scale by a learned gain, computed in float32 and cast back.
# 除以均方根，再乘以可学习的缩放。

# %%
section("1. RMSNorm", "归一化")
print("  x / rms(x) * weight, computed in float32 and cast back")
norm = RMSNorm(dim_emb)
show("x", x, "B, S, C")
show("RMSNorm(dim_emb)(x)", norm(x), "B, S, C")
rms = norm(x).pow(2).mean(-1).sqrt()
assert torch.allclose(rms, torch.ones_like(rms), atol=1e-3)
print(f"     rms of each output row ~ 1: {rms.mean():.3f}")

# %% [markdown]
# ## 2. FeedForward / 前馈网络
#
# ``Linear(C, 4C)``, SiLU, ``Linear(4C, C)``, no biases.
# 先升维再降维，中间是 SiLU 激活。

# %%
section("2. FeedForward", "前馈网络")
print("  Linear(C, 4C) -> SiLU -> Linear(4C, C), no biases")
ff = FeedForward(dim_emb, 4 * dim_emb, activation="silu", bias=False)
show("w_in(x): the hidden layer", ff.w_in(x), "B, S, F")
show("FeedForward(x)", ff(x), "B, S, C")
assert torch.allclose(ff(x), ff.w_out(torch.nn.functional.silu(ff.w_in(x))), atol=1e-6)

# %% [markdown]
# ## 3. Single-head attention / 单头注意力
#
# ``softmax(q kᵀ / √d) v``: every weight row sums to 1.
# 缩放点积注意力：每行权重之和为 1。

# %%
section("3. Single-head attention", "单头注意力")
print("  softmax(q k^T / sqrt(d)) v")
w_q, w_k, w_v = (torch.nn.Linear(dim_emb, dim_head, bias=False) for _ in range(3))
q, k, v = w_q(x)[:, None], w_k(x)[:, None], w_v(x)[:, None]  # one head: (B, 1, S, D)
show("q = x W_q (one head)", q, "B, 1, S, D")
out, weights = reference_attention(q, k, v)
show("attention weights", weights, "B, 1, S, S")
show("attention output", out, "B, 1, S, D")
assert torch.allclose(weights, (q @ k.transpose(-2, -1) / math.sqrt(dim_head)).softmax(-1), atol=1e-6)
print(f"     each weight row sums to 1: {torch.allclose(weights.sum(-1), torch.ones(1))}")

# %% [markdown]
# ## 4. MultiHeadAttention(dim_emb, dim_head, dim_out, head_num) / 多头注意力
#
# The seed keeps a Python list of heads, concatenates their outputs and projects them by ``W``. attnkit packs
# every head's projections into one matrix; ``head_dim`` may be chosen freely, as in the seed.
# 种子文章用列表保存各个头；attnkit 把所有头的投影打包成一个矩阵。

# %%
section("4. MultiHeadAttention(dim_emb, dim_head, dim_out, head_num)", "多头注意力")
mha = MultiHeadAttention(dim_emb, head_num, head_dim=dim_head, out_dim=dim_emb, bias=False)
q_all = mha.qkv_proj(x)[..., : head_num * dim_head]
show("packed projection qkv_proj(x), q part", q_all, "B, S, H*D")
heads = q_all.view(batch, input_seq_len, head_num, dim_head).transpose(1, 2)
show("split into heads", heads, "B, H, S, D")
y, per_head = mha(x, need_weights=True, average_attn_weights=False)
show("weights of every head", per_head, "B, H, S, S")
show("heads concatenated and projected by W", y, "B, S, C")
print(f"     the seed's list of {head_num} heads is one packed matrix here: "
      f"qkv_proj {tuple(mha.qkv_proj.weight.shape)}, out_proj {tuple(mha.out_proj.weight.shape)}")
wide = MultiHeadAttention(dim_emb, head_num, head_dim=48, out_dim=dim_emb, bias=False)
y_wide, w_wide = wide(x, need_weights=True, average_attn_weights=False)
assert w_wide.shape == (batch, head_num, input_seq_len, input_seq_len) and y_wide.shape == x.shape
print(f"     dim_head need not be dim_emb / head_num: head_dim=48 gives heads (B, H, S, D) = "
      f"{(batch, head_num, input_seq_len, 48)}, concatenated H*D = {head_num * 48}, W back to C:")
show("MultiHeadAttention(128, 4, head_dim=48)(x)", y_wide, "B, S, C")

# %% [markdown]
# ## 5. positional_encoding(batch, seq_len, dim) / 位置编码
#
# Sines on the even channels, cosines on the odd ones. The seed fills the table with three nested Python loops,
# one element at a time; attnkit computes it in one vectorised step, with the same numbers.
# 偶数通道用 sin，奇数通道用 cos；种子文章用三重循环逐个元素计算。

# %%
section("5. positional_encoding(batch, seq_len, dim)", "位置编码")
print("  sin on even, cos on odd channels")


def seed_loop_positional_encoding(batch: int, seq_len: int, dim: int) -> torch.Tensor:
    """The seed's positional_encoding: three nested Python loops, one element at a time (kept to compare)."""
    pe = torch.zeros(batch, seq_len, dim)
    for b in range(batch):
        for pos in range(seq_len):
            for i in range(dim):
                if i % 2 == 0:
                    pe[b, pos, i] = math.sin(pos / (10000 ** (i / dim)))
                else:
                    pe[b, pos, i] = math.cos(pos / (10000 ** ((i - 1) / dim)))
    return pe


pe = positional_encoding(batch, input_seq_len, dim_emb)
loop = seed_loop_positional_encoding(batch, input_seq_len, dim_emb)
show("positional_encoding (vectorised)", pe, "B, S, C")
assert torch.allclose(pe, loop, atol=1e-5)
print(f"     equal to the seed's triple loop: max |diff| = {(pe - loop).abs().max():.1e}")

# %% [markdown]
# ## 6. generate_mask_mat(seq_len, masked_len) / 掩码
#
# Element ``[i, j]`` is masked (``True`` = may not attend) when ``seq_len - j + i <= masked_len``; with
# ``masked_len = seq_len - 1`` that is the look-ahead mask.
# masked_len = seq_len - 1 时就是前瞻掩码。

# %%
section("6. generate_mask_mat(seq_len, masked_len)", "掩码")
print("  True = may not attend")
mask = generate_mask_mat(output_seq_len, output_seq_len - 1)
show("generate_mask_mat(7, 6)", mask, "T, T")
assert torch.equal(mask, causal_mask(output_seq_len))
print(f"     with masked_len = seq_len - 1 it is the look-ahead mask: "
      f"{torch.equal(mask, causal_mask(output_seq_len))}")
print("     row 0 (the first target token sees only itself):", mask[0].int().tolist())

# %% [markdown]
# ## 7-8. The Transformer: encoders and decoders / 编码器与解码器
#
# The seed's configuration is the preset ``transformer-seed000`` (post-norm RMSNorm blocks). The seed draws ids
# with ``random.randint(0, vocab_size)``, which can return ``vocab_size`` itself, one past the embedding table;
# attnkit refuses such an id. The seed's demo builds a mask and never passes it; attnkit's decoder applies the
# causal mask itself. Given no encoder output, the seed's decoder attends to itself a second time; attnkit's refuses.
# 种子文章的示例可能取到越界的编号，构造的掩码从未传入模型，没有编码器输出时解码器退化为第二次自注意力。

# %%
section("7-8. The Transformer: encoders and decoders", "编码器与解码器")
print("  post-norm RMSNorm blocks")
model = build_model(get_preset("transformer-seed000")).eval()
layers = (model.config.num_encoder_layers, model.config.num_decoder_layers)
assert layers == (encoder_num, decoder_num)
print(f"     preset transformer-seed000: {layers[0]} encoders, {layers[1]} decoders, axes {model_axes(model)}")
# torch.randint's upper bound is exclusive, so every id here is in [0, V).
src = torch.randint(0, vocab_size, (batch, input_seq_len))
tgt = torch.randint(0, vocab_size, (batch, output_seq_len))
error_of(lambda: model.encode(torch.tensor([[vocab_size]])), ValueError)
print(f"     ids in [0, {vocab_size}) (the seed's random.randint(0, vocab_size) can draw {vocab_size}, one past "
      f"the table: attnkit refuses it with a ValueError)")
show("input_seq (source ids)", src, "B, S")
show("output_seq (target ids)", tgt, "B, T")
no_memory = error_of(lambda: model.decode(tgt, None), ValueError)
print(f"     the decoder without the encoder's output is refused (the seed's attends to itself again): {no_memory}")
with torch.no_grad():
    memory = model.encode(src)
    show("encoder output (memory)", memory, "B, S, C")
    probs = model.predict_proba(src, tgt)
    later = tgt.clone()
    later[:, 4:] = (later[:, 4:] + 1) % vocab_size
    assert torch.allclose(model.predict_proba(src, later)[:, :4], probs[:, :4], atol=1e-6)
print("     the decoder applies the causal mask itself (the seed's demo built mask_mat and never passed it): "
      "changing target tokens 4.. leaves positions 0-3 unchanged")
show("probabilities (softmax over the vocabulary)", probs, "B, T, V")
assert torch.allclose(probs.sum(-1), torch.ones(1), atol=1e-5)
print(f"     every row sums to 1: {torch.allclose(probs.sum(-1), torch.ones(1), atol=1e-5)}")

# %% [markdown]
# ## 9. Greedy next token / 贪心选择下一个词
#
# The most probable token of the last position.
# 取最后一个位置概率最大的词。

# %%
section("9. Greedy next token", "贪心选择下一个词")
print("  argmax over the last position")
next_token = torch.argmax(probs[:, -1, :], dim=-1)
show("next_token", next_token, "B")
print("     next tokens:", next_token.tolist())
