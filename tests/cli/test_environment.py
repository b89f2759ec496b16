"""The command line in odd but real environments: a closed stderr (``2>&-``) or stdout (``>&-``), a current folder
deleted under the shell. Each case runs ``python -m attnkit`` in a subprocess, as a user's shell would.

Axis legend: none (command lines and their output only).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def attnkit(args: list[str], *, cwd: str | os.PathLike, close_stderr: bool = False,
            close_stdout: bool = False) -> subprocess.CompletedProcess:
    """Run ``python -m attnkit ARGS`` in ``cwd`` (stderr / stdout closed with ``close_stderr`` / ``close_stdout``),
    attnkit from this checkout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1"}
    closed = [fd for fd, close in ((1, close_stdout), (2, close_stderr)) if close]
    return subprocess.run([sys.executable, "-m", "attnkit", *args], cwd=cwd, env=env,
                          stdout=None if close_stdout else subprocess.PIPE,
                          stderr=None if close_stderr else subprocess.PIPE, text=True, timeout=120,
                          preexec_fn=(lambda: [os.close(fd) for fd in closed]) if closed else None)


def test_closed_stderr_keeps_the_error_out_of_stdout(tmp_path):
    """Was: with ``2>&-`` the error line went to stdout (``print(file=sys.stderr)`` with ``sys.stderr`` None), into
    the command's output (a sample's "note: ..." line landed in the generated text); now it is dropped, exit 2."""
    done = attnkit(["data", "prepare", "no-such-recipe"], cwd=tmp_path, close_stderr=True)
    assert done.returncode == 2
    assert done.stdout == ""


def test_closed_stdout_is_a_write_error(tmp_path):
    """Was: with ``>&-`` the parameter table went nowhere (``print`` to ``sys.stdout`` None) and the exit code was 0;
    now writing the output is a one-line error, exit 2, as a Unix tool's write error is."""
    done = attnkit(["params", "char-small"], cwd=tmp_path, close_stdout=True)
    assert done.returncode == 2
    assert done.stderr.startswith("attnkit params: error: [Errno 9] standard output is closed (>&-)")
    assert done.stderr.count("\n") == 1
    both = attnkit(["params", "char-small"], cwd=tmp_path, close_stdout=True, close_stderr=True)
    assert both.returncode == 2


def test_deleted_current_folder_is_a_one_line_error(tmp_path):
    """Was: ``Intel oneMKL FATAL ERROR: Cannot load .../libtorch_cpu.so.`` (torch's libraries abort on import in a
    deleted folder); now attnkit's own line before torch is imported, exit 2."""
    gone = tmp_path / "gone"
    gone.mkdir()
    code = (f"import os, subprocess, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); "
            "r = subprocess.run([sys.executable, '-m', 'attnkit', 'params', 'char-small'], capture_output=True, "
            "text=True); print(r.returncode); print(r.stderr, end='')")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120).stdout
    rc, err = out.split("\n", 1)
    assert rc == "2"
    assert err.startswith("attnkit params: error: the current folder no longer exists") and err.count("\n") == 1


@pytest.mark.parametrize("closed", [(1,), (2,), (1, 2)], ids=["stdout", "stderr", "both"])
def test_a_closed_standard_descriptor_is_taken_before_the_command_opens_a_file(tmp_path, closed):
    """standard_streams() puts /dev/null on a closed 1 or 2, so the next file the command opens does not become its
    stdout or stderr (where a C library's or a child's output would land in it)."""
    out = tmp_path / "fd"
    code = ("import os; from attnkit.api.launcher import standard_streams; standard_streams(); "
            f"fd = os.open({str(out)!r}, os.O_WRONLY | os.O_CREAT); os.write(fd, str(fd).encode())")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, timeout=60, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, preexec_fn=lambda: [os.close(fd) for fd in closed])
    assert done.returncode == 0
    assert int(out.read_text()) > 2
