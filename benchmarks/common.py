"""Helpers shared by the benchmark modules: result records, seeding, optional peers.

Every ``run_*`` function of a benchmark module returns a :class:`BenchResult`; ``__main__`` collects
them into ``records/cpu_speed/results.json`` and the "Speed" section of ``records/cpu_speed/speed.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnkit.generation.decoding_layout import use_decoding_layout

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


def run_impls(result: BenchResult, impls: list[Impl], *, rounds: int, warmup: int, progress=None,
              min_time: float = 0.0) -> dict[str, Measurement]:
    """Run ``impls`` alternately, recording load before/after and the summaries into ``result``."""
    result.load_before = loadavg()
    measured = alternate(impls, rounds=rounds, warmup=warmup, progress=progress, min_time=min_time)
    result.load_after = loadavg()
    for name, m in measured.items():
        result.results[name] = m.summary()
    return measured


def linear_gemm_floor(model: torch.nn.Module, rows: int, *, steps: int = 1, backward: bool = True,
                      work: float | None = None):
    """A closure doing only the matrix products of ``model``'s ``nn.Linear`` layers for ``rows`` input rows.

    Forward ``X (rows, K) @ W.T``; with ``backward`` also ``dY @ W`` and ``dY.T @ X`` (the two gradient
    products). Nothing else: no attention, norms, activations, loss or optimizer. Every real
    implementation does at least this work with the same BLAS, so its throughput is an **upper bound**
    on what any of them can reach on this machine (the "floor" of the step time). Returns ``work``
    (default ``rows * steps``) per call, like the implementations it bounds.

    Shape:
        for each Linear ``(N, K)``: X ``(rows, K)``, dY ``(rows, N)``.
    """
    mats = []
    seen = set()
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and id(m) not in seen:
            seen.add(id(m))
            N, K = m.weight.shape
            g = seeded(N * 7919 + K)
            w = m.weight.detach().clone()
            if not backward:  # a decoding step: the layout attnkit decodes with (see use_decoding_layout)
                holder = torch.nn.Linear(K, N, bias=False)
                holder.weight.data = w
                use_decoding_layout(holder)
                w = holder.weight.detach()
            mats.append((torch.randn(rows, K, generator=g), w, torch.randn(rows, N, generator=g)))
    total = float(rows * steps) if work is None else float(work)

    def run() -> float:
        for _ in range(steps):
            for x, w, dy in mats:
                torch.nn.functional.linear(x, w)  # (rows, N)
                if backward:
                    torch.mm(dy, w)  # (rows, K): input gradient
                    torch.mm(dy.t(), x)  # (N, K): weight gradient
        return total

    return run


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


__all__ = ["BenchResult", "run_impls", "have_transformers", "seeded", "ratio", "linear_gemm_floor"]
