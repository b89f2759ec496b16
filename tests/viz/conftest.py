"""Fixtures for the attnkit.viz tests: tiny models with spread-out random weights and tiny checkpoints.

(``--import-mode=importlib``: helpers are handed out as fixtures, not imported from here.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnkit.models import GPTConfig, TransformerConfig, build_model
from helpers import spread_weights

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(4321)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _spread(model: torch.nn.Module, std: float = 0.3, seed: int = 0) -> torch.nn.Module:
    """Redraw every parameter so attention weights are far from uniform (training init gives near-uniform maps)."""
    return spread_weights(model, std=std, seed=seed)


def _gpt_config(kind: str = "gpt2", **overrides) -> GPTConfig:
    if kind == "gpt2":
        base = dict(vocab_size=41, block_size=16, n_layer=2, n_head=4, n_embd=32)
    elif kind == "llama":  # RoPE, RMSNorm, SwiGLU, grouped-query attention 4:2, no bias, untied
        base = dict(vocab_size=41, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=48,
                    activation="swiglu", norm="rmsnorm", bias=False, position="rope", tie_embeddings=False)
    else:
        raise ValueError(kind)
    base.update(overrides)
    return GPTConfig(**base)


@pytest.fixture
def make_gpt():
    def make(kind: str = "gpt2", **overrides):
        return _spread(build_model(_gpt_config(kind, **overrides))).eval()

    return make


@pytest.fixture
def make_transformer():
    def make(**overrides):
        base = dict(src_vocab_size=37, tgt_vocab_size=29, d_model=32, num_heads=4, num_encoder_layers=2,
                    num_decoder_layers=2, dim_feedforward=48, dropout=0.0, max_len=32, pad_id=0)
        base.update(overrides)
        return _spread(build_model(TransformerConfig(**base))).eval()

    return make


@pytest.fixture
def is_png():
    """Check a file is a non-empty PNG and return its (width, height) from the IHDR chunk."""

    def check(path: Path) -> tuple[int, int]:
        data = Path(path).read_bytes()
        assert len(data) > 0
        assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG (starts with {data[:8]!r})"
        assert data[12:16] == b"IHDR"
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert width > 0 and height > 0
        return width, height

    return check


def _save(path: Path, model, tokenizer, kind: str) -> Path:
    from attnkit.training.checkpoint import save_checkpoint

    return save_checkpoint(path, model, state={"model_config": model.config.to_dict()},
                           extra={"kind": kind, "tokenizer": tokenizer.to_dict()}, include_rng=False)


@pytest.fixture(scope="session")
def lm_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint folder of a tiny character-level GPT (random weights) with its tokenizer."""
    from attnkit.data.char_tokenizer import CharTokenizer

    tok = CharTokenizer.train("abcdefghijklmnopqrstuvwxyz ,.:!?\nROMEOJULIET")
    cfg = _gpt_config(vocab_size=tok.vocab_size, block_size=32)
    torch.manual_seed(0)
    model = _spread(build_model(cfg))
    return _save(tmp_path_factory.mktemp("lm") / "ckpt", model, tok, "lm")


@pytest.fixture(scope="session")
def mt_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint folder of a tiny encoder-decoder (random weights) with a joint BPE tokenizer."""
    from attnkit.data.bpe_tokenizer import BPETokenizer

    text = ["das haus ist gross", "the house is big", "der hund ist klein", "the dog is small"] * 5
    tok = BPETokenizer.train(text, 280, special_tokens=["<pad>", "<bos>", "<eos>", "<unk>"])
    cfg = TransformerConfig(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, d_model=32, num_heads=4,
                            num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=48, dropout=0.0, max_len=40,
                            pad_id=tok.pad_id)
    torch.manual_seed(0)
    model = _spread(build_model(cfg))
    return _save(tmp_path_factory.mktemp("mt") / "ckpt", model, tok, "mt")
