"""How a translator decodes: beam size, length penalty, the length limit and batch size (``translate``,
``evaluate_mt``). Nothing here imports torch. There are no tensor axes in this file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnkit.checks import is_number
from attnkit.recipes import DEFAULT_BATCH_SIZE, DEFAULT_BEAM, DEFAULT_LENGTH_PENALTY

from .options import DeviceOptions

__all__ = ["DecodingOptions"]


@dataclass
class DecodingOptions(DeviceOptions):
    """Beam search settings and where to run them.

    Attributes:
        beam: beam size (1 = greedy search).
        length_penalty: alpha of the GNMT length normalisation ``((5 + len) / 6) ** alpha`` (0 = none).
        max_len_a, max_len_b: a target may be at most ``a * source length + b`` tokens long.
        batch_size: sentences per batch.
        strict: refuse sources longer than the model takes (and malformed pairs) instead of cutting / skipping
            and counting them.
    """

    beam: int = DEFAULT_BEAM
    length_penalty: float = DEFAULT_LENGTH_PENALTY
    max_len_a: float = 1.2
    max_len_b: float = 10
    batch_size: int = DEFAULT_BATCH_SIZE
    strict: bool = False

    def _check(self) -> None:
        super()._check()
        if self.beam < 1:
            raise ValueError(f"--beam must be >= 1, got {self.beam}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")
        # checked here, not only in the search: translate --output writes its record before the first batch
        for flag, value in (("--max-len-a", self.max_len_a), ("--max-len-b", self.max_len_b)):
            if not is_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{flag} must be a finite number >= 0, got {value!r}")
            if value > 1e6:  # a * length + b stays an int a search can count to
                raise ValueError(f"{flag} must be at most 1e6, got {value!r}")
        if not is_number(self.length_penalty) or not math.isfinite(self.length_penalty):
            raise ValueError(f"--length-penalty must be a finite number, got {self.length_penalty!r}")
        if not -10 <= self.length_penalty <= 10:  # ((5 + len) / 6) ** alpha stays a finite float
            raise ValueError(f"--length-penalty must be in [-10, 10], got {self.length_penalty!r}")

    @property
    def search(self) -> dict:
        """The keyword arguments of :func:`attnkit.generation.translate.translate_ids` / ``translate_sentences``."""
        return {"beam": self.beam, "length_penalty": self.length_penalty, "max_len_a": self.max_len_a,
                "max_len_b": self.max_len_b}
