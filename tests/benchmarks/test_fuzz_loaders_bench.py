"""benchmarks/fuzz_loaders.py's judging, offline: what counts as a hang, a memory overrun, a clear error; the table."""

import time

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


def test_clear_errors_other_exceptions_and_memory():
    def refuse():
        raise ValueError("bad header: claims 2**40 bytes")

    def crash():
        raise TypeError("unhashable type: 'list'")

    def grow():
        block = bytearray(64 * MiB)
        block[::4096] = b"x" * len(block[::4096])  # touch every page
        return block

    assert measure(refuse, bound=1 << 40).kind == "error"
    assert measure(crash, bound=1 << 40).kind == "other"
    assert measure(lambda: ValueError("two\nlines"), bound=1 << 40).kind == "load"  # returned, not raised
    assert measure(grow, bound=8 * MiB).kind == "memory"


def test_the_table_counts_each_outcome_and_the_maxima():
    t = Tally()
    t.add(0, Outcome("error", 0.5, 2 * MiB, "ValueError: x", cpu_seconds=0.2), 100)
    t.add(1, Outcome("load", 2.0, MiB, cpu_seconds=0.9), 100)
    t.add(2, Outcome("other", 0.1, 0, "TypeError: y", cpu_seconds=0.1), 100)
    row = table({"gguf": t}).splitlines()[-1]
    assert row == "| gguf | 3 | 1 | 1 | 1 | 0 | 0 | 0.90 | 2.00 | 2.0 MiB |"
    assert t.max_seconds_index == 1 and [e["kind"] for e in t.examples] == ["error", "other"]
