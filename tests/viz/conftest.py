"""Fixtures for the attnkit.viz tests: tiny models with spread-out random weights and tiny checkpoints.

(``--import-mode=importlib``: helpers are handed out as fixtures, not imported from here.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnkit.models import build_model
from helpers import spread_weights, tiny_gpt_config, tiny_transformer_config

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(4321)  # (one thread: tests/conftest.py sets it for every test)
    yield


def _spread(model: torch.nn.Module, std: float = 0.3, seed: int = 0) -> torch.nn.Module:
    """Redraw every parameter so attention weights are far from uniform (training init gives near-uniform maps)."""
    return spread_weights(model, std=std, seed=seed)


# The shared tiny configs (tests/helpers.py) with the viz tests' vocabularies and lengths, which their labels use.
VIZ_GPT = dict(vocab_size=41, block_size=16)
VIZ_TRANSFORMER = dict(src_vocab_size=37, tgt_vocab_size=29, max_len=32, pad_id=0)


@pytest.fixture
def make_gpt():
    def make(kind: str = "gpt2", **overrides):
        return _spread(build_model(tiny_gpt_config(kind, **(VIZ_GPT | overrides)))).eval()

    return make


@pytest.fixture
def make_transformer():
    def make(**overrides):
        return _spread(build_model(tiny_transformer_config(**(VIZ_TRANSFORMER | overrides)))).eval()

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
    from attnkit.checkpoints.checkpoint import save_checkpoint

    return save_checkpoint(path, model, state={"model_config": model.config.to_dict()},
                           extra={"kind": kind, "tokenizer": tokenizer.to_dict()}, include_rng=False)


@pytest.fixture(scope="session")
def lm_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint folder of a tiny character-level GPT (random weights) with its tokenizer."""
    from attnkit.data.tokenizers.char_tokenizer import CharTokenizer

    tok = CharTokenizer.train("abcdefghijklmnopqrstuvwxyz ,.:!?\nROMEOJULIET")
    cfg = tiny_gpt_config(vocab_size=tok.vocab_size, block_size=32)
    torch.manual_seed(0)
    model = _spread(build_model(cfg))
    return _save(tmp_path_factory.mktemp("lm") / "ckpt", model, tok, "lm")


@pytest.fixture(scope="session")
def mt_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint folder of a tiny encoder-decoder (random weights) with a joint BPE tokenizer."""
    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer

    text = ["das haus ist gross", "the house is big", "der hund ist klein", "the dog is small"] * 5
    tok = BPETokenizer.train(text, 280, special_tokens=["<pad>", "<bos>", "<eos>", "<unk>"])
    cfg = tiny_transformer_config(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, max_len=40,
                                  pad_id=tok.pad_id)
    torch.manual_seed(0)
    model = _spread(build_model(cfg))
    return _save(tmp_path_factory.mktemp("mt") / "ckpt", model, tok, "mt")
