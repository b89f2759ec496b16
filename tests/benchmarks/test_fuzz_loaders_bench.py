"""benchmarks/fuzz_loaders.py's judging, offline: what counts as a hang, a memory overrun, a clear error; the table."""

import subprocess
import sys
import time
from pathlib import Path

from benchmarks.fuzz_loaders import MiB, Outcome, Tally, measure, table


def _spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_hang_is_cpu_time_not_wall_time():
    """A loaded machine stretches wall time; an input is a hang only when it does the work of one."""
    waited = measure(lambda: time.sleep(0.3), bound=1 << 40, hang_s=0.1)
    assert waited.kind == "load" and waited.seconds >= 0.3 and waited.cpu_seconds < 0.1
    spun = measure(lambda: _spin(0.3), bound=1 << 40, hang_s=0.1)
    assert spun.kind == "hang" and spun.cpu_seconds >= 0.3 and "CPU s" in spun.detail


def test_clear_errors_and_other_exceptions():
    def refuse():
        raise ValueError("bad header: claims 2**40 bytes")

    def crash():
        raise TypeError("unhashable type: 'list'")

    assert measure(refuse, bound=1 << 40).kind == "error"
    assert measure(crash, bound=1 << 40).kind == "other"
    assert measure(lambda: ValueError("two\nlines"), bound=1 << 40).kind == "load"  # returned, not raised


# The growth is measured in a fresh interpreter. In a pytest-xdist worker that had run other test files, the 64 MiB
# block was twice judged "load" (CI and a fresh clone, not reproduced alone): memory that earlier tests' threads or
# allocator state free during the call lowers the resident size under it, and the high-water mark misses the block.
_GROW = """
from benchmarks.fuzz_loaders import MiB, measure

def grow():
    block = bytearray(64 * MiB)
    block[::4096] = b"x" * len(block[::4096])  # touch every page
    return block

print(measure(grow, bound=8 * MiB))
"""


def test_a_growth_over_the_bound_is_memory():
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _GROW], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Outcome(kind='memory'"), done.stdout


def test_the_table_counts_each_outcome_and_the_maxima():
    t = Tally()
    t.add(0, Outcome("error", 0.5, 2 * MiB, "ValueError: x", cpu_seconds=0.2), 100)
    t.add(1, Outcome("load", 2.0, MiB, cpu_seconds=0.9), 100)
    t.add(2, Outcome("other", 0.1, 0, "TypeError: y", cpu_seconds=0.1), 100)
    row = table({"gguf": t}).splitlines()[-1]
    assert row == "| gguf | 3 | 1 | 1 | 1 | 0 | 0 | 0.90 | 2.00 | 2.0 MiB |"
    assert t.max_seconds_index == 1 and [e["kind"] for e in t.examples] == ["error", "other"]


def _outcomes():
    kinds = ["error", "load", "other", "error", "hang", "load", "memory", "error"]
    return [Outcome(k, 0.1 * i, i * MiB, f"detail {i}", cpu_seconds=0.05 * (i % 5), notes={"n": 1} if i % 3 else {})
            for i, k in enumerate(kinds)]


def test_a_run_in_parts_merges_into_the_tally_of_one_run(tmp_path):
    """``--start N --merge``: inputs 0..N-1 from the record, N.. from this run, the same tally as one run, also
    after the round trip through the JSON record."""
    import argparse

    from benchmarks.fuzz_loaders import read_record, write_record

    whole, first, second = Tally(), Tally(), Tally()
    for i, o in enumerate(_outcomes()):
        whole.add(i, o, 10 * i)
        (first if i < 3 else second).add(i, o, 10 * i)
    args = argparse.Namespace(seed=0, jobs=1, start=0, inputs=3)
    write_record(tmp_path / "r", {"gguf": first}, args, time.time(), "first")
    runs, before = read_record(tmp_path / "r")
    merged = before["gguf"].merged(second)
    assert table({"gguf": merged}) == table({"gguf": whole})
    assert (merged.counts, merged.notes, merged.max_seconds_index, merged.max_rss_index) == \
        (whole.counts, whole.notes, whole.max_seconds_index, whole.max_rss_index)
    assert [e["index"] for e in merged.examples] == [e["index"] for e in whole.examples]
    write_record(tmp_path / "r", {"gguf": merged}, argparse.Namespace(seed=0, jobs=1, start=3, inputs=5),
                 time.time(), "second", runs["runs"])
    record, _ = read_record(tmp_path / "r")
    assert [(r["first"], r["last"]) for r in record["runs"]] == [(0, 2), (3, 7)]
    assert record["inputs_per_loader"] == 8 and record["loaders"]["gguf"]["inputs"] == 8
