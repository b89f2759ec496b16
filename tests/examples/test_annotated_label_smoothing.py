"""examples/annotated_label_smoothing.py runs: the smoothed targets, the loss's minimum below full confidence and
MTTask's losses checked, two figures drawn."""

from __future__ import annotations


def test_label_smoothing_is_checked_and_drawn(run_example, expect_lines, expect_figures):
    out, figures = run_example("annotated_label_smoothing.py")
    expect_lines(out, [
        "smoothed targets                             (N, V) = (5, 8)  float32",
        "the reference gets 1 - ε + ε/V = 0.65, every other token ε/V = 0.05",
        "ε = 0: the loss keeps falling as p -> 1",
        "at p = 0.912 (1 - ε + ε/V = 0.912)",
        "batch tgt_in (<bos> + target)                (B, T) = (2, 4)  int64",
        "MTTask.loss = ",
    ])
    expect_figures(figures, ["annotated_label_smoothing_targets.png", "annotated_label_smoothing_loss.png"])
