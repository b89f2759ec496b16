"""`attnkit train mt --anneal-data/--anneal-share`: the end of the budget trains on the in-domain pairs, the
switch and the options travel with the run (resume), and bad values get one clear line (exit code 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnkit.cli.main import main
from attnkit.checkpoints.checkpoint import latest_checkpoint, read_checkpoint_state

TINY_MT = ["--preset", "transformer-small", "--set", "d_model=32", "--set", "num_heads=2",
           "--set", "num_encoder_layers=1", "--set", "num_decoder_layers=1", "--set", "dim_feedforward=64",
           "--set", "dropout=0.0", "--vocab-size", "300", "--max-tokens", "256", "--max-len", "24",
           "--warmup-steps", "1", "--log-every", "1", "--ckpt-every", "2", "--no-bleu", "--no-progress"]


@pytest.fixture(scope="module")
def data(tmp_path_factory, make_copy_task) -> Path:
    folder = make_copy_task(tmp_path_factory.mktemp("data") / "copy", sizes=(("train", 120), ("valid", 12)))
    lines = (folder / "train.tsv").read_text(encoding="utf-8").splitlines()
    (folder / "in-domain.tsv").write_text("\n".join(lines[:30]) + "\n", encoding="utf-8")  # a subset, as de-en's
    return folder


def _train(data: Path, out: Path, *extra: str) -> int:
    return main(["train", "mt", "--data", str(data), "--out", str(out), *TINY_MT, *extra])


def _state(run: Path) -> dict:
    return read_checkpoint_state(latest_checkpoint(run / "checkpoints"))


def test_a_recipe_folder_anneals_on_its_in_domain_pairs_and_resumes(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(data, run, "--anneal-data", str(data), "--anneal-share", "0.5", "--steps", "4") == 0
    err = capsys.readouterr().err
    assert "anneal: the last 50% of the budget trains on 30 pairs only" in err, err
    state = _state(run)
    assert state["task"]["anneal_from"] == 2 and state["task"]["n_anneal"] == 30
    opts = state["extra"]["mt_options"]
    assert (opts["anneal_data"], opts["anneal_share"]) == (str(data), 0.5)
    assert state["extra"]["data_stats"]["anneal_pairs"] == 30
    # resume takes the anneal options from the run; the switch (step 2) stays where it was
    assert main(["train", "mt", "--out", str(run), "--resume", "--steps", "6", "--no-progress"]) == 0
    assert _state(run)["step"] == 6 and _state(run)["task"]["anneal_from"] == 2


def test_a_tsv_file_and_the_default_share(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(data, run, "--anneal-data", str(data / "in-domain.tsv"), "--steps", "5") == 0
    assert "anneal: the last 20% of the budget trains on 30 pairs only" in capsys.readouterr().err
    assert _state(run)["task"]["anneal_from"] == 4  # 4/5 = 80% of the steps used


def test_anneal_pairs_shared_with_the_split_off_validation_are_counted_in_the_log(data, tmp_path, capsys):
    """The train file as --data (10% split off for validation) and as --anneal-data: the anneal pairs whose source
    is a validation one are dropped, and the anneal line says how many (it did not)."""
    run = tmp_path / "run"
    assert main(["train", "mt", "--data", str(data / "train.tsv"), "--out", str(run), *TINY_MT, "--steps", "2",
                 "--anneal-data", str(data / "train.tsv")]) == 0
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("anneal: "))
    assert " shared a validation source, " in line, line
    n = int(line.split(" shared a validation source")[0].rsplit(", ", 1)[-1])
    assert n > 0 and f"trains on {120 - n} pairs only" in line, line


def test_replay_travels_with_the_run(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(data, run, "--anneal-data", str(data), "--anneal-share", "0.5", "--anneal-replay", "0.5",
                  "--steps", "4") == 0
    assert "anneal: the last 50% of the budget trains on 30 pairs and 15 replayed training pairs" in \
        capsys.readouterr().err
    state = _state(run)
    assert state["extra"]["mt_options"]["anneal_replay"] == 0.5 and state["task"]["anneal_replay"] == 0.5
    assert state["extra"]["data_stats"]["anneal_replayed"] == 15
    assert main(["train", "mt", "--out", str(run), "--resume", "--steps", "6", "--no-progress"]) == 0
    assert _state(run)["task"]["anneal_replay"] == 0.5


@pytest.mark.parametrize("extra,message", [
    (["--anneal-share", "0.3"], "--anneal-share 0.3 needs --anneal-data"),
    (["--anneal-replay", "1"], "--anneal-replay 1 needs --anneal-data"),
    (["--anneal-data", "DATA", "--anneal-replay", "-1"], "--anneal-replay must be a number >= 0, got -1"),
    (["--anneal-data", "DATA", "--anneal-share", "1"], r"--anneal-share must be in \(0, 1\), got 1"),
    (["--anneal-data", "DATA", "--anneal-share", "0"], r"--anneal-share must be in \(0, 1\), got 0"),
    (["--anneal-data", "missing.tsv"], "--anneal-data: no such file or folder: missing.tsv"),
    (["--anneal-data", "shakespeare"], "--anneal-data 'shakespeare' is a lm recipe"),
    (["--anneal-data", "VALIDFOLDER"], "has no in-domain.tsv"),
])
def test_bad_anneal_options(data, tmp_path, capsys, extra, message):
    import re

    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "train.tsv").write_text((data / "valid.tsv").read_text(encoding="utf-8"), encoding="utf-8")
    extra = [str(data) if a == "DATA" else str(folder) if a == "VALIDFOLDER" else a for a in extra]
    assert _train(data, tmp_path / "run", *extra, "--steps", "2") == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
