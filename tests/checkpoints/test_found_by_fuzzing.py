"""Damaged checkpoints: the regressions of the loader bugs that fuzzing found (``tests/reliability/test_fuzz.py`` runs the
checkpoint loaders of ``benchmarks/fuzz_loaders.py`` on hypothesis-drawn mutations of a real run folder: bytes
flipped, files cut or extended, safetensors headers that claim huge tensors or data past the end of the file,
``state.json`` with wrong types, NaN, huge numbers, deep nesting, config sizes times 1,024). Each test names what
happened before the fix. Loading gives the weights or one ``CheckpointError`` (a ValueError) naming the file;
nothing is ever unpickled.
"""

import json
import math

import pytest
import torch

from attnkit.checkpoints.checkpoint import CheckpointError, load_checkpoint, read_checkpoint_state, save_checkpoint
from attnkit.checkpoints.load import load
from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from benchmarks.fuzz_loaders import seed_folder

CONFIG = GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8)


def test_the_untouched_run_loads():
    loaded = load(seed_folder() / "lm")
    assert all(torch.isfinite(p).all() for p in loaded.model.parameters())


@pytest.fixture()
def ckpt(tmp_path):
    """A copy of the seed run's best checkpoint, to damage."""
    import shutil

    folder = tmp_path / "best"
    shutil.copytree(seed_folder() / "lm" / "checkpoints" / "best", folder)
    return folder


def _edit_state(folder, edit):
    state = json.loads((folder / "state.json").read_text())
    edit(state)
    (folder / "state.json").write_text(json.dumps(state))


@pytest.mark.parametrize("key, value", [("model_config", ["gpt"]), ("extra", "lm"), ("extra", None),
                                        ("train_config", 3), ("optimizer", [])])
def test_state_keys_that_must_be_objects(ckpt, key, value):
    """Was: AttributeError ('str' object has no attribute 'get') in load() and in resume."""
    _edit_state(ckpt, lambda s: s.__setitem__(key, value))
    with pytest.raises(CheckpointError, match=f"'{key}' must be a JSON object"):
        read_checkpoint_state(ckpt)


@pytest.mark.parametrize("field, factor", [("n_embd", 2**20), ("n_layer", 2**31), ("n_embd", 2**62)])
def test_config_sizes_that_disagree_with_the_weights_are_refused_before_allocating(ckpt, field, factor):
    """Was: load() built the model of the config first: n_embd x 2**20 asked for terabytes (a crash or the
    system's out-of-memory killer), n_layer x 2**31 built layers for minutes, 2**62 overflowed in torch."""
    _edit_state(ckpt, lambda s: s["model_config"].__setitem__(field, s["model_config"][field] * factor))
    with pytest.raises(CheckpointError, match="does not fit|too few for|cannot be built"):
        load(ckpt)


def test_a_block_size_that_asks_for_huge_position_tables(ckpt):
    """Was: block_size = 2**31 with rotary positions allocated 2 x 2**31 x D floats of cos/sin tables (the
    weights say nothing about it)."""
    _edit_state(ckpt, lambda s: s["model_config"].__setitem__("block_size", 2**31))
    with pytest.raises(CheckpointError, match="position tables for length 2147483648"):
        load(ckpt)


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a": ' + "1" * 5000 + "}"])
def test_json_the_parser_refuses_for_its_size(ckpt, text):
    """Was: RecursionError (100,000 nested brackets) and a bare ValueError about Python's digit limit."""
    (ckpt / "state.json").write_text(text)
    with pytest.raises(CheckpointError, match="state.json is corrupt"):
        read_checkpoint_state(ckpt)


@pytest.mark.parametrize("key, value", [("kind", ["lm"]), ("kind", {"a": 1}), ("tokenizer", "char"),
                                        ("stop_token_ids", [1.5]),
                                        ("chat_template", 7), ("add_bos_token", "yes")])
def test_extra_entries_of_the_wrong_type(ckpt, key, value):
    """Was: TypeError (unhashable kind), AttributeError, or a silently wrong load."""
    _edit_state(ckpt, lambda s: s["extra"].__setitem__(key, value))
    with pytest.raises(CheckpointError, match=f"extra.{key} must be"):
        load(ckpt)


@pytest.mark.parametrize("value, match", [("yes", "extra.prompting must be"),
                                          ({"add_bos_token": 1}, "extra.prompting.add_bos_token must be"),
                                          ({"stop_token_ids": [-1]}, "extra.prompting.stop_token_ids must be")])
def test_prompting_entries_of_the_wrong_type(ckpt, value, match):
    """extra.prompting (where finetune records the source model's add_bos_token / stop_token_ids) is checked too."""
    _edit_state(ckpt, lambda s: s["extra"].__setitem__("prompting", value))
    with pytest.raises(CheckpointError, match=match):
        load(ckpt)


def test_prompting_entries_are_read(ckpt):
    """Was: the conventions finetune must record (extra values are strings or objects) were only read from the top
    of extra, where no checkpoint writer can put a bool or a list."""
    _edit_state(ckpt, lambda s: s["extra"].__setitem__("prompting", {"add_bos_token": True, "stop_token_ids": [3, 5]}))
    loaded = load(ckpt)
    assert loaded.add_bos is True and loaded.stop_ids == [3, 5]
    _edit_state(ckpt, lambda s: s["extra"].update(add_bos_token=False, stop_token_ids=[4]))  # the top level wins
    loaded = load(ckpt)
    assert loaded.add_bos is False and loaded.stop_ids == [4]


def test_a_broken_lora_entry(ckpt):
    """Was: KeyError 'rank' for an unmerged LoRA entry without its settings."""
    _edit_state(ckpt, lambda s: s["extra"].__setitem__("lora", {"merged": False}))
    with pytest.raises(CheckpointError, match="extra.lora must hold rank, alpha and targets"):
        load(ckpt)


def _saved(tmp_path, steps=1):
    model = GPT(CONFIG)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    for _ in range(steps):
        model(torch.zeros(1, 4, dtype=torch.long))[0].sum().backward()
        opt.step()
    return save_checkpoint(tmp_path / "c", model, opt), model, opt


def _rewrite(file, edit):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(file))
    edit(tensors)
    save_file(tensors, str(file))


def test_optimizer_state_of_the_wrong_shape(tmp_path):
    """Was: loaded, then RuntimeError (size of tensor a must match b) in the first optimizer step."""
    path, model, opt = _saved(tmp_path)
    _rewrite(path / "optimizer.safetensors", lambda t: t.__setitem__("wte.weight:exp_avg", torch.zeros(17, 8)))
    with pytest.raises(CheckpointError, match=r"'wte.weight:exp_avg' has shape \(17, 8\)"):
        load_checkpoint(path, GPT(CONFIG), torch.optim.AdamW(GPT(CONFIG).parameters()))


def test_an_optimizer_state_entry_missing(tmp_path):
    """Was: loaded, then KeyError 'exp_avg' in the first optimizer step."""
    path, model, opt = _saved(tmp_path)
    _rewrite(path / "optimizer.safetensors", lambda t: t.pop("wte.weight:exp_avg"))
    m = GPT(CONFIG)
    with pytest.raises(CheckpointError, match="an entry is missing"):
        load_checkpoint(path, m, torch.optim.AdamW(m.parameters()))


@pytest.mark.parametrize("key, value, match", [("betas", [7, 0.99], "refuses"), ("betas", "x", "must be like"),
                                               ("eps", -1.0, "refuses"), ("lr", None, "must be like")])
def test_optimizer_settings_the_optimizer_refuses(tmp_path, key, value, match):
    """Was: loaded, then NaN or TypeError in the first step (betas = [7, 0.99], betas = "x")."""
    path, model, opt = _saved(tmp_path)
    _edit_state(path, lambda s: s["optimizer"]["param_groups"][0].__setitem__(key, value))
    m = GPT(CONFIG)
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(path, m, torch.optim.AdamW(m.parameters()))


@pytest.mark.parametrize("name, bad", [("wte.weight:exp_avg", math.nan), ("wte.weight:exp_avg_sq", -1.0)])
def test_optimizer_states_that_cannot_be(tmp_path, name, bad):
    """Was: loaded; training then stopped at a NaN loss (an exponent bit flipped to NaN, a negative second
    moment under Adam's square root)."""
    path, model, opt = _saved(tmp_path)
    _rewrite(path / "optimizer.safetensors", lambda t: t[name].view(-1).__setitem__(0, bad))
    m = GPT(CONFIG)
    with pytest.raises(CheckpointError, match="not finite|negative values"):
        load_checkpoint(path, m, torch.optim.AdamW(m.parameters()))


@pytest.mark.parametrize("key, value", [("last_eval", 1.5), ("last_eval", {"step": "1"}), ("best", [2.0]),
                                        ("best", {"metric": "loss", "value": None, "step": 1}), ("last_loss", "1.2")])
def test_a_resumed_run_refuses_trainer_state_of_the_wrong_type(tmp_path, monkeypatch, key, value):
    """Was: TypeError ('float' object is not subscriptable) at the end of the resumed run, after its training
    (benchmarks/fuzz_loaders.py, resume-train #530)."""
    import shutil

    from attnkit import api
    from attnkit.checkpoints.checkpoint import latest_checkpoint

    shutil.copytree(seed_folder(), tmp_path / "seeds")
    monkeypatch.chdir(tmp_path / "seeds")  # the seed run's data is "corpus.txt", relative
    _edit_state(latest_checkpoint(tmp_path / "seeds" / "lm" / "checkpoints"), lambda s: s.__setitem__(key, value))
    with pytest.raises(CheckpointError, match=f"'{key}' must be"):
        api.train_lm(out="lm", resume=True, data="corpus.txt", steps=2, progress=False, log=lambda line: None)


def test_optimizer_settings_missing_from_the_checkpoint_take_the_runs_own(tmp_path):
    """Was: loaded, then KeyError 'weight_decay' in the first step (torch's load_state_dict takes the saved
    param groups as they are); now a setting the file lacks (an older torch, an edit) is the run's own."""
    path, model, opt = _saved(tmp_path)
    _edit_state(path, lambda s: s["optimizer"]["param_groups"][0].pop("weight_decay"))
    m = GPT(CONFIG)
    fresh = torch.optim.AdamW(m.parameters(), lr=0.01, weight_decay=0.05)
    load_checkpoint(path, m, fresh)
    assert fresh.param_groups[0]["weight_decay"] == 0.05
    m(torch.zeros(1, 4, dtype=torch.long))[0].sum().backward()
    fresh.step()


@pytest.mark.parametrize("edit, match", [
    (lambda s: s.pop("train_config"), "lacks 'train_config': not written by the Trainer"),  # was: KeyError
    (lambda s: s["model_config"].__setitem__("block_size", 2**35), "position tables for length 34359738368"),
    # was: KeyError 'tokenizer' in train_lm (resume-train #6653)
    (lambda s: s["extra"].pop("tokenizer"), "lacks extra.tokenizer: not a run of attnkit train or finetune"),
])
def test_resume_checks_the_saved_run_before_building_from_it(tmp_path, edit, match):
    """Was: KeyError, and a 256 GiB allocation of rotary tables in train_lm(resume=True) for a block_size of 2**35
    (benchmarks/fuzz_loaders.py, resume-train #1909 and #6653): the resume path built the saved config unchecked."""
    import shutil

    from attnkit.checkpoints.checkpoint import latest_checkpoint
    from attnkit.checkpoints.runs import read_saved_run

    shutil.copytree(seed_folder() / "lm", tmp_path / "lm")
    _edit_state(latest_checkpoint(tmp_path / "lm" / "checkpoints"), edit)
    with pytest.raises(CheckpointError, match=match):
        read_saved_run(tmp_path / "lm")


@pytest.mark.parametrize("part, key, value", [("numpy", "pos", float("inf")), ("numpy", "key", ""),
                                              ("python", "state", ""), ("python", "gauss", "x")])
def test_rng_states_numpy_and_python_would_fail_on(part, key, value):
    """Was: OverflowError (an infinite position) and IndexError (an empty key) out of numpy's set_state."""
    from attnkit.checkpoints.rng import capture_rng_state, restore_rng_state

    state = capture_rng_state()
    state[part][key] = value
    with pytest.raises(ValueError, match=f"RNG state '{part}' is malformed"):
        restore_rng_state(state)
    restore_rng_state(capture_rng_state())  # a good state still restores


@pytest.mark.parametrize("part, key", [("python", "gauss"), ("numpy", "pos")])
def test_a_rng_state_without_a_key_says_which_one_it_lacks(part, key):
    """Was: "RNG state 'python' is malformed: 'gauss'" (the text of the KeyError)."""
    from attnkit.checkpoints.rng import capture_rng_state, restore_rng_state

    state = capture_rng_state()
    del state[part][key]
    with pytest.raises(ValueError, match=f"^RNG state '{part}' is malformed: it lacks '{key}'$"):
        restore_rng_state(state)
