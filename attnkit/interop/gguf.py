"""GGUF -> attnkit: read a llama.cpp model file into a Hugging Face Llama checkpoint, then into attnkit's GPT.

GGUF is the single-file format of llama.cpp: a header of typed key/value metadata (architecture sizes,
the tokenizer's vocabulary and merges, a chat template), a table of tensor descriptions, then the tensor
data, often quantized (e.g. ``Q4_1``: blocks of 32 weights stored as 4-bit integers plus a float16 scale
and minimum per block). Reading one takes four steps, one function each:

1. :func:`check_gguf_file` -- is this really a complete GGUF file? (A pickle is refused, see below.)
2. :func:`gguf_to_hf_config` -- metadata ``llama.*`` -> an HF ``LlamaConfig``-style dict.
3. :func:`gguf_to_hf_state_dict` -- dequantize every tensor to float, undo the row permutation that
   llama.cpp's converter applies to the query/key projections, rename ``blk.N.attn_q`` ->
   ``model.layers.N.self_attn.q_proj`` and so on: the result loads into ``transformers.LlamaForCausalLM``.
4. :func:`gguf_tokenizer` -- the byte-level BPE tokenizer rebuilt from ``tokenizer.ggml.*`` as a
   ``tokenizers.Tokenizer`` wrapped in attnkit's :class:`~attnkit.data.tokenizers.bpe_tokenizer.BPETokenizer`.

:func:`load_gguf` runs all of them and returns a :class:`GGUFCheckpoint`; :func:`gguf_to_gpt` goes one step
further and builds attnkit's :class:`~attnkit.models.gpt.GPT` through :func:`attnkit.interop.hf.from_hf`
(the one HF-Llama -> attnkit mapping; GGUF only has to produce HF names).

Why the Q/K permutation? Rotary embeddings rotate *pairs* of channels. HF Llama pairs channel ``i`` with
``i + D/2`` ("rotate_half"); GGML's rope kernel pairs ``2i`` with ``2i + 1``. So when llama.cpp converts an
HF checkpoint it reorders the rows of ``q_proj`` and ``k_proj`` inside every head, from
``[x_0 .. x_{D/2-1}, y_0 .. y_{D/2-1}]`` to ``[x_0, y_0, x_1, y_1, ...]``; attention scores are unchanged
because q and k are permuted the same way. :func:`unpermute_rotary_rows` puts them back.

Safety: weights are data, and data must not run code. A pickle file (PyTorch ``.bin``/``.pt``) can execute
arbitrary code when loaded, so :func:`check_gguf_file` refuses it instead of unpickling it.

Axis legend: ``C`` model width, ``H`` query heads, ``K`` key/value heads, ``D`` head dim,
``F`` feed-forward width, ``V`` vocabulary, ``L`` layers.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "GGUF_MAGIC",
    "SUPPORTED_ARCHITECTURES",
    "SUPPORTED_TENSOR_TYPES",
    "SUPPORTED_PRE_TOKENIZERS",
    "GGUFCheckpoint",
    "check_gguf_file",
    "GGUFLayout",
    "gguf_layout",
    "read_gguf",
    "gguf_metadata",
    "gguf_to_hf_config",
    "gguf_to_hf_name",
    "unpermute_rotary_rows",
    "dequantize_tensor",
    "gguf_to_hf_state_dict",
    "gguf_tokenizer",
    "load_gguf",
    "gguf_to_gpt",
]

GGUF_MAGIC = b"GGUF"
SUPPORTED_ARCHITECTURES = ("llama",)

# Tensor types we dequantize. All are handled by `gguf.quants.dequantize` (NumPy); we list them explicitly
# so that an exotic type (ternary TQ1_0, the IQ* importance quants, MXFP4, ...) fails loudly by name
# rather than in some corner of a kernel. F32/F16/BF16 are plain floats; Q4_0..Q8_0 are 32-weight blocks
# with one scale (and a minimum for the *_1 kinds); Q2_K..Q6_K are 256-weight "k-quant" super-blocks.
SUPPORTED_TENSOR_TYPES = (
    "F32", "F16", "BF16",
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
)

# llama.cpp's pre-tokenizer names (metadata `tokenizer.ggml.pre`) -> (regexes applied in order, ignore_merges).
# The text is cut by each regex in turn ("isolated" pieces), then every piece is turned into byte-characters.
_GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_LLAMA3_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
_PRE_TOKENIZERS: dict[str, tuple[tuple[str, ...], bool]] = {
    "gpt-2": ((_GPT2_SPLIT,), False),
    # SmolLM: every digit is its own piece first, then GPT-2's regex.
    "smollm": ((r"\p{N}", _GPT2_SPLIT), False),
    # Llama 3: digits in groups of up to three; whole words found in the vocabulary skip the merges.
    "llama-bpe": ((_LLAMA3_SPLIT,), True),
    "llama3": ((_LLAMA3_SPLIT,), True),
}
SUPPORTED_PRE_TOKENIZERS = tuple(_PRE_TOKENIZERS)
# llama.cpp (llama-vocab.cpp) puts <bos> in front of prompts for its LLAMA3 pre-tokenizer group when the file has no
# tokenizer.ggml.add_bos_token (Llama 3 conversions write none); for the others the default is no <bos>.
_ADD_BOS_BY_DEFAULT = ("llama-bpe", "llama3")

# GGUF token types (llama.cpp's llama_token_type)
_TOKEN_NORMAL, _TOKEN_UNKNOWN, _TOKEN_CONTROL, _TOKEN_USER_DEFINED = 1, 2, 3, 4

# GGUF tensor name (with N = layer) -> HF LlamaForCausalLM name
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_LAYER_RE = re.compile(r"^blk\.(\d+)\.(.+)$")


# ----------------------------------------------------------------------------------------------------------
# 1. is it a GGUF file?
# ----------------------------------------------------------------------------------------------------------

def _looks_like_pickle(path: Path, head: bytes) -> str | None:
    """A human-readable description if the file is a pickle (or a PyTorch zip holding one), else None."""
    # Pickle protocol 2+ starts with the PROTO opcode 0x80 followed by the protocol number.
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return f"a Python pickle (protocol {head[1]})"
    if head[:4] == b"PK\x03\x04":  # zip: torch.save() writes a zip archive whose data.pkl is a pickle
        try:
            with zipfile.ZipFile(path) as zf:
                if any(n.endswith(".pkl") for n in zf.namelist()):
                    return "a PyTorch checkpoint (a zip archive containing a pickle, as written by torch.save)"
        except zipfile.BadZipFile:
            pass
    return None


def check_gguf_file(path: str | os.PathLike) -> Path:
    """Check that ``path`` is a GGUF file before parsing it; return it as a ``Path``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is a pickle (refused: unpickling runs arbitrary code), or does not start with the
            GGUF magic bytes ``b"GGUF"``. Truncation is detected later, by :func:`read_gguf`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    with open(path, "rb") as f:
        head = f.read(8)
    pickled = _looks_like_pickle(path, head)
    if pickled is not None:
        raise ValueError(
            f"{path} is {pickled}, not a GGUF file. attnkit refuses to load pickled weights: unpickling can run "
            "arbitrary code hidden in the file. Convert the checkpoint to safetensors or GGUF with the tool you "
            "trust, and load that instead."
        )
    if head[:4] != GGUF_MAGIC:
        raise ValueError(f"{path} is not a GGUF file: expected the magic bytes {GGUF_MAGIC!r} at offset 0, "
                         f"got {head[:4]!r} (file size {path.stat().st_size} bytes)")
    return path


# The GGUF header, for checking it before ``gguf.GGUFReader`` parses it (the reader trusts every count it
# reads: an array that claims 2**63 one-byte items past the end of the file keeps it looping and growing).
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NESTING = 4  # arrays of arrays of ...: deeper than any writer goes


@dataclass
class GGUFLayout:
    """Where each part of a GGUF header lies (byte offsets into the file), from :func:`gguf_layout`.

    Attributes:
        byte_order: ``"<"`` or ``">"``.
        fields: per key/value pair ``(key, value type, offset of the value type, offset of the value)``; for an
            array the value starts with its item type (4 bytes) and count (8 bytes).
        tensors: per tensor ``(name, offset of its n_dims, dims, GGML type, data offset relative to
            data_start)``; the dims follow n_dims, then the type (4 bytes) and the data offset (8 bytes).
        data_start: where the tensor data begins (after the alignment padding).
        size: the file's size in bytes.
    """

    byte_order: str
    fields: list[tuple[str, int, int, int]]
    tensors: list[tuple[str, int, tuple[int, ...], int, int]]
    data_start: int
    size: int


class _HeaderCursor:
    """Reads a GGUF header front to back, refusing any count or length that runs past the end of the file."""

    def __init__(self, buf: Any, path: Path, byte_order: str):
        self.buf, self.path, self.order, self.pos = buf, path, byte_order, 0

    def fail(self, what: str) -> ValueError:
        return ValueError(f"{self.path} is not a valid GGUF file ({len(self.buf)} bytes): {what} (at byte {self.pos}); "
                          "the file is probably truncated or corrupt")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise self.fail(f"{what} needs {n} bytes, but only {len(self.buf) - self.pos} remain")

    def scalar(self, fmt: str, what: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size, what)
        (value,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self, what: str) -> bytes:
        n = self.scalar("Q", what + " length")
        self.need(n, what)
        self.pos += n
        return bytes(self.buf[self.pos - n:self.pos])

    def skip_value(self, vtype: int, what: str, depth: int = 0) -> None:
        if vtype in _SCALAR_FORMATS:
            self.need(struct.calcsize(_SCALAR_FORMATS[vtype]), what)
            self.pos += struct.calcsize(_SCALAR_FORMATS[vtype])
        elif vtype == _STRING:
            n = self.scalar("Q", what + " length")
            self.need(n, what)
            self.pos += n
        elif vtype == _ARRAY:
            if depth >= _MAX_NESTING:
                raise self.fail(f"{what} nests arrays more than {_MAX_NESTING} deep")
            itype, count = self.scalar("I", what + " item type"), self.scalar("Q", what + " count")
            if itype in _SCALAR_FORMATS:  # fixed-size items: check the whole array at once
                self.need(count * struct.calcsize(_SCALAR_FORMATS[itype]), f"{what} ({count} items)")
                self.pos += count * struct.calcsize(_SCALAR_FORMATS[itype])
                return
            self.need(count * 8 if itype == _STRING else count * 12, f"{what} ({count} items)")  # smallest items
            for _ in range(count):
                self.skip_value(itype, what + " item", depth + 1)
        else:
            raise self.fail(f"{what} has the unknown value type {vtype}")


def gguf_layout(path: str | os.PathLike) -> GGUFLayout:
    """Walk the header of the GGUF file ``path`` without trusting it: every count, length, type and tensor
    extent is checked against the file before anything is allocated for it.

    Raises:
        ValueError: an unknown version, value type or tensor type, more than 4 dimensions, a count or length
            that runs past the end of the file, or tensor data that lies outside it; the message names the
            file and the byte offset.
    """
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    path = check_gguf_file(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 24:
            raise ValueError(f"{path} is not a complete GGUF file: {size} bytes, shorter than the 24-byte header")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            (version,) = struct.unpack_from("<I", buf, 4)
            order = ">" if version & 0xFFFF == 0 else "<"  # a file written on a big-endian machine
            cur = _HeaderCursor(buf, path, order)
            cur.pos = 4
            version = cur.scalar("I", "version")
            if version not in (2, 3):
                raise cur.fail(f"GGUF version {version} is not supported (expected 2 or 3)")
            n_tensors, n_fields = cur.scalar("Q", "tensor count"), cur.scalar("Q", "key/value count")
            cur.need(n_fields * 12, f"{n_fields} key/value pairs")  # a key length and a value type each, at least
            fields, alignment = [], 32
            for i in range(n_fields):
                key = cur.string(f"key {i}").decode("utf-8", "replace")
                type_at = cur.pos
                vtype = cur.scalar("I", f"the type of {key!r}")
                value_at = cur.pos
                if key == "general.alignment" and vtype == 4:
                    alignment = struct.unpack_from(order + "I", buf, value_at)[0] if value_at + 4 <= size else 0
                cur.skip_value(vtype, f"the value of {key!r}")
                fields.append((key, vtype, type_at, value_at))
            cur.need(n_tensors * 24, f"{n_tensors} tensor descriptions")  # name length, n_dims, type, offset
            tensors = []
            for i in range(n_tensors):
                name = cur.string(f"tensor {i}'s name").decode("utf-8", "replace")
                dims_at = cur.pos
                n_dims = cur.scalar("I", f"tensor {name!r}'s dimension count")
                if n_dims > _MAX_DIMS:
                    raise cur.fail(f"tensor {name!r} has {n_dims} dimensions, at most {_MAX_DIMS} are allowed")
                dims = tuple(cur.scalar("Q", f"tensor {name!r}'s dimensions") for _ in range(n_dims))
                ttype = cur.scalar("I", f"tensor {name!r}'s type")
                offset = cur.scalar("Q", f"tensor {name!r}'s data offset")
                tensors.append((name, dims_at, dims, ttype, offset))
            if alignment == 0 or alignment & (alignment - 1):
                raise cur.fail(f"general.alignment must be a power of two, got {alignment}")
            data_start = -(-cur.pos // alignment) * alignment
    for name, _, dims, ttype, offset in tensors:
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
        except (ValueError, KeyError):
            raise ValueError(f"{path}: tensor {name!r} has the unknown GGML type {ttype}") from None
        n = 1
        for d in dims:
            n *= d
        if dims and dims[0] % block:
            raise ValueError(f"{path}: tensor {name!r} has rows of {dims[0]} values, not a multiple of its type's "
                             f"block of {block}")
        end = data_start + offset + n // block * type_size
        if end > size:
            raise ValueError(f"{path} is truncated or corrupt: tensor {name!r} (shape {list(dims)}) would end at "
                             f"byte {end}, but the file has only {size} bytes")
    return GGUFLayout(order, fields, tensors, data_start, size)


def read_gguf(path: str | os.PathLike):
    """Open a GGUF file with ``gguf.GGUFReader`` (memory-mapped: tensor data is read lazily), after
    :func:`gguf_layout` has checked its header against the file.

    Raises:
        ValueError: not GGUF, a pickle, or truncated/corrupt (the reader's own low-level error is chained).
    """
    import gguf  # imported here so that `import attnkit.interop` stays light

    path = check_gguf_file(path)
    gguf_layout(path)  # every count and extent fits in the file: the reader cannot run away
    size = path.stat().st_size
    try:
        reader = gguf.GGUFReader(path)
    except Exception as err:  # the reader fails with IndexError/ValueError/... deep in NumPy on a cut file
        raise ValueError(
            f"{path} is not a complete GGUF file ({size} bytes): reading its header failed with "
            f"{type(err).__name__}: {err}. The file is probably truncated (an interrupted download?) or corrupt."
        ) from err
    # Every tensor's bytes must lie inside the file (the reader may map a shorter view without complaint).
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise ValueError(f"{path} is truncated: tensor {t.name!r} ends at byte {end}, "
                             f"but the file has only {size} bytes")
    return reader


# ----------------------------------------------------------------------------------------------------------
# 2. metadata -> config
# ----------------------------------------------------------------------------------------------------------

def gguf_metadata(reader) -> dict[str, Any]:
    """All key/value metadata as plain Python values (strings, numbers, bools, lists).

    The reader's own bookkeeping keys (``GGUF.version``, ``GGUF.tensor_count``, ...) are left out.
    """
    out: dict[str, Any] = {}
    for key, fld in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        out[key] = fld.contents()
    return out


def _require(meta: dict[str, Any], key: str) -> Any:
    if key not in meta:
        raise ValueError(f"GGUF metadata is missing the required key {key!r}")
    return meta[key]


def _meta_int(meta: dict[str, Any], key: str, default: Any = None, *, minimum: int = 1) -> int:
    """Metadata ``key`` (``default`` when absent; required when ``default`` is None) as an int >= ``minimum``."""
    value = _require(meta, key) if default is None else meta.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"GGUF metadata {key!r} must be an integer >= {minimum}, got {value!r}")
    return value


def _meta_float(meta: dict[str, Any], key: str, default: float) -> float:
    value = meta.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise ValueError(f"GGUF metadata {key!r} must be a finite number, got {value!r}")
    return float(value)


def _meta_bool(meta: dict[str, Any], key: str, default: bool) -> bool:
    """Metadata ``key`` (``default`` when absent), which must be a GGUF bool: a string ``"false"`` is not false."""
    value = meta.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"GGUF metadata {key!r} must be a bool (true or false), got {value!r}")
    return value


def gguf_to_hf_config(meta: dict[str, Any], *, tensor_names: set[str] | None = None) -> dict[str, Any]:
    """Build a Hugging Face ``LlamaConfig``-style dict from GGUF metadata (keys ``llama.*``, ``tokenizer.ggml.*``).

    Args:
        meta: from :func:`gguf_metadata`.
        tensor_names: the file's tensor names; used to tell tied embeddings (no ``output.weight``) from untied.

    Returns:
        e.g. for SmolLM2-135M ``{"model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30,
        "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "intermediate_size": 1536,
        "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "vocab_size": 49152, ...}``;
        ``transformers.LlamaConfig(**config)`` accepts it.

    Raises:
        ValueError: an architecture other than ``llama``, a missing key, RoPE scaling or partial rotary
            (which attnkit's rotary embedding does not implement).
    """
    arch = _require(meta, "general.architecture")
    if not isinstance(arch, str) or arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"unsupported GGUF architecture {arch!r}; supported: {list(SUPPORTED_ARCHITECTURES)}")
    p = arch + "."
    C = _meta_int(meta, p + "embedding_length")
    H = _meta_int(meta, p + "attention.head_count")
    K = _meta_int(meta, p + "attention.head_count_kv", H)
    D = _meta_int(meta, p + "attention.key_length", max(C // H, 1))
    if _meta_int(meta, p + "attention.value_length", D) != D:
        raise ValueError(f"key and value head sizes must be equal, got key_length {D} and "
                         f"value_length {meta[p + 'attention.value_length']}")
    rot = _meta_int(meta, p + "rope.dimension_count", D)
    if rot != D:
        raise ValueError(f"partial rotary embeddings are not supported: rope.dimension_count must equal the "
                         f"head dim {D}, got {rot}")
    scaling = meta.get(p + "rope.scaling.type", "none")
    if scaling not in ("none", None):
        raise ValueError(f"RoPE scaling is not supported: expected rope.scaling.type 'none', got {scaling!r}")
    if "tokenizer.ggml.tokens" in meta:
        if not isinstance(meta["tokenizer.ggml.tokens"], list):
            raise ValueError(f"GGUF metadata 'tokenizer.ggml.tokens' must be an array of strings, "
                             f"got {meta['tokenizer.ggml.tokens']!r}")
        vocab = len(meta["tokenizer.ggml.tokens"])
    else:
        vocab = _meta_int(meta, p + "vocab_size")
    if p + "vocab_size" in meta and _meta_int(meta, p + "vocab_size") != vocab:
        raise ValueError(f"{p}vocab_size is {meta[p + 'vocab_size']} but the tokenizer has {vocab} tokens")
    theta = _meta_float(meta, p + "rope.freq_base", 10000.0)
    tied = tensor_names is not None and "output.weight" not in tensor_names
    layers = _meta_int(meta, p + "block_count")
    if tensor_names is not None and layers > len(tensor_names):  # every layer has tensors
        raise ValueError(f"GGUF metadata {p}block_count is {layers}, but the file holds only "
                         f"{len(tensor_names)} tensors")
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": C,
        "intermediate_size": _meta_int(meta, p + "feed_forward_length"),
        "num_hidden_layers": layers,
        "num_attention_heads": H,
        "num_key_value_heads": K,
        "head_dim": D,
        "max_position_embeddings": _meta_int(meta, p + "context_length", 2048),
        "rms_norm_eps": _meta_float(meta, p + "attention.layer_norm_rms_epsilon", 1e-5),
        "rope_theta": theta,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
    }
    for role in ("bos", "eos", "padding"):
        key = f"tokenizer.ggml.{role}_token_id"
        if key in meta:
            config[("pad" if role == "padding" else role) + "_token_id"] = _meta_int(meta, key, minimum=0)
    return config


# ----------------------------------------------------------------------------------------------------------
# 3. tensors -> HF state dict
# ----------------------------------------------------------------------------------------------------------

def gguf_to_hf_name(name: str) -> str:
    """``"blk.3.attn_q.weight"`` -> ``"model.layers.3.self_attn.q_proj.weight"``; unknown names raise ValueError."""
    if name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[name]
    m = _LAYER_RE.match(name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    known = sorted(_GLOBAL_NAMES) + [f"blk.N.{k}" for k in _LAYER_NAMES]
    raise ValueError(f"unsupported GGUF tensor {name!r} for a Llama model; expected one of {known}")


def unpermute_rotary_rows(w: np.ndarray | torch.Tensor, n_heads: int):
    """Undo llama.cpp's interleaving of the rows of a query or key projection (see the module docstring).

    Inside each head, GGUF row ``2j + s`` (``s`` in {0, 1}, ``j < D/2``) holds HF row ``s * D/2 + j``.

    Args:
        w: the projection weight in GGUF row order.
        n_heads: ``H`` for the query projection, ``K`` for the key projection.

    Shape:
        w: ``(n_heads * D, C)`` -> ``(n_heads * D, C)``.
    """
    rows = w.shape[0]
    if n_heads < 1 or rows % n_heads or (rows // n_heads) % 2:
        raise ValueError(f"rotary rows must split into n_heads = {n_heads} heads of even size, got {rows} rows")
    D = rows // n_heads
    rest = tuple(w.shape[1:])
    w = w.reshape(n_heads, D // 2, 2, *rest)   # (heads, D/2, 2, C): [h, j, s] = GGUF row 2j + s
    w = w.swapaxes(1, 2)                       # (heads, 2, D/2, C): [h, s, j] = HF row s*D/2 + j
    return w.reshape(rows, *rest)              # (heads * D, C)


def dequantize_tensor(tensor) -> np.ndarray:
    """Float32 values of one GGUF tensor (a ``gguf.ReaderTensor``), in NumPy row-major order.

    GGUF lists dimensions fastest-first (``[C, V]`` for an embedding), so the array has the reversed shape
    (``(V, C)``), which is also PyTorch's ``nn.Linear``/``nn.Embedding`` weight layout.

    Raises:
        ValueError: a tensor type outside :data:`SUPPORTED_TENSOR_TYPES` (named in the message), or
            non-finite values after dequantization.
    """
    from gguf.quants import dequantize

    kind = tensor.tensor_type.name
    if kind not in SUPPORTED_TENSOR_TYPES:
        raise ValueError(f"unsupported GGUF tensor type {kind} for tensor {tensor.name!r}; "
                         f"supported types: {list(SUPPORTED_TENSOR_TYPES)}")
    shape = tuple(int(n) for n in reversed(tensor.shape))
    with np.errstate(invalid="ignore", over="ignore"):  # damaged scales give NaN/inf: refused just below
        if kind == "F32":
            values = np.array(tensor.data, dtype=np.float32)  # copy out of the memory map
        elif kind == "F16":
            values = np.asarray(tensor.data).astype(np.float32)
        else:
            values = dequantize(np.asarray(tensor.data), tensor.tensor_type).astype(np.float32, copy=False)
    values = values.reshape(shape)
    if not np.isfinite(values).all():
        raise ValueError(f"GGUF tensor {tensor.name!r} ({kind}) holds non-finite values after dequantization")
    return values


def gguf_to_hf_state_dict(reader, config: dict[str, Any], *, dtype: torch.dtype = torch.float32,
                          progress: bool = True) -> dict[str, torch.Tensor]:
    """Dequantize and rename every tensor into an HF ``LlamaForCausalLM`` state dict.

    The query/key rows are un-permuted (:func:`unpermute_rotary_rows`). With tied embeddings the dict has
    no ``lm_head.weight`` (as in HF's own safetensors files).

    Shape:
        ``model.embed_tokens.weight`` ``(V, C)``; ``q_proj`` ``(H*D, C)``; ``k_proj``/``v_proj`` ``(K*D, C)``;
        ``o_proj`` ``(C, H*D)``; ``gate_proj``/``up_proj`` ``(F, C)``; ``down_proj`` ``(C, F)``; norms ``(C,)``.

    Raises:
        ValueError: unknown or missing tensors, a tensor of the wrong shape, an unsupported tensor type, a value
            beyond the range of ``dtype`` (named: cast, it would be inf).
    """
    from tqdm.auto import tqdm

    C, H, K, D = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    F, V, L = config["intermediate_size"], config["vocab_size"], config["num_hidden_layers"]
    expected: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    if not config["tie_word_embeddings"]:
        expected["lm_head.weight"] = (V, C)
    for i in range(L):
        pre = f"model.layers.{i}."
        expected.update({
            pre + "input_layernorm.weight": (C,),
            pre + "self_attn.q_proj.weight": (H * D, C),
            pre + "self_attn.k_proj.weight": (K * D, C),
            pre + "self_attn.v_proj.weight": (K * D, C),
            pre + "self_attn.o_proj.weight": (C, H * D),
            pre + "post_attention_layernorm.weight": (C,),
            pre + "mlp.gate_proj.weight": (F, C),
            pre + "mlp.up_proj.weight": (F, C),
            pre + "mlp.down_proj.weight": (C, F),
        })

    # check names and types of every tensor before the slow part
    names = {}
    for t in reader.tensors:
        hf = gguf_to_hf_name(t.name)
        if hf not in expected:
            raise ValueError(f"unexpected GGUF tensor {t.name!r} (as {hf!r}) for a {L}-layer Llama")
        if t.tensor_type.name not in SUPPORTED_TENSOR_TYPES:
            raise ValueError(f"unsupported GGUF tensor type {t.tensor_type.name} for tensor {t.name!r}; "
                             f"supported types: {list(SUPPORTED_TENSOR_TYPES)}")
        names[t.name] = hf
    missing = sorted(set(expected) - set(names.values()))
    if missing:
        raise ValueError(f"the GGUF file lacks {len(missing)} tensors of a {L}-layer Llama, e.g. {missing[:3]}")

    state: dict[str, torch.Tensor] = {}
    for t in tqdm(reader.tensors, desc="dequantizing GGUF", unit="tensor", disable=not progress, leave=False):
        hf = names[t.name]
        w = dequantize_tensor(t)
        if tuple(w.shape) != expected[hf]:
            raise ValueError(f"GGUF tensor {t.name!r} must have shape {expected[hf]} (as {hf}), got {tuple(w.shape)}")
        if hf.endswith("q_proj.weight"):
            w = unpermute_rotary_rows(w, H)
        elif hf.endswith("k_proj.weight"):
            w = unpermute_rotary_rows(w, K)
        big = float(np.abs(w).max()) if w.size and dtype != torch.float32 else 0.0  # (w: finite float32)
        if big > torch.finfo(dtype).max:  # cast, it would be inf: not a damaged file, a dtype too narrow
            raise ValueError(f"GGUF tensor {t.name!r} does not fit dtype={dtype}: expected magnitudes up to its "
                             f"largest finite value {torch.finfo(dtype).max:.6g}, got {big:.6g}; load it in float32 "
                             "or bfloat16")
        state[hf] = torch.from_numpy(np.ascontiguousarray(w)).to(dtype)
    return state


# ----------------------------------------------------------------------------------------------------------
# 4. tokenizer
# ----------------------------------------------------------------------------------------------------------

def gguf_tokenizer(meta: dict[str, Any]):
    """Rebuild the byte-level BPE tokenizer stored in GGUF metadata.

    Uses ``tokenizer.ggml.model`` (must be ``"gpt2"``: byte-level BPE), ``.tokens`` (id -> token), ``.merges``
    (``"a b"`` strings, by priority), ``.token_type`` (control tokens become special tokens, matched literally
    in text), ``.pre`` (the pre-tokenizer, see :data:`SUPPORTED_PRE_TOKENIZERS`) and the bos/eos/pad/unk ids.

    Returns:
        a :class:`~attnkit.data.tokenizers.bpe_tokenizer.BPETokenizer`. It never adds bos/eos by itself; the metadata flag
        ``tokenizer.ggml.add_bos_token`` is reported by :func:`load_gguf` as ``GGUFCheckpoint.add_bos_token``.

    Raises:
        ValueError: another tokenizer model (e.g. ``"llama"`` SentencePiece), an unknown pre-tokenizer,
            duplicate tokens or malformed merges.
    """
    import tokenizers
    from tokenizers import AddedToken, decoders, models, pre_tokenizers

    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer, backend_call

    kind = _require(meta, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(f"unsupported GGUF tokenizer model {kind!r}; only 'gpt2' (byte-level BPE) is supported")
    pre = meta.get("tokenizer.ggml.pre", "gpt-2")
    if not isinstance(pre, str) or pre not in _PRE_TOKENIZERS:
        raise ValueError(f"unsupported GGUF pre-tokenizer {pre!r}; supported: {list(SUPPORTED_PRE_TOKENIZERS)}")
    tokens = _require(meta, "tokenizer.ggml.tokens")
    merges_raw = _require(meta, "tokenizer.ggml.merges")
    types = meta.get("tokenizer.ggml.token_type", [_TOKEN_NORMAL] * len(tokens) if isinstance(tokens, list) else [])
    for key, value, kinds in (("tokens", tokens, str), ("merges", merges_raw, str), ("token_type", types, int)):
        if not isinstance(value, list) or not all(isinstance(v, kinds) and not isinstance(v, bool) for v in value):
            raise ValueError(f"GGUF metadata 'tokenizer.ggml.{key}' must be an array of "
                             f"{kinds.__name__}s, got {str(value)[:80]}")
    if len(types) != len(tokens):
        raise ValueError(f"tokenizer.ggml.token_type must have one entry per token ({len(tokens)}), got {len(types)}")

    vocab = {tok: i for i, tok in enumerate(tokens)}
    if len(vocab) != len(tokens):
        dup = next(t for t, n in Counter(tokens).items() if n > 1)
        raise ValueError(f"tokenizer.ggml.tokens must be distinct, got {len(tokens) - len(vocab)} duplicates, e.g. {dup!r}")
    merges = []
    for i, m in enumerate(merges_raw):
        # byte-level tokens never contain a real space (it is shown as "Ġ"), so one space separates the pair
        parts = m.split(" ")
        if len(parts) != 2 or parts[0] not in vocab or parts[1] not in vocab:
            raise ValueError(f"merge {i} must be two vocabulary tokens separated by one space, got {m!r}")
        merges.append((parts[0], parts[1]))

    splits, ignore_merges = _PRE_TOKENIZERS[pre]
    bpe = backend_call("the GGUF tokenizer cannot be built", models.BPE, vocab=vocab, merges=merges,
                       ignore_merges=ignore_merges)  # e.g. a merge whose result is not in the vocabulary
    backend = tokenizers.Tokenizer(bpe)
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(tokenizers.Regex(rx), behavior="isolated") for rx in splits]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    backend.decoder = decoders.ByteLevel()
    # Control/unknown tokens (<|im_start|>, <|endoftext|>, ...) are "special": matched as a whole in the text and
    # dropped by decode(skip_special_tokens=True). User-defined tokens are matched whole but are ordinary text.
    special = [AddedToken(tokens[i], special=True, normalized=False)
               for i, ty in enumerate(types) if ty in (_TOKEN_CONTROL, _TOKEN_UNKNOWN)]
    user = [AddedToken(tokens[i], special=False, normalized=False)
            for i, ty in enumerate(types) if ty == _TOKEN_USER_DEFINED]
    if special:
        backend.add_special_tokens(special)
    if user:
        backend.add_tokens(user)

    def role(key: str) -> int | None:
        key = f"tokenizer.ggml.{key}_token_id"
        return _meta_int(meta, key, minimum=0) if key in meta else None

    return BPETokenizer(backend, bos=role("bos"), eos=role("eos"), pad=role("padding"), unk=role("unknown"))


# ----------------------------------------------------------------------------------------------------------
# everything together
# ----------------------------------------------------------------------------------------------------------

@dataclass
class GGUFCheckpoint:
    """A GGUF file turned into Hugging Face Llama form.

    Attributes:
        path: the file.
        config: HF ``LlamaConfig``-style dict (:func:`gguf_to_hf_config`).
        state_dict: HF ``LlamaForCausalLM`` tensor names -> float tensors (:func:`gguf_to_hf_state_dict`).
        tokenizer: a :class:`~attnkit.data.tokenizers.bpe_tokenizer.BPETokenizer` (:func:`gguf_tokenizer`), or None when
            the file has no tokenizer.
        chat_template: the Jinja chat template (``tokenizer.chat_template``) or None.
        add_bos_token: whether llama.cpp would put bos in front of a prompt (``tokenizer.ggml.add_bos_token``;
            without it, llama.cpp's default: true for the ``llama-bpe`` / ``llama3`` pre-tokenizers).
        tensor_types: count of tensors per storage type, e.g. ``{"Q4_1": 210, "F32": 61, "Q8_0": 1}``.
        metadata: the scalar metadata (long arrays such as the vocabulary are left out).
    """

    path: Path
    config: dict[str, Any]
    state_dict: dict[str, torch.Tensor]
    tokenizer: Any
    chat_template: str | None
    add_bos_token: bool
    tensor_types: dict[str, int]
    metadata: dict[str, Any] = field(default_factory=dict)


def load_gguf(path: str | os.PathLike, *, dtype: torch.dtype = torch.float32, progress: bool = True) -> GGUFCheckpoint:
    """Read a Llama-architecture GGUF file: config, dequantized HF-named weights, tokenizer, chat template.

    Args:
        path: the ``.gguf`` file.
        dtype: floating dtype of the returned tensors.
        progress: show a tqdm bar while dequantizing.

    Raises:
        ValueError: see :func:`check_gguf_file`, :func:`read_gguf`, :func:`gguf_to_hf_config`,
            :func:`gguf_to_hf_state_dict`, :func:`gguf_tokenizer`; a ``tokenizer.chat_template`` that is not a
            string, a ``tokenizer.ggml.add_bos_token`` that is not a bool.
    """
    from attnkit.data.tokenizers.chat_template import check_chat_template

    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    reader = read_gguf(path)
    meta = gguf_metadata(reader)
    config = gguf_to_hf_config(meta, tensor_names={t.name for t in reader.tensors})
    state = gguf_to_hf_state_dict(reader, config, dtype=dtype, progress=progress)
    tokenizer = gguf_tokenizer(meta) if "tokenizer.ggml.model" in meta else None
    scalars = {k: v for k, v in meta.items() if not isinstance(v, list) or len(v) <= 64}
    return GGUFCheckpoint(
        path=Path(path),
        config=config,
        state_dict=state,
        tokenizer=tokenizer,
        chat_template=check_chat_template(meta.get("tokenizer.chat_template"), f"{path}: tokenizer.chat_template"),
        add_bos_token=_meta_bool(meta, "tokenizer.ggml.add_bos_token",
                                 meta.get("tokenizer.ggml.pre") in _ADD_BOS_BY_DEFAULT),
        tensor_types=dict(Counter(t.tensor_type.name for t in reader.tensors)),
        metadata=scalars,
    )


def gguf_to_gpt(source: str | os.PathLike | GGUFCheckpoint, *, dtype: torch.dtype | None = None,
                progress: bool = True):
    """A GGUF file (or a loaded :class:`GGUFCheckpoint`) as attnkit's ``GPT`` in eval mode.

    The HF-named weights go through :func:`attnkit.interop.hf.from_hf`, the same mapping used for
    Hugging Face checkpoints (q/k/v packed into ``qkv_proj``, ``gate/up/down`` -> ``w_gate/w_in/w_out``, ...).

    Args:
        source: a ``.gguf`` path or the result of :func:`load_gguf`.
        dtype: parameter dtype; default float32 for a path, the checkpoint's tensor dtype otherwise.
        progress: show a tqdm bar while dequantizing.

    Returns:
        ``(model, checkpoint)``; ``checkpoint.tokenizer`` and ``checkpoint.chat_template`` come with it.
    """
    from attnkit.interop.hf import from_hf

    if isinstance(source, GGUFCheckpoint):
        ckpt = source
    else:
        ckpt = load_gguf(source, dtype=dtype or torch.float32, progress=progress)
    if dtype is None:
        dtype = next(iter(ckpt.state_dict.values())).dtype
    model = from_hf(ckpt.state_dict, config=ckpt.config, dtype=dtype)
    model.eval()
    return model, ckpt
