"""What the walkthroughs in examples/ share: section headings, shapes printed with named axes, two threads at
most (one by default), and the folder their figures go to.

Figures are written to the folder given by ``--out DIR``, else ``$ATTNKIT_EXAMPLES_OUT``, else ``examples/out/``
(ignored by git). Run as ``python examples/NAME.py``, a walkthrough takes ``--help`` and (if it draws figures)
``--out DIR``, and any other argument is a one-line usage error; run cell by cell in a notebook (its ``# %%``
cells), the arguments of the kernel (``-f kernel.json``) are ignored.

Axes are named by the caller (the legend is in each walkthrough's docstring).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable

import torch

OUT_ENV = "ATTNKIT_EXAMPLES_OUT"
EXAMPLES = Path(__file__).resolve().parent
DEFAULT_OUT = EXAMPLES / "out"


def setup(seed: int = 0, threads: int = 1) -> None:
    """Seed torch's generator and use ``threads`` threads (at most two: the walkthroughs are sized for a 2-core
    laptop). One is the default: for models this small a second thread mostly waits for the first, and on a
    busy machine each of their many tiny operations can then take milliseconds instead of microseconds."""
    if threads not in (1, 2):
        raise ValueError(f"threads must be 1 or 2, got {threads!r}")
    torch.set_num_threads(min(threads, os.cpu_count() or 1))
    torch.manual_seed(seed)


def section(title: str, chinese: str) -> None:
    """Print a cell's heading in English and Chinese, e.g. ``== 2. Positional encoding / 位置编码``."""
    print(f"\n== {title} / {chinese}")


def show(label: str, t: torch.Tensor, axes: str) -> None:
    """Print a tensor's shape with the axis names, e.g. ``(B, T, C) = (2, 4, 8)  float32``."""
    names = [a.strip() for a in axes.split(",")]
    if len(names) != t.dim():
        raise ValueError(f"{label}: {len(names)} axis names {axes!r} for a {t.dim()}-D tensor of shape "
                         f"{tuple(t.shape)}")
    print(f"  {label:<44} ({axes}) = {tuple(t.shape)}  {str(t.dtype).replace('torch.', '')}")


def error_of(call: Callable[[], object], expected: type[BaseException] | tuple[type[BaseException], ...]) -> str:
    """Run ``call``, which must fail with ``expected``, and return the first line of its message (a claim that
    something fails is checked like any other: no error is an ``AssertionError``)."""
    try:
        call()
    except expected as err:
        return (err.msg if isinstance(err, SyntaxError) else str(err)).splitlines()[0]
    raise AssertionError(f"expected {expected} to be raised, got no error")


def _parser(figures: bool) -> argparse.ArgumentParser:
    """The command line of the walkthrough being run: its docstring's first paragraph (which may wrap over
    several lines), ``--help``, ``--out DIR``."""
    doc = (sys.modules["__main__"].__doc__ or "").strip()
    parser = argparse.ArgumentParser(prog=f"python examples/{Path(sys.argv[0]).name}",
                                     description=" ".join(doc.split("\n\n")[0].split()) if doc else None)
    if figures:
        parser.add_argument("--out", metavar="DIR", help=f"the folder for the figures (default: ${OUT_ENV}, "
                                                         f"else examples/out/)")
    return parser


def _parse(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Run as ``python examples/NAME.py``, the walkthrough's arguments; anywhere else (a notebook kernel, whose
    ``sys.argv[0]`` is not a file of examples/ and whose other arguments, ``-f kernel.json``, are its own) none."""
    script = Path(sys.argv[0]).resolve()
    if script.parent != EXAMPLES or not script.is_file():
        return parser.parse_args([])
    return parser.parse_args(sys.argv[1:])


def command_line(figures: bool = False) -> argparse.Namespace:
    """The walkthrough's arguments: ``--help``, and ``--out DIR`` when it draws figures (``figures``); any other
    argument is a one-line usage error (exit status 2)."""
    return _parse(_parser(figures))


def output_dir() -> Path:
    """The folder for figures (created): ``--out DIR``, else ``$ATTNKIT_EXAMPLES_OUT``, else ``examples/out``;
    one that cannot be a folder (an existing file, no permission) is a one-line usage error."""
    parser = _parser(figures=True)
    out = Path(_parse(parser).out or os.environ.get(OUT_ENV) or DEFAULT_OUT).expanduser()
    if out.exists() and not out.is_dir():
        parser.error(f"expected a folder for the figures, got the file {out}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        parser.error(f"cannot make the folder for the figures {out}: {err.strerror}")
    return out


def figure(width: float, height: float, ncols: int = 1):
    """A matplotlib figure with ``ncols`` axes side by side (no pyplot: nothing opens a window), and its axes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(1, ncols)


def annotate_axes(ax, xlabel: str, ylabel: str, title: str, *, legend: bool = True) -> None:
    """Axis labels, a title, a light grid and (``legend``) the legend of the labelled lines."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if legend:
        ax.legend()


def save(fig, out: Path, name: str) -> Path:
    """Write ``fig`` as ``out/name`` (a PNG, with attnkit's :func:`~attnkit.viz.save_figure`) and say where."""
    from attnkit.viz import save_figure

    path = save_figure(fig, out / name)
    print(f"  figure: {path}")
    return path
