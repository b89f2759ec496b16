"""examples/seed000_walkthrough.py runs and prints the shapes seed 000 prints by hand."""

from __future__ import annotations

import ast


def test_walkthrough_runs_and_prints_the_expected_shapes(run_example, expect_lines):
    out, _ = run_example("seed000_walkthrough.py")
    expect_lines(out, [
        "== 1. RMSNorm / 归一化",
        "RMSNorm(dim_emb)(x)                          (B, S, C) = (3, 12, 128)",
        "w_in(x): the hidden layer                    (B, S, F) = (3, 12, 512)",
        "attention weights                            (B, 1, S, S) = (3, 1, 12, 12)",
        "split into heads                             (B, H, S, D) = (3, 4, 12, 32)",
        "weights of every head                        (B, H, S, S) = (3, 4, 12, 12)",
        "heads concatenated and projected by W        (B, S, C) = (3, 12, 128)",
        "MultiHeadAttention(128, 4, head_dim=48)(x)   (B, S, C) = (3, 12, 128)",
        "positional_encoding (vectorised)             (B, S, C) = (3, 12, 128)",
        "generate_mask_mat(7, 6)                      (T, T) = (7, 7)  bool",
        "encoder output (memory)                      (B, S, C) = (3, 12, 128)",
        "probabilities (softmax over the vocabulary)  (B, T, V) = (3, 7, 256)",
        "next_token                                   (B) = (3,)  int64",
        "each weight row sums to 1: True",
        "with masked_len = seq_len - 1 it is the look-ahead mask: True",
        "every row sums to 1: True",
        "ids in [0, 256) (the seed's random.randint(0, vocab_size) can draw 256",
        "the decoder applies the causal mask itself",
    ])
    diff = float(out.split("equal to the seed's triple loop: max |diff| = ")[1].split()[0])
    assert diff < 1e-5
    tokens = ast.literal_eval(out.split("next tokens:")[1].strip())  # a list of 3 ids in [0, 256)
    assert len(tokens) == 3 and all(0 <= t < 256 for t in tokens)
