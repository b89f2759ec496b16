"""Smoke test of benchmarks/long_sampling.py at a tiny size (no timing assertions)."""

from benchmarks.long_sampling import main


def test_long_sampling_runs_both_paths(capsys):
    assert main(["--new", "3", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("tokens/s") == 4 and "rope: the cached window is" in out
