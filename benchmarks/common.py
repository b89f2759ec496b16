"""Helpers shared by the benchmark modules: result records, seeding, optional peers.

Every ``run_*`` function of a benchmark module returns a :class:`BenchResult`; ``__main__`` collects
them into ``results.json`` and the "Speed" section of ``RESULTS.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .harness import Impl, Measurement, alternate, loadavg, ratio


@dataclass
class BenchResult:
    """One benchmark's outcome: its configuration, per-implementation summaries, ratios and target checks."""

    name: str
    title: str
    config: dict
    results: dict[str, dict] = field(default_factory=dict)
    ratios: dict[str, float | None] = field(default_factory=dict)
    targets: list[dict] = field(default_factory=list)  # {"what", "target", "measured", "met"}
    extra: dict = field(default_factory=dict)
    load_before: list[float] | None = None
    load_after: list[float] | None = None
    notes: list[str] = field(default_factory=list)

    def add_target(self, what: str, measured: float | None, target: float, unit: str = "x") -> None:
        met = None if measured is None else measured >= target
        self.targets.append({"what": what, "target": target, "measured": measured, "unit": unit, "met": met})

    def to_dict(self) -> dict:
        return {
            "name": self.name, "title": self.title, "config": self.config, "results": self.results,
            "ratios": self.ratios, "targets": self.targets, "extra": self.extra,
            "load_before": self.load_before, "load_after": self.load_after, "notes": self.notes,
        }


def run_impls(result: BenchResult, impls: list[Impl], *, rounds: int, warmup: int, progress=None) -> dict[str, Measurement]:
    """Run ``impls`` alternately, recording load before/after and the summaries into ``result``."""
    result.load_before = loadavg()
    measured = alternate(impls, rounds=rounds, warmup=warmup, progress=progress)
    result.load_after = loadavg()
    for name, m in measured.items():
        result.results[name] = m.summary()
    return measured


def have_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def seeded(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


__all__ = ["BenchResult", "run_impls", "have_transformers", "seeded", "ratio"]
