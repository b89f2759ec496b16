"""examples/annotated_lr_schedule.py runs: the paper's schedule and attnkit's warmup + cosine checked and drawn."""

from __future__ import annotations


def test_schedules_are_checked_and_drawn(run_example, expect_lines, expect_figures):
    out, figures = run_example("annotated_lr_schedule.py")
    expect_lines(out, [
        "d_model 512, warmup 4000: equal to the paper's formula at all 20,000 updates; peak 6.99e-04 at update 4000",
        "d_model 256, warmup 4000: equal to the paper's formula",
        "peak 0.0003 at update 100",
        "cosine: the 1000 rates the optimizer ran with are lr_at's",
        "inverse_sqrt: the 1000 rates the optimizer ran with are lr_at's",
    ])
    expect_figures(figures, ["annotated_lr_inverse_sqrt.png", "annotated_lr_cosine.png"])
