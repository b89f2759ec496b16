"""load(): a checkpoint's model and its tokenizer come back together, or not at all."""

from __future__ import annotations

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
