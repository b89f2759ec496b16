"""``convert_checkpoint``'s refusals, made before anything is read: a run's ``checkpoints/`` folder as the source
(the run folder is what to give), an output folder below a file, and an output named like one of its run's own
checkpoints (the run would resume from it). The conversion itself is tested with real sharded checkpoints in
``tests/training/test_distributed.py`` and ``tests/cli/test_scale_cli.py``.

Axis legend: none (folders only).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnkit.api import convert_checkpoint


def fake_run(tmp_path: Path) -> Path:
    """A run folder whose latest step checkpoint is ``step_00000003`` (its contents are never read here)."""
    run = tmp_path / "run"
    (run / "checkpoints" / "step_00000003").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({}), encoding="utf-8")
    return run


def test_a_runs_checkpoints_folder_names_the_run_folder(tmp_path):
    run = fake_run(tmp_path)
    with pytest.raises(ValueError, match=r"checkpoints is a run's checkpoints folder: give the run folder '.*run'"):
        convert_checkpoint(run / "checkpoints", tmp_path / "out")


def test_an_output_below_a_file_is_named_before_anything_is_read(tmp_path):
    run = fake_run(tmp_path)
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(ValueError, match=r"'.*notes.txt' is a file, not a folder"):
        convert_checkpoint(run, tmp_path / "notes.txt" / "converted")
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "mine"


@pytest.mark.parametrize("name", ["step_00000009", "best", "step_00000009.tmp"])
def test_an_output_named_like_the_runs_own_checkpoints_is_refused(tmp_path, name):
    """``step_00000009`` written into the run's checkpoints/ would be the step checkpoint a resume loads."""
    run = fake_run(tmp_path)
    with pytest.raises(ValueError, match=rf"{name}' has the name of one of its run's own checkpoints"):
        convert_checkpoint(run, run / "checkpoints" / name)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000003"]


def test_an_output_inside_the_checkpoint_is_refused(tmp_path):
    """Was: ``convert SRC SRC/x`` wrote the converted folder into the sharded checkpoint, which a later save that
    replaces that checkpoint then refused to remove (a folder holding files it did not write)."""
    run = fake_run(tmp_path)
    src = run / "checkpoints" / "step_00000003"
    before = sorted(p.name for p in src.iterdir())
    with pytest.raises(ValueError, match=r"step_00000003/x' is inside the checkpoint .*step_00000003'; expected a "
                                         r"folder outside it, such as the default .*step_00000003-converted'"):
        convert_checkpoint(src, src / "x")
    assert sorted(p.name for p in src.iterdir()) == before


def test_a_hand_edited_model_config_is_refused_before_the_model_is_built(tmp_path):
    """Was: the model was built from state.json as it stood: block_size = 10**8 took 22 GB and 90 s (rotary tables)
    and was written out; now the position tables are bounded by the weights, as every other loader does."""
    from attnkit.checkpoints.checkpoint import DCP_DIR, FORMAT, FORMAT_VERSION

    ckpt = tmp_path / "step_00000003"
    (ckpt / DCP_DIR).mkdir(parents=True)
    config = {"model_type": "gpt", "vocab_size": 28, "block_size": 2**21, "n_layer": 1, "n_head": 2, "n_embd": 16,
              "activation": "swiglu", "norm": "rmsnorm", "bias": False, "position": "rope"}
    state = {"format": FORMAT, "version": FORMAT_VERSION, "step": 3, "model_config": config, "sharded": True}
    (ckpt / "state.json").write_text(json.dumps(state), encoding="utf-8")
    with pytest.raises(ValueError, match=r"position tables for length 2097152 would take 128 MiB up front"):
        convert_checkpoint(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("src, out", [(None, None), ("", None), (3, None), ("run", 5), ("run", "")])
def test_a_source_or_output_that_is_no_path_is_a_value_error(tmp_path, monkeypatch, src, out):
    """Was: ``convert_checkpoint(None)`` raised TypeError from ``Path(None)``, and ``""`` (the working directory)
    ``PosixPath('.') has an empty name``."""
    monkeypatch.chdir(tmp_path)
    fake_run(tmp_path)
    with pytest.raises(ValueError, match=r"convert_checkpoint (src|out) must be the (checkpoint or run folder|folder "
                                         r"to write) \(a non-empty str or pathlib.Path.*\), got"):
        convert_checkpoint(src, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def _sharded_checkpoint(path: Path) -> Path:
    """A real sharded checkpoint written in one process (``dcp/`` + ``state.json``), 1-layer 8-wide GPT."""
    import torch.distributed.checkpoint as dcp

    from attnkit.checkpoints.checkpoint import DCP_DIR, FORMAT, FORMAT_VERSION
    from attnkit.models.configs import GPTConfig
    from attnkit.models.gpt import GPT

    config = GPTConfig(vocab_size=8, block_size=4, n_layer=1, n_head=1, n_embd=8)
    dcp.save({"model": GPT(config).state_dict()}, checkpoint_id=str(path / DCP_DIR), no_dist=True)
    state = {"format": FORMAT, "version": FORMAT_VERSION, "step": 1, "sharded": True,
             "model_config": json.loads(config.to_json())}
    (path / "state.json").write_text(json.dumps(state), encoding="utf-8")
    return path


@pytest.mark.filterwarnings("ignore")
def test_an_existing_output_spelled_through_a_missing_folder_is_refused(tmp_path):
    """Was: ``convert SRC new/../mine`` (``new`` missing) passed the "already exists" check, then the save made
    ``new`` and published the checkpoint over the user's folder ``mine``, deleting what it held."""
    src = _sharded_checkpoint(tmp_path / "sharded")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("years of work", encoding="utf-8")
    with pytest.raises(ValueError, match=r"new/\.\./mine already exists; choose another output folder"):
        convert_checkpoint(src, tmp_path / "new" / ".." / "mine")
    assert [p.name for p in mine.iterdir()] == ["thesis.txt"] and not (tmp_path / "new").exists()
    done = convert_checkpoint(src, tmp_path / "new" / ".." / "converted")  # a new folder so spelled is fine
    assert done.path == tmp_path / "new" / ".." / "converted"
    assert sorted(p.name for p in (tmp_path / "converted").iterdir()) == ["model.safetensors", "state.json"]
