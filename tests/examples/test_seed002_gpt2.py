"""examples/seed002_gpt2.py runs: nanoGPT's attention redone by hand, the seed's parameter counts, cached and
uncached generation agreeing."""

from __future__ import annotations


def test_walkthrough_counts_gpt2_and_generates(run_example, expect_lines, expect_figures):
    out, figures = run_example("seed002_gpt2.py")
    expect_lines(out, [
        "c_attn(x) = attn.qkv_proj(x)                 (B, T, 3C) = (1, 21, 192)  float32",
        "att = softmax(masked q kᵀ / √D)              (B, H, T, T) = (1, 4, 21, 21)  float32",
        "attnkit's MultiHeadAttention(x, is_causal=True) equals the seed's forward",
        "the model is causal",
        "total    163,109,376",
        "one block: 7,087,872 (the seed: 7,087,872); total 163,109,376",
        "OpenAI's GPT-2 small (vocab 50,257, lm_head tied to wte): 124,439,808",
        "GPT-2 XL (48 layers, 25 heads, 1600 wide), vocab 50,304 untied: 1,638,172,800",
        "a block of width 1600 holds 30,740,800 = 12·C² + 13·C",
        "one layer's key cache (empty)                (B, K, S, D) = (1, 4, 29, 16)  float32",
        "one cached step's logits                     (B, 1, V) = (1, 1, 16)  float32",
        "56 new tokens, the same with and without the cache; positions run through the model: 1,988 without",
    ])
    expect_figures(figures, ["seed002_causal_attention.png", "seed002_parameters.png"])
