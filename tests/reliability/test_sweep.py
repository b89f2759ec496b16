"""Every row of the reliability sweep (``benchmarks/reliability.py``) as a test.

A row passes when the observed outcome is the expected one: a clear error (one line, no traceback) whose
message names the problem, or the expected success; no NaN printed; the files the row protects unchanged.
"""

import pytest

from benchmarks.reliability import CASES, Fixtures, check, cli_commands, run_case, uncovered_commands


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return Fixtures(tmp_path_factory.mktemp("shared"))


def test_at_least_sixty_distinct_rows():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 60
    assert len({(c.area, c.input) for c in CASES}) == len(CASES)


def test_the_commands_this_sweep_was_written_for_all_have_rows():
    commands = cli_commands()
    known = ["train lm", "train mt", "finetune", "sample", "eval lm", "eval mt", "translate", "viz positions",
             "viz attention", "trace", "params", "data prepare", "convert"]
    assert set(known) <= set(commands)
    assert not set(uncovered_commands()) & set(known)


@pytest.mark.parametrize("row", CASES, ids=[c.id for c in CASES])
def test_row(row, fixtures, tmp_path):
    outcome = run_case(row, fixtures, tmp_path)
    if outcome.kind == "skipped":
        pytest.skip(outcome.message)
    problem = check(row, outcome)
    assert problem is None, f"{row.input}: {problem}; observed {outcome.describe()}"
