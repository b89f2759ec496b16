"""Seed 004, step by step: embeddings, positions, and training vs inference with <start>/<end> markers.

Run it:  python examples/seed004_embeddings.py [--out DIR]     (a few seconds on a laptop CPU)
Open it as a notebook: Jupyter (with jupytext) or VS Code read the ``# %%`` cells.
The map from this text to attnkit's files and tests: docs/from-the-seeds.md, section 5. The learning-rate
schedule and label smoothing used when training: examples/annotated_lr_schedule.py,
examples/annotated_label_smoothing.py.

Seed 004 steps back: a token embedding is a one-hot vector times a learned table; ``TokenEmbedding``,
``PositionalEmbedding(d_model, max_len)`` and ``TransformerEmbedding`` (token + position + dropout); the
families of positional encodings (sinusoidal as in the paper, its Fig. 4; learned as in BERT, GPT and ViT;
rotary as in LLaMA and Qwen); and the two stages of translation: training on (source, target) pairs with
``<start>`` and ``<end>`` markers, inference from ``<start>`` alone. This script checks each statement with
attnkit's modules, reproduces the seed's ``PositionalEmbedding`` bug (it reads the batch size as the sequence
length) and shows it wrong, then trains a tiny translator for a few seconds to compare teacher forcing with
greedy decoding.

Axis legend: B batch, T sequence (target) length, S source length, C model width (d_model), V vocabulary,
H heads, D head dim.
"""

# %%
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from _walkthrough import error_of, output_dir, save, section, setup, show
from attnkit.generation import greedy_search
from attnkit.models import Transformer, TransformerConfig
from attnkit.modules import (LearnedPositionalEmbedding, RotaryEmbedding, SinusoidalPositionalEncoding, TokenEmbedding,
                             TransformerEmbedding, causal_mask, pad_right, sinusoidal_table)
from attnkit.viz import plot_positional_encoding

setup(seed=0)
OUT = output_dir()

# %% [markdown]
# ## 1. One-hot vs learned embeddings / One-hot 与可学习的 Embedding
#
# A one-hot vector of length ``V`` times a ``(V, C)`` table picks one row of the table: an embedding lookup is
# that product without the multiplications. The table is learned (it has gradients), only the rows of the
# tokens in the batch are updated, and a token gets the same vector wherever it stands (the position is added
# later).
# One-hot 向量乘以嵌入表就是取出一行；嵌入表是可学习的参数。

# %%
section("1. One-hot vs learned embeddings", "One-hot 与可学习的 Embedding")
V, C = 10, 8
tok = TokenEmbedding(V, C)
ids = torch.tensor([[3, 1, 4, 1], [5, 9, 2, 6]])
one_hot = F.one_hot(ids, V).float()
show("token ids", ids, "B, T")
show("one-hot vectors", one_hot, "B, T, V")
show("embedding table", tok.weight, "V, C")
show("one_hot @ table", one_hot @ tok.weight, "B, T, C")
assert torch.allclose(one_hot @ tok.weight, tok(ids))
print("  one_hot @ table equals TokenEmbedding(ids): a lookup is the same product")
tok(ids).sum().backward()
rows_with_grad = tok.weight.grad.abs().sum(dim=1).nonzero().flatten().tolist()
assert rows_with_grad == sorted(set(ids.flatten().tolist()))
print(f"  the table is trained: a backward pass reaches only the rows of the batch's tokens {rows_with_grad}")
assert torch.equal(tok(ids)[0, 1], tok(ids)[0, 3])
print("  token 1 at positions 1 and 3 gets the same vector: the order is added by the positional encoding")

# %% [markdown]
# ## 2. TransformerEmbedding = token + position + dropout / Transformer 的 Embedding 模块
#
# ``TransformerEmbedding(V, C, max_len=..., position=..., dropout=p)`` adds the position signal to the token
# vectors and applies dropout (training only). ``scale=True`` multiplies the tokens by √C first, as the paper
# does, so they are not drowned by the unit-size sinusoids.
# Token 向量加位置编码，再做 dropout；scale=True 时乘以 √C。

# %%
section("2. TransformerEmbedding = token + position + dropout", "Transformer 的 Embedding 模块")
emb = TransformerEmbedding(V, C, max_len=32, position="sinusoidal", dropout=0.1, scale=True).eval()
x = emb(ids)
show("TransformerEmbedding(ids)", x, "B, T, C")
assert torch.allclose(x, emb.tok(ids) * C ** 0.5 + sinusoidal_table(ids.shape[1], C))
print("  eval(): tok(ids) * sqrt(C) + sinusoidal_table(T, C), no dropout")
emb.train()
assert (emb(ids) == 0).any() and not torch.allclose(emb(ids), x)
print("  train(): dropout zeroes some entries")

# %% [markdown]
# ## 3. Three kinds of positions / 三种位置编码
#
# Sinusoidal (the paper): ``PE(pos, 2i) = sin(pos / 10000^(2i/C))``, ``PE(pos, 2i+1) = cos(...)``, a fixed
# ``(max_len, C)`` table; the figure is the seed's Fig. 4 (``max_len = 128``, ``d_model = 512``) drawn from
# attnkit's table. Learned (BERT, GPT-2's ``wpe``): a trained ``(max_len, C)`` table, with no row past
# ``max_len``. Rotary (LLaMA, Qwen): queries and keys are rotated by an angle proportional to their position,
# so their dot product depends only on the distance between them.
# 正余弦、可学习、旋转位置编码。

# %%
section("3. Three kinds of positions", "三种位置编码")
d_model, max_len = 512, 128
pos = torch.arange(max_len, dtype=torch.float32)[:, None]
_2i = torch.arange(0, d_model, 2, dtype=torch.float32)
seed_table = torch.zeros(max_len, d_model)  # the seed's formula, as written in its PositionalEmbedding
seed_table[:, 0::2] = torch.sin(pos / (10000 ** (_2i / d_model)))
seed_table[:, 1::2] = torch.cos(pos / (10000 ** (_2i / d_model)))
table = sinusoidal_table(max_len, d_model)
show("sinusoidal_table(max_len, d_model)", table, "T, C")
assert torch.allclose(table, seed_table, atol=1e-5)
print(f"  equal to the seed's formula: max |difference| = {(table - seed_table).abs().max():.1e}")
save(plot_positional_encoding(max_len, d_model), OUT, "seed004_positional_encoding.png")

learned = LearnedPositionalEmbedding(max_len=16, dim=C)
show("LearnedPositionalEmbedding.forward_len(5)", learned.forward_len(5), "T, C")
assert torch.equal(learned.forward_len(5), learned.weight[:5]) and learned.weight.requires_grad
print(f"  learned positions stop at max_len: {error_of(lambda: learned(torch.tensor([16])), ValueError)}")

D = 8
rope = RotaryEmbedding(D)
q, k = torch.randn(1, 1, 1, D), torch.randn(1, 1, 1, D)  # (B, H, T, D): one query, one key


def rotated_score(m: int, n: int) -> float:
    """q placed at position m, k at position n, both rotated; their dot product."""
    return float((rope(q, torch.tensor([m])) * rope(k, torch.tensor([n]))).sum())


assert abs(rotated_score(3, 1) - rotated_score(10, 8)) < 1e-5 and abs(rotated_score(3, 1) - rotated_score(3, 2)) > 1e-3
assert torch.allclose(rope(q, torch.tensor([7])).norm(), q.norm())
print(f"  rotary: q·k at positions (3, 1) = {rotated_score(3, 1):.4f} = at (10, 8) = {rotated_score(10, 8):.4f} "
      f"(distance 2 both), at (3, 2): {rotated_score(3, 2):.4f}; rotation keeps lengths")

# %% [markdown]
# ## 4. Seed bug: PositionalEmbedding reads the batch size / 种子错误：PositionalEmbedding 把 batch 大小当作长度
#
# The seed's ``PositionalEmbedding.forward`` returns ``embedding_table[:x.shape[0]]``. For one unbatched
# sentence ``(T,)`` that is T rows; for a batch ``(B, T)`` it is B rows. Added to the token embeddings
# ``(B, T, C)`` this fails when ``B != T`` and ``B != 1``, and with ``B == 1`` (one sentence at inference) it
# silently gives *every* position the encoding of position 0: the model cannot tell the word order. Its table is
# also a plain attribute, so ``.double()`` or ``.to(device)`` leaves it behind. attnkit reads the sequence axis
# and keeps the table in a buffer.
# 种子文章用 x.shape[0]（batch 大小）当作序列长度；batch 为 1 时所有位置都得到位置 0 的编码。

# %%
section("4. Seed bug: PositionalEmbedding reads the batch size", "种子错误：PositionalEmbedding 把 batch 大小当作长度")


class SeedPositionalEmbedding(nn.Module):
    """Seed 004's PositionalEmbedding, as written."""

    def __init__(self, d_model, max_len):
        super().__init__()
        table = torch.zeros(max_len, d_model)
        pos = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
        _2i = torch.arange(0, d_model, 2, dtype=torch.float32)
        table[:, 0::2] = torch.sin(pos / (10000 ** (_2i / d_model)))
        table[:, 1::2] = torch.cos(pos / (10000 ** (_2i / d_model)))
        self.embedding_table = table

    def forward(self, x):
        return self.embedding_table[:x.shape[0], :]  # the bug: x.shape[0] is B for a batch


seed_pe = SeedPositionalEmbedding(C, 32)
batch = torch.randint(0, V, (5, 3))  # B = 5 sentences of T = 3 tokens
show("a batch of ids", batch, "B, T")
show("seed PositionalEmbedding(batch)", seed_pe(batch), "B, C")
mismatch = error_of(lambda: tok(batch) + seed_pe(batch), RuntimeError)  # the seed's tok_emb + pos_emb
print(f"  the seed's tok_emb + pos_emb with B = 5, T = 3: {mismatch}")
one = torch.tensor([[3, 1, 4, 1]])  # B = 1: one sentence, as at inference
seed_sum = tok(one) + seed_pe(one)
assert torch.allclose(seed_sum - tok(one), table[0, :C].expand(4, C)[None], atol=1e-6)
flipped = one.flip(1)
seed_flipped = tok(flipped) + seed_pe(flipped)
assert torch.allclose(seed_flipped, seed_sum.flip(1))  # reversing the words just reverses the vectors
attnkit_pe = TransformerEmbedding(V, C, max_len=32).eval()
attnkit_pe.tok.load_state_dict(tok.state_dict())
assert torch.equal(attnkit_pe(batch), tok(batch) + sinusoidal_table(3, C))
assert not torch.allclose(attnkit_pe(flipped), attnkit_pe(one).flip(1))
show("attnkit TransformerEmbedding(batch)", attnkit_pe(batch), "B, T, C")
print("  B = 1: the seed adds position 0's encoding to every token, so reversing the sentence only reverses the "
      "vectors (no order information); attnkit adds positions 0..T-1 along the sequence axis")
seed_pe.double()
assert seed_pe.embedding_table.dtype == torch.float32 and not list(seed_pe.buffers())
pe_module = SinusoidalPositionalEncoding(C).double()
assert pe_module.pe.dtype == torch.float64
print("  .double(): the seed's table stays float32 (a plain attribute, not a buffer); attnkit's buffer follows")

# %% [markdown]
# ## 5. Training vs inference: <start>, <end>, teacher forcing, greedy decoding / 训练与推理
#
# Training: the encoder reads ``<start> Good Morning . <end>``; the decoder reads the target shifted right,
# ``<start> 早上 好 。``, and at every position predicts the next token, ``早上 好 。 <end>``: the whole target in
# one pass, each position given the reference prefix (teacher forcing). Pairs of different lengths are padded
# and the padding is masked out of attention and of the loss. Inference: the decoder starts from ``<start>``
# alone and feeds back its own best token until it writes ``<end>`` (greedy decoding), one pass per token.
# Below a tiny translator learns the four pairs (a few seconds), then both ways are checked.
# 训练时解码器一次看到整个目标（教师强制）；推理时从 <start> 开始逐个生成，直到 <end>。

# %%
section("5. Training vs inference with <start> and <end>", "训练与推理")
SRC_WORDS = ["<pad>", "<start>", "<end>", "Good", "Morning", "Afternoon", "Evening", "Night", "."]
TGT_WORDS = ["<pad>", "<start>", "<end>", "早上", "下午", "晚上", "晚安", "好", "。"]
PAD, START, END = 0, 1, 2
pairs = [("Good Morning .", "早上 好 。"), ("Good Afternoon .", "下午 好 。"),
         ("Good Evening .", "晚上 好 。"), ("Good Night .", "晚安 。")]


def encode(sentence: str, words: list[str]) -> list[int]:
    return [START] + [words.index(w) for w in sentence.split()] + [END]


src, _ = pad_right([encode(s, SRC_WORDS) for s, _ in pairs], PAD)
targets = [encode(t, TGT_WORDS) for _, t in pairs]  # <start> ... <end>
tgt_in, _ = pad_right([t[:-1] for t in targets], PAD)  # the decoder reads <start> ...
labels, _ = pad_right([t[1:] for t in targets], PAD)  # and predicts ... <end>: the same tokens, shifted by one
show("source ids (<start> ... <end>, padded)", src, "B, S")
show("decoder input (without the last token)", tgt_in, "B, T")
show("labels (without <start>)", labels, "B, T")
print(f"  pair 4: decoder input {[TGT_WORDS[i] for i in tgt_in[3]]} -> labels {[TGT_WORDS[i] for i in labels[3]]}")

config = TransformerConfig(src_vocab_size=len(SRC_WORDS), tgt_vocab_size=len(TGT_WORDS), d_model=32, num_heads=4,
                           num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64, dropout=0.0, pad_id=PAD,
                           max_len=16)
model = Transformer(config)
show("look-ahead mask of the decoder", causal_mask(tgt_in.shape[1]), "T, T")
show("padding mask of the source", model.padding_mask(src), "B, S")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
losses = []
for step in range(150):  # teacher forcing: one pass over all target positions of all pairs
    logits = model(src, tgt_in)  # padding masks derived from PAD, decoder causal by itself
    loss = F.cross_entropy(logits.reshape(-1, len(TGT_WORDS)), labels.reshape(-1), ignore_index=PAD)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
show("logits of one teacher-forced pass", logits, "B, T, V")
print(f"  training loss {losses[0]:.3f} -> {losses[-1]:.4f} in {len(losses)} steps")
assert losses[-1] < 0.05 * losses[0]
model.eval()

with torch.no_grad():
    forced = model(src, tgt_in).argmax(-1)
    real = labels != PAD
    assert torch.equal(forced[real], labels[real])
    print("  teacher forcing: one pass predicts every next token of every pair correctly")

    source = src[1:2]  # "<start> Good Afternoon . <end>", the seed's inference example
    prefix = torch.tensor([[START]])
    while prefix[0, -1] != END and prefix.shape[1] < 10:  # greedy decoding, one pass per token
        next_token = model(source, prefix)[:, -1].argmax(-1, keepdim=True)
        prefix = torch.cat([prefix, next_token], dim=1)
    by_hand = prefix[0, 1:-1].tolist()
    searched = greedy_search(model, src, bos_id=START, eos_id=END, pad_id=PAD)
assert by_hand == searched[1]
assert [" ".join(TGT_WORDS[i] for i in out) for out in searched] == [t for _, t in pairs]
print(f"  inference from <start> alone: {' '.join(TGT_WORDS[i] for i in prefix[0, 1:].tolist())} in "
      f"{prefix.shape[1] - 1} passes (the loop above and attnkit's greedy_search agree)")
for (s, t), out in zip(pairs, searched):
    print(f"    {s:<18} -> {' '.join(TGT_WORDS[i] for i in out)}")
print("  (the four training pairs, learnt by heart: enough to see the two stages, not a translator)")
