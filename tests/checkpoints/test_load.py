"""load(): a checkpoint's model and its tokenizer come back together, or not at all."""

from __future__ import annotations

import importlib
import shutil

import pytest
import torch

from attnkit.checkpoints.checkpoint import CheckpointError, save_checkpoint
from attnkit.checkpoints.load import load
from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.models.builders import build_model
from attnkit.models.configs import GPTConfig, TransformerConfig

TOKENIZER = CharTokenizer.train("abcdefghijklmnopqrstuvwxyz .,")  # 29 tokens


def _save(folder, config, kind):
    save_checkpoint(folder, build_model(config), state={"model_config": config.to_dict(), "step": 1},
                    extra={"kind": kind, "tokenizer": TOKENIZER.to_dict()})
    return folder


def test_a_padded_vocabulary_loads(tmp_path):
    config = GPTConfig(vocab_size=64, block_size=8, n_layer=1, n_head=2, n_embd=8)
    loaded = load(_save(tmp_path / "ck", config, "lm"))
    assert loaded.tokenizer.vocab_size == 29 and loaded.model.config.vocab_size == 64


@pytest.mark.parametrize("config, kind, key", [
    (GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=8), "lm", "vocab_size"),
    (TransformerConfig(src_vocab_size=40, tgt_vocab_size=20, d_model=8, num_heads=2, num_encoder_layers=1,
                       num_decoder_layers=1, dim_feedforward=16, max_len=16), "mt", "tgt_vocab_size"),
], ids=["lm", "mt"])
def test_a_tokenizer_with_more_tokens_than_the_model_has_embeddings_is_refused(tmp_path, config, kind, key):
    """Was: loaded, then failed on the first prompt holding a token past the embeddings (a prompt of the first
    letters worked)."""
    ckpt = _save(tmp_path / "ck", config, kind)
    with pytest.raises(CheckpointError, match=rf"extra.tokenizer has 29 tokens but the model_config's {key} is "
                                              rf"{getattr(config, key)}: they do not belong together"):
        load(ckpt)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_model_saved_in_half_precision_comes_back_in_it(tmp_path, dtype):
    """Was: rebuilt in float32, twice the memory, and its outputs not those of the model that was saved."""
    config = GPTConfig(vocab_size=29, block_size=8, n_layer=1, n_head=4, n_kv_head=2, n_embd=16, norm="rmsnorm",
                       position="rope", activation="swiglu", bias=False, tie_embeddings=False)
    torch.manual_seed(0)
    model = build_model(config).to(dtype).eval()
    save_checkpoint(tmp_path / "ck", model, state={"model_config": config.to_dict(), "step": 1},
                    extra={"kind": "lm", "tokenizer": TOKENIZER.to_dict()})
    loaded = load(tmp_path / "ck").model
    assert {p.dtype for p in loaded.parameters()} == {dtype}
    ids = torch.tensor([[1, 2, 3, 4]])  # (B, T)
    assert torch.equal(loaded(ids), model(ids))


def test_a_sharded_step_checkpoint_is_named_as_one(tmp_path):
    """Was: "model.safetensors is corrupt or truncated: No such file or directory" (the dtype of its weights was read
    before anything said it was sharded): a stopped FSDP run's best/ and step checkpoints are sharded."""
    import json
    import shutil

    from attnkit.checkpoints.averaging import average_checkpoints

    ckpt = _save(tmp_path / "ck", GPTConfig(vocab_size=29, block_size=8, n_layer=1, n_head=2, n_embd=8), "lm")
    state = json.loads((ckpt / "state.json").read_text())
    (ckpt / "state.json").write_text(json.dumps(state | {"sharded": True, "world_size": 2}))
    (ckpt / "model.safetensors").unlink()
    (ckpt / "dcp").mkdir()  # what save_sharded writes in its place
    shutil.copytree(ckpt, tmp_path / "ck2")
    message = r"ck2? is a sharded \(FSDP\) checkpoint: resume it with --fsdp under torchrun, or turn it into an " \
              r"ordinary one with `attnkit convert .*ck2? OUT`"
    with pytest.raises(CheckpointError, match=message):
        load(ckpt)
    with pytest.raises(CheckpointError, match=message):
        average_checkpoints([ckpt, tmp_path / "ck2"], tmp_path / "avg")



# the module (``attnkit.checkpoints.load`` the attribute is the function)
LOAD_MODULE = importlib.import_module("attnkit.checkpoints.load")
TINY = GPTConfig(vocab_size=29, block_size=8, n_layer=1, n_head=2, n_embd=8)


def _save_seeded(folder, seed, step):
    """A checkpoint of a tiny GPT drawn with ``seed`` at ``step`` in ``folder``; returns the model."""
    torch.manual_seed(seed)
    model = build_model(TINY)
    save_checkpoint(folder, model, state={"model_config": TINY.to_dict(), "step": step},
                    extra={"kind": "lm", "tokenizer": TOKENIZER.to_dict()})
    return model


def _meanwhile(monkeypatch, action):
    """Run ``action(ckpt)`` once, when load() has read ``ckpt``'s state.json and is about to read its weights (the
    moment a training run publishes or prunes a checkpoint in the race); returns the list of folders read."""
    real, calls = LOAD_MODULE.read_checkpoint_state, []

    def read_checkpoint_state(ckpt):
        state = real(ckpt)
        calls.append(ckpt.name)
        if len(calls) == 1:
            action(ckpt)
        return state

    monkeypatch.setattr(LOAD_MODULE, "read_checkpoint_state", read_checkpoint_state)
    return calls


def test_a_best_checkpoint_replaced_while_it_is_read_is_read_again_whole(tmp_path, monkeypatch):
    """Was: state.json of step 1 with the weights of step 2 (a run that is training published a new best/ between
    the two reads), silently: `sample --ckpt RUN` and `eval lm --ckpt RUN` while the run trains."""
    best = tmp_path / "run" / "checkpoints" / "best"
    _save_seeded(best, seed=0, step=1)
    newer = {}
    calls = _meanwhile(monkeypatch, lambda ckpt: newer.update(model=_save_seeded(best, seed=1, step=2)))
    loaded = load(tmp_path / "run")
    assert loaded.state["step"] == 2 and calls == ["best", "best"]
    want = newer["model"].state_dict()
    assert all(torch.equal(t, want[name]) for name, t in loaded.model.state_dict().items())


def test_a_step_checkpoint_pruned_while_it_is_read_gives_the_next_one(tmp_path, monkeypatch):
    """Was: "step_00000001/model.safetensors is corrupt or truncated: No such file or directory" (the run pruned
    it while a reader of its latest checkpoint read it)."""
    ckpts = tmp_path / "run" / "checkpoints"
    _save_seeded(ckpts / "step_00000001", seed=0, step=1)

    def save_and_prune(ckpt):
        _save_seeded(ckpts / "step_00000002", seed=1, step=2)
        shutil.rmtree(ckpt)

    calls = _meanwhile(monkeypatch, save_and_prune)
    loaded = load(tmp_path / "run", prefer="latest")
    assert loaded.path.name == "step_00000002" and loaded.state["step"] == 2
    assert calls == ["step_00000001", "step_00000002"]


def test_a_damaged_checkpoint_that_stays_in_place_is_refused_at_the_first_read(tmp_path, monkeypatch):
    """Reading again is for a checkpoint that moved while it was read, not for one that is damaged."""
    best = tmp_path / "run" / "checkpoints" / "best"
    _save_seeded(best, seed=0, step=1)
    (best / "model.safetensors").write_bytes(b"junk")
    calls = _meanwhile(monkeypatch, lambda ckpt: None)
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load(tmp_path / "run")
    assert calls == ["best"]


def test_a_best_checkpoint_between_its_two_renames_is_not_taken_for_missing(tmp_path, monkeypatch):
    """Was: the latest step checkpoint in the place of best/, silently, when the run was publishing a new best/ (the
    old one moved aside to best.old, the new one not yet in place) just as the run folder was resolved."""
    ckpts = tmp_path / "run" / "checkpoints"
    _save_seeded(ckpts / "step_00000005", seed=0, step=5)
    _save_seeded(ckpts / "best", seed=1, step=3)
    real, calls = LOAD_MODULE.resolve_checkpoint, []

    def resolve_checkpoint(path, **kw):
        calls.append(path)
        if len(calls) > 1:
            return real(path, **kw)
        (ckpts / "best").rename(ckpts / "best.old")  # publish_folder's first rename ...
        try:
            return real(path, **kw)
        finally:
            (ckpts / "best.old").rename(ckpts / "best")  # ... and (here, the same folder) its second

    monkeypatch.setattr(LOAD_MODULE, "resolve_checkpoint", resolve_checkpoint)
    loaded = load(tmp_path / "run")
    assert loaded.path.name == "best" and loaded.state["step"] == 3
