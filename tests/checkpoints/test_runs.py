"""attnkit/checkpoints/runs.py: which checkpoint a run folder stands for, and which files a command may write.

Axis legend: none (folders and files only).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from torch import nn

from attnkit.checkpoints.checkpoint import CheckpointError, save_checkpoint
from attnkit.checkpoints.runs import check_new_run_folder, check_output_file, resolve_checkpoint


def _run(tmp_path):
    run = tmp_path / "run"
    for name, step in (("step_00000002", 2), ("step_00000004", 4), ("best", 2)):
        save_checkpoint(run / "checkpoints" / name, nn.Linear(2, 2), state={"step": step})
    (run / "run.json").write_text("{}")
    return run


def test_a_run_folder_stands_for_its_best_checkpoint_and_a_damaged_best_is_never_replaced_silently(tmp_path):
    run = _run(tmp_path)
    assert resolve_checkpoint(run) == run / "checkpoints" / "best"
    assert resolve_checkpoint(run, prefer="latest") == run / "checkpoints" / "step_00000004"
    (run / "checkpoints" / "best" / "state.json").unlink()
    with pytest.raises(CheckpointError, match=r"best is incomplete: .*state.json is missing \(pass a step checkpoint"):
        resolve_checkpoint(run)
    assert resolve_checkpoint(run, prefer="latest") == run / "checkpoints" / "step_00000004"


def test_a_runs_checkpoints_folder_names_the_run_folder(tmp_path):
    """``--ckpt runs/x/checkpoints`` holds checkpoints, not one: the error says which folder to give (it said the
    folder held no checkpoint)."""
    run = _run(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"checkpoints is a run's checkpoints folder: give the run folder "
                                                r"'.*' or one checkpoint in it, such as '.*checkpoints/best'"):
        resolve_checkpoint(run / "checkpoints")


def test_check_output_file_below_a_file_is_refused_before_any_work(tmp_path):
    """A path under an existing file cannot be written: one clear line naming that file, before the model runs
    (it was ``[Errno 17] File exists: 'mine.png'`` once the figure was drawn)."""
    (tmp_path / "mine.png").write_bytes(b"png")
    with pytest.raises(ValueError, match=r"--out '.*mine.png/sub/x.png': '.*mine.png' is a file, not a folder"):
        check_output_file(tmp_path / "mine.png" / "sub" / "x.png", "--out")
    assert (tmp_path / "mine.png").read_bytes() == b"png"


def test_check_output_file_keeps_runs_folders_and_other_files(tmp_path):
    run = _run(tmp_path)
    (run / "loss.png").write_bytes(b"png")
    for path in (run / "loss.png", run / "run.json", run / "checkpoints" / "best" / "state.json"):
        with pytest.raises(ValueError, match=r"^--out '.*' is a file of a training run; give a new file name$"):
            check_output_file(path, "--out")
    assert check_output_file(run / "checkpoints" / "best" / "eval_lm.json", "--json", run_prefix="eval_")
    assert check_output_file(run / "new.png", "--out") == run / "new.png"  # a new file may go anywhere
    with pytest.raises(ValueError, match=r"is a folder; give a file name"):
        check_output_file(tmp_path, "--out")
    mine = tmp_path / "mine.txt"
    mine.write_text("mine")
    with pytest.raises(ValueError, match=r"exists and is not a file this command wrote \(a figure\); it would be "
                                         r"overwritten: give a new file name"):
        check_output_file(mine, "--out", replaces=lambda p: p.read_text() == "figure", may_replace="a figure")
    mine.write_text("figure")
    assert check_output_file(mine, "--out", replaces=lambda p: p.read_text() == "figure") == mine


def test_check_output_file_refuses_devices_and_pipes(tmp_path):
    """Was: an existing ``/dev/full`` was read to see whether a rerun may replace it (``eval --json /dev/full``,
    ``translate --output /dev/full``: zeros without end until the kernel killed the process), and ``translate
    --output /dev/null`` wrote ``/dev/null.json`` then failed with ``[Errno 22] Invalid argument``."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path in ("/dev/full", "/dev/null", fifo):
        if Path(path).exists():
            with pytest.raises(ValueError, match=r"^--json .* is not a regular file \(a device, pipe or socket\); "):
                check_output_file(path, "--json", replaces=lambda p: pytest.fail(f"{p} was read"))


def test_outputs_spelled_through_a_missing_folder_are_checked_where_they_land(tmp_path, monkeypatch):
    """Was: ``new/../mine.png`` did not exist as spelled (``new`` is missing), so the user's ``mine.png`` was
    replaced once ``new`` was made; ``train --out new/../run`` wrote into that run."""
    monkeypatch.chdir(tmp_path)
    run = _run(tmp_path)
    Path("mine.png").write_bytes(b"mine")
    with pytest.raises(ValueError, match=r"^--out 'new/../mine.png' exists and is not a file this command wrote"):
        check_output_file("new/../mine.png", "--out", replaces=lambda p: False)
    with pytest.raises(ValueError, match=r"^--out 'new/../run' is a folder"):
        check_output_file("new/../run", "--out")
    with pytest.raises(ValueError, match=r"^out_dir new/../run already holds a training run; pass --resume"):
        check_new_run_folder("new/../run")
    assert not Path("new").exists() and Path("mine.png").read_bytes() == b"mine"
    check_new_run_folder("new/../fresh")  # a new folder spelled so is fine


@pytest.mark.parametrize("inside", ["checkpoints/best", "checkpoints/best/sub", "checkpoints/step_00000004/sub",
                                    "checkpoints"])
def test_a_new_run_inside_a_checkpoint_is_refused(tmp_path, inside):
    """Was: accepted; the outer run's next save or prune of that checkpoint then failed on (or would delete) it."""
    run = _run(tmp_path)
    with pytest.raises(ValueError, match=rf"^out_dir .*{inside} is inside a checkpoint \(.*\), which its run "
                                         rf"replaces or prunes; choose a folder outside it$"):
        check_new_run_folder(run / inside)
    check_new_run_folder(run / "sub")  # beside the checkpoints: the run's folder is the user's too


def test_a_default_run_folder_taken_in_the_same_second_gets_a_number(tmp_path, monkeypatch):
    """Was: a second run of the same data and preset started in the same second (a loop of short runs) met the
    first one's folder: "already holds a training run; pass --resume", though no --out was given."""
    import time

    from attnkit.checkpoints.runs import default_run_folder

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20261130-214143")
    first = default_run_folder("lm", "corpus.txt", "char-small")
    assert first == Path("runs/lm-corpus-char-small-20261130-214143")
    first.mkdir(parents=True)
    assert default_run_folder("lm", "corpus.txt", "char-small") == Path("runs/lm-corpus-char-small-20261130-214143-2")
    Path("runs/lm-corpus-char-small-20261130-214143-2").mkdir()
    assert default_run_folder("lm", "corpus.txt", "char-small").name.endswith("-214143-3")
