"""Seed 003, step by step: the full encoder-decoder with its masks, the seed's bugs reproduced and shown wrong.

Run it:  python examples/seed003_encoder_decoder.py      (a few seconds on a laptop CPU)
Open it as a notebook: Jupyter (with jupytext) or VS Code read the ``# %%`` cells.
The map from this text to attnkit's files and tests: docs/from-the-seeds.md, section 4. A model of this kind
trained end to end on a small task: examples/annotated_copy_task.py.

Seed 003 assembles a translation model: attention that takes a padding mask and builds a causal mask itself,
``AddNorm`` (residual + LayerNorm, post-norm), a feed-forward layer with a choice of activation, encoder and
decoder layers and stacks, and ``Transformer(num_encoder_layers, num_decoder_layers, d_model, num_heads,
dim_feedforward, dropout)``. This script runs the seed's example with attnkit's ``EncoderDecoder``, shows how
the padding and causal masks act, then reproduces the seed's mistakes in a few lines each on attnkit's own
layers and shows in numbers why they are wrong: the decoder's cross-attention done by the self-attention
module, every decoder layer fed the original input, an encoder that is causal by default, and the NaN of a
query whose keys are all masked. Last, attnkit's stack agrees with ``torch.nn.Transformer``.

Axis legend: B batch, S source length, T target length, C model width (d_model), H heads, D head dim (C / H),
F feed-forward width (dim_feedforward), V vocabulary.
"""

# %%
from __future__ import annotations

import warnings

import torch
from torch import nn

from _walkthrough import command_line, section, setup, show
from attnkit.interop.torch_nn import from_torch
from attnkit.models import EncoderDecoder, Transformer, TransformerConfig
from attnkit.modules import ACTIVATIONS, causal_mask, scaled_dot_product_attention

setup(seed=0)
command_line()  # --help; it draws no figures, so it takes no --out


def spread(module: nn.Module) -> nn.Module:
    """Redraw every weight of ``module`` with a wider spread (norms and biases too): a freshly initialised
    stack maps most inputs to almost the same output, and the differences this script measures would
    then be about rounding rather than about the code."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return module.eval()


# %% [markdown]
# ## 1. The seed's example / 种子文章的示例
#
# The seed's ``Transformer()`` (6 + 6 layers, d_model 512, 8 heads, feed-forward 2048, dropout 0.1) maps
# source embeddings ``(2, 5, 512)`` and target embeddings ``(2, 3, 512)`` with padding masks to ``(2, 3, 512)``.
# attnkit's ``EncoderDecoder`` is that stack (the counterpart of ``torch.nn.Transformer``); its feed-forward
# offers the seed's six activations and more.
# 用 attnkit 的 EncoderDecoder 运行种子文章的例子。

# %%
section("1. The seed's example", "种子文章的示例")
stack = EncoderDecoder(d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
                       dropout=0.1).eval()
x, y = torch.rand(2, 5, 512), torch.rand(2, 3, 512)
padding_mask_x = torch.tensor([[False, False, False, True, True],
                               [False, False, True, True, True]])
padding_mask_y = torch.tensor([[False, False, False],
                               [False, False, True]])
with torch.no_grad():
    out = stack(x, y, src_key_padding_mask=padding_mask_x, tgt_key_padding_mask=padding_mask_y,
                memory_key_padding_mask=padding_mask_x)
show("source embeddings x", x, "B, S, C")
show("target embeddings y", y, "B, T, C")
show("output", out, "B, T, C")
assert out.shape == (2, 3, 512) and torch.isfinite(out).all()
print("  the seed prints torch.Size([2, 3, 512]) for the same call")
seed_activations = ("sigmoid", "tanh", "relu", "gelu", "leaky_relu", "elu")
assert set(seed_activations) <= set(ACTIVATIONS)
print(f"  FeedForward activations: the seed's {', '.join(seed_activations)}, plus "
      f"{', '.join(a for a in ACTIVATIONS if a not in seed_activations)}")

# %% [markdown]
# ## 2. Padding and causal masks on a token model / 填充掩码与因果掩码
#
# With token ids and a ``pad_id`` attnkit's ``Transformer`` derives the padding masks itself (``True`` =
# padding) and the decoder's self-attention is causal without being asked. Two checks: a padded sentence gives
# the same logits as the sentence alone, and a target token never depends on later target tokens.
# 由 pad_id 自动得到填充掩码；解码器自注意力自动带因果掩码。

# %%
section("2. Padding and causal masks on a token model", "填充掩码与因果掩码")
config = TransformerConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=32, num_heads=4, num_encoder_layers=2,
                           num_decoder_layers=2, dim_feedforward=64, dropout=0.0, pad_id=0)
model = spread(Transformer(config))
src = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])  # the second sentence is padded
tgt = torch.tensor([[1, 11, 12, 13], [1, 11, 12, 13]])
show("src ids (0 = padding)", src, "B, S")
show("derived src_key_padding_mask", model.padding_mask(src), "B, S")
show("decoder self-attention mask causal_mask(T)", causal_mask(tgt.shape[1]), "T, T")
with torch.no_grad():
    logits = model(src, tgt)
    alone = model(src[1:, :3], tgt[1:])
    show("logits", logits, "B, T, V")
    assert torch.allclose(logits[1], alone[0], atol=1e-5)
    print("  the padded sentence's logits equal those of the same sentence without padding")
    later_changed = tgt.clone()
    later_changed[:, 2:] = 17
    assert torch.allclose(model(src, later_changed)[:, :2], logits[:, :2], atol=1e-5)
    print("  changing target tokens 2.. leaves the logits of positions 0 and 1 unchanged: causal")

layer = model.core.decoder.layers[0]
memory = model.encode(src).detach()
y_emb = model.tgt_embed(tgt).detach()
mem_pad = model.padding_mask(src)


def attnkit_decoder_layer(y: torch.Tensor) -> torch.Tensor:
    return layer(y, memory, memory_key_padding_mask=mem_pad)


# %% [markdown]
# ## 3. Seed bug: cross-attention done by the self-attention module / 种子错误一：交叉注意力用了自注意力模块
#
# The seed's ``DecoderLayer`` builds ``self.cross_attn`` but calls ``self.attn(x, memory, memory, ...)`` for
# the encoder-decoder attention: the same projection weights serve both sub-layers and ``cross_attn`` is never
# used. Rebuilt below on attnkit's layer: its output differs, ``cross_attn`` gets no gradient, and changing
# ``cross_attn`` changes nothing.
# 交叉注意力误用了自注意力模块：cross_attn 从未被调用。

# %%
section("3. Seed bug: cross-attention done by the self-attention module", "种子错误一：交叉注意力用了自注意力模块")


def seed_decoder_layer(y: torch.Tensor) -> torch.Tensor:
    """The seed's DecoderLayer.forward (post-norm), on attnkit's modules: ``self_attn`` used twice."""
    x = layer.norm1(y + layer.self_attn(y, is_causal=True)[0])
    x = layer.norm2(x + layer.self_attn(x, memory, memory, key_padding_mask=mem_pad)[0])  # the bug
    return layer.norm3(x + layer.ff(x))


layer.zero_grad()
seed_out = seed_decoder_layer(y_emb)
seed_out.sum().backward()
assert layer.cross_attn.q_proj.weight.grad is None  # never used
layer.zero_grad()
attnkit_decoder_layer(y_emb).sum().backward()
assert layer.cross_attn.q_proj.weight.grad.abs().sum() > 0
show("decoder layer output", seed_out, "B, T, C")
assert not torch.allclose(seed_out, attnkit_decoder_layer(y_emb), atol=1e-3)
with torch.no_grad():
    before = attnkit_decoder_layer(y_emb)
    saved = layer.cross_attn.q_proj.weight.clone()
    layer.cross_attn.q_proj.weight.mul_(2.0)
    assert torch.equal(seed_decoder_layer(y_emb), seed_out.detach())
    assert not torch.allclose(attnkit_decoder_layer(y_emb), before, atol=1e-3)
    layer.cross_attn.q_proj.weight.copy_(saved)
print("  the seed's layer: cross_attn gets no gradient and doubling its weights changes nothing; attnkit's "
      "layer reads the memory through cross_attn (gradient > 0) and gives a different output")

# %% [markdown]
# ## 4. Seed bug: every decoder layer fed the original input / 种子错误二：每层解码器都输入原始的 y
#
# The seed's ``Decoder.forward`` runs ``x = layer(y, memory, ...)`` in its loop: each layer gets the decoder's
# input ``y`` rather than the previous layer's output, so the result is the last layer's alone and the other
# layers are dead weight. attnkit chains them.
# 每层都用原始输入 y，结果只取决于最后一层。

# %%
section("4. Seed bug: every decoder layer fed the original input", "种子错误二：每层解码器都输入原始的 y")
layers = model.core.decoder.layers


def seed_decoder(y: torch.Tensor) -> torch.Tensor:
    """The seed's Decoder.forward on attnkit's layers."""
    x = y
    for lay in layers:
        x = lay(y, memory, memory_key_padding_mask=mem_pad)  # the bug: y, not x
    return x


model.zero_grad()
seed_stack = seed_decoder(y_emb)
seed_stack.sum().backward()
assert layers[0].ff.w_out.weight.grad is None  # layer 0's work is thrown away
assert torch.equal(seed_stack, layers[-1](y_emb, memory, memory_key_padding_mask=mem_pad))
with torch.no_grad():
    chained = layers[1](layers[0](y_emb, memory, memory_key_padding_mask=mem_pad), memory,
                        memory_key_padding_mask=mem_pad)
    ours = model.core.decoder(y_emb, memory, memory_key_padding_mask=mem_pad)
assert torch.allclose(ours, chained, atol=1e-6) and not torch.allclose(ours, seed_stack, atol=1e-3)
show("decoder stack output", ours, "B, T, C")
print("  the seed's stack equals its last layer alone (layer 0 gets no gradient); attnkit's equals "
      "layer 1(layer 0(y))")

# %% [markdown]
# ## 5. Seed bug: attention causal by default / 种子错误三：注意力默认带因果掩码
#
# The seed's ``Attention`` defaults to ``causal=True`` and ``MultiHeadSelfAttention`` never changes it, so the
# encoder is causal too (a source word cannot see the words after it) and so is the encoder-decoder attention,
# with a mask ``triu(ones(T, S), 1)`` aligned at the top left: the first target word sees only the first
# source word. In attnkit only the decoder's self-attention is causal.
# 种子文章的编码器与交叉注意力也被因果掩码遮挡。

# %%
section("5. Seed bug: attention causal by default", "种子错误三：注意力默认带因果掩码")
enc = model.core.encoder.layers[0]
src_emb = model.src_embed(src[:1]).detach()  # the unpadded sentence
last_changed = src_emb.clone()
last_changed[:, -1] += 1.0  # another last source word
with torch.no_grad():
    causal_enc = [enc(e, is_causal=True) for e in (src_emb, last_changed)]  # the seed's encoder
    full_enc = [enc(e) for e in (src_emb, last_changed)]  # attnkit's
assert torch.allclose(causal_enc[0][:, 0], causal_enc[1][:, 0], atol=1e-6)
assert not torch.allclose(full_enc[0][:, 0], full_enc[1][:, 0], atol=1e-3)
print("  seed: the encoder's first position ignores the last source word; attnkit: it sees it")

T, S = tgt.shape[1], src.shape[1]
seed_cross_mask = torch.triu(torch.ones(T, S), diagonal=1).bool()  # the seed's automatic mask
show("seed's cross mask triu(ones(T, S), 1)", seed_cross_mask, "T, S")
print(f"  row 0 of it: {seed_cross_mask[0].int().tolist()} (1 = hidden): target word 0 sees source word 0 only")
with torch.no_grad():
    _, w = layer.cross_attn(layer.norm1(y_emb)[:1], memory[:1], memory[:1], need_weights=True)
show("attnkit cross-attention weights", w, "B, T, S")
assert (w[0, 0] > 0).all()
print("  attnkit: target word 0 attends to all 5 source words")

# %% [markdown]
# ## 6. Seed bug: NaN when every key of a query is masked / 种子错误四：全部被遮挡的行得到 NaN
#
# A softmax over a row of ``-inf`` is ``0 / 0``. It happens with left padding and a causal mask: the first query
# may see only the first key, which is padding. The seed's fix-up after the softmax (zeroing the padded
# columns) leaves the causally masked columns NaN, and the NaN spreads to the output and the gradients.
# attnkit returns zeros for such a row, in the output and the weights, with finite gradients.
# 左侧填充加因果掩码时，第一行全部被遮挡，softmax 得到 NaN；attnkit 输出 0。

# %%
section("6. Seed bug: NaN when every key of a query is masked", "种子错误四：全部被遮挡的行得到 NaN")
q, k = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)  # (B, H, T, D), (B, H, S, D)
v = torch.randn(1, 1, 3, 4, requires_grad=True)
pad = torch.tensor([[True, False, False]])  # the first position is (left) padding
scores = q @ k.transpose(-2, -1) / 2.0  # the seed's Attention, in its order:
scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
scores = scores.masked_fill(causal_mask(3), float("-inf"))
weights = scores.softmax(dim=-1).masked_fill(pad[:, None, None, :], 0)
seed_out = weights @ v
show("seed output", seed_out, "B, H, T, D")
print(f"  seed, query 0: weights {weights[0, 0, 0].tolist()}, output {seed_out[0, 0, 0].tolist()}; a loss "
      f"over the output gives the values of keys 1 and 2 NaN gradients")
assert torch.isnan(seed_out[0, 0, 0]).all() and not torch.isnan(seed_out[0, 0, 1:]).any()
seed_out.sum().backward()  # a loss over this output
assert torch.isnan(v.grad[0, 0, 1:]).all()  # the values that row 0 may not see get NaN gradients
v.grad = None
out, w = scaled_dot_product_attention(q, k, v, key_padding_mask=pad, is_causal=True, need_weights=True)
out.sum().backward()
assert (out[0, 0, 0] == 0).all() and (w[0, 0, 0] == 0).all() and torch.isfinite(v.grad).all()
assert torch.allclose(out[0, 0, 1:], seed_out[0, 0, 1:])
print(f"  attnkit, query 0: weights {w[0, 0, 0].tolist()}, output {out[0, 0, 0].tolist()}; the other rows "
      f"equal the seed's, gradients finite")

# %% [markdown]
# ## 7. attnkit's stack agrees with torch.nn.Transformer / 与 torch.nn.Transformer 一致
#
# ``from_torch`` copies a ``torch.nn.Transformer`` into an ``EncoderDecoder`` (the layouts match name by name:
# ``in_proj_weight`` → ``qkv_proj`` or ``q_proj`` + ``kv_proj``, ``linear1/2`` → ``ff.w_in/w_out``). With the
# same weights and masks both give the same output. torch's decoder needs the causal mask passed in; attnkit's
# adds it itself.
# 权重相同、掩码相同，两者输出一致。

# %%
section("7. attnkit's stack agrees with torch.nn.Transformer", "与 torch.nn.Transformer 一致")
ref = spread(nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=64,
                            dropout=0.0, batch_first=True))
mine = from_torch(ref).eval()
src_x, tgt_y = torch.randn(2, 6, 32), torch.randn(2, 4, 32)
src_pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
with torch.no_grad(), warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # torch's note that its nested-tensor fast path is a prototype
    expected = ref(src_x, tgt_y, tgt_mask=nn.Transformer.generate_square_subsequent_mask(4),
                   src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad)
    got = mine(src_x, tgt_y, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad)
show("torch.nn.Transformer output", expected, "B, T, C")
show("attnkit EncoderDecoder output", got, "B, T, C")
assert torch.allclose(got, expected, atol=5e-5)
print(f"  equal: max |difference| = {(got - expected).abs().max():.1e}")
