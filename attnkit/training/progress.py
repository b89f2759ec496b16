"""The training progress bar (tqdm): step, loss, lr, tokens/s, and ETA or the time budget left.

* With ``steps`` set, the bar counts optimizer updates and tqdm's ETA is the time to the last step; if
  ``max_time`` is set too, a ``left=`` field shows the remaining time budget (whichever ends first wins).
* With ``max_time`` only, the bar counts seconds of the budget: ``elapsed<remaining`` is the time left.

No tensors here, so no shapes to document.
"""

from __future__ import annotations

from typing import Any, Callable

from tqdm.auto import tqdm


def format_seconds(seconds: float) -> str:
    """``3725.2 -> '1:02:05'``, ``65 -> '01:05'``."""
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class TrainProgress:
    """A tqdm bar driven by (step, elapsed seconds) pairs.

    Args:
        total_steps: the run's ``steps`` (None for a time-only run).
        max_time_s: the time budget in seconds (None if unbounded).
        initial_step / initial_elapsed: where a resumed run starts.
        enabled: False hides the bar.
        log: False silences :meth:`write` too (the lines print without the bar when only ``enabled`` is False); a
            function receives each line instead of stdout.
    """

    def __init__(self, *, total_steps: int | None, max_time_s: float | None, initial_step: int = 0,
                 initial_elapsed: float = 0.0, enabled: bool = True, log: bool | Callable[[str], None] = True):
        self.total_steps = total_steps
        self.max_time_s = max_time_s
        self.enabled = enabled
        self.log = log
        if total_steps is not None:
            self.bar = tqdm(total=total_steps, initial=initial_step, unit="step", desc="train",
                            dynamic_ncols=True, disable=not enabled)
        else:
            assert max_time_s is not None, "TrainConfig guarantees steps or max_time"
            self.bar = tqdm(total=round(max_time_s), initial=min(round(initial_elapsed), round(max_time_s)),
                            unit="s", desc="train (time budget)", dynamic_ncols=True, disable=not enabled,
                            bar_format="{l_bar}{bar}| {n:.0f}/{total_fmt}s [{elapsed}<{remaining}{postfix}]")

    def update(self, step: int, elapsed: float, **fields: Any) -> None:
        """Move the bar to ``step`` / ``elapsed`` and show ``fields`` (floats are formatted compactly).

        Redraws at most every ``mininterval`` (0.1 s), so calling it every step is cheap.
        """
        if self.total_steps is None:
            fields = {"step": step, **fields}
        elif self.max_time_s is not None:
            fields["left"] = format_seconds(self.max_time_s - elapsed)
        shown = {}
        for key, value in fields.items():
            if isinstance(value, float):
                value = f"{value:.2e}" if key == "lr" else (f"{value:.0f}" if key.endswith("/s") else f"{value:.4f}")
            shown[key] = value
        self.bar.set_postfix(shown, refresh=False)  # drawn by the update below
        if self.total_steps is not None:
            self.bar.update(step - self.bar.n)
        else:
            self.bar.update(max(0.0, min(elapsed, float(self.bar.total)) - self.bar.n))

    def write(self, message: str) -> None:
        """Print a line (above the bar when it is shown); nothing when ``log`` is False."""
        if callable(self.log):
            self.log(message)
        elif self.log:
            tqdm.write(message)

    def close(self) -> None:
        self.bar.close()
