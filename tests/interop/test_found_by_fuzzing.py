"""Models from elsewhere: the regressions of the loader bugs that fuzzing found in GGUF files and Hugging Face
folders (``tests/reliability/test_fuzz.py`` runs ``interop.load.load_model`` on hypothesis-drawn mutations of a real GGUF
file and HF folder: headers with huge counts, lengths, dimensions and offsets, configs whose sizes disagree with
the weights, JSON with wrong types, NaN, deep nesting). Each test names what happened before the fix.
"""

import json
import shutil
import struct

import pytest

from attnkit.interop.gguf import gguf_layout, gguf_tokenizer, read_gguf
from attnkit.interop.load import load_model
from benchmarks.fuzz_loaders import seed_folder


@pytest.fixture()
def gguf_copy(tmp_path):
    path = tmp_path / "model.gguf"
    shutil.copyfile(seed_folder() / "model.gguf", path)
    return path


def _field(path, key):
    return next(f for f in gguf_layout(path).fields if f[0] == key)


def _put(path, offset, fmt, value):
    data = bytearray(path.read_bytes())
    struct.pack_into("<" + fmt, data, offset, value)
    path.write_bytes(bytes(data))


def test_a_gguf_array_that_claims_more_items_than_the_file_holds(gguf_copy):
    """Was: gguf.GGUFReader looped over 2**62 items past the end of the file, growing a list (a hang that ate
    memory); now the header walk refuses the count before the reader runs."""
    _, _, _, value_at = _field(gguf_copy, "tokenizer.ggml.token_type")  # an array of int32
    _put(gguf_copy, value_at + 4, "Q", 2**62)
    with pytest.raises(ValueError, match=r"\(4611686018427387904 items\) needs"):
        read_gguf(gguf_copy)


@pytest.mark.parametrize("offset, fmt, value, match", [
    (8, "Q", 2**40, "tensor descriptions needs"),  # the tensor count
    (16, "Q", 2**63, "key/value pairs needs"),  # the key/value count
])
def test_gguf_counts_past_the_end_of_the_file(gguf_copy, offset, fmt, value, match):
    _put(gguf_copy, offset, fmt, value)
    with pytest.raises(ValueError, match=match):
        read_gguf(gguf_copy)


def test_a_gguf_tensor_whose_data_lies_past_the_end(gguf_copy):
    name, dims_at, dims, _, _ = gguf_layout(gguf_copy).tensors[0]
    _put(gguf_copy, dims_at + 4, "Q", 2**40)  # its first dimension
    with pytest.raises(ValueError, match="truncated or corrupt: tensor"):
        read_gguf(gguf_copy)


@pytest.mark.parametrize("key, value, match", [
    ("llama.block_count", 2**31, "block_count is 2147483648, but the file holds only"),  # was: minutes of layers
    ("llama.context_length", 2**31, "position tables for length 2147483648"),  # was: 2**31 x D rotary tables
    ("llama.attention.head_count", 0, "head_count' must be an integer >= 1"),  # was: ZeroDivisionError
])
def test_gguf_metadata_sizes(gguf_copy, key, value, match):
    _, _, _, value_at = _field(gguf_copy, key)
    _put(gguf_copy, value_at, "I", value)
    with pytest.raises(ValueError, match=match):
        load_model(str(gguf_copy))


def test_gguf_metadata_of_the_wrong_type(gguf_copy):
    """Was: ZeroDivisionError: head_count's value type changed to float32 read 2 as 2.8e-45, int() made it 0."""
    _, _, type_at, _ = _field(gguf_copy, "llama.attention.head_count")
    _put(gguf_copy, type_at, "I", 6)  # float32
    with pytest.raises(ValueError, match="head_count' must be an integer >= 1, got 2.8"):
        load_model(str(gguf_copy))


def test_a_gguf_merge_whose_result_is_not_in_the_vocabulary():
    """Was: the tokenizers library's bare Exception ("Token `ab` out of vocabulary")."""
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b"], "tokenizer.ggml.merges": ["a b"]}
    with pytest.raises(ValueError, match="the GGUF tokenizer cannot be built"):
        gguf_tokenizer(meta)


@pytest.fixture()
def hf_copy(tmp_path):
    folder = tmp_path / "hf"
    shutil.copytree(seed_folder() / "hf_llama", folder)
    return folder


def _edit_config(folder, key, value, name="config.json"):
    config = json.loads((folder / name).read_text())
    config[key] = value
    (folder / name).write_text(json.dumps(config))


@pytest.mark.parametrize("key, value, match", [
    ("hidden_size", {"a": 1}, "'hidden_size' must be an integer"),  # was: TypeError from int()
    ("rms_norm_eps", float("inf"), "'rms_norm_eps' must be a finite number"),  # was: OverflowError
    ("num_hidden_layers", 2**40, "but the checkpoint holds only"),  # was: meta layers for minutes
    ("intermediate_size", 2**63, "cannot be built"),  # was: TypeError (Overflow when unpacking long long)
    ("max_position_embeddings", 2**31, "position tables for length 2147483648"),  # was: huge rotary tables
    ("rope_scaling", "linear", "'rope_scaling' must be an object"),  # was: AttributeError
    ("model_type", ["llama"], "unsupported Hugging Face model_type"),  # was: TypeError (unhashable)
    ("tie_word_embeddings", "no", "'tie_word_embeddings' must be true or false"),  # was: bool("no") = True
])
def test_hf_config_values(hf_copy, key, value, match):
    _edit_config(hf_copy, key, value)
    with pytest.raises(ValueError, match=match):
        load_model(str(hf_copy))


@pytest.mark.parametrize("text", [b"\xff\xfe{}", b"[" * 100_000])
def test_hf_config_json_that_does_not_parse(hf_copy, text):
    """Was: UnicodeDecodeError and RecursionError escaping load_hf_folder."""
    (hf_copy / "config.json").write_bytes(text)
    with pytest.raises(ValueError, match="config.json is not valid UTF-8 JSON"):
        load_model(str(hf_copy))


def test_hf_tokenizer_files(hf_copy):
    """Was: a bare Exception from the tokenizers library, and AttributeError for a tokenizer_config.json that
    holds a list."""
    (hf_copy / "tokenizer_config.json").write_text("[1]")
    with pytest.raises(ValueError, match="tokenizer_config.json must hold a JSON object"):
        load_model(str(hf_copy))
    (hf_copy / "tokenizer_config.json").unlink()
    (hf_copy / "tokenizer.json").write_text('{"version": "1.0", "model": 5}')
    with pytest.raises(ValueError, match="tokenizer.json is not a tokenizers JSON file"):
        load_model(str(hf_copy))
