"""Figures that show what is inside a Transformer: positional encodings, masks, attention maps, parameter
counts and next-token predictions.

Axis legend: ``T`` query positions (rows), ``S`` key positions (columns), ``C`` model width, ``H`` heads,
``B`` batch rows, ``k`` candidates per position.

Every ``plot_*`` function takes numbers (tensors) and returns a :class:`matplotlib.figure.Figure` drawn on the
Agg canvas (no pyplot, no global backend change, nothing shown on screen); :func:`save_figure` writes it as a
PNG atomically. The numbers come from attnkit itself (:func:`~attnkit.modules.sinusoidal.sinusoidal_table`,
:mod:`~attnkit.modules.masks`, :mod:`attnkit.viz.attention_maps`, :mod:`attnkit.viz.predictions`,
:mod:`~attnkit.models.params`), so a figure shows exactly what the model computes.

    fig = plot_positional_encoding(seq_len=100, dim=128)
    save_figure(fig, "pe.png")
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any, Sequence

import torch

from attnkit.checks import check_float, check_int, is_int

__all__ = [
    "save_figure",
    "check_figure_path",
    "check_dpi",
    "check_pixels",
    "mask_figure_inches",
    "MAX_TABLE",
    "MAX_DPI",
    "MAX_PIXELS",
    "plot_positional_encoding",
    "make_mask",
    "MASK_KINDS",
    "plot_mask",
    "plot_attention",
    "plot_parameters",
    "plot_predictions",
]

MASK_KINDS = ("causal", "banded", "padding")
MIN_DPI, MAX_DPI = 10, 1200  # dots per inch of a saved PNG
MAX_PIXELS = 100_000_000  # width x height of a saved PNG (its RGBA buffer: 400 MB)
MAX_TABLE = 1 << 24  # values of a drawn position table (positions x channels): 64 MB, more than any screen shows
# Text drawn from tokens, titles and labels is shown as given: matplotlib would parse a '$...$' pair as
# mathtext (a token '$$' would even raise a multi-line ParseException).
_PLAIN = {"parse_math": False}


def _figure(width: float, height: float, *, constrained: bool = True):
    """A Figure attached to an Agg canvas (object-oriented matplotlib: no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained" if constrained else None)
    FigureCanvasAgg(fig)
    return fig


def _check_figure_tensor(name: str, value: Any, expected: str, ok: bool) -> None:
    """``ValueError`` naming ``expected`` and what was given unless ``ok``, or when the tensor has no elements."""
    if not ok:
        got = (f"{value.dtype} tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
               else type(value).__name__)
        raise ValueError(f"{name} must be {expected}, got {got}")
    if value.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(value.shape)}")


def _is_png(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


def check_figure_path(path: str | os.PathLike, dpi: Any = 100, flag: str = "--out") -> Path:
    """``ValueError`` (before any work) unless ``path`` ends in ``.png`` and may be written: not a folder, not a
    file of a training run (its ``loss.png`` included), and if it exists an earlier PNG, which is replaced
    (:func:`~attnkit.checkpoints.runs.check_output_file`); and unless ``dpi`` is in range."""
    from attnkit.checkpoints.runs import check_output_file

    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"figures are written as PNG: the path must end in .png, got {str(path)!r}")
    check_dpi(dpi)
    return check_output_file(path, flag, replaces=_is_png, may_replace="an earlier PNG figure")


def save_figure(fig: Any, path: str | os.PathLike, *, dpi: int = 100) -> Path:
    """Render ``fig`` to PNG and write it to ``path`` (temporary name, then rename); returns the path.

    The parent folder is created if needed. ``path`` must end in ``.png`` and may replace only an earlier PNG, not
    a file of a run (:func:`check_figure_path`); ``dpi`` must be in [``MIN_DPI``, ``MAX_DPI``] = [10, 1200] and
    the image at most ``MAX_PIXELS`` (100 megapixels).
    """
    from attnkit.files import write_bytes_atomic

    path = check_figure_path(path, dpi)
    check_pixels(*(float(x) for x in fig.get_size_inches()), dpi)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, buf.getvalue())
    return path


def check_pixels(width: float, height: float, dpi: Any, what: str = "figure") -> None:
    """``ValueError`` unless a ``width`` x ``height`` inch ``what`` at ``dpi`` stays within ``MAX_PIXELS``: naming
    the largest dpi that fits, or, when not even ``MIN_DPI`` does, that the figure is too large to draw."""
    pixels = round(width * dpi) * round(height * dpi)
    if pixels <= MAX_PIXELS:
        return
    most = int(math.sqrt(MAX_PIXELS / (width * height)))
    size = f"{round(width * dpi)} x {round(height * dpi)} pixel image ({pixels / 1e6:.0f} megapixels)"
    if most < MIN_DPI:
        raise ValueError(f"this {what} (a {width:.0f} x {height:.0f} inch figure) is too large to draw: even at dpi "
                         f"{MIN_DPI} (the least) it would be more than {MAX_PIXELS // 1_000_000} megapixels; draw a "
                         f"smaller one")
    raise ValueError(f"dpi {dpi} would make a {size}: expected at most {MAX_PIXELS // 1_000_000} megapixels, "
                     f"i.e. dpi <= {most} for this {what} (a {width:.1f} x {height:.1f} inch figure)")


def check_dpi(dpi: Any) -> None:
    """``ValueError`` unless ``dpi`` is a number in [``MIN_DPI``, ``MAX_DPI``] (before any work is done)."""
    check_float("dpi", dpi, low=MIN_DPI, high=MAX_DPI)


def _label_fontsize(n: int) -> float:
    return 9 if n <= 16 else 7 if n <= 32 else 5.5 if n <= 64 else 4.5


# ----------------------------------------------------------------------------------------------------
# positional encoding
# ----------------------------------------------------------------------------------------------------

def plot_positional_encoding(seq_len: int = 100, dim: int = 128, *, dims: Sequence[int] | None = None,
                             base: float = 10000.0):
    """Heatmap of the sinusoidal table (positions down, channels across) and a few channels as curves.

    Low channels oscillate fast along the positions, high channels slowly: every position gets a unique
    pattern, and channels ``2m`` (sine) and ``2m + 1`` (cosine) share one frequency.

    Args:
        seq_len: positions ``T`` (rows).
        dim: channels ``C`` (columns).
        dims: channels drawn as curves (default: the pair at 1/16 of the width, and the sines at 1/8 and 1/4).
        base: the ``10000`` of the formula ``pos / base ** (2m / C)``: a finite number > 1 (at 1 every channel
            pair has the same frequency; below 1 the table runs backwards; <= 0 has no real power).

    Shape:
        draws the ``(T, C)`` table of :func:`~attnkit.modules.sinusoidal.sinusoidal_table`.
    """
    from attnkit.modules.sinusoidal import sinusoidal_table

    check_int("seq_len", seq_len, minimum=1)
    check_int("dim", dim, minimum=1)
    base = check_float("base", base, low=1.0, low_inclusive=False)
    if seq_len * dim > MAX_TABLE:  # before the table is computed
        raise ValueError(f"a table of {seq_len:,} positions x {dim:,} channels is too large to draw: at most "
                         f"{MAX_TABLE:,} values (e.g. 4096 x 4096)")
    if dims is None:
        # a sine/cosine pair, then two slower sines: periods grow geometrically with the channel index
        d16, d8, d4 = 2 * (dim // 16), 2 * (dim // 8), 2 * (dim // 4)
        dims = sorted({d for d in (d16, d16 + 1, d8, d4) if d < dim})
    dims = list(dims)
    if not dims:
        raise ValueError("dims must name at least one channel, got none")
    for d in dims:
        if not is_int(d) or not 0 <= d < dim:
            raise ValueError(f"dims must be channels in [0, {dim}), got {d!r}")
    table = sinusoidal_table(seq_len, dim, base=base)  # (T, C)

    fig = _figure(12, 4.8)
    heat_ax, curve_ax = fig.subplots(1, 2, width_ratios=[1.15, 1])
    im = heat_ax.imshow(table.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    heat_ax.set_xlabel("channel i (even: sin, odd: cos)")
    heat_ax.set_ylabel("position pos")
    heat_ax.set_title(f"sinusoidal positional encoding, {seq_len} positions x {dim} channels")
    fig.colorbar(im, ax=heat_ax, label="PE[pos, i]")

    positions = torch.arange(seq_len).numpy()
    for d in dims:
        kind = "sin" if d % 2 == 0 else "cos"
        period = 2 * math.pi * base ** ((d - d % 2) / dim)
        curve_ax.plot(positions, table[:, d].numpy(), label=f"i = {d} ({kind}, period {period:,.1f})")
    curve_ax.set_xlabel("position pos")
    curve_ax.set_ylabel("PE[pos, i]")
    curve_ax.set_ylim(-1.15, 1.45)
    curve_ax.set_title("a few channels along the positions")
    curve_ax.grid(True, alpha=0.3)
    curve_ax.legend(loc="upper right", fontsize=8)
    return fig


# ----------------------------------------------------------------------------------------------------
# masks
# ----------------------------------------------------------------------------------------------------

def make_mask(kind: str, *, length: int | None = None, key_length: int | None = None, masked_len: int | None = None,
              lengths: Sequence[int] | None = None) -> torch.Tensor:
    """Build one of attnkit's masks by name (what ``attnkit viz mask --kind`` draws).

    * ``"causal"``: :func:`~attnkit.modules.masks.causal_mask` ``(length, key_length)`` (bottom-right aligned);
    * ``"banded"``: seed 000's :func:`~attnkit.modules.masks.generate_mask_mat` ``(length, length)`` with
      ``masked_len`` (default ``length - 1``, which is the look-ahead mask);
    * ``"padding"``: :func:`~attnkit.modules.masks.padding_mask` from ``lengths``, padded to ``key_length``
      (default ``max(lengths)``).

    Shape:
        returns ``(T, S)`` bool for causal/banded, ``(B, S)`` bool for padding; ``True`` = may not attend.
    """
    from attnkit.modules.masks import causal_mask, generate_mask_mat, padding_mask

    if kind not in MASK_KINDS:
        raise ValueError(f"mask kind must be one of {MASK_KINDS}, got {kind!r}")
    if kind == "padding":
        if not lengths:
            raise ValueError("a padding mask needs lengths (one per batch row), got none")
        return padding_mask(list(lengths), max_len=key_length)
    if length is None or not is_int(length) or length < 1:
        raise ValueError(f"a {kind} mask needs length >= 1, got {length!r}")
    if kind == "causal":
        S = length if key_length is None else key_length
        if S < 1:
            raise ValueError(f"key_length must be >= 1, got {S}")
        return causal_mask(length, S)
    masked_len = length - 1 if masked_len is None else masked_len
    if not 0 <= masked_len <= length:
        raise ValueError(f"masked_len must be in [0, {length}] for length {length}, got {masked_len}")
    return generate_mask_mat(length, masked_len)


def mask_figure_inches(rows: int, cols: int) -> tuple[float, float]:
    """The size (width, height) in inches of :func:`plot_mask`'s figure of a ``rows`` x ``cols`` mask: checked
    with :func:`check_pixels` before the mask is built."""
    cell = min(0.45, max(0.12, 7.0 / max(rows, cols)))
    return max(4.5, cols * cell + 2.2), max(3.5, rows * cell + 1.6)


def plot_mask(mask: torch.Tensor, *, title: str | None = None, xlabel: str = "key position j",
              ylabel: str = "query position i", row_labels: Sequence[str] | None = None,
              col_labels: Sequence[str] | None = None):
    """Draw a boolean mask as a grid of cells: dark = ``True`` (may not attend), light = ``False`` (may attend).

    Small masks (up to 32 x 32) get a cross in every masked cell, like the seeds' mask diagrams.

    Shape:
        mask ``(T, S)`` (or ``(B, S)`` for a padding mask), bool.
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    _check_figure_tensor("mask", mask, "a 2-D bool tensor (True = may not attend)",
                         isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.dim() == 2)
    rows, cols = mask.shape
    for name, labels, n in (("row_labels", row_labels, rows), ("col_labels", col_labels, cols)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} must have {n} entries, got {len(labels)}")
    fig = _figure(*mask_figure_inches(rows, cols))
    ax = fig.add_subplot(1, 1, 1)
    cmap = ListedColormap(["#f4f1de", "#3d405b"])  # False (may attend), True (masked)
    ax.imshow(mask.to(torch.uint8).cpu().numpy(), cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
    # cell borders
    ax.set_xticks([x - 0.5 for x in range(cols + 1)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(rows + 1)], minor=True)
    ax.grid(which="minor", color="white", linewidth=1.0)
    ax.tick_params(which="minor", length=0)
    if max(rows, cols) <= 32:
        for i, j in mask.nonzero().tolist():
            ax.text(j, i, "×", ha="center", va="center", color="white", fontsize=8)
    fs = _label_fontsize(max(rows, cols))
    if cols <= 64:
        ax.set_xticks(range(cols))
        ax.set_xticklabels(list(col_labels) if col_labels is not None else [str(j) for j in range(cols)],
                           fontsize=fs, rotation=90 if col_labels is not None else 0, **_PLAIN)
    if rows <= 64:
        ax.set_yticks(range(rows))
        ax.set_yticklabels(list(row_labels) if row_labels is not None else [str(i) for i in range(rows)], fontsize=fs,
                           **_PLAIN)
    ax.set_xlabel(xlabel, **_PLAIN)
    ax.set_ylabel(ylabel, **_PLAIN)
    ax.xaxis.set_label_position("top")
    ax.xaxis.tick_top()
    if title:
        ax.set_title(title, pad=12, **_PLAIN)
    ax.legend(handles=[Patch(color="#3d405b", label="True: may not attend"),
                       Patch(color="#f4f1de", label="False: may attend")],
              loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=2, fontsize=8, frameon=False)
    return fig


# ----------------------------------------------------------------------------------------------------
# attention maps
# ----------------------------------------------------------------------------------------------------

def plot_attention(weights: torch.Tensor, *, query_labels: Sequence[str] | None = None,
                   key_labels: Sequence[str] | None = None, title: str | None = None,
                   panel_titles: Sequence[str] | None = None):
    """Attention weights as heatmaps: one panel per head (a grid), queries down, keys across.

    All panels share one colour scale from 0 to the largest weight, so heads can be compared. Tokens label the
    axes when given (and when there are at most 64 of them).

    Args:
        weights: ``(H, T, S)`` for a grid of heads, or ``(T, S)`` for a single map.
        query_labels / key_labels: ``T`` / ``S`` strings (e.g. from :func:`attnkit.viz.labels.token_labels`).
        panel_titles: ``H`` strings (default ``head 0``, ``head 1``, ...).

    Shape:
        weights ``(H, T, S)`` or ``(T, S)``.
    """
    _check_figure_tensor("weights", weights, "a float tensor of shape (H, T, S) or (T, S)",
                         isinstance(weights, torch.Tensor) and weights.dim() in (2, 3) and weights.is_floating_point())
    w = weights.detach().float().cpu()
    if w.dim() == 2:
        w = w[None]  # (1, T, S)
    H, T, S = w.shape
    if not torch.isfinite(w).all():
        raise ValueError("weights contain NaN or inf; attention weights are finite probabilities")
    for name, labels, n in (("query_labels", query_labels, T), ("key_labels", key_labels, S)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} must have {n} entries (one per {'query' if name[0] == 'q' else 'key'}), "
                             f"got {len(labels)}")
    if panel_titles is None:
        panel_titles = [f"head {h}" for h in range(H)]
    if len(panel_titles) != H:
        raise ValueError(f"panel_titles must have {H} entries (one per head), got {len(panel_titles)}")

    cols = math.ceil(math.sqrt(H))
    rows = math.ceil(H / cols)
    panel = min(6.5, max(2.6, 0.22 * max(T, S))) if H > 1 else min(10.0, max(4.0, 0.3 * max(T, S)))
    fig = _figure(cols * panel + 1.2, rows * panel + (0.6 if title else 0.2))
    axes = fig.subplots(rows, cols, squeeze=False)
    vmax = float(w.max()) if float(w.max()) > 0 else 1.0
    fs = _label_fontsize(max(T, S)) * (1.0 if H == 1 else 0.85)
    image = None
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= H:
            ax.set_axis_off()
            continue
        image = ax.imshow(w[h].numpy(), cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto",
                          interpolation="nearest")
        ax.set_title(panel_titles[h], fontsize=10, **_PLAIN)
        if key_labels is not None and S <= 64:
            ax.set_xticks(range(S))
            ax.set_xticklabels(list(key_labels), rotation=90, fontsize=fs, **_PLAIN)
        if query_labels is not None and T <= 64:
            ax.set_yticks(range(T))
            ax.set_yticklabels(list(query_labels) if h % cols == 0 else [], fontsize=fs, **_PLAIN)
        if h % cols == 0:
            ax.set_ylabel("query", fontsize=9)
        if h // cols == rows - 1 or h + cols >= H:
            ax.set_xlabel("key", fontsize=9)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    if title:
        fig.suptitle(title, **_PLAIN)
    return fig


# ----------------------------------------------------------------------------------------------------
# parameter counts
# ----------------------------------------------------------------------------------------------------

def plot_parameters(model_or_config: Any, *, depth: int = 1, title: str | None = None):
    """Horizontal bars of :func:`~attnkit.models.params.parameter_table`: where the parameters are.

    Each bar is labelled with its count and share of the total; tied tensors are counted once (under the
    module that owns them). A config is built on the meta device, so even GPT-2 XL costs no memory.

    Shape:
        one bar per row of ``parameter_table(model, depth)``.
    """
    from attnkit.models.builders import build_model
    from attnkit.models.configs import GPTConfig, TransformerConfig
    from attnkit.models.params import parameter_table, tied_parameters

    module = model_or_config
    if isinstance(model_or_config, (GPTConfig, TransformerConfig)):
        module = build_model(model_or_config, device="meta")  # shapes only, built once for both tables
    rows = parameter_table(module, depth)
    total = sum(n for _, n in rows)
    if total == 0:
        raise ValueError("the model has no parameters to plot")
    names = [name for name, _ in rows]
    counts = [n for _, n in rows]
    fig = _figure(10, max(2.5, 0.32 * len(rows) + 1.5))
    ax = fig.add_subplot(1, 1, 1)
    positions = list(range(len(rows)))
    ax.barh(positions, counts, color="tab:blue", alpha=0.8)
    ax.set_yticks(positions)
    ax.set_yticklabels(names, fontsize=_label_fontsize(len(rows)) + 1, **_PLAIN)
    ax.invert_yaxis()  # first module on top, as in the printed table
    ax.set_xlim(0, max(counts) * 1.45)
    for y, n in zip(positions, counts):
        ax.text(n, y, f"  {n:,} ({100 * n / total:.1f}%)", va="center", fontsize=8)
    ax.set_xlabel("parameters")
    ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    head = title or type(model_or_config).__name__
    tied = tied_parameters(module)
    note = "" if not tied else f"  ({', '.join(a for a, _ in tied)} tied, counted once)"
    ax.set_title(f"{head}: {total:,} parameters{note}", fontsize=10, **_PLAIN)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


# ----------------------------------------------------------------------------------------------------
# next-token predictions
# ----------------------------------------------------------------------------------------------------

def plot_predictions(probs: torch.Tensor, candidate_labels: Sequence[Sequence[str]], *,
                     context_labels: Sequence[str] | None = None, hits: torch.Tensor | None = None,
                     title: str | None = None):
    """The probability matrix, row by row: at each position, the ``k`` most likely next tokens.

    Row ``t`` is labelled with the token at position ``t`` and shows the candidates for position ``t + 1``
    (shade = probability). ``hits`` outlines the cell of the token that actually comes next in the text.

    Args:
        probs: probabilities, each row in decreasing order (from :func:`attnkit.viz.predictions.next_token_predictions`).
        candidate_labels: ``T`` rows of ``k`` strings.
        context_labels: ``T`` strings for the rows.
        hits: bool ``(T, k)``, ``True`` where the candidate is the actual next token.

    Shape:
        probs ``(T, k)``; hits ``(T, k)``.
    """
    _check_figure_tensor("probs", probs, "a float tensor of shape (T, k)",
                         isinstance(probs, torch.Tensor) and probs.dim() == 2 and probs.is_floating_point())
    T, k = probs.shape
    if len(candidate_labels) != T or any(len(row) != k for row in candidate_labels):
        raise ValueError(f"candidate_labels must be {T} rows of {k} strings, got "
                         f"{[len(row) for row in candidate_labels]}")
    if context_labels is not None and len(context_labels) != T:
        raise ValueError(f"context_labels must have {T} entries, got {len(context_labels)}")
    if hits is not None and (not isinstance(hits, torch.Tensor) or tuple(hits.shape) != (T, k)):
        raise ValueError(f"hits must be a bool tensor of shape (T, k) = ({T}, {k}), got "
                         f"{tuple(hits.shape) if isinstance(hits, torch.Tensor) else type(hits).__name__}")
    from matplotlib.patches import Rectangle

    p = probs.detach().float().cpu()
    fig = _figure(1.3 * k + 2.5, 0.42 * T + 1.4)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(p.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    fs = 8 if T <= 24 else 6
    for t in range(T):
        for r in range(k):
            value = float(p[t, r])
            ax.text(r, t, f"{candidate_labels[t][r]}\n{value:.2f}", ha="center", va="center", fontsize=fs,
                    color="white" if value > 0.55 else "black", **_PLAIN)
            if hits is not None and bool(hits[t, r]):
                ax.add_patch(Rectangle((r - 0.5, t - 0.5), 1, 1, fill=False, edgecolor="tab:orange", linewidth=2))
    ax.set_xticks(range(k))
    ax.set_xticklabels([f"#{r + 1}" for r in range(k)])
    ax.set_xlabel("candidates for the next token, most likely first")
    ax.set_yticks(range(T))
    ax.set_yticklabels(list(context_labels) if context_labels is not None else [str(t) for t in range(T)],
                       fontsize=fs + 1, **_PLAIN)
    ax.set_ylabel("token at position t (predicting t + 1)")
    ax.xaxis.set_label_position("top")
    ax.xaxis.tick_top()
    fig.colorbar(image, ax=ax, shrink=0.8, label="probability")
    if title:
        fig.suptitle(title, **_PLAIN)
    return fig
