"""Running the walkthroughs of examples/ as a user does: ``python examples/NAME.py``, in a fresh process.

``run_example(name, *args, env=None)`` runs the script with this checkout on ``PYTHONPATH`` and its figures sent to
a temporary folder (``$ATTNKIT_EXAMPLES_OUT``, or ``--out`` when the test passes it), asserts that it exits with
status 0 (each walkthrough checks its own claims with ``assert``, so a wrong claim fails here) and returns
``(stdout, figure folder)``; ``run_script`` runs it the same way and returns the process, whatever its exit status.
``expect_lines`` and ``expect_figures`` check what it printed and drew.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def run_script(tmp_path):
    """``run_script(name, *args, env=None)``: the finished process (any exit status) of ``python examples/NAME.py``,
    its figures sent to ``tmp_path / "figures"`` unless ``--out`` says otherwise."""
    def run(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        environ = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                       ATTNKIT_EXAMPLES_OUT=str(tmp_path / "figures"), **(env or {}))
        return subprocess.run([sys.executable, str(EXAMPLES / name), *args], env=environ, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)

    return run


@pytest.fixture
def run_example(run_script, tmp_path):
    def run(name: str, *args: str, env: dict[str, str] | None = None) -> tuple[str, Path]:
        result = run_script(name, *args, env=env)
        assert result.returncode == 0, f"{name} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        return result.stdout, tmp_path / "figures"

    return run


def _assert_lines(out: str, expected: list[str]) -> None:
    missing = [line for line in expected if line not in out]
    assert not missing, f"missing {missing} in:\n{out}"


def _assert_figures(folder: Path, names: list[str]) -> None:
    for name in names:
        path = folder / name
        assert path.is_file(), f"no figure {path}; the folder holds {sorted(p.name for p in folder.glob('*'))}"
        assert path.read_bytes()[:8] == PNG_MAGIC, f"{path} is not a PNG file"


@pytest.fixture
def expect_lines():
    """``expect_lines(stdout, [line, ...])``: every expected line (a substring of the output) is printed."""
    return _assert_lines


@pytest.fixture
def expect_figures():
    """``expect_figures(folder, [name, ...])``: the figures were written there, as PNG files."""
    return _assert_figures
