"""Damaged checkpoints, fuzzed (hypothesis): bytes changed in the safetensors header, files cut anywhere,
state.json cut anywhere. Loading must give the weights or one ``CheckpointError`` (a ValueError) naming the
file, never another exception, and never run code (nothing is unpickled).
"""

import shutil
import tempfile
from pathlib import Path

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from attnkit.checkpoints.checkpoint import CheckpointError, load_checkpoint, read_checkpoint_state, save_checkpoint

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)
CONFIG = GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8)
FOLDER = tempfile.TemporaryDirectory(prefix="attnkit-ckpt-fuzz-")
GOOD = save_checkpoint(Path(FOLDER.name) / "good", GPT(CONFIG), state={"step": 1})
WEIGHTS = (GOOD / "model.safetensors").read_bytes()
HEADER = 8 + int.from_bytes(WEIGHTS[:8], "little")  # the 8-byte length and the JSON header


def _load(mutate_file: str, data: bytes) -> None:
    ckpt = Path(FOLDER.name) / "damaged"
    shutil.rmtree(ckpt, ignore_errors=True)
    shutil.copytree(GOOD, ckpt)
    (ckpt / mutate_file).write_bytes(data)
    try:
        read_checkpoint_state(ckpt)
        load_checkpoint(ckpt, GPT(CONFIG))
    except CheckpointError as e:
        assert str(ckpt) in str(e)


@SETTINGS
@given(st.integers(0, HEADER - 1), st.integers(0, 255))
def test_a_byte_changed_in_the_header(offset, value):
    data = bytearray(WEIGHTS)
    data[offset] = value
    _load("model.safetensors", bytes(data))


@SETTINGS
@given(st.integers(0, len(WEIGHTS) - 1))
def test_weights_cut_anywhere(length):
    _load("model.safetensors", WEIGHTS[:length])


@SETTINGS
@given(st.data())
def test_state_json_cut_anywhere(data):
    text = (GOOD / "state.json").read_bytes()
    _load("state.json", text[:data.draw(st.integers(0, len(text) - 1))])


def test_the_untouched_checkpoint_loads():
    model = GPT(CONFIG)
    load_checkpoint(GOOD, model)
    assert all(torch.isfinite(p).all() for p in model.parameters())
