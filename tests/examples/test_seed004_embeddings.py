"""examples/seed004_embeddings.py runs: embeddings and positions checked, the PositionalEmbedding bug shown
wrong, and a tiny translator trained with teacher forcing that greedy decoding reproduces."""

from __future__ import annotations


def test_walkthrough_embeds_and_translates(run_example, expect_lines, expect_figures):
    out, figures = run_example("seed004_embeddings.py")
    expect_lines(out, [
        "one_hot @ table                              (B, T, C) = (2, 4, 8)  float32",
        "one_hot @ table equals TokenEmbedding(ids)",
        "sinusoidal_table(max_len, d_model)           (T, C) = (128, 512)  float32",
        "seed PositionalEmbedding(batch)              (B, C) = (5, 8)  float32",
        "attnkit TransformerEmbedding(batch)          (B, T, C) = (5, 3, 8)  float32",
        "B = 1: the seed adds position 0's encoding to every token",
        "labels (without <start>)                     (B, T) = (4, 4)  int64",
        "logits of one teacher-forced pass            (B, T, V) = (4, 4, 9)  float32",
        "teacher forcing: one pass predicts every next token of every pair correctly",
        "inference from <start> alone: 下午 好 。 <end> in 4 passes",
        "Good Night .       -> 晚安 。",
    ])
    expect_figures(figures, ["seed004_positional_encoding.png"])
