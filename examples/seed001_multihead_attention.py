"""Seed 001, step by step: what happens inside ``torch.nn.MultiheadAttention``, next to attnkit's own layer.

Run it:  python examples/seed001_multihead_attention.py [--out DIR]     (a few seconds on a laptop CPU)
Open it as a notebook: Jupyter (with jupytext) or VS Code read the ``# %%`` cells.
The map from this text to attnkit's files and tests: docs/from-the-seeds.md, section 2.

Seed 001 reads PyTorch's multi-head attention line by line: token embedding shapes, a sinusoidal encoding
added with dropout and a ``max_len``, one packed in-projection for self- and encoder-decoder attention, the
rules for ``attn_mask`` (2-D or 3-D, bool or float) and ``key_padding_mask`` and how the two are merged, the
split into heads and the merge back, and the attention weights averaged over heads. This script does each
step with attnkit, checks every claim against ``torch.nn.MultiheadAttention`` with the same weights (``assert``),
and shows where the seed's code goes wrong (its ``P[:,:0::2]`` typo, a dropout that never turns off).

Axis legend: B batch (the seed's N), T query length (L), S key length, C model width (embed_dim, E),
H heads, D head dim (C / H), V vocabulary.
"""

# %%
from __future__ import annotations

import warnings

import torch
from torch import nn

from _walkthrough import error_of, output_dir, save, section, setup, show
from attnkit.interop.torch_nn import from_torch
from attnkit.modules import (MultiHeadAttention, SinusoidalPositionalEncoding, TokenEmbedding, TransformerEmbedding,
                             merge_masks, sinusoidal_table)
from attnkit.viz import plot_attention

setup(seed=0)
OUT = output_dir()


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float32 rounding (the two libraries sum in different orders)."""
    return torch.allclose(a, b, atol=1e-6, rtol=1e-5)


# %% [markdown]
# ## 1. Token embedding shapes / 词嵌入的形状
#
# A batch of token ids ``(B, T)`` becomes a batch of vectors ``(B, T, C)``: the seed's example has a vocabulary
# of 10 words, 2 sentences of 4 tokens and 8 features per token.
# 一批词的编号 ``(B, T)`` 经过词嵌入变成 ``(B, T, C)``。

# %%
section("1. Token embedding shapes", "词嵌入的形状")
X = torch.zeros((2, 4), dtype=torch.long)  # the seed's X: 2 sentences of 4 token ids
embed = TokenEmbedding(10, 8)
show("token ids X", X, "B, T")
show("TokenEmbedding(10, 8)(X)", embed(X), "B, T, C")
assert embed(X).shape == nn.Embedding(10, 8)(X).shape == (2, 4, 8)
print(f"  the same shape as nn.Embedding(10, 8)(X): {tuple(nn.Embedding(10, 8)(X).shape)}")
# one past the table: nn.Embedding fails deep inside with an IndexError
print(f"  an id outside the vocabulary is refused: {error_of(lambda: embed(torch.tensor([[10]])), ValueError)}")

# %% [markdown]
# ## 2. Positional encoding with dropout and max_len / 位置编码（dropout 与 max_len）
#
# The seed adds a ``(1, max_len, C)`` sinusoidal table to the input and applies dropout. Its line
# ``P[:,:0::2] = torch.sin(X_)`` is a typo for ``P[:, :, 0::2]`` (sines on the even *channels*): as printed it
# is not even Python. Below: the typo, a tempting wrong repair, the repaired function against attnkit's table,
# and two more traps of the seed's function (a dropout that is always on, and the ``max_len`` limit).
# 种子文章的 ``P[:,:0::2]`` 是 ``P[:, :, 0::2]`` 的笔误；下面逐一验证。

# %%
section("2. Positional encoding with dropout and max_len", "位置编码（dropout 与 max_len）")


EVEN = (slice(None), slice(None), slice(0, None, 2))  # P[:, :, 0::2]: the even channels, what the seed meant


def seed_positional_encoding(X, num_features, dropout_p=0.0, max_len=512, *, sine_slice=EVEN):
    """Seed 001's positional_encoding with its typo repaired; ``sine_slice`` says where the sines go."""
    dropout = nn.Dropout(dropout_p)  # a new module on every call: always in training mode
    P = torch.zeros((1, max_len, num_features))
    X_ = torch.arange(max_len, dtype=torch.float32).reshape(-1, 1) / torch.pow(
        10000, torch.arange(0, num_features, 2, dtype=torch.float32) / num_features)
    P[sine_slice] = torch.sin(X_)
    P[:, :, 1::2] = torch.cos(X_)
    return dropout(X + P[:, :X.shape[1], :].to(X.device))


typo = error_of(lambda: compile("P[:,:0::2] = torch.sin(X_)", "seed 001", "exec"), SyntaxError)
print(f"  the seed's line P[:,:0::2] = ... is a SyntaxError: {typo}")

B, T, C = 2, 4, 10
x = torch.randn(B, T, C)
table = sinusoidal_table(T, C)  # attnkit: even channels sin, odd channels cos
show("sinusoidal_table(T, C)", table, "T, C")
repaired = seed_positional_encoding(x, C)
assert close(repaired, x + table)
print("  repaired as P[:, :, 0::2] it equals x + sinusoidal_table(T, C): True")
# read as P[:, 0::2]: sines into every other *position*, the wrong axis
wrong_axis = error_of(lambda: seed_positional_encoding(x, C, sine_slice=(slice(None), slice(0, None, 2))),
                      RuntimeError)
print(f"  repaired as P[:, 0::2] (even positions, the wrong axis) it fails: {wrong_axis}")

# Dropout: the seed builds nn.Dropout inside the function, so it is in training mode on every call, inference too.
twice = [seed_positional_encoding(x, C, dropout_p=0.5) for _ in range(2)]
assert not torch.equal(*twice)
emb = TransformerEmbedding(10, C, max_len=512, position="sinusoidal", dropout=0.5)
ids = torch.randint(0, 10, (B, T))
emb.eval()
assert torch.equal(emb(ids), emb(ids)) and close(emb(ids), emb.tok(ids) + table)
emb.train()
dropped = emb(ids)
kept = dropped != 0
assert close(dropped[kept], 2 * (emb.tok(ids) + table)[kept])  # kept values scaled by 1 / (1 - p)
print("  the seed's dropout acts on every call (two calls differ); attnkit's TransformerEmbedding(dropout=0.5) "
      "drops only in train(), scaling the kept values by 1 / (1 - p) = 2")
show("TransformerEmbedding(10, 10)(ids)", dropped, "B, T, C")

# max_len: the seed's table has max_len rows, a longer input fails; attnkit's table grows on demand.
long_x = torch.randn(1, 12, C)
too_long = error_of(lambda: seed_positional_encoding(long_x, C, max_len=8), RuntimeError)
print(f"  seed function, max_len=8, T=12: {too_long}")
pe = SinusoidalPositionalEncoding(C, max_len=8)
assert torch.equal(pe.forward_len(12), sinusoidal_table(12, C))
print(f"  SinusoidalPositionalEncoding(C, max_len=8) gives 12 positions and grows its table to {pe.pe.shape[0]} rows")
# an odd width: the seed's cos slice has one column fewer than X_
odd = error_of(lambda: seed_positional_encoding(torch.randn(1, 3, 9), 9), RuntimeError)
print(f"  seed function with an odd width C = 9 fails: {odd}")
show("attnkit's sinusoidal_table(3, 9) (odd C)", sinusoidal_table(3, 9), "T, C")

# %% [markdown]
# ## 3. The packed in-projection / 打包的输入投影
#
# ``nn.MultiheadAttention`` keeps one ``in_proj_weight`` of shape ``(3C, C)``, rows ``[W_q; W_k; W_v]``. For
# self-attention (``q is k is v``) one matrix product gives all three; for encoder-decoder attention the first
# ``C`` rows project the decoder's queries and the other ``2C`` the encoder's memory. attnkit stores the same
# rows: ``qkv_proj`` for self-attention, ``q_proj`` + ``kv_proj`` for cross-attention.
# 自注意力一次矩阵乘法得到 q、k、v；编码器-解码器注意力把权重拆成 ``[C, 2C]`` 两块。

# %%
section("3. The packed in-projection", "打包的输入投影")
B, T, S, C, H = 2, 3, 5, 8, 2
D = C // H
ref = nn.MultiheadAttention(C, H, batch_first=True).eval()
with torch.no_grad():
    ref.in_proj_bias.normal_()  # torch starts the biases at 0; nonzero ones make the checks stronger
    ref.out_proj.bias.normal_()
mine = from_torch(ref)  # packed self-attention layout
mine_cross = from_torch(ref, self_attention=False)  # q_proj + kv_proj layout, the same numbers
assert torch.equal(mine.qkv_proj.weight, ref.in_proj_weight)
assert torch.equal(torch.cat([mine_cross.q_proj.weight, mine_cross.kv_proj.weight]), ref.in_proj_weight)
show("torch in_proj_weight", ref.in_proj_weight, "3C, C")
show("attnkit qkv_proj.weight (self-attention)", mine.qkv_proj.weight, "3C, C")
show("attnkit q_proj.weight (cross-attention)", mine_cross.q_proj.weight, "C, C")
show("attnkit kv_proj.weight (cross-attention)", mine_cross.kv_proj.weight, "2C, C")

x = torch.randn(B, T, C)  # decoder side: the queries
memory = torch.randn(B, S, C)  # encoder output: keys and values
q, k, v = nn.functional.linear(x, ref.in_proj_weight, ref.in_proj_bias).chunk(3, dim=-1)  # self-attention
assert all(close(a, b) for a, b in zip((q, k, v), mine.qkv_proj(x).split(C, dim=-1)))
w_q, w_kv = ref.in_proj_weight.split([C, 2 * C])
b_q, b_kv = ref.in_proj_bias.split([C, 2 * C])
q_cross = nn.functional.linear(x, w_q, b_q)
k_cross, v_cross = nn.functional.linear(memory, w_kv, b_kv).chunk(2, dim=-1)
assert close(q_cross, mine_cross.q_proj(x)) and close(torch.cat([k_cross, v_cross], -1), mine_cross.kv_proj(memory))
show("self-attention q = k = v projections", q, "B, T, C")
show("cross-attention q (from the decoder)", q_cross, "B, T, C")
show("cross-attention k, v (from the memory)", k_cross, "B, S, C")
for layer in (mine, mine_cross):
    assert close(layer(x, memory, memory)[0], ref(x, memory, memory, need_weights=False)[0])
print("  both layouts give torch's output for attention from x (B, T, C) to memory (B, S, C)")

# %% [markdown]
# ## 4. attn_mask: 2-D or 3-D, bool or float / attn_mask 的规则
#
# Boolean: ``True`` = may *not* attend (both libraries). Float: added to the scores (``-inf`` blocks). 2-D
# masks are ``(T, S)``, shared by the batch and the heads. 3-D masks differ: torch's are ``(B*H, T, S)``,
# one per (batch row, head); attnkit keeps the two axes apart, ``(B, T, S)`` for every head or
# ``(B, H, T, S)`` per head. Byte masks: the seed converts them with a warning; today's torch and attnkit refuse.
# 布尔掩码 True 表示不可关注；浮点掩码加到分数上；三维掩码的形状两者不同。

# %%
section("4. attn_mask rules, checked against nn.MultiheadAttention", "attn_mask 的规则")


def both(**masks) -> tuple[torch.Tensor, torch.Tensor]:
    """(attnkit, torch) outputs and averaged weights for the same inputs; asserts they agree."""
    torch_masks = dict(masks)
    if "attn_mask_torch" in torch_masks:
        torch_masks["attn_mask"] = torch_masks.pop("attn_mask_torch")
        masks.pop("attn_mask_torch")
    out, w = mine(x, memory, memory, need_weights=True, **masks)
    out_ref, w_ref = ref(x, memory, memory, need_weights=True, **torch_masks)
    assert close(out, out_ref) and close(w, w_ref)
    return out, w


bool_2d = torch.rand(T, S) < 0.4
bool_2d[:, 0] = False  # every query keeps at least one key
_, w = both(attn_mask=bool_2d)
assert (w[:, bool_2d] == 0).all()
show("2-D bool attn_mask", bool_2d, "T, S")
print("  equal to torch; masked keys get weight 0")

float_2d = torch.randn(T, S).masked_fill(bool_2d, float("-inf"))
both(attn_mask=float_2d)
show("2-D float attn_mask (added to the scores)", float_2d, "T, S")
print("  equal to torch")

per_head = torch.rand(B, H, T, S) < 0.4
per_head[..., 0] = False
both(attn_mask=per_head, attn_mask_torch=per_head.reshape(B * H, T, S))
show("attnkit 4-D per-head mask", per_head, "B, H, T, S")
show("torch 3-D mask = the same, reshaped", per_head.reshape(B * H, T, S), "B*H, T, S")
per_row = per_head[:, 0]  # one mask per batch row, shared by the heads
both(attn_mask=per_row, attn_mask_torch=per_row.repeat_interleave(H, dim=0))
show("attnkit 3-D mask (every head)", per_row, "B, T, S")
print("  equal to torch given (B*H, T, S) with each row's mask repeated H times")



def refusal(layer, mask: torch.Tensor) -> str:
    """What ``layer`` says to ``attn_mask=mask``: its error, or that it accepts the mask."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            layer(x, memory, memory, attn_mask=mask)
    except (ValueError, RuntimeError, AssertionError) as err:
        return f"{type(err).__name__}: {err}"
    return "accepted"


torch_3d = per_head.reshape(B * H, T, S)
assert refusal(ref, torch_3d) == "accepted" and refusal(mine, torch_3d).startswith("ValueError")
print(f"  torch's 3-D form (B*H, T, S) given to attnkit: {refusal(mine, torch_3d)}")
for label, bad in (("a 2-D mask of the wrong shape", torch.zeros(T, S + 1, dtype=torch.bool)),
                   ("a byte mask (the seed: converted with a warning)", torch.zeros(T, S, dtype=torch.uint8))):
    assert refusal(mine, bad).startswith("ValueError") and refusal(ref, bad) != "accepted"
    print(f"  {label}:\n    attnkit: {refusal(mine, bad)}\n    torch:   {refusal(ref, bad)}")

# %% [markdown]
# ## 5. key_padding_mask merged into the mask / 填充掩码的合并
#
# ``key_padding_mask`` ``(B, S)`` marks padded keys (``True`` = padding). The seed's code expands it to
# ``(B*H, 1, S)`` and merges it: ``logical_or`` with a bool mask, ``masked_fill(-inf)`` into a float one.
# attnkit's ``merge_masks`` does the same without expanding (``(B, 1, 1, S)`` broadcasts).
# 填充掩码与 attn_mask 合并：布尔掩码取逻辑或，浮点掩码填 -inf。

# %%
section("5. key_padding_mask merged into the mask", "填充掩码的合并")
key_padding_mask = torch.tensor([[False, False, False, True, True],
                                 [False, False, False, False, True]])  # row 0 has 3 real keys, row 1 has 4
show("key_padding_mask (True = padding)", key_padding_mask, "B, S")


def seed_merge(attn_mask: torch.Tensor, kpm: torch.Tensor) -> torch.Tensor:
    """The seed's merging, as torch wrote it: expand the padding mask to (B*H, 1, S), then or / -inf."""
    kpm = kpm.view(B, 1, 1, S).expand(-1, H, -1, -1).reshape(B * H, 1, S)
    attn_mask = attn_mask.unsqueeze(0)  # (1, T, S)
    if attn_mask.dtype == torch.bool:
        return attn_mask.logical_or(kpm)
    return attn_mask.masked_fill(kpm, float("-inf"))


for label, attn_mask in (("bool", bool_2d), ("float", float_2d)):
    merged = merge_masks(attn_mask, key_padding_mask, B, H, T, S, torch.float32)
    expanded = merged.expand(B, H, T, S).reshape(B * H, T, S)
    assert merged.dtype == attn_mask.dtype and torch.equal(expanded, seed_merge(attn_mask, key_padding_mask))
    show(f"merge_masks({label} (T, S), (B, S))", merged, "B, 1, T, S")
print("  equal to the seed's merged mask, element by element (expanded to (B*H, T, S))")
_, w = both(attn_mask=bool_2d, key_padding_mask=key_padding_mask)
assert (w.masked_select(key_padding_mask[:, None, :]) == 0).all()
print("  with both masks attnkit equals torch, and every padded key gets weight 0")

# %% [markdown]
# ## 6. Dropout on the attention weights / 注意力权重上的 dropout
#
# In training the weights go through dropout before they multiply the values: each weight is zeroed with
# probability p, the others scaled by ``1 / (1 - p)``, so a row no longer sums to 1. In evaluation nothing is
# dropped (the seed's ``if not training: dropout_p = 0.0``).
# 训练时权重经过 dropout，评估时不做 dropout。

# %%
section("6. Dropout on the attention weights", "注意力权重上的 dropout")
drop_layer = MultiHeadAttention(C, H, dropout=0.5)
drop_layer.load_state_dict(mine.state_dict())
drop_layer.eval()
_, w_eval = drop_layer(x, need_weights=True, average_attn_weights=False)
drop_layer.train()
_, w_train = drop_layer(x, need_weights=True, average_attn_weights=False)
kept = w_train != 0
assert close(w_train[kept], 2 * w_eval[kept]) and 0.2 < 1 - kept.float().mean() < 0.8
assert close(w_eval.sum(-1), torch.ones(B, H, T))
print(f"  train(): {1 - kept.float().mean():.0%} of the weights dropped, the rest doubled; "
      f"eval(): rows sum to 1")

# %% [markdown]
# ## 7. Splitting into heads and merging back / 拆分多头与合并
#
# The seed works sequence-first and folds batch and heads into one axis: ``(T, B, C)`` → ``(T, B*H, D)`` →
# ``(B*H, T, D)``. attnkit works batch-first and keeps the axes apart: ``(B, T, C)`` → ``(B, T, H, D)`` →
# ``(B, H, T, D)``. Same numbers, and the merge is the inverse.
# 种子文章把 batch 和头合成一维；attnkit 保持两个轴分开。

# %%
section("7. Splitting into heads and merging back", "拆分多头与合并")
q = mine.qkv_proj(x)[..., :C]  # (B, T, C)
heads = q.view(B, T, H, D).transpose(1, 2)  # attnkit's split
seed_heads = q.transpose(0, 1).contiguous().view(T, B * H, D).transpose(0, 1)  # the seed's, from (T, B, C)
show("q", q, "B, T, C")
show("attnkit: view + transpose", heads, "B, H, T, D")
show("seed: (T, B*H, D) transposed", seed_heads, "B*H, T, D")
assert torch.equal(heads.reshape(B * H, T, D), seed_heads)
merged_back = heads.transpose(1, 2).reshape(B, T, H * D)
assert torch.equal(merged_back, q)
show("merged back: transpose + reshape", merged_back, "B, T, C")
print("  the same numbers in both layouts, and the merge gives q back exactly")

# %% [markdown]
# ## 8. Attention weights averaged over heads / 多头平均的注意力权重
#
# With ``need_weights=True`` both layers return ``(B, T, S)``: the per-head weights ``(B, H, T, S)`` averaged
# over the heads (``average_attn_weights=False`` keeps them apart). The figure shows each head and the average.
# need_weights=True 返回各头平均后的权重。

# %%
section("8. Attention weights averaged over heads", "多头平均的注意力权重")
out, w_avg = mine(x, memory, memory, key_padding_mask=key_padding_mask, need_weights=True)
_, w_heads = mine(x, memory, memory, key_padding_mask=key_padding_mask, need_weights=True,
                  average_attn_weights=False)
_, w_torch = ref(x, memory, memory, key_padding_mask=key_padding_mask, need_weights=True,
                 average_attn_weights=False)
show("weights of every head", w_heads, "B, H, T, S")
show("averaged weights", w_avg, "B, T, S")
show("output", out, "B, T, C")
assert close(w_avg, w_heads.mean(dim=1)) and close(w_heads, w_torch)
print("  averaged = mean of the heads; the per-head weights equal torch's")
panels = torch.cat([w_heads[0], w_avg[0][None]]).detach()  # (H + 1, T, S) for batch row 0
fig = plot_attention(panels, title="batch row 0: each head and their average (2 padded keys)",
                     query_labels=[f"q{i}" for i in range(T)],
                     panel_titles=[f"head {h}" for h in range(H)] + ["average"],
                     key_labels=[f"k{j}" + (" pad" if key_padding_mask[0, j] else "") for j in range(S)])
save(fig, OUT, "seed001_attention_weights.png")
