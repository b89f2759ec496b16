"""Timing harness shared by every benchmark: alternating rounds, statistics, machine load, peak memory.

How a comparison is measured
----------------------------
Each implementation is a zero-argument callable that does one unit of work (some training steps, one
generation, one attention forward+backward) and returns how much work it did (tokens, calls, ...).

1. **warm-up**: every implementation runs ``warmup`` times untimed (allocator, thread pool, lazy init,
   ``torch.compile``: the first call's time is kept separately as ``first_call_s``);
2. **rounds**: implementations alternate ``A B C A B C ...`` so slow drifts of the machine's load hit
   all of them alike;
   A sample repeats the call until ``min_time`` seconds have passed (work and time are summed), so
   calls of a few milliseconds are not dominated by timer and scheduler noise;
3. **memory**: after the rounds, every implementation runs once more with glibc told to serve every
   allocation above 64 KiB by ``mmap`` and to return it at once (``mallopt``), so the **peak resident
   memory above the level at its start** (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``) sees
   every large temporary instead of memory the C allocator had kept from an earlier call. The pass runs
   twice (A B A B) and the smaller peak of each implementation is reported; it is not timed; afterwards glibc
   gets thresholds (32 MiB mmap / 64 MiB trim) close to the ones it would have reached on its own. Without
   ``/proc`` or glibc the peak is ``None``;
4. we report ``min / median / max`` of the per-round throughput; ratios between implementations are
   ratios of medians from the same run.

``/proc/loadavg`` is read before and after: on a shared 2-core machine a load above ~2 means other
processes took CPU time from the benchmark, and absolute numbers are then lower bounds.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

_CLEAR_REFS = "/proc/self/clear_refs"
_STATUS = "/proc/self/status"


# ------------------------------------------------------------------------------------------------
# flags
# ------------------------------------------------------------------------------------------------
def int_list(text: str, minimum: int) -> list[int] | None:
    """``"64,128"`` as ``[64, 128]``; ``None`` when an item is no integer or is below ``minimum`` (or there is
    none): the script then says so with its own usage error."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        return None
    return values if values and min(values) >= minimum else None


def path_flag(text: str) -> Path:
    """``type=`` of a script's file or folder flag (``--out``, ``--record``, ...): the path, an empty one refused as
    ``attnkit``'s commands refuse it (``Path("")`` is the current folder: a run or a record would land in it)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a file or folder name, got {text!r}")
    return Path(text)


def out_file_flag(text: str) -> Path:
    """``type=`` of a flag naming a file a script writes at the end (``--json``): :func:`path_flag`, and a folder or
    a file in a folder that does not exist refused now, not after the measurements (they would be lost)."""
    path = path_flag(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a file name, got the folder {text!r}")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"no such folder {str(path.parent)!r} to write {path.name!r} in")
    return path


# ------------------------------------------------------------------------------------------------
# machine state
# ------------------------------------------------------------------------------------------------
def loadavg() -> list[float] | None:
    """The 1/5/15-minute load averages (``None`` where ``/proc/loadavg`` does not exist)."""
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


def machine_info() -> dict:
    """Facts that change benchmark numbers: CPU, threads, library versions."""
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "platform": platform.platform(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:  # the peers that need it are then skipped
        info["transformers"] = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def run_header(prog: str, argv: list[str] | None = None) -> str:
    """One line for a script that prints its figures: the command (``prog`` and ``argv``, by default the process's
    arguments), the UTC date, the CPU model, torch and its threads."""
    command = " ".join([prog, *(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))])
    info = machine_info()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"`{command}`, {date}; {info.get('cpu_model', platform.machine())}, {info['cpu_count']} cores, "
            f"torch {info['torch']}, {info['torch_threads']} thread(s)")


# ------------------------------------------------------------------------------------------------
# peak memory (resident set size) of this process
# ------------------------------------------------------------------------------------------------
def _status_kib(key: str) -> int | None:
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_bytes() -> int | None:
    """Current resident set size in bytes."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters


def _mallopt(param: int, value: int) -> bool:
    try:
        import ctypes

        return bool(ctypes.CDLL("libc.so.6").mallopt(param, value))
    except (OSError, AttributeError):  # not glibc
        return False


class ExactAllocations:
    """Inside the block, glibc ``mmap``-s every allocation above 64 KiB and unmaps it on ``free``.

    Then the resident high-water mark counts every large temporary, even ones that would otherwise reuse
    memory the allocator kept cached. ``active`` is False where ``mallopt`` is unavailable.
    """

    def __enter__(self) -> "ExactAllocations":
        self.active = _mallopt(_M_MMAP_THRESHOLD, 64 * 1024) and _mallopt(_M_TRIM_THRESHOLD, 0)
        if self.active:  # give back the heap memory kept from earlier calls, so nothing can be reused
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        return self

    def __exit__(self, *exc) -> None:
        if self.active:  # roughly where glibc's dynamic thresholds settle after large frees
            _mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024)
            _mallopt(_M_TRIM_THRESHOLD, 64 * 1024 * 1024)


class PeakMemory:
    """Peak resident memory reached inside a ``with`` block, above the resident memory at its start.

    Uses Linux's ``clear_refs`` (writing ``5`` resets the high-water mark). It sees every allocation
    that touches pages (torch's CPU allocator included). Memory that the C allocator keeps cached from
    earlier calls is reused without new pages, so small temporaries can be under-counted; large
    buffers (> 32 MiB, always ``mmap``-ed by glibc) are counted exactly.

    ``peak_bytes`` is ``None`` where ``/proc`` is unavailable.
    """

    def __init__(self):
        self.peak_bytes: int | None = None
        self._start: int | None = None

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        try:
            with open(_CLEAR_REFS, "w") as f:
                f.write("5")
            self._start = rss_bytes()
        except OSError:
            self._start = None
        return self

    def __exit__(self, *exc) -> None:
        if self._start is None:
            return
        hwm = _status_kib("VmHWM")
        if hwm is not None:
            self.peak_bytes = max(0, hwm * 1024 - self._start)


# ------------------------------------------------------------------------------------------------
# measurements
# ------------------------------------------------------------------------------------------------
@dataclass
class Measurement:
    """All rounds of one implementation: seconds, work done and peak memory of each timed call."""

    name: str
    unit: str  # what `work` counts, e.g. "tokens"
    seconds: list[float] = field(default_factory=list)
    work: list[float] = field(default_factory=list)
    peak_bytes: list[int | None] = field(default_factory=list)
    first_call_s: float | None = None  # the first warm-up call (includes compilation, lazy init)
    notes: str = ""

    @property
    def throughput(self) -> list[float]:
        """Work per second of every round."""
        return [w / s for w, s in zip(self.work, self.seconds)]

    def summary(self) -> dict:
        tp = self.throughput
        peaks = [p for p in self.peak_bytes if p is not None]
        return {
            "name": self.name,
            "unit": self.unit,
            "rounds": len(self.seconds),
            "seconds": {"min": min(self.seconds), "median": statistics.median(self.seconds), "max": max(self.seconds)},
            "throughput": {"min": min(tp), "median": statistics.median(tp), "max": max(tp)},
            # seconds per unit of work (per call when the unit is "calls"), from the same samples
            "seconds_per_unit": {"min": 1 / max(tp), "median": 1 / statistics.median(tp), "max": 1 / min(tp)},
            "peak_bytes": min(peaks) if peaks else None,
            "first_call_s": self.first_call_s,
            "notes": self.notes,
            "raw_seconds": self.seconds,
            "raw_work": self.work,
        }


@dataclass
class Impl:
    """One implementation under test: ``run()`` does a unit of work and returns the amount of work."""

    name: str
    run: Callable[[], float]
    unit: str = "tokens"
    notes: str = ""


def alternate(impls: list[Impl], *, rounds: int, warmup: int = 1, progress: Callable[[str], None] | None = None,
              min_time: float = 0.0, measure_memory: bool = True) -> dict[str, Measurement]:
    """Warm every implementation up, time them in alternating rounds ``A B A B ...``, then measure memory.

    Each timed sample repeats ``run()`` until at least ``min_time`` seconds have passed.
    Returns one :class:`Measurement` per implementation name (in the order given).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if min_time < 0:
        raise ValueError(f"min_time must be >= 0, got {min_time}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    names = [impl.name for impl in impls]
    if len(set(names)) != len(names):
        raise ValueError(f"implementation names must be unique, got {names}")
    results = {impl.name: Measurement(impl.name, impl.unit, notes=impl.notes) for impl in impls}
    for impl in impls:
        for i in range(warmup):
            t0 = time.perf_counter()
            impl.run()
            if i == 0:
                results[impl.name].first_call_s = time.perf_counter() - t0
    for r in range(rounds):
        for impl in impls:
            m = results[impl.name]
            work, dt = 0.0, 0.0
            t0 = time.perf_counter()
            while dt == 0.0 or dt < min_time:
                work += float(impl.run())
                dt = time.perf_counter() - t0
            m.seconds.append(dt)
            m.work.append(work)
            if progress is not None:
                progress(f"round {r + 1}/{rounds} {impl.name}: {work / dt:,.1f} {impl.unit}/s")
    if measure_memory:  # twice, alternating; a peak that depends on the allocator's prior state shows up once only
        for _ in range(2):
            for impl in impls:
                with ExactAllocations(), PeakMemory() as mem:
                    impl.run()
                results[impl.name].peak_bytes.append(mem.peak_bytes)
    return results


def matmul_peak_gflops(n: int = 2048, repeats: int = 5, dtype: torch.dtype = torch.float32) -> dict:
    """Measured fp32 matmul throughput (GFLOP/s) of an ``n x n @ n x n`` product: max and median of ``repeats``.

    The maximum is the "peak" used for MFU: the best this machine did during this run.
    """
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)
    out = torch.empty(n, n, dtype=dtype)
    torch.mm(a, b, out=out)  # warm-up
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        rates.append(2 * n**3 / (time.perf_counter() - t0) / 1e9)
    return {"n": n, "max_gflops": max(rates), "median_gflops": statistics.median(rates), "raw": rates}


def ratio(results: dict[str, Measurement], a: str, b: str) -> float | None:
    """Median throughput of ``a`` divided by the median throughput of ``b`` (None if either is missing)."""
    if a not in results or b not in results:
        return None
    return statistics.median(results[a].throughput) / statistics.median(results[b].throughput)
