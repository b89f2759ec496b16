"""Checkpoints: exact round-trip, tied weights, atomic publication, crash leftovers, corrupt/missing files."""

from __future__ import annotations

import json
import os

import pytest
import torch

from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from attnkit.checkpoints.checkpoint import (CheckpointError, clean_stale, latest_checkpoint, list_checkpoints,
                                         load_checkpoint, prune_checkpoints, read_checkpoint_state,
                                         save_checkpoint, step_dir_name)
from attnkit.training.config import TrainConfig
from attnkit.training.optim import LRScheduler, build_optimizer

CFG = TrainConfig(steps=20, lr=1e-2, min_lr=1e-3, warmup_steps=3)


def _train(model, opt, sched, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randint(0, 32, (4, 6), generator=g)  # (B, T)
        loss = model(x).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def _setup(tiny_lm, seed=0):
    model = tiny_lm(seed)
    opt = build_optimizer(model, CFG)
    return model, opt, LRScheduler(opt, CFG)


def test_round_trip_restores_model_optimizer_scheduler_exactly(tmp_path, tiny_lm):
    model, opt, sched = _setup(tiny_lm)
    _train(model, opt, sched, 4, seed=1)
    path = save_checkpoint(tmp_path / "ck", model, opt, sched, state={"step": 4, "note": "hi"},
                           extra={"tokenizer": "{\"kind\": \"char\"}", "meta": {"a": 1}})
    assert sorted(os.listdir(path)) == ["model.safetensors", "optimizer.safetensors", "state.json"]

    model2, opt2, sched2 = _setup(tiny_lm, seed=5)  # different init: everything must come from the file
    state = load_checkpoint(path, model2, opt2, sched2)
    assert state["step"] == 4 and state["note"] == "hi"
    assert state["extra"] == {"tokenizer": "{\"kind\": \"char\"}", "meta": {"a": 1}}
    for (n1, p1), (n2, p2) in zip(model.state_dict().items(), model2.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2)
    sd1, sd2 = opt.state_dict(), opt2.state_dict()
    assert sd1["param_groups"] == sd2["param_groups"]
    for i in sd1["state"]:
        for k, v in sd1["state"][i].items():
            assert torch.equal(v, sd2["state"][i][k]), (i, k)
    assert sched2.state_dict() == sched.state_dict()

    # and training continues identically
    _train(model, opt, sched, 3, seed=2)
    _train(model2, opt2, sched2, 3, seed=2)
    for p1, p2 in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p1, p2)


def test_optimizer_state_uses_stable_parameter_names(tmp_path, tiny_lm):
    from safetensors.torch import load_file

    model, opt, sched = _setup(tiny_lm)
    _train(model, opt, sched, 1, seed=1)
    path = save_checkpoint(tmp_path / "ck", model, opt, sched)
    keys = set(load_file(str(path / "optimizer.safetensors")))
    assert {"emb.weight:exp_avg", "emb.weight:exp_avg_sq", "emb.weight:step", "ln.bias:exp_avg"} <= keys
    layout = read_checkpoint_state(path)["optimizer"]["param_groups"]
    assert [g["name"] for g in layout] == ["decay", "no_decay"]
    assert layout[0]["params"] == ["emb.weight", "fc.weight"] and layout[0]["betas"] == [0.9, 0.95]


def test_tied_gpt_weights_stored_once_and_still_tied_after_load(tmp_path):
    from safetensors.torch import load_file

    cfg = GPTConfig(vocab_size=40, block_size=16, n_layer=1, n_head=2, n_embd=16, tie_embeddings=True)
    torch.manual_seed(0)
    model = GPT(cfg)
    path = save_checkpoint(tmp_path / "ck", model)
    stored = load_file(str(path / "model.safetensors"))
    assert ("wte.weight" in stored) != ("lm_head.weight" in stored)  # exactly one copy
    torch.manual_seed(1)
    model2 = GPT(cfg)
    load_checkpoint(path, model2)
    assert model2.lm_head.weight.data_ptr() == model2.wte.weight.data_ptr()
    assert torch.equal(model2.wte.weight, model.wte.weight)
    idx = torch.randint(0, 40, (2, 5))
    model.eval(), model2.eval()
    assert torch.equal(model(idx), model2(idx))


def test_the_weights_of_an_untied_model_do_not_load_into_a_tied_one(tmp_path):
    """Was: both tensors were copied into the one tied weight, the last silently winning (tie_embeddings set to
    true in the state.json of an untied model)."""
    config = dict(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16)
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "ck", GPT(GPTConfig(**config, tie_embeddings=False)))
    tied = GPT(GPTConfig(**config, tie_embeddings=True))
    before = tied.wte.weight.detach().clone()
    with pytest.raises(CheckpointError, match=r"lm_head.weight and wte.weight differ, but they are one tensor"):
        load_checkpoint(tmp_path / "ck", tied)
    assert torch.equal(tied.wte.weight, before)


def test_rng_state_saved_and_restored(tmp_path, tiny_lm):
    model = tiny_lm()
    torch.manual_seed(3)
    path = save_checkpoint(tmp_path / "ck", model)
    expected = torch.rand(5)
    torch.manual_seed(99)
    load_checkpoint(path, model, restore_rng=True)
    assert torch.equal(torch.rand(5), expected)


def test_state_must_be_json_and_not_use_reserved_keys(tmp_path, tiny_lm):
    model = tiny_lm()
    with pytest.raises(ValueError, match="JSON-serialisable"):
        save_checkpoint(tmp_path / "a", model, state={"x": torch.zeros(2)})
    with pytest.raises(ValueError, match="JSON-serialisable"):
        save_checkpoint(tmp_path / "b", model, state={"loss": float("nan")})
    with pytest.raises(ValueError, match=r"reserved keys \['rng'\]"):
        save_checkpoint(tmp_path / "c", model, state={"rng": 1})
    with pytest.raises(ValueError, match="extra must map str -> str | dict"):
        save_checkpoint(tmp_path / "d", model, extra={"n": 3})
    assert not any(tmp_path.iterdir())  # nothing written for a rejected save


def test_save_over_existing_checkpoint_replaces_it(tmp_path, tiny_lm):
    model = tiny_lm()
    save_checkpoint(tmp_path / "best", model, state={"step": 1})
    save_checkpoint(tmp_path / "best", model, state={"step": 2})
    assert read_checkpoint_state(tmp_path / "best")["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]  # no .tmp / .old left behind


@pytest.mark.parametrize("where", ["ck", "ck.tmp", "ck.old"])
@pytest.mark.parametrize("what", ["folder", "file"])
def test_a_save_replaces_no_file_or_folder_that_is_not_a_checkpoint(tmp_path, tiny_lm, where, what):
    """A user's folder at the checkpoint's path (or at ``<path>.tmp`` / ``.old``, names a save uses on the way) was
    deleted to make room for the checkpoint."""
    mine = tmp_path / where
    if what == "folder":
        mine.mkdir()
        (mine / "notes.txt").write_text("keep me")
    else:
        mine.write_text("keep me")
    why = r"holds \['notes.txt'\], not a checkpoint's files" if what == "folder" else "is a file"
    with pytest.raises(ValueError, match=rf"{mine.name} exists and {why}; it would be"):
        save_checkpoint(tmp_path / "ck", tiny_lm(), state={"step": 1})
    assert (mine / "notes.txt" if what == "folder" else mine).read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == [mine.name]


def test_a_checkpoint_with_evaluation_records_is_replaced(tmp_path, tiny_lm):
    """``attnkit eval`` writes ``<checkpoint>/eval_lm.json``: a resumed run still replaces its best/."""
    save_checkpoint(tmp_path / "best", tiny_lm(), state={"step": 1})
    (tmp_path / "best" / "eval_lm.json").write_text("{}")
    save_checkpoint(tmp_path / "best", tiny_lm(), state={"step": 2})
    assert read_checkpoint_state(tmp_path / "best")["step"] == 2


def test_a_save_that_fails_leaves_the_published_checkpoint_whole(tmp_path, tiny_lm, monkeypatch):
    """Atomic publication: the new version is written beside the old one and published only when complete."""
    import attnkit.checkpoints.checkpoint as ckpt

    model = tiny_lm()
    save_checkpoint(tmp_path / "best", model, state={"step": 1})
    weights = (tmp_path / "best" / "model.safetensors").read_bytes()

    def disk_full(tensors, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(b"half")  # part of the file, then the failure
        raise OSError("No space left on device")

    monkeypatch.setattr(ckpt, "save_file", disk_full)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(tmp_path / "best", model, state={"step": 2})
    monkeypatch.undo()
    clean_stale(tmp_path)  # what a resume does with the leftovers of a save that never finished
    assert read_checkpoint_state(tmp_path / "best")["step"] == 1
    assert (tmp_path / "best" / "model.safetensors").read_bytes() == weights


# --- a folder of checkpoints ---------------------------------------------------------------------------
def test_list_latest_prune(tmp_path, tiny_lm):
    model = tiny_lm()
    for step in (5, 10, 15, 20):
        save_checkpoint(tmp_path / step_dir_name(step), model, state={"step": step})
    save_checkpoint(tmp_path / "best", model, state={"step": 10})
    assert [s for s, _ in list_checkpoints(tmp_path)] == [5, 10, 15, 20]
    assert latest_checkpoint(tmp_path).name == "step_00000020"
    removed = prune_checkpoints(tmp_path, keep_last=2)
    assert [p.name for p in removed] == ["step_00000005", "step_00000010"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "step_00000015", "step_00000020"]
    with pytest.raises(ValueError, match="keep_last must be an int >= 1, got 0"):
        prune_checkpoints(tmp_path, 0)


def test_pruning_removes_no_step_folder_of_the_users(tmp_path, tiny_lm):
    """A ``step_*`` folder holding the user's notes, or a link to a folder elsewhere, is left where it is (pruning
    removed the notes, and stopped the run with an OSError at the link); the checkpoints around them are pruned."""
    model = tiny_lm()
    for step in (5, 10, 15, 20):
        save_checkpoint(tmp_path / step_dir_name(step), model, state={"step": step})
    (tmp_path / step_dir_name(5) / "notes.txt").write_text("keep me")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    save_checkpoint(elsewhere, model, state={"step": 1})
    (tmp_path / step_dir_name(1)).symlink_to(elsewhere, target_is_directory=True)
    assert [p.name for p in prune_checkpoints(tmp_path, keep_last=2)] == ["step_00000010"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000001", "step_00000005", "step_00000015",
                                                          "step_00000020"]
    assert (tmp_path / step_dir_name(5) / "notes.txt").read_text() == "keep me"
    assert read_checkpoint_state(elsewhere)["step"] == 1


def test_cleaning_after_a_crash_removes_nothing_of_the_users(tmp_path, tiny_lm):
    """Only the leftovers a save leaves (``.tmp`` and ``.old`` folders of checkpoint files) are removed on resume;
    a save refuses to remove the others too."""
    save_checkpoint(tmp_path / "best", tiny_lm(), state={"step": 7})
    for name in ("best.old", "notes.tmp"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "notes.txt").write_text("keep me")
    (tmp_path / "list.tmp").write_text("keep me")
    assert clean_stale(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "best.old", "list.tmp", "notes.tmp"]
    assert (tmp_path / "best.old" / "notes.txt").read_text() == (tmp_path / "list.tmp").read_text() == "keep me"


def test_unfinished_tmp_folder_is_ignored_and_cleaned(tmp_path, tiny_lm):
    model = tiny_lm()
    save_checkpoint(tmp_path / step_dir_name(10), model, state={"step": 10})
    # a crash in the middle of saving step 20 leaves a half-written .tmp folder
    half = tmp_path / (step_dir_name(20) + ".tmp")
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"\x00" * 10)
    assert latest_checkpoint(tmp_path).name == "step_00000010"
    actions = clean_stale(tmp_path)
    assert actions == ["removed unfinished step_00000020.tmp"]
    assert not half.exists()


def test_old_folder_restored_when_replacement_never_appeared(tmp_path, tiny_lm):
    model = tiny_lm()
    save_checkpoint(tmp_path / "best", model, state={"step": 7})
    # crash between "best -> best.old" and "best.tmp -> best"
    os.rename(tmp_path / "best", tmp_path / "best.old")
    (tmp_path / "best.tmp").mkdir()
    clean_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]
    assert read_checkpoint_state(tmp_path / "best")["step"] == 7


def test_old_folder_removed_when_replacement_exists(tmp_path, tiny_lm):
    model = tiny_lm()
    save_checkpoint(tmp_path / "best", model, state={"step": 7})
    save_checkpoint(tmp_path / "best.old", model, state={"step": 3})  # stale previous version
    assert clean_stale(tmp_path) == ["removed replaced best.old"]
    assert read_checkpoint_state(tmp_path / "best")["step"] == 7


# --- corrupt / missing files ---------------------------------------------------------------------------
@pytest.fixture
def saved(tmp_path, tiny_lm):
    model, opt, sched = _setup(tiny_lm)
    _train(model, opt, sched, 2, seed=1)
    return save_checkpoint(tmp_path / "ck", model, opt, sched, state={"step": 2})


def test_missing_folder(tmp_path, tiny_lm):
    with pytest.raises(CheckpointError, match="no checkpoint at .*nowhere: the folder does not exist"):
        load_checkpoint(tmp_path / "nowhere", tiny_lm())


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors", "state.json"])
def test_missing_file_is_named(saved, tiny_lm, name):
    (saved / name).unlink()
    model, opt, sched = _setup(tiny_lm, seed=3)
    with pytest.raises(CheckpointError, match=rf"incomplete: .*{name} is missing"):
        load_checkpoint(saved, model, opt, sched)


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors"])
def test_truncated_safetensors_is_a_value_error_naming_the_file(saved, tiny_lm, name):
    data = (saved / name).read_bytes()
    (saved / name).write_bytes(data[: len(data) // 2])
    model, opt, sched = _setup(tiny_lm, seed=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=rf"{name} is corrupt or truncated"):
        load_checkpoint(saved, model, opt, sched)
    # nothing was modified by the failed load
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert opt.state_dict()["state"] == {}


def test_corrupt_state_json(saved, tiny_lm):
    (saved / "state.json").write_text('{"format": "attnkit.checkpoint", "step": ')
    with pytest.raises(CheckpointError, match=r"state.json is corrupt \(not valid JSON"):
        load_checkpoint(saved, tiny_lm())


def test_foreign_state_json(saved, tiny_lm):
    (saved / "state.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(CheckpointError, match="not an attnkit checkpoint"):
        load_checkpoint(saved, tiny_lm())


def test_weights_of_another_shape_do_not_fit(saved, tiny_lm):
    model = tiny_lm(vocab_size=40)  # emb (40, 16) instead of (32, 16)
    before = model.emb.weight.detach().clone()
    with pytest.raises(CheckpointError, match=r"model.safetensors does not fit TinyLM: .*emb.weight: checkpoint \(32, 16\), model \(40, 16\)"):
        load_checkpoint(saved, model)
    assert torch.equal(model.emb.weight, before)


@pytest.mark.parametrize("bad, message", [
    (lambda t: t.to(torch.int64), r"emb.weight is torch.int64, but the model's emb.weight is torch.float32"),
    (lambda t: t > 0, r"emb.weight is torch.bool, but the model's emb.weight is torch.float32"),
    (lambda t: t.index_fill(0, torch.tensor([3]), float("nan")), r"emb.weight holds values that are not finite"),
    (lambda t: t.index_fill(1, torch.tensor([0]), float("-inf")), r"emb.weight holds values that are not finite"),
], ids=["int64", "bool", "nan", "inf"])
def test_weights_of_another_kind_or_not_finite_are_refused(saved, tiny_lm, bad, message):
    """They were converted to floats (booleans to 0 and 1) or loaded as NaN, which only showed as NaN output."""
    from safetensors.torch import load_file, save_file

    weights = load_file(str(saved / "model.safetensors"))
    weights["emb.weight"] = bad(weights["emb.weight"])
    save_file(weights, str(saved / "model.safetensors"))
    model = tiny_lm(seed=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(saved, model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_weights_with_missing_keys_do_not_fit(saved, tiny_lm):
    model = tiny_lm()
    model.extra = torch.nn.Linear(2, 2)
    with pytest.raises(CheckpointError, match=r"missing keys \['extra.bias', 'extra.weight'\]"):
        load_checkpoint(saved, model)


def test_optimizer_layout_mismatch(saved, tiny_lm):
    model = tiny_lm()
    model.ln.weight.requires_grad_(False)  # changes the no_decay group
    cfg_opt = build_optimizer(model, CFG)
    with pytest.raises(CheckpointError, match="optimizer parameter layout differs"):
        load_checkpoint(saved, model, cfg_opt)


def test_no_pickle_anywhere(saved):
    """Every file is safetensors or JSON: neither starts with a pickle protocol header."""
    for f in saved.iterdir():
        head = f.read_bytes()[:2]
        assert head[:1] != b"\x80", f"{f} looks like a pickle"
    json.loads((saved / "state.json").read_text())


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_checkpoint_files_get_the_users_umask(tmp_path, umask):
    """Every file of a checkpoint has the mode of any file the user creates (safetensors' save_file gave the weights
    and the optimizer state 0600 while state.json had 0644 under umask 022)."""
    import stat

    model = GPT(GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16))
    opt = build_optimizer(model, CFG)
    old = os.umask(umask)
    try:
        path = save_checkpoint(tmp_path / "step_1", model, opt, state={"step": 1})
    finally:
        os.umask(old)
    names = sorted(p.name for p in path.iterdir())
    assert names == ["model.safetensors", "optimizer.safetensors", "state.json"]  # no temporary file left
    for name in names:
        assert stat.S_IMODE((path / name).stat().st_mode) == 0o666 & ~umask, name


def test_pruning_with_a_cadence_drops_superseded_checkpoints_off_it(tmp_path, tiny_lm):
    """``every``: a checkpoint off the cadence (a preemption's, step 6) is kept while it is the newest and does not
    count towards ``keep_last``; once superseded it goes, and the newest is kept whatever its step."""
    model = tiny_lm()
    save_checkpoint(tmp_path / step_dir_name(0), model, state={"step": 0})  # a signal before the first update
    assert prune_checkpoints(tmp_path, keep_last=3, every=4) == []
    for step in (4, 6):
        save_checkpoint(tmp_path / step_dir_name(step), model, state={"step": step})
    assert [p.name for p in prune_checkpoints(tmp_path, keep_last=3, every=4)] == ["step_00000000"]
    for step in (8, 11):
        save_checkpoint(tmp_path / step_dir_name(step), model, state={"step": step})
    assert [p.name for p in prune_checkpoints(tmp_path, keep_last=3, every=4)] == ["step_00000006"]
    assert [s for s, _ in list_checkpoints(tmp_path)] == [4, 8, 11]
    with pytest.raises(ValueError, match="every must be an int >= 1, got 0"):
        prune_checkpoints(tmp_path, 2, every=0)
