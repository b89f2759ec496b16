"""The result of :func:`attnkit.viz.trace.trace`: its rows, legend and totals, as a table or as JSON.

Axis legend: ``B`` batch, ``T`` target / text positions (queries), ``S`` source positions, ``C`` model width,
``H`` query heads, ``K`` key/value heads, ``D`` head dim, ``F`` feed-forward width, ``V`` vocabulary; derived
widths (``3C`` ...) and position tables (``(T, C)``) are explained in each trace's legend.

The table has one line per module call (indented by nesting) with its input and output shapes, output dtype,
parameters and their share, trainable parameters (only when some are frozen), mult-adds (nested calls
included) and output memory; attention layers get their mask, head split and own products underneath; the
legend is above, the totals below, as torchinfo's summary ends::

    Total params / Trainable params / Frozen params / Total mult-adds
    Input size / Forward activation size / Params size / Buffers size / Estimated total size
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict, dataclass, field
from typing import Sequence

from .trace_cost import human_bytes, human_count

__all__ = ["TraceRow", "TraceTotals", "Trace"]


@dataclass
class TraceRow:
    """One module call. ``depth`` is the call nesting (0 = the model itself).

    ``inputs`` / ``output`` are the shapes as printed, ``input_axes`` / ``output_axes`` their axis names
    (``None`` = unnamed); ``params`` counts each shared tensor once, ``trainable`` those of them with
    ``requires_grad``; ``mult_adds`` includes the calls nested inside, ``own_mult_adds`` does not;
    ``output_bytes`` is the size of every tensor returned; ``call`` is ``"forward"`` or ``"forward_len"``.
    """

    name: str
    kind: str
    depth: int
    inputs: list[str]
    output: str = ""
    dtype: str = ""
    params: int = 0
    share: float = 0.0
    tied: bool = False
    attention: dict[str, str] | None = None
    input_shapes: list[list[int]] = field(default_factory=list)
    output_shape: list[int] = field(default_factory=list)
    input_axes: list[list[str | None]] = field(default_factory=list)
    output_axes: list[str | None] = field(default_factory=list)
    trainable: int = 0
    mult_adds: int = 0
    own_mult_adds: int = 0
    output_bytes: int = 0
    call: str = "forward"


@dataclass
class TraceTotals:
    """The footer's numbers (bytes and counts), each shared tensor once."""

    params: int = 0
    trainable_params: int = 0
    mult_adds: int = 0
    input_bytes: int = 0
    activation_bytes: int = 0
    param_bytes: int = 0
    buffer_bytes: int = 0

    @property
    def frozen_params(self) -> int:
        return self.params - self.trainable_params

    @property
    def total_bytes(self) -> int:
        """Input + forward activations + parameters + buffers."""
        return self.input_bytes + self.activation_bytes + self.param_bytes + self.buffer_bytes

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "frozen_params": self.frozen_params, "total_bytes": self.total_bytes}


@dataclass
class Trace:
    """The rows of one traced forward call, the axis sizes used to name shapes, the legend and the totals.

    ``legend`` holds every line the legend may need, by the label it explains (``"axes"`` for the plain axes,
    ``"3C"``, ``"tables"`` for ``(T, C)`` position tables); :meth:`format` and :meth:`to_json` keep those that the
    shown rows use. ``uncounted``: product-like operations without a mult-add formula, and how often they ran.
    """

    model: str
    total_params: int
    axes: dict[str, int]
    rows: list[TraceRow] = field(default_factory=list)
    legend: dict[str, str] = field(default_factory=dict)
    totals: TraceTotals = field(default_factory=TraceTotals)
    uncounted: dict[str, int] = field(default_factory=dict)

    def visible(self, depth: int | None = None) -> list[TraceRow]:
        """Rows at nesting ``<= depth`` (all when ``None``)."""
        if depth is not None and depth < 0:
            raise ValueError(f"depth must be >= 0 (or None for every level), got {depth}")
        return [r for r in self.rows if depth is None or r.depth <= depth]

    def legend_lines(self, rows: Sequence[TraceRow]) -> list[str]:
        """The legend entries that ``rows`` use: the plain axes first, then derived widths, then tables."""
        used = {n for r in rows for axes in (*r.input_axes, r.output_axes) for n in axes if n}
        tables = dict.fromkeys(f"({r.output_axes[0]}, {r.output_axes[1]})" for r in rows  # position tables
                               if len(r.output_axes) == 2 and r.output_axes[0] in ("S", "T") and r.output_axes[1])
        lines = [text for label, text in self.legend.items() if label == "axes" or label in used]
        if tables and "tables" in self.legend:
            lines.append(f"{', '.join(tables)}: {self.legend['tables']}")
        return lines

    def to_json(self, depth: int | None = None) -> str:
        """The trace as JSON: ``{"model", "total_params", "axes", "legend", "totals", "uncounted", "rows"}``."""
        rows = self.visible(depth)
        return json.dumps({"model": self.model, "total_params": self.total_params, "axes": self.axes,
                           "legend": self.legend_lines(rows), "totals": self.totals.to_dict(),
                           "uncounted": self.uncounted, "rows": [asdict(r) for r in rows]},
                          indent=1, ensure_ascii=False)

    def format(self, depth: int | None = None) -> str:
        """A text table, one line per module call (indented by nesting), attention details underneath,
        the legend above and the totals below."""
        rows = self.visible(depth)
        frozen = self.totals.frozen_params > 0
        head = ["module", "input", "output", "dtype", "params", "share", *(["trainable"] if frozen else []),
                "mult-adds", "output mem"]
        table = []
        for r in rows:
            kind = r.kind if r.call == "forward" else f"{r.kind}.{r.call}"
            label = "  " * r.depth + (r.name or "(model)") + f" ({kind})"
            params = f"{r.params:,}" + (" tied" if r.tied else "")
            cells = [label, " | ".join(r.inputs), r.output, r.dtype, params, f"{100 * r.share:.1f}%"]
            cells += [f"{r.trainable:,}"] if frozen else []
            cells += [f"{r.mult_adds:,}" if r.mult_adds else "--", human_bytes(r.output_bytes) if r.output else "--"]
            table.append(cells)
        widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(head)]

        def line(cells):
            left = [c.ljust(w) for c, w in zip(cells[:4], widths[:4])]
            right = [c.rjust(w) for c, w in zip(cells[4:], widths[4:])]
            return "  ".join(left + right).rstrip()

        if self.axes:
            axes = "axes " + " ".join(f"{k}={v}" for k, v in self.axes.items())
        else:
            axes = "no axis is known (not an attnkit model): sizes are printed as they are"
        out = [f"{self.model}: {self.total_params:,} parameters; {axes}"]
        out += [wrapped for text in self.legend_lines(rows)
                for wrapped in textwrap.wrap(text, 110, initial_indent="  ", subsequent_indent="    ",
                                         break_on_hyphens=False)]
        rule = line(["-" * w for w in widths])
        out += [line(head), rule]
        for r, cells in zip(rows, table):
            out.append(line(cells))
            if r.attention:
                pad = "  " * (r.depth + 1) + "  "
                out += [f"{pad}{key}: {text}" for key, text in r.attention.items()]
        return "\n".join(out + [rule, *self.footer()])

    def footer(self) -> list[str]:
        """The totals, one per line, as torchinfo's summary ends."""
        t = self.totals
        lines = [("Total params", f"{t.params:,}"), ("Trainable params", f"{t.trainable_params:,}"),
                 ("Frozen params", f"{t.frozen_params:,}"),
                 ("Total mult-adds", f"{human_count(t.mult_adds)} ({t.mult_adds:,}): matrix products only"
                  if t.mult_adds >= 1_000_000 else f"{t.mult_adds:,}: matrix products only"),
                 ("Input size", human_bytes(t.input_bytes)),
                 ("Forward activation size", human_bytes(t.activation_bytes)),
                 ("Params size", human_bytes(t.param_bytes)), ("Buffers size", human_bytes(t.buffer_bytes)),
                 ("Estimated total size", human_bytes(t.total_bytes))]
        width = max(len(k) for k, _ in lines)
        out = [f"{k + ':':<{width + 1}} {v}" for k, v in lines]
        if self.uncounted:
            out.append("Not counted (no formula): " + ", ".join(f"{k} x{v}" for k, v in self.uncounted.items()))
        return out

    def __str__(self) -> str:
        return self.format()
