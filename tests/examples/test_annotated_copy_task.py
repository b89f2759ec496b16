"""examples/annotated_copy_task.py runs: the model learns to copy (the script asserts exact copies of every
held-out sequence), and the loss curve and cross-attention are drawn."""

from __future__ import annotations

import re


def test_copy_task_learns(run_example, expect_lines, expect_figures):
    out, figures = run_example("annotated_copy_task.py")
    expect_lines(out, [
        "src: digits + <eos>                          (B, S) = (64, 11)  int64",
        "exact copies 0 / 200",
        "exact copies 200 / 200",
        "0123456789 -> 0123456789",
        "cross-attention, last decoder layer          (H, T, S) = (4, 11, 11)  float32",
    ])
    losses = [float(x) for x in re.findall(r"update +\d+: loss ([\d.]+)", out)]
    assert len(losses) == 7 and losses[-1] < 0.01 * losses[0]
    expect_figures(figures, ["annotated_copy_loss.png", "annotated_copy_cross_attention.png"])
