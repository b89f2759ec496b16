"""Seed 002, step by step: GPT-2 as nanoGPT writes it, rebuilt from attnkit's modules and checked in code.

Run it:  python examples/seed002_gpt2.py [--out DIR]     (a few seconds on a laptop CPU)
Open it as a notebook: Jupyter (with jupytext) or VS Code read the ``# %%`` cells.
The map from this text to attnkit's files and tests: docs/from-the-seeds.md, section 3. The seed's last part,
fine-tuning GPT-2 on jokes, has its own walkthrough: examples/seed002_finetune_jokes.py.

Seed 002 explains a decoder-only model: causal self-attention with one packed ``c_attn`` projection, a GELU MLP
that widens four times, pre-norm residual blocks, generation one token at a time, and where the parameters
are (GPT-2 small with a 50,304-token untied vocabulary: 163,109,376; GPT-2 XL: 48 layers, 25 heads, 1600
wide). This script redoes the seed's causal attention by hand on attnkit's weights, counts the parameters of
the three models on the meta device (shapes only, no memory) against the seed's arithmetic, and generates
token by token with and without attnkit's key/value cache.

Axis legend: B batch, T sequence length, S key length (cached + new), C model width (n_embd), H heads
(n_head), D head dim (C / H), F feed-forward width (4C), V vocabulary, K key/value heads (= H in GPT-2).
"""

# %%
from __future__ import annotations

import math
import time

import torch

from _walkthrough import output_dir, save, section, setup, show
from attnkit.generation import generate
from attnkit.models import GPTConfig, build_model, count_parameters, format_parameter_table, get_preset, parameter_table
from attnkit.modules import causal_mask
from attnkit.viz import attention_maps, plot_attention, plot_parameters, visible

setup(seed=0)
OUT = output_dir()

# A small GPT-2-shaped model over characters: every piece of GPT-2, a CPU-sized width.
TEXT = "I am fine, thank you."
CHARS = sorted(set(TEXT))
config = GPTConfig(vocab_size=len(CHARS), block_size=64, n_layer=2, n_head=4, n_embd=64)
model = build_model(config).eval()
with torch.no_grad():  # an untrained GPT's logits are nearly flat: spread the weights so greedy choices are clear
    for name, p in model.named_parameters():
        if p.dim() == 2:
            p.normal_(0.0, 2.0 / math.sqrt(p.shape[-1]))
ids = torch.tensor([[CHARS.index(c) for c in TEXT]])  # (1, T)
B, T, C, H = 1, ids.shape[1], config.n_embd, config.n_head
D = C // H

# %% [markdown]
# ## 1. Causal self-attention with one packed projection / 因果自注意力与打包投影
#
# nanoGPT's ``c_attn`` is ``Linear(C, 3C)``: one product gives q, k and v, split along the last axis and then
# into heads. The scores ``q kᵀ / √D`` are masked above the diagonal (a token may not look at later tokens),
# softmaxed, and mix the values; the heads are merged and projected by ``c_proj``. In attnkit ``c_attn`` is
# ``attn.qkv_proj`` and ``c_proj`` is ``attn.out_proj``; below, the seed's forward runs on those weights.
# 用 attnkit 的权重逐行重做种子文章的 CausalSelfAttention，并与 attnkit 的结果比较。

# %%
section("1. Causal self-attention with one packed projection", "因果自注意力与打包投影")
block = model.blocks[0]
attn = block.attn
x = block.ln_1(model.wte(ids) + model.wpe(torch.arange(T)))  # what block 0's attention sees
show("x (input of the attention)", x, "B, T, C")
qkv = attn.qkv_proj(x)  # nanoGPT: self.c_attn(x)
show("c_attn(x) = attn.qkv_proj(x)", qkv, "B, T, 3C")
q, k, v = qkv.split(C, dim=2)
q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
show("q, k, v split into heads", q, "B, H, T, D")
att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
tril = torch.tril(torch.ones(T, T)).view(1, 1, T, T)  # nanoGPT's registered "bias" buffer
att = att.masked_fill(tril == 0, float("-inf")).softmax(dim=-1)
show("att = softmax(masked q kᵀ / √D)", att, "B, H, T, T")
y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
y = attn.out_proj(y)  # nanoGPT: self.c_proj(y)
show("heads merged and projected by c_proj", y, "B, T, C")
ours, weights = attn(x, is_causal=True, need_weights=True, average_attn_weights=False)
assert torch.allclose(ours, y, atol=1e-5) and torch.allclose(weights, att, atol=1e-6)
assert (weights[..., causal_mask(T)] == 0).all()
print("  attnkit's MultiHeadAttention(x, is_causal=True) equals the seed's forward; every weight above the "
      "diagonal is exactly 0")

maps = attention_maps(model, ids[0])  # every layer's (H, T, T), captured with hooks
assert torch.allclose(maps[0], weights[0], atol=1e-6)  # block 0's maps are the weights computed above
labels = [visible(c) for c in TEXT]
fig = plot_attention(maps[0], query_labels=labels, key_labels=labels,
                     title="block 0: causal attention, each token looks only at itself and earlier tokens")
save(fig, OUT, "seed002_causal_attention.png")

# %% [markdown]
# ## 2. The MLP and the pre-norm block / MLP 与 pre-norm 残差块
#
# ``x = x + attn(ln_1(x))`` then ``x = x + mlp(ln_2(x))``; the MLP widens ``C`` to ``4C``, applies GELU and
# narrows back (GPT-2 uses the tanh form of GELU, ``activation="gelu_tanh"``; the seed's ``nn.GELU()`` is
# ``"gelu"``). A token's output depends only on itself and earlier tokens.
# 残差块：先归一化再注意力/MLP，再加回输入。

# %%
section("2. The MLP and the pre-norm block", "MLP 与 pre-norm 残差块")
h = model.wte(ids) + model.wpe(torch.arange(T))
show("the MLP's hidden layer mlp.w_in(...)", block.mlp.w_in(block.ln_2(h)), "B, T, F")
x1 = h + block.attn(block.ln_1(h), is_causal=True)[0]
by_hand = x1 + block.mlp(block.ln_2(x1))
assert torch.allclose(block(h), by_hand, atol=1e-5)
print(f"  block(x) = x1 + mlp(ln_2(x1)) with x1 = x + attn(ln_1(x)); activation {config.activation!r}")
changed = ids.clone()
changed[0, -1] = (changed[0, -1] + 1) % config.vocab_size
logits, logits_changed = model(ids), model(changed)
show("logits = model(idx)", logits, "B, T, V")
assert torch.allclose(logits[:, :-1], logits_changed[:, :-1], atol=1e-5)
assert not torch.allclose(logits[:, -1], logits_changed[:, -1])
print("  changing the last token changes only the last position's logits: the model is causal")

# %% [markdown]
# ## 3. Where the parameters are / 参数量估计
#
# The seed counts GPT-2 small with nanoGPT's vocabulary of 50,304 and an untied ``lm_head``: 163,109,376.
# OpenAI's GPT-2 small (vocabulary 50,257, ``lm_head`` tied to ``wte``) has 124,439,808. The models below are
# built on PyTorch's ``meta`` device: every tensor has a shape and no storage, so even GPT-2 XL is counted in
# milliseconds without 6 GB of memory. The seed's own XL estimate does not add up; the count shows why.
# 在 meta 设备上建模型，只有形状没有内存，参数量即刻可得。

# %%
section("3. Where the parameters are", "参数量估计")


def block_params(c: int) -> int:
    """One GPT-2 block: c_attn 3C²+3C, c_proj C²+C, c_fc 4C²+4C, mlp c_proj 4C²+C, two LayerNorms 4C."""
    return 12 * c * c + 13 * c


seed002 = get_preset("gpt2-seed002")
seed_model = build_model(seed002, device="meta")
assert next(seed_model.parameters()).device.type == "meta"
print(format_parameter_table(seed_model))
by_layer = dict(parameter_table(seed_model, depth=4))
seed_numbers = {  # as the seed prints them
    "blocks.0.attn.qkv_proj": 1_771_776, "blocks.0.attn.out_proj": 590_592,
    "blocks.0.mlp.w_in": 2_362_368, "blocks.0.mlp.w_out": 2_360_064,
    "blocks.0.ln_1.weight": 768, "blocks.0.ln_1.bias": 768,
}
for name, expected in seed_numbers.items():
    assert by_layer[name] == expected, (name, by_layer[name], expected)
per_block = sum(n for name, n in by_layer.items() if name.startswith("blocks.0."))
assert per_block == block_params(768) == 7_087_872
assert count_parameters(seed_model) == 38_633_472 + 786_432 + 12 * 7_087_872 + 1_536 + 38_633_472 == 163_109_376
print(f"  one block: {per_block:,} (the seed: 7,087,872); total {count_parameters(seed_model):,} "
      f"(the seed: 163,109,376)")

gpt2 = get_preset("gpt2")
assert count_parameters(gpt2) == 124_439_808
print(f"  OpenAI's GPT-2 small (vocab {gpt2.vocab_size:,}, lm_head tied to wte): {count_parameters(gpt2):,}")

start = time.perf_counter()
xl = build_model(get_preset("gpt2-xl-seed002"), device="meta")
xl_total = count_parameters(xl)
elapsed = time.perf_counter() - start
xl_cfg = xl.config
assert (xl_cfg.n_layer, xl_cfg.n_head, xl_cfg.n_embd) == (48, 25, 1600)
xl_block = dict(parameter_table(xl, depth=2))["blocks.0"]
assert xl_block == block_params(1600) == 30_740_800
assert xl_total == 50_304 * 1600 + 1024 * 1600 + 48 * xl_block + 2 * 1600 + 1600 * 50_304 == 1_638_172_800
print(f"  GPT-2 XL (48 layers, 25 heads, 1600 wide), vocab 50,304 untied: {xl_total:,} "
      f"(the seed: 1638.17M), counted on the meta device in {elapsed * 1000:.0f} ms")
seed_estimate = 80.5e6 + 23e6 * 48 + 80.5e6  # the seed's "wte + 23m x 48 blocks + lm_head"
assert abs(seed_estimate - xl_total) > 300e6
print(f"  the seed's estimate 80.5m + 23m x 48 + 80.5m = {seed_estimate / 1e6:,.0f}m misses its own total: "
      f"a block of width 1600 holds {xl_block:,} = 12·C² + 13·C, not 23m")
ratio = 48 * xl_block / (12 * per_block)
assert abs(ratio / ((1600 / 768) ** 2 * 48 / 12) - 1) < 0.01
print(f"  the blocks grow {ratio:.2f}x from small to XL: about (width ratio)² x (layer ratio) = "
      f"{(1600 / 768) ** 2 * 4:.2f}, as the seed says")
official_xl = get_preset("gpt2-xl")
assert count_parameters(official_xl) == 1_557_611_200
print(f"  OpenAI's GPT-2 XL (vocab 50,257, tied): {count_parameters(official_xl):,} (nanoGPT: 1558M)")
save(plot_parameters(seed002, depth=1, title="gpt2-seed002: 163,109,376 parameters"), OUT,
     "seed002_parameters.png")

# %% [markdown]
# ## 4. Generation, one token at a time / 逐字生成
#
# Run the model, take the most likely next token of the last position, append it, run again. Without a cache
# every step recomputes the whole prefix; with attnkit's key/value cache the prompt is fed once ("prefill")
# and each later step feeds only the newest token, attending to the cached keys and values. Both give the
# same tokens; below, a hand-written loop, ``generate(use_cache=False)`` and ``generate(use_cache=True)`` agree.
# 每次取最后一个位置概率最大的词，接到输入后面再预测；有无 KV 缓存结果相同。

# %%
section("4. Generation, one token at a time", "逐字生成")
prompt = ids[:, :9]  # "I am fine"
n_new = 20
tokens = prompt
with torch.no_grad():
    for _ in range(n_new):  # the seed's loop
        next_token = model(tokens)[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, next_token], dim=1)
by_hand = tokens[0, prompt.shape[1]:].tolist()
uncached = generate(model, prompt, max_new_tokens=n_new, use_cache=False)[0]
cached = generate(model, prompt, max_new_tokens=n_new, use_cache=True)[0]
assert by_hand == uncached == cached
print(f"  prompt {TEXT[:9]!r} + {n_new} greedy tokens: {''.join(CHARS[i] for i in cached)!r} "
      f"(an untrained model: the point is that the three agree)")

cache = model.new_cache(batch_size=1, max_len=prompt.shape[1] + n_new)
show("one layer's key cache (empty)", cache[0].k_cache, "B, K, S, D")
with torch.no_grad():
    prefill = model(prompt, cache=cache)  # every prompt position at once
    show("prefill logits", prefill, "B, T, V")
    step_tokens = prompt
    for i, token in enumerate(cached[:5]):
        step = model(torch.tensor([[token]]), cache=cache)  # one new position
        step_tokens = torch.cat([step_tokens, torch.tensor([[token]])], dim=1)
        assert torch.allclose(step[:, -1], model(step_tokens)[:, -1], atol=1e-4)
    show("one cached step's logits", step, "B, 1, V")
print(f"  after the prefill and 5 steps the cache holds {cache.length} positions; each step's logits equal "
      f"a full forward over the whole prefix")

long_prompt = torch.randint(0, config.vocab_size, (1, 8))
n_long = config.block_size - 8
embedded = []  # how many token positions each call of the model embeds (= runs through every block)
hook = model.wte.register_forward_hook(lambda module, args, out: embedded.append(args[0].numel()))
runs = {}
for use_cache in (False, True):
    embedded.clear()
    start = time.perf_counter()
    out = generate(model, long_prompt, max_new_tokens=n_long, use_cache=use_cache)[0]
    runs[use_cache] = (out, sum(embedded), time.perf_counter() - start)
hook.remove()
assert runs[False][0] == runs[True][0]
# without the cache step i runs the prompt and the i tokens so far; with it the prompt once, then one token a step
assert runs[False][1] == sum(8 + i for i in range(n_long)) and runs[True][1] == 8 + n_long - 1
(_, n_uncached, t_uncached), (_, n_cached, t_cached) = runs[False], runs[True]
print(f"  {n_long} new tokens, the same with and without the cache; positions run through the model: "
      f"{n_uncached:,} without ({t_uncached * 1000:.0f} ms), {n_cached:,} with ({t_cached * 1000:.0f} ms)")
