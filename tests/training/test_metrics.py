"""MetricsLogger: JSONL with exact floats, CSV merged by step, loss.png, truncation on resume."""

from __future__ import annotations

import csv
import json

import pytest

from attnkit.training.metrics import MetricsLogger, read_metrics


def _log_run(out_dir, steps):
    m = MetricsLogger(out_dir)
    for s in steps:
        m.log({"step": s, "loss": 1.0 / (s + 3), "lr": 0.1})
        if s % 2 == 0:
            m.log({"step": s, "valid_loss": 2.0 / (s + 3), "valid_ppl": 7.5})
    return m


def test_jsonl_keeps_exact_floats(tmp_path):
    m = _log_run(tmp_path, [1, 2, 3])
    m.close()
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 2, 3]
    assert rows[0]["loss"] == 1.0 / 4  # the very same float
    assert rows[3]["loss"] == 1.0 / 6
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[3])["loss"] == 1.0 / 6


def test_csv_and_png_written(tmp_path):
    m = _log_run(tmp_path, [1, 2, 3, 4])
    m.write_tables()
    m.close()
    with open(tmp_path / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["step"] for r in rows] == ["1", "2", "3", "4"]  # one line per step
    assert list(rows[0]) == ["step", "loss", "lr", "valid_loss", "valid_ppl"]
    assert float(rows[1]["valid_loss"]) == 2.0 / 5 and rows[0]["valid_loss"] == ""
    assert float(rows[2]["loss"]) == 1.0 / 6
    png = (tmp_path / "loss.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_resume_drops_rows_past_the_checkpoint(tmp_path):
    _log_run(tmp_path, [1, 2, 3, 4, 5]).close()
    m = MetricsLogger(tmp_path, resume_step=3)
    m.log({"step": 4, "loss": 0.5})
    m.close()
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 2, 3, 4]
    assert rows[-1]["loss"] == 0.5


def test_a_resume_that_drops_rows_rewrites_the_csv_and_the_plot_at_once(tmp_path):
    """Was: until the resumed run's first evaluation metrics.csv and loss.png still showed the dropped steps (a run
    killed again before it showed them for good)."""
    m = _log_run(tmp_path, [1, 2, 3, 4])
    m.write_tables()
    m.close()
    plot = (tmp_path / "loss.png").read_bytes()
    MetricsLogger(tmp_path, resume_step=2).close()
    with open(tmp_path / "metrics.csv") as fh:
        assert [r["step"] for r in csv.DictReader(fh)] == ["1", "2"]
    assert (tmp_path / "loss.png").read_bytes() != plot
    (tmp_path / "metrics.csv").write_text("as it was")
    MetricsLogger(tmp_path, resume_step=2).close()  # nothing dropped: the views are left as they are
    assert (tmp_path / "metrics.csv").read_text() == "as it was"


def test_fresh_logger_empties_old_log(tmp_path):
    _log_run(tmp_path, [1, 2]).close()
    MetricsLogger(tmp_path).close()
    assert read_metrics(tmp_path) == []


def test_half_written_last_line_is_skipped(tmp_path):
    _log_run(tmp_path, [1]).close()
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 2, "lo')  # killed mid-write
    with pytest.warns(UserWarning, match="malformed metrics line"):
        m = MetricsLogger(tmp_path, resume_step=10)
    m.close()
    assert [r["step"] for r in read_metrics(tmp_path)] == [1]


def test_bad_rows_rejected(tmp_path):
    m = MetricsLogger(tmp_path)
    with pytest.raises(ValueError, match="needs an int 'step', got None"):
        m.log({"loss": 1.0})
    with pytest.raises(ValueError, match="'loss' at step 3 is not finite: nan"):
        m.log({"step": 3, "loss": float("nan")})
    m.close()


def test_a_lone_training_point_is_drawn(tmp_path, monkeypatch):
    """Was: a run with one logged step (``--steps 1``) drew its training loss as a line of one point, which shows
    nothing: loss.png had a "train loss" legend entry and no train loss (and ticks at steps 0.96 ... 1.04)."""
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    figures = []
    savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), savefig(fig, *a, **k))[1])
    m = MetricsLogger(tmp_path)
    m.log({"step": 1, "loss": 2.88})
    m.log({"step": 1, "valid_loss": 2.76})
    m.write_tables()
    m.close()
    (fig,) = figures
    ax = fig.axes[0]
    image = imread(tmp_path / "loss.png")  # (height, width, RGBA) floats in [0, 1]
    x, y = ax.transData.transform((1, 2.88))  # the point in pixels, from the bottom left
    r, g, b = image[round(image.shape[0] - y), round(x), :3]
    assert b > r + 0.3 and b > g + 0.1, f"no blue train-loss marker at step 1 (pixel {r:.2f} {g:.2f} {b:.2f})"
    assert all(float(t).is_integer() for t in ax.get_xticks()), ax.get_xticks()
    assert np.isclose(image[..., :3], 1.0).mean() > 0.5  # still a white figure, not a blot
