"""Training metrics: an append-only ``metrics.jsonl`` log, plus ``metrics.csv`` and ``loss.png`` views.

* ``metrics.jsonl`` — one JSON object per event, appended and flushed immediately (so a killed run keeps
  everything up to its last step). Training rows: ``{"step", "loss", "lr", "grad_norm", "tokens",
  "tokens_per_s", "elapsed"}``; evaluation rows: ``{"step", "valid_loss", "valid_ppl", ...}``. Floats are
  written with ``repr`` precision, so a logged loss is the exact float the run computed.
* ``metrics.csv`` — the same rows merged by step (one line per step, columns in order of first
  appearance), rewritten atomically by :meth:`MetricsLogger.write_tables`.
* ``loss.png`` — training and validation loss against step (matplotlib, Agg canvas), rewritten likewise.

On resume, :class:`MetricsLogger` drops every row after the checkpoint's step, so the log never holds the
same step twice, even when the killed run had got further than its last checkpoint (the CSV and the plot are
rewritten at once then, so they do not show the dropped rows either).

No tensors here, so no shapes to document.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

from attnkit.files import write_bytes_atomic, write_text_atomic

JSONL_FILE = "metrics.jsonl"
CSV_FILE = "metrics.csv"
PLOT_FILE = "loss.png"


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All rows of a ``metrics.jsonl`` file (a folder holding one is accepted too).

    A line that is not valid JSON (a run killed while writing it) is skipped with a warning.
    """
    path = Path(path)
    if path.is_dir():
        path = path / JSONL_FILE
    rows = []
    if not path.is_file():
        return rows
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                warnings.warn(f"{path}:{lineno}: skipping a malformed metrics line (interrupted write?)", stacklevel=2)
                continue
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                rows.append(row)
    return rows


class MetricsLogger:
    """Writes the three metrics files of a run folder.

    Args:
        out_dir: the run folder.
        resume_step: None starts a fresh log (an existing ``metrics.jsonl`` is emptied); an int keeps the
            rows with ``step <= resume_step`` and drops the rest (they belong to the interrupted future).
    """

    def __init__(self, out_dir: str | os.PathLike, *, resume_step: int | None = None):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = self.out_dir / JSONL_FILE
        self.csv_path = self.out_dir / CSV_FILE
        self.plot_path = self.out_dir / PLOT_FILE
        logged = [] if resume_step is None else read_metrics(self.jsonl_path)
        self.rows: list[dict[str, Any]] = [r for r in logged if r["step"] <= resume_step]
        # Rewrite the log with the kept rows (atomically), then append from here on.
        write_text_atomic(self.jsonl_path, "".join(self._line(r) for r in self.rows))
        self._fh = open(self.jsonl_path, "a", encoding="utf-8")
        self.dirty = True  # rows not yet reflected in the CSV / PNG
        if len(self.rows) < len(logged):  # the CSV and the plot show the dropped rows: rewrite them now
            self.write_tables()

    @staticmethod
    def _line(row: dict[str, Any]) -> str:
        # json uses repr() for floats: the shortest text that reads back as the very same float
        return json.dumps(row, allow_nan=False) + "\n"

    def log(self, row: dict[str, Any]) -> None:
        """Append one row (must have an int ``"step"``; values finite numbers or str) and flush it to disk."""
        if not isinstance(row.get("step"), int):
            raise ValueError(f"a metrics row needs an int 'step', got {row.get('step')!r}")
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"metrics value {key!r} at step {row['step']} is not finite: {value}")
        row = dict(row)
        self._fh.write(self._line(row))
        self._fh.flush()
        self.rows.append(row)
        self.dirty = True

    # --------------------------------------------------------------------------------------------
    def merged_by_step(self) -> tuple[list[str], list[dict[str, Any]]]:
        """(columns, rows): one row per step, training and evaluation values side by side."""
        columns: list[str] = []
        merged: dict[int, dict[str, Any]] = {}
        for row in self.rows:
            for key in row:
                if key not in columns:
                    columns.append(key)
            merged.setdefault(row["step"], {}).update(row)
        return columns, [merged[s] for s in sorted(merged)]

    def write_csv(self) -> None:
        columns, rows = self.merged_by_step()
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, restval="", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
        write_text_atomic(self.csv_path, buf.getvalue())

    def write_plot(self) -> None:
        """``loss.png``: training loss (line; a marker when there is one point) and validation loss (markers)
        against step."""
        # The object-oriented Agg canvas: renders to PNG without pyplot, so no global backend is changed.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        train = [(r["step"], r["loss"]) for r in self.rows if "loss" in r]
        valid = [(r["step"], r["valid_loss"]) for r in self.rows if "valid_loss" in r]
        fig = Figure(figsize=(7, 4.2), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        if train:  # a lone point is no line: it gets a marker (a run of one logged step)
            ax.plot(*zip(*train), label="train loss", color="tab:blue", linewidth=1.0, alpha=0.85,
                    marker="o" if len(train) == 1 else None, markersize=4)
        if valid:
            ax.plot(*zip(*valid), label="valid loss", color="tab:orange", marker="o", markersize=4, linewidth=1.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no tick at step 0.96
        steps = {s for s, _ in train + valid}
        if len(steps) == 1:  # one step: a range of whole steps around it (matplotlib's own is 0.945 to 1.065)
            ax.set_xlim(min(steps) - 1, min(steps) + 1)
        ax.set_xlabel("step (optimizer updates)")
        ax.set_ylabel("cross-entropy (nats / token)")
        ax.set_title("training curve")
        ax.grid(True, alpha=0.3)
        if train or valid:
            ax.legend()
        fig.subplots_adjust(left=0.1, right=0.97, bottom=0.12, top=0.92)  # fixed margins: tight_layout is slow
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        write_bytes_atomic(self.plot_path, buf.getvalue())

    def write_tables(self, *, only_if_changed: bool = False) -> None:
        """Rewrite ``metrics.csv`` and ``loss.png`` from all rows so far (skipped when ``only_if_changed``
        and nothing was logged since the last write)."""
        if only_if_changed and not self.dirty:
            return
        self.write_csv()
        self.write_plot()
        self.dirty = False

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
