"""examples/seed001_multihead_attention.py runs, agrees with torch.nn.MultiheadAttention, and draws its figure."""

from __future__ import annotations


def test_walkthrough_checks_the_mask_rules_against_torch(run_example, expect_lines, expect_figures, tmp_path):
    out, _ = run_example("seed001_multihead_attention.py", "--out", str(tmp_path / "given"))  # --out wins
    expect_lines(out, [
        "== 1. Token embedding shapes / 词嵌入的形状",
        "TokenEmbedding(10, 8)(X)                     (B, T, C) = (2, 4, 8)  float32",
        "the seed's line P[:,:0::2] = ... is a SyntaxError",
        "repaired as P[:, :, 0::2] it equals x + sinusoidal_table(T, C): True",
        "torch in_proj_weight                         (3C, C) = (24, 8)  float32",
        "attnkit kv_proj.weight (cross-attention)     (2C, C) = (16, 8)  float32",
        "torch 3-D mask = the same, reshaped          (B*H, T, S) = (4, 3, 5)  bool",
        "torch's 3-D form (B*H, T, S) given to attnkit: ValueError: 3-D attn_mask must have shape (B, T, S)",
        "merge_masks(bool (T, S), (B, S))             (B, 1, T, S) = (2, 1, 3, 5)  bool",
        "equal to the seed's merged mask, element by element",
        "attnkit: view + transpose                    (B, H, T, D) = (2, 2, 3, 4)  float32",
        "averaged weights                             (B, T, S) = (2, 3, 5)  float32",
        "averaged = mean of the heads; the per-head weights equal torch's",
    ])
    expect_figures(tmp_path / "given", ["seed001_attention_weights.png"])
