"""Fuzzing the loaders of every file a user may receive (issue #41 part 3).

    python -m benchmarks.fuzz_loaders                          # 10,000 mutated inputs per loader, seed 0
    python -m benchmarks.fuzz_loaders --only gguf,hf-config --inputs 2000
    python -m benchmarks.fuzz_loaders --only gguf --replay 1234   # run one input again, in this process
    python -m benchmarks.fuzz_loaders --start 3000 --inputs 7000 --merge   # inputs 3000-9999, added to the record

Each loader (:data:`LOADERS`) starts from real files, the seeds (a run folder written by ``train_lm`` and one by
``train_mt``, tokenizer files, Hugging Face GPT-2 and Llama folders, a GGUF file, TSV and text data, lines to
translate, a prompt), and gets inputs made from them by seeded mutations: bytes flipped, set, inserted, deleted,
files cut short or extended; safetensors headers that claim huge tensors, data past the end of the file, other
dtypes, or shapes rewritten consistently (a valid file whose sizes disagree with the config); GGUF headers with huge
counts, lengths, dimensions, types and offsets; JSON with wrong types, NaN, huge numbers, deep nesting, missing and
unknown keys, and config sizes that disagree with the weights; text with invalid UTF-8, NUL bytes, mixed line
endings, byte-order marks, other encodings, huge lines and many lines.

The outcome of every input must be a **clear error** (a ``ValueError`` or ``OSError``, such as ``CheckpointError``
or ``FileNotFoundError``, with a one-line message, which the command line prints as one line before it exits 2; for
the loaders that train, also the trainer's one-line stop at a NaN loss, a ``FloatingPointError``: finite but wrong
weights are caught nowhere else) or a **correct load** (checked: the model has the shapes of its config and runs,
the tokenizer encodes and decodes, the data are pairs of non-empty one-line sentences, one translation comes out per
input line and the command line prints exactly those, a sample starts with its prompt, a resumed run takes one more
step). Anything else is counted: **other** (another exception, a wrong load, a multi-line message), **hang** (more
than 5 s of the worker's CPU time, which other jobs on the machine do not move, or still running after 60 s of wall
time: a loop, or a wait), **memory** (peak resident growth above the bound below). Findings beside the outcome are counted as
notes (:data:`NOTES`).

Each input runs in a worker process (``--jobs`` of them) that measures its wall time and the peak of its resident
memory above the level before the input (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``; glibc returns
every allocation above 64 KiB at once, so the peak sees each large temporary). The parent kills a worker that takes
longer than 60 s or grows past 3 GiB. The bound on the peak is ``64 MiB + 16 x the input's bytes`` (``256 x`` for
text that is tokenized whole, a prompt or lines to translate: the tokenizers library keeps about 200 bytes per
token while it encodes): a header that claims more than its file holds, or a config whose sizes disagree with the
weights, must be refused before anything of that size is allocated.

The summary table (per loader: inputs, clear errors, correct loads, other exceptions, hangs, inputs over the memory
bound, max seconds, max resident growth) is printed and written, with the first failures of each kind (each
reproducible with ``--replay``), to ``benchmarks/records/reliability/fuzz_loaders.{json,md}``. Input ``i`` of a
loader depends only on the seed, the loader and ``i``, so a long run can be done in parts: ``--start N --merge``
runs inputs ``N``, ``N + 1``, ... and adds them to the record of inputs ``0`` to ``N - 1``. The tests
(``tests/reliability/test_fuzz.py``) run the same loaders and mutations with inputs drawn by hypothesis, a
few hundred per loader.

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import multiprocessing
import os
import random
import runpy
import shutil
import struct
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RECORD = HERE / "records" / "reliability" / "fuzz_loaders"
MiB = 1 << 20
HANG_S = 5.0  # an input that takes more CPU seconds is a hang
KILL_S = 60.0  # the parent kills a worker whose input takes longer (wall seconds; a hang)
KILL_RSS = 3 << 30  # ... or whose resident memory passes this
RSS_BASE = 64 * MiB  # the bound on an input's peak resident growth: RSS_BASE + RSS_PER_BYTE x its bytes
RSS_PER_BYTE = 16
# Text that is tokenized as a whole (a prompt, lines to translate): the tokenizers library keeps about 200 bytes
# per token while encoding (ids, offsets, the token strings), so these loaders are allowed that much per byte.
TOKENIZED_RSS_PER_BYTE = 256
OUTCOMES = ("error", "load", "other", "hang", "memory")


# =================================================================================================================
# drawing choices: from a seeded random.Random (the benchmark) or from hypothesis (the tests)
# =================================================================================================================
class RandomDraw:
    """Choices from ``random.Random(seed)``: the same seed gives the same input. ``small`` caps the sizes of the
    inputs that are big on purpose (huge lines to 256 KiB instead of 4 MiB, 10,000 lines instead of 100,000), so
    the tests stay quick."""

    small = False

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]``."""
        return self.rng.randint(lo, hi)

    def pick(self, options: Sequence[Any]) -> Any:
        return options[self.rng.randrange(len(options))]

    def bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)


class HypothesisDraw(RandomDraw):
    """Choices drawn by hypothesis (``st.data()``), so a failing input shrinks to a small one; ``small`` sizes."""

    small = True

    def __init__(self, data: Any):
        from hypothesis import strategies as st

        self.data, self.st = data, st

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))

    def pick(self, options: Sequence[Any]) -> Any:
        return options[self.int(0, len(options) - 1)]

    def bytes(self, n: int) -> bytes:
        return self.data.draw(self.st.binary(min_size=n, max_size=n))


def case_seed(seed: int, loader: str, index: int) -> int:
    """The seed of input ``index`` of ``loader`` in a run seeded ``seed``."""
    return (seed * 1_000_003 + zlib.crc32(loader.encode())) * 10_000_019 + index


# =================================================================================================================
# mutations of bytes
# =================================================================================================================
INTERESTING_BYTES = (0x00, 0xFF, 0x7F, 0x80, 0x0A, 0x0D, 0x20, 0x22, 0x2C, 0x30, 0x39, 0x5B, 0x5C, 0x7B, 0x7D)


def flip_bits(data: bytes, draw: RandomDraw) -> bytes:
    """1 to 8 single bits flipped."""
    if not data:
        return data
    out = bytearray(data)
    for _ in range(draw.int(1, 8)):
        pos = draw.int(0, len(out) - 1)
        out[pos] ^= 1 << draw.int(0, 7)
    return bytes(out)


def set_bytes(data: bytes, draw: RandomDraw) -> bytes:
    """1 to 8 bytes set to a random or a telling value (NUL, 0xff, a quote, a digit, a bracket ...)."""
    if not data:
        return data
    out = bytearray(data)
    for _ in range(draw.int(1, 8)):
        out[draw.int(0, len(out) - 1)] = draw.pick(INTERESTING_BYTES) if draw.int(0, 1) else draw.int(0, 255)
    return bytes(out)


def truncate(data: bytes, draw: RandomDraw) -> bytes:
    """The file cut anywhere, down to nothing (an interrupted download or copy)."""
    return data[:draw.int(0, max(len(data) - 1, 0))]


def extend(data: bytes, draw: RandomDraw) -> bytes:
    """Bytes added at the end: random, zeros, a copy of the file, or a megabyte."""
    kind = draw.pick(("random", "zeros", "copy", "big"))
    if kind == "random":
        return data + draw.bytes(draw.int(1, 512))
    if kind == "zeros":
        return data + bytes(draw.int(1, 4096))
    if kind == "copy":
        return data + data
    return data + draw.bytes(64) * (1 << (12 if draw.small else 14))


def splice(data: bytes, draw: RandomDraw) -> bytes:
    """A chunk deleted, inserted (random bytes) or duplicated elsewhere."""
    if not data:
        return draw.bytes(draw.int(1, 64))
    a = draw.int(0, len(data) - 1)
    b = min(len(data), a + draw.int(1, 256))
    kind = draw.pick(("delete", "insert", "duplicate"))
    if kind == "delete":
        return data[:a] + data[b:]
    if kind == "insert":
        return data[:a] + draw.bytes(draw.int(1, 64)) + data[a:]
    at = draw.int(0, len(data))
    return data[:at] + data[a:b] + data[at:]


BYTE_MUTATIONS = (flip_bits, set_bytes, truncate, extend, splice)


def mutate_bytes(data: bytes, draw: RandomDraw) -> bytes:
    return draw.pick(BYTE_MUTATIONS)(data, draw)


# =================================================================================================================
# mutations of JSON (state.json, run.json, config.json, tokenizer files)
# =================================================================================================================
# Fields that size a model: a value that disagrees with the weights must be refused before anything is allocated.
SIZE_KEYS = frozenset({
    "vocab_size", "block_size", "n_layer", "n_head", "n_embd", "n_kv_head", "head_dim", "ffn_hidden",
    "src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "num_encoder_layers", "num_decoder_layers",
    "dim_feedforward", "max_len", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "intermediate_size", "max_position_embeddings", "n_positions", "n_ctx", "n_inner",
    "rank", "step", "tokens", "batch_size", "n_train", "n_valid",
})
JSON_VALUES = (None, True, False, 0, 1, -1, 7, 2**31, 2**63, -2**63, 10**30, 0.5, -0.0, 1e308, 1e-308, "", "x",
               "\u0000", "\udcff", "ü" * 3, [], {}, [0], [[]], {"": 0}, {"type": "char"}, ["a", 1, None])
RAW_JSON = ("NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" * 5000, "[" * 100_000 + "]" * 100_000,
            '{"a":' * 50_000 + "1" + "}" * 50_000, '"' + "a" * 1_000_000 + '"')
_SENTINEL = "\u2063fuzz-raw-{}\u2063"


def _json_paths(doc: Any) -> list[tuple]:
    """Every value in ``doc`` as a path of keys and indices (the root excluded), in document order."""
    out, stack = [], [((), doc)]
    while stack:
        path, value = stack.pop()
        if path:
            out.append(path)
        if isinstance(value, dict):
            stack.extend((path + (k,), v) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((path + (i,), v) for i, v in reversed(list(enumerate(value))))
    return out


def _json_get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def mutate_json_doc(doc: Any, draw: RandomDraw, raws: list[str]) -> Any:
    """One edit of a parsed JSON document; a value that JSON cannot spell (NaN, a 5,000-digit number, 100,000
    nested brackets) goes into ``raws`` and a sentinel string takes its place until the text is written."""
    paths = _json_paths(doc)
    if not paths or draw.int(0, 19) == 0:  # the whole document replaced
        return copy.deepcopy(draw.pick(JSON_VALUES))
    sizes = [p for p in paths if isinstance(p[-1], str) and p[-1] in SIZE_KEYS]
    shallow = [p for p in paths if len(p) <= 3]
    pool = draw.pick([x for x in (sizes, shallow, paths) if x])
    path = draw.pick(pool)
    parent = _json_get(doc, path[:-1])
    key = path[-1]
    old = parent[key]
    kind = draw.pick(("value", "value", "raw", "size", "delete", "rename", "add"))
    if kind == "size" and isinstance(old, (int, float)) and not isinstance(old, bool) and math.isfinite(old):
        factor = draw.pick((0, 2, 3, 1024, 2**20, 2**31, -1))
        parent[key] = int(old) * factor if factor > 0 or draw.int(0, 1) else int(old) + factor
    elif kind == "raw":
        raws.append(draw.pick(RAW_JSON))
        parent[key] = _SENTINEL.format(len(raws) - 1)
    elif kind == "delete":
        del parent[key]
    elif kind == "rename" and isinstance(parent, dict):
        parent[key + draw.pick(("s", "_", " "))] = parent.pop(key)
    elif kind == "add":
        if isinstance(parent, dict):
            parent[draw.pick(("extra", "n_layers", "unknown", str(key) + "2"))] = copy.deepcopy(draw.pick(JSON_VALUES))
        else:
            parent.insert(key, copy.deepcopy(draw.pick(JSON_VALUES)))
    else:
        parent[key] = copy.deepcopy(draw.pick(JSON_VALUES))
    return doc


def write_json(doc: Any, raws: list[str], draw: RandomDraw) -> bytes:
    """``doc`` as JSON text (compact or indented, ASCII or not), with the raw values put in place."""
    text = json.dumps(doc, allow_nan=True, indent=draw.pick((None, 2)), ensure_ascii=bool(draw.int(0, 1)))
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(_SENTINEL.format(i), ensure_ascii=False), raw)
        text = text.replace(json.dumps(_SENTINEL.format(i), ensure_ascii=True), raw)
    return text.encode("utf-8", "surrogatepass")


def mutate_json(data: bytes, draw: RandomDraw) -> bytes:
    """1 to 3 structural edits of a JSON file (bytes edits when it does not parse)."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):  # not JSON (any more): an earlier mutation broke it
        return mutate_bytes(data, draw)
    raws: list[str] = []
    for _ in range(draw.int(1, 3)):
        doc = mutate_json_doc(doc, draw, raws)
    return write_json(doc, raws, draw)


# =================================================================================================================
# mutations of safetensors files
# =================================================================================================================
ST_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
             "F8_E4M3": 1, "F8_E5M2": 1}


def _st_parse(data: bytes) -> tuple[dict, bytes] | None:
    if len(data) < 8:
        return None
    n = struct.unpack("<Q", data[:8])[0]
    try:
        header = json.loads(data[8:8 + n])
    except (ValueError, RecursionError):
        return None
    return (header, data[8 + n:]) if isinstance(header, dict) else None


def _st_pack(tensors: dict[str, tuple[str, list, bytes]], metadata: Any) -> bytes:
    """A safetensors file from ``{name: (dtype, shape, raw bytes)}``, offsets computed."""
    header: dict[str, Any] = {} if metadata is None else {"__metadata__": metadata}
    body, pos = [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        body.append(raw)
        pos += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(body)


def _st_tensors(header: dict, body: bytes) -> dict[str, tuple[str, list, bytes]]:
    out = {}
    for name, info in header.items():
        if name != "__metadata__":
            a, b = info["data_offsets"]
            out[name] = (info["dtype"], list(info["shape"]), body[a:b])
    return out


def mutate_safetensors(data: bytes, draw: RandomDraw) -> bytes:
    """A header rewritten: a tensor that claims a huge shape or data past the end of the file, a wrong dtype, a
    shape changed consistently (a valid file that does not fit the model), a tensor dropped, renamed, added,
    converted to another float type, the header length field rewritten, or the header's JSON mutated."""
    try:
        return _mutate_safetensors(data, draw)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):  # an earlier mutation broke the header
        return mutate_bytes(data, draw)


def _mutate_safetensors(data: bytes, draw: RandomDraw) -> bytes:
    parsed = _st_parse(data)
    if parsed is None or draw.int(0, 3) == 0:
        return mutate_bytes(data, draw)
    header, body = parsed
    names = sorted(k for k in header if k != "__metadata__")
    if not names:
        return mutate_bytes(data, draw)
    name = draw.pick(names)
    kind = draw.pick(("huge", "beyond", "dtype", "reshape", "drop", "rename", "add", "convert", "length", "json"))
    n = struct.unpack("<Q", data[:8])[0]
    if kind == "length":
        return struct.pack("<Q", draw.pick((0, 1, n - 1, n + 1, n + 8, len(data), 2**32, 2**63, 2**64 - 1))) + data[8:]
    if kind == "json":
        text = mutate_json(data[8:8 + n], draw)
        return struct.pack("<Q", len(text)) + text + body
    if kind in ("huge", "beyond", "dtype"):
        info = header[name]
        if kind == "huge":
            info["shape"] = draw.pick(([2**31, 2**31], [2**40], [10**12, 16], [2**20, 2**20, 2**10], [2**62]))
            if draw.int(0, 1):  # the offsets agree with the claim: the data would lie far past the end
                size = ST_DTYPES.get(info["dtype"], 4) * math.prod(info["shape"])
                info["data_offsets"] = [info["data_offsets"][0], info["data_offsets"][0] + size]
        elif kind == "beyond":
            info["data_offsets"] = [info["data_offsets"][0], len(body) + draw.pick((1, 4096, 2**32, 2**62))]
        else:
            info["dtype"] = draw.pick(tuple(ST_DTYPES) + ("X", "f32"))
        text = json.dumps(header).encode()
        return struct.pack("<Q", len(text)) + text + body
    tensors = _st_tensors(header, body)
    dtype, shape, raw = tensors[name]
    shape = [int(n) for n in shape]
    if kind == "reshape" and shape and math.prod(shape) < 1 << 22:
        axis = draw.int(0, len(shape) - 1)
        new = list(shape)
        new[axis] = max(0, shape[axis] + draw.pick((-1, 1, shape[axis], 7)))
        size = ST_DTYPES.get(dtype, 4) * math.prod(new)
        tensors[name] = (dtype, new, (raw * (size // max(len(raw), 1) + 1))[:size])
    elif kind == "drop":
        del tensors[name]
    elif kind == "rename":
        tensors[name + draw.pick(("x", ".weight", "_orig"))] = tensors.pop(name)
    elif kind == "add":
        tensors[draw.pick(("lm_head.weight", "extra.weight", name.replace("0", "9")))] = (dtype, shape, raw)
    elif kind == "convert" and dtype == "F32":
        import numpy as np

        values = np.frombuffer(raw, dtype="<f4")
        target = draw.pick(("F16", "F64", "BF16"))
        if target == "BF16":
            converted = (values.view("<u4") >> 16).astype("<u2").tobytes()
        else:
            converted = values.astype("<f2" if target == "F16" else "<f8").tobytes()
        tensors[name] = (target, shape, converted)
    return _st_pack(tensors, header.get("__metadata__"))


# =================================================================================================================
# mutations of GGUF files
# =================================================================================================================
def mutate_gguf(data: bytes, draw: RandomDraw, path: Path) -> bytes:
    """A header field rewritten where it is (see :func:`attnkit.interop.gguf.gguf_layout`): a count, a string or
    array length, a number of the metadata (sizes of the model), a value type, a tensor's dimensions, type or data
    offset; or bytes edits."""
    from attnkit.interop.gguf import gguf_layout

    if draw.int(0, 3) == 0:
        return mutate_bytes(data, draw)
    layout = gguf_layout(path)  # of the unmutated seed file
    out = bytearray(data)
    huge = (0, 1, 2, 3, 255, 2**16, 2**31 - 1, 2**32 - 1, 2**40, 2**62, 2**63, 2**64 - 1)

    def put(offset: int, fmt: str, value: int) -> None:
        struct.pack_into("<" + fmt, out, offset, value % (1 << (8 * struct.calcsize(fmt))))

    for _ in range(draw.int(1, 2)):
        kind = draw.pick(("counts", "field", "field", "tensor", "tensor", "type"))
        if kind == "counts":
            put(draw.pick((8, 16)), "Q", draw.pick(huge) if draw.int(0, 1) else struct.unpack_from(
                "<Q", data, 8)[0] + draw.pick((-1, 1)))
        elif kind == "field":
            key, vtype, type_at, value_at = draw.pick(layout.fields)
            if vtype in (4, 5):  # u32 / i32: sizes of the model, token ids
                put(value_at, "I", draw.pick(huge + (16, 32, 64, 100_000)))
            elif vtype in (10, 11):
                put(value_at, "Q", draw.pick(huge))
            elif vtype == 8:  # a string's length
                put(value_at, "Q", draw.pick(huge) if draw.int(0, 1) else
                    struct.unpack_from("<Q", data, value_at)[0] + draw.pick((-1, 1, 8)))
            elif vtype == 9:  # an array's item type or count
                if draw.int(0, 2):
                    put(value_at + 4, "Q", draw.pick(huge) if draw.int(0, 1) else
                        struct.unpack_from("<Q", data, value_at + 4)[0] + draw.pick((-1, 1)))
                else:
                    put(value_at, "I", draw.int(0, 13))
            else:
                put(type_at, "I", draw.int(0, 13))
        elif kind == "tensor":
            name, dims_at, dims, ttype, offset = draw.pick(layout.tensors)
            part = draw.pick(("n_dims", "dim", "type", "offset"))
            after_dims = dims_at + 4 + 8 * len(dims)
            if part == "n_dims":
                put(dims_at, "I", draw.pick((0, 1, 3, 4, 5, 255, 2**31)))
            elif part == "dim" and dims:
                put(dims_at + 4 + 8 * draw.int(0, len(dims) - 1), "Q", draw.pick(huge + (32, 64, 96)))
            elif part == "type":
                put(after_dims, "I", draw.int(0, 40))
            else:
                put(after_dims + 4, "Q", draw.pick(huge) if draw.int(0, 1) else offset + draw.pick((-32, 32, 1)))
        else:
            _, _, type_at, _ = draw.pick(layout.fields)
            put(type_at, "I", draw.pick((0, 4, 6, 8, 9, 10, 12, 13, 2**31)))
    return bytes(out)


# =================================================================================================================
# mutations of text (data files, translation input, prompts)
# =================================================================================================================
TEXT_SNIPPETS = (b"\xff", b"\xfe\xff", b"\xc3", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80",
                 b"\x00", b"\x00\x00\x00", b"\r", b"\r\n", b"\n", b"\n\n", b"\t", b"\t\t", "\u2028".encode(),
                 "\x85".encode(), b"\x0b", b"\x0c", b"\x1b[31m", b"\xef\xbb\xbf", "e\u0301".encode(),
                 "\u200b".encode(), "\U0001f600".encode(), "\u202e".encode(), "\ufffd".encode(), b"\\", b'"',
                 "ß".encode(), "日本語".encode(), b" ", b"<eos>", b"<|endoftext|>")


def mutate_text(data: bytes, draw: RandomDraw, *, many: bool = True) -> bytes:
    """Invalid UTF-8, NUL bytes, other line endings, byte-order marks, odd characters, a huge line, many lines
    (not with ``many=False``: translating 100,000 lines takes minutes however well it goes), the text in another
    encoding, or nothing at all."""
    kinds = ("snippets", "snippets", "snippets", "endings", "huge", "many", "encoding", "empty", "bytes")
    kind = draw.pick(kinds if many else tuple(k for k in kinds if k != "many"))
    if kind == "snippets":
        out = bytearray(data)
        for _ in range(draw.int(1, 6)):
            at = draw.int(0, len(out))
            out[at:at] = draw.pick(TEXT_SNIPPETS)
        return bytes(out)
    if kind == "endings":
        ending = draw.pick((b"\r", b"\r\n", b"\n\r", "\u2028".encode(), b"\x85"))
        lines = data.split(b"\n")
        return b"".join(line + (ending if draw.int(0, 1) else b"\n") for line in lines[:-1]) + lines[-1]
    if kind == "huge":  # one line of 64 KiB to 4 MiB (256 KiB when small)
        size = 1 << draw.int(16, 18 if draw.small else 22)
        unit = draw.pick((b"a", b"ab ", "ü".encode(), b"\x00", b"\t", draw.bytes(16)))
        line = (unit * (size // len(unit) + 1))[:size]
        at = data.find(b"\n", draw.int(0, len(data))) + 1
        return data[:at] + line + b"\n" + data[at:]
    if kind == "many":  # 10,000 to 100,000 short or empty lines (10,000 when small)
        unit = draw.pick((b"\n", b"a\n", b"x\ty\n", b"\r\n"))
        return data + unit * draw.int(10_000, 10_000 if draw.small else 100_000)
    if kind == "encoding":
        text = data.decode("utf-8", "replace")
        return text.encode(draw.pick(("utf-16", "utf-32", "latin-1", "cp1252")), "replace")
    if kind == "empty":
        return draw.pick((b"", b"\n", b"\xef\xbb\xbf", b"   ", b"\n\n\n"))
    return mutate_bytes(data, draw)


# =================================================================================================================
# the seed files
# =================================================================================================================
CORPUS = ("To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n"
          "The slings and arrows of outrageous fortune,\nOr to take arms against a sea of troubles\n") * 12
WORDS = {"haus": "house", "katze": "cat", "hund": "dog", "baum": "tree", "wasser": "water", "groß": "big",
         "klein": "small", "rot": "red"}
TINY_LM = dict(preset="char-small", overrides={"n_layer": 1, "n_head": 2, "n_embd": 16}, block_size=16, batch_size=4,
               warmup_steps=1, eval_batches=1, progress=False)
TINY_MT = dict(preset="transformer-cpu", overrides={"d_model": 16, "num_heads": 2, "dim_feedforward": 32,
                                                    "num_encoder_layers": 1, "num_decoder_layers": 1},
               vocab_size=280, max_tokens=128, max_len=24, eval_batches=1, bleu_sentences=4, progress=False)


def _pairs() -> list[tuple[str, str]]:
    rng = random.Random(0)
    out = []
    for _ in range(40):
        words = [rng.choice(sorted(WORDS)) for _ in range(rng.randint(1, 4))]
        out.append((" ".join(words), " ".join(WORDS[w] for w in words)))
    return out


def _write_gguf(path: Path, tokenizer: Any) -> None:
    """A tiny Llama as llama.cpp writes it: q/k rows interleaved, 2-D weights in Q8_0 or F16, norms in F32, with
    the byte-level BPE tokenizer and a chat template."""
    import gguf
    import numpy as np
    import torch
    from gguf.constants import GGMLQuantizationType

    from attnkit.interop.hf import state_dict_to_hf
    from attnkit.models.configs import GPTConfig
    from attnkit.models.gpt import GPT

    torch.manual_seed(0)
    V = tokenizer.vocab_size
    cfg = GPTConfig(vocab_size=V, block_size=64, n_layer=1, n_head=2, n_kv_head=1, n_embd=32, ffn_hidden=64,
                    activation="swiglu", norm="rmsnorm", bias=False, position="rope", tie_embeddings=False)
    hf_cfg, state = state_dict_to_hf(GPT(cfg), include_tied=False)
    w = gguf.GGUFWriter(str(path), "llama")
    sizes = {"context_length": cfg.block_size, "embedding_length": cfg.n_embd, "block_count": cfg.n_layer,
             "feed_forward_length": cfg.ffn_hidden, "head_count": cfg.n_head, "head_count_kv": cfg.n_kv_head,
             "layer_norm_rms_eps": 1e-5, "rope_freq_base": 10000.0, "tokenizer_model": "gpt2",
             "tokenizer_pre": "gpt-2"}
    for what, value in sizes.items():
        getattr(w, "add_" + what)(value)
    vocab = tokenizer.backend.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.get)
    special = set(tokenizer.backend.get_added_tokens_decoder())
    w.add_token_list(tokens)
    w.add_token_types([3 if i in special else 1 for i in range(len(tokens))])
    merges = json.loads(tokenizer.backend.to_str())["model"]["merges"]
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    w.add_bos_token_id(tokenizer.bos_id)
    w.add_eos_token_id(tokenizer.eos_id)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                        "{% endfor %}")
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i, (name, tensor) in enumerate(sorted(state.items())):
        arr = tensor.detach().numpy().astype(np.float32)
        heads = {"q_proj": cfg.n_head, "k_proj": cfg.n_kv_head}.get(name.split(".")[-2])
        if heads:  # llama.cpp pairs rows (i, i + D/2) of each head as rows (2i, 2i + 1)
            d = arr.shape[0] // heads
            arr = arr.reshape(heads, 2, d // 2, -1).transpose(0, 2, 1, 3).reshape(arr.shape)
        if name in names:
            gname = names[name]
        else:
            _, _, n, rest = name.split(".", 3)
            gname = f"blk.{n}.{layer[rest.rsplit('.', 1)[0]]}.weight"
        if arr.ndim == 1:
            w.add_tensor(gname, arr)
        elif i % 2:
            w.add_tensor(gname, arr.astype(np.float16))
        else:
            w.add_tensor(gname, gguf.quants.quantize(arr, GGMLQuantizationType.Q8_0),
                         raw_dtype=GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _write_hf_folder(folder: Path, family: str, tokenizer: Any) -> None:
    """``config.json`` + ``model.safetensors`` (``save_hf``) of a tiny GPT-2 or Llama, with ``tokenizer.json`` and
    ``tokenizer_config.json``."""
    import torch

    from attnkit.interop.hf import save_hf
    from attnkit.models.configs import GPTConfig
    from attnkit.models.gpt import GPT

    torch.manual_seed(1)
    V = tokenizer.vocab_size
    if family == "gpt2":
        cfg = GPTConfig(vocab_size=V, block_size=32, n_layer=1, n_head=2, n_embd=16)
    else:
        cfg = GPTConfig(vocab_size=V, block_size=32, n_layer=2, n_head=2, n_kv_head=1, n_embd=16, ffn_hidden=32,
                        activation="swiglu", norm="rmsnorm", bias=False, position="rope", tie_embeddings=True)
    save_hf(GPT(cfg), folder)
    (folder / "tokenizer.json").write_text(tokenizer.backend.to_str(), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|im_start|>", "eos_token": {"content": "<|endoftext|>"}, "chat_template": "{{ messages }}"}))


def _normalise_state(folder: Path, root: Path) -> None:
    """Make the seed files the same on every machine and in every run: no durations, no absolute paths."""
    for file in sorted(folder.rglob("*.json")):
        text = file.read_text(encoding="utf-8").replace(str(root) + "/", "")
        doc = json.loads(text)
        if isinstance(doc, dict) and "elapsed" in doc:
            doc["elapsed"] = 1.0
        file.write_text(json.dumps(doc, indent=2), encoding="utf-8")


def build_seeds(root: Path) -> Path:
    """Write every seed file under ``root`` (about 3 s): runs ``lm/`` and ``mt/`` (one training step each), tokenizer
    files, Hugging Face folders ``hf_gpt2/`` and ``hf_llama/``, ``model.gguf``, ``pairs.tsv``, ``train.de`` /
    ``train.en``, ``corpus.txt``, ``texts/``, ``input.de``, ``prompt.txt``. Paths inside are relative to ``root``."""
    from attnkit import api
    from attnkit.checkpoints import load
    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
    from attnkit.data.tokenizers.tokenizer import save_tokenizer

    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    pairs = _pairs()
    (root / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    (root / "train.de").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (root / "train.en").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    (root / "texts" / "more").mkdir(parents=True, exist_ok=True)
    (root / "texts" / "a.txt").write_text(CORPUS[:300], encoding="utf-8")
    (root / "texts" / "more" / "b.txt").write_text(CORPUS[300:700], encoding="utf-8")
    (root / "input.de").write_text("das haus ist groß\nkatze\n\nder hund und der baum\nwasser rot\n", encoding="utf-8")
    (root / "prompt.txt").write_text("To be, or not", encoding="utf-8")
    here = os.getcwd()
    os.chdir(root)  # the runs record their data as relative paths
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            api.train_lm(data="corpus.txt", out="lm", steps=1, log=lambda line: None, **TINY_LM)
            api.train_mt(data="pairs.tsv", out="mt", steps=1, log=lambda line: None, **TINY_MT)
    finally:
        os.chdir(here)
    for run in ("lm", "mt"):
        _normalise_state(root / run, root)
    save_tokenizer(load(root / "lm").tokenizer, root / "tokenizer_char.json")
    save_tokenizer(load(root / "mt").tokenizer, root / "tokenizer_bpe.json")
    bpe = BPETokenizer.train(CORPUS, 300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    _write_hf_folder(root / "hf_gpt2", "gpt2", bpe)
    _write_hf_folder(root / "hf_llama", "llama", bpe)
    _write_gguf(root / "model.gguf", bpe)
    return root


@lru_cache(maxsize=1)
def seed_folder() -> Path:
    """The seed files of this process (built once, in a temporary folder removed at exit)."""
    folder = Path(tempfile.mkdtemp(prefix="attnkit-fuzz-seeds-"))
    import atexit

    atexit.register(shutil.rmtree, folder, True)
    return build_seeds(folder)


# =================================================================================================================
# the loaders and what a correct load looks like
# =================================================================================================================
PROBE = "To be, or not to be"
DECODING = dict(beam=1, max_len_a=0.0, max_len_b=6)  # short greedy translations: the input is under test


def _check_tokenizer(tok: Any) -> None:
    """Encodes and decodes: ids in [0, V), a string back."""
    ids = tok.encode(PROBE if tok.type != "char" else "".join(c for c in PROBE if tok.token_to_id(c) is not None))
    assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids), ids[:10]
    assert isinstance(tok.decode(ids), str)


def _check_loaded(loaded: Any) -> None:
    """A LoadedModel: its weights have the shapes of its config, its tokenizer works, it runs."""
    import torch

    from attnkit.models.builders import build_model

    config = loaded.model.config
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in build_model(config).state_dict().items()}
    got = {k: tuple(v.shape) for k, v in loaded.model.state_dict().items()}
    assert got == expected, "weights do not have the shapes of the config"
    _check_tokenizer(loaded.tokenizer)
    vocab = getattr(config, "vocab_size", None) or getattr(config, "src_vocab_size", None)
    ids = torch.tensor([[min(i, vocab - 1) for i in (0, 1, 2)]])
    with torch.inference_mode():
        if hasattr(config, "src_vocab_size"):
            loaded.model(ids, ids)
        else:
            loaded.model(ids)


def _load_checkpoint(root: Path) -> Any:
    from attnkit.checkpoints import load

    loaded = load(root / "lm")
    _check_loaded(loaded)
    return loaded


def _resume_checkpoint(root: Path) -> Any:
    """What ``--resume`` asks of the checkpoint layer, as the Trainer does it: the run's latest state
    (``read_saved_run``), the model of its config, the optimizer and schedule of its training config, every state
    restored (``load_checkpoint`` with RNG); then one update must run."""
    import torch

    from attnkit.checkpoints.checkpoint import build_checkpoint_model, latest_checkpoint, load_checkpoint
    from attnkit.checkpoints.runs import read_saved_run
    from attnkit.training.config import TrainConfig
    from attnkit.training.optim import LRScheduler, build_optimizer

    state = read_saved_run(root / "lm")
    latest = latest_checkpoint(root / "lm" / "checkpoints")
    config = TrainConfig.from_dict(state["train_config"])  # a ValueError names a bad field
    model = build_checkpoint_model(latest, state)
    optimizer = build_optimizer(model, config)
    scheduler = LRScheduler(optimizer, config, d_model=model.config.n_embd)
    load_checkpoint(latest, model, optimizer, scheduler, restore_rng=True)
    out = model(torch.zeros(2, 4, dtype=torch.long))
    (out[0] if isinstance(out, tuple) else out).float().mean().backward()
    optimizer.step()
    scheduler.step()
    return model


def _resume(root: Path) -> Any:
    from attnkit import api

    here = os.getcwd()
    os.chdir(root)  # the run's data is "corpus.txt", relative
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            result = api.train_lm(out="lm", resume=True, data="corpus.txt", steps=2, progress=False,
                                  log=lambda line: None)
    finally:
        os.chdir(here)
    assert result.summary["steps"] == 2, result.summary
    return result


def _load_tokenizer(root: Path, name: str) -> Any:
    from attnkit.data.tokenizers.tokenizer import load_tokenizer

    tok = load_tokenizer(root / name)
    _check_tokenizer(tok)
    return tok


def _load_model(root: Path, source: str) -> Any:
    from attnkit.interop.load import load_model

    with contextlib.redirect_stderr(io.StringIO()):  # the GGUF reader's progress bar
        loaded = load_model(str(root / source))
    _check_loaded(loaded)
    return loaded


def _check_corpus(corpus: Any) -> None:
    for s, t in zip(corpus.sources, corpus.targets):
        assert isinstance(s, str) and isinstance(t, str) and s and t, (s, t)
        assert not any(c in s + t for c in "\t\n\r"), (s, t)


def _load_tsv(root: Path) -> Any:
    from attnkit.data.corpora.parallel import load_train_valid

    train, valid, _ = load_train_valid(root / "pairs.tsv")
    _check_corpus(train)
    _check_corpus(valid)
    return train


def _load_parallel_files(root: Path) -> Any:
    from attnkit.data.corpora.parallel import load_parallel

    corpus = load_parallel([root / "train.de", root / "train.en"])
    _check_corpus(corpus)
    return corpus


def _load_text(root: Path, name: str) -> Any:
    from attnkit.data.corpora.text import load_text_corpus

    train, valid, info = load_text_corpus(root / name)
    assert isinstance(train, str) and isinstance(valid, str) and train + valid, info
    return info


def _expected_lines(data: bytes, errors: str = "strict") -> int:
    """How many lines Python's text reading sees (universal newlines)."""
    return len(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors=errors).readlines())


@lru_cache(maxsize=1)
def _translator(folder: str) -> Any:
    from attnkit.api import Translator

    return Translator(ckpt=Path(folder) / "mt", batch_size=4, **DECODING)


# Findings that are not about the loader under test, counted per loader and kept in the record.
NOTES: dict[str, int] = {}
LINE_BREAK_NOTE = "translations holding a line break (the model's output, not its input: one output line becomes two)"


def _translations(root: Path) -> list[str]:
    """The translations of ``input.de``, one per input line, as the module's example reads a file."""
    translator = _translator(str(seed_folder()))
    with open(root / "input.de", encoding="utf-8") as lines:
        out = [h for hyps in translator.stream(lines) for h in hyps]
    assert len(out) == _expected_lines((root / "input.de").read_bytes()), len(out)
    assert all(isinstance(h, str) for h in out)
    broken = sum(1 for h in out if len(h.splitlines()) > 1 or h.endswith(("\n", "\r")))
    if broken:
        NOTES[LINE_BREAK_NOTE] = NOTES.get(LINE_BREAK_NOTE, 0) + broken
    return out


def _translate_api(root: Path) -> Any:
    return _translations(root)


def _run_cli(argv: list[str], stdin: bytes | None = None) -> tuple[int, str, str]:
    """``attnkit ARGV`` in this process, through the entry point ``python -m attnkit`` runs (``attnkit/__main__.py``,
    which ends in ``sys.exit``): (exit code, stdout, stderr); stdin as a terminal-less UTF-8 stream."""
    out, err = io.StringIO(), io.StringIO()
    old_stdin, old_argv = sys.stdin, sys.argv
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    sys.argv = ["attnkit", *argv]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_module("attnkit", run_name="__main__")
            except SystemExit as stop:  # the entry point's sys.exit, or argparse's
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)
    finally:
        sys.stdin, sys.argv = old_stdin, old_argv
    return code, out.getvalue(), err.getvalue()


class CommandFailed(ValueError):
    """The command line exited 2 with its one-line error (a clear error)."""


def _check_cli(command: str, code: int, err: str) -> None:
    """Exit 0, or exit 2 with one line ``attnkit COMMAND: error: ...`` (raised as :class:`CommandFailed`)."""
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"attnkit {command}: error: "), err[-2000:]
        raise CommandFailed(lines[0])
    assert code == 0, (code, err[-2000:])


def _translate_cli(root: Path, via_stdin: bool) -> Any:
    data = (root / "input.de").read_bytes()
    argv = ["translate", "--ckpt", str(seed_folder() / "mt"), "--beam", "1", "--max-len-a", "0", "--max-len-b", "6",
            "--batch-size", "4"]
    code, out, err = _run_cli(argv if via_stdin else argv + ["--input", str(root / "input.de")],
                              data if via_stdin else None)
    _check_cli("translate", code, err)
    with contextlib.redirect_stdout(io.StringIO()):  # the same translations from the API, line for line
        expected = "".join(h + "\n" for h in _translations(root))
    assert out == expected, (out[:200], expected[:200])
    return out


def _prompt(data: bytes) -> str:
    """What a program gets from bytes on its command line: invalid UTF-8 as lone surrogates (os.fsdecode)."""
    return os.fsdecode(data.replace(b"\x00", b""))


def _sample_api(root: Path) -> Any:
    from attnkit.api import sample

    prompt = (root / "prompt.txt").read_bytes().decode("utf-8", "surrogateescape")
    with contextlib.redirect_stderr(io.StringIO()):
        (text,) = sample(ckpt=seed_folder() / "lm", prompt=prompt, max_new_tokens=4, seed=0)
    assert text.startswith(prompt), (text[:80], prompt[:80])
    return text


def _sample_cli(root: Path) -> Any:
    prompt = _prompt((root / "prompt.txt").read_bytes())
    code, out, err = _run_cli(["sample", "--ckpt", str(seed_folder() / "lm"), "--prompt", prompt,
                               "--max-new-tokens", "4", "--seed", "0", "--no-stream"])
    _check_cli("sample", code, err)
    return out


@dataclass(frozen=True)
class Loader:
    """One loader under test: which seed files an input replaces, how each is mutated, and the load.

    ``files`` are ``(path under the seed folder, kind)`` with kind ``safetensors``, ``json``, ``gguf``, ``text``,
    ``input`` (text without the many-lines mutation) or ``bytes``; ``run(root)`` loads from a copy of the seed
    folder at ``root`` (the mutated file in place) and checks what it got; ``copy`` is the sub-folder a loader may
    write into (copied afresh for every input); ``rss_per_byte`` scales the memory bound with the input's size
    (:data:`TOKENIZED_RSS_PER_BYTE` where every character of the input is tokenized).
    """

    name: str
    what: str
    files: tuple[tuple[str, str], ...]
    run: Callable[[Path], Any]
    copy: str | None = None
    rss_per_byte: int = RSS_PER_BYTE


RESUME_FILES = (("lm/checkpoints/step_00000001/state.json", "json"), ("lm/run.json", "json"),
                ("lm/checkpoints/step_00000001/model.safetensors", "safetensors"))
LOADERS: dict[str, Loader] = {loader.name: loader for loader in (
    Loader("checkpoint-weights", "model.safetensors of a checkpoint -> attnkit.checkpoints.load",
           (("lm/checkpoints/best/model.safetensors", "safetensors"),), _load_checkpoint),
    Loader("checkpoint-state", "state.json of a checkpoint -> read_checkpoint_state, attnkit.checkpoints.load",
           (("lm/checkpoints/best/state.json", "json"),), _load_checkpoint),
    Loader("resume", "state.json / run.json / model.safetensors of a run's latest step -> read_saved_run, "
                     "build_checkpoint_model, load_checkpoint with optimizer, schedule and RNG, one update",
           RESUME_FILES, _resume_checkpoint),
    Loader("resume-optimizer", "optimizer.safetensors of a run's latest step -> the same",
           (("lm/checkpoints/step_00000001/optimizer.safetensors", "safetensors"),), _resume_checkpoint),
    Loader("resume-train", "any of these four files -> api.train_lm(resume=True), one more step (the API and the "
                           "Trainer around the checkpoint layer)",
           RESUME_FILES + (("lm/checkpoints/step_00000001/optimizer.safetensors", "safetensors"),), _resume,
           copy="lm"),
    Loader("tokenizer-char", "attnkit char tokenizer JSON -> load_tokenizer / tokenizer_from_dict",
           (("tokenizer_char.json", "json"),), lambda root: _load_tokenizer(root, "tokenizer_char.json")),
    Loader("tokenizer-bpe", "attnkit BPE tokenizer JSON -> load_tokenizer / tokenizer_from_dict",
           (("tokenizer_bpe.json", "json"),), lambda root: _load_tokenizer(root, "tokenizer_bpe.json")),
    Loader("tokenizer-hf", "Hugging Face tokenizer.json (+ tokenizer_config.json) -> interop.load.load_model",
           (("hf_llama/tokenizer.json", "json"), ("hf_llama/tokenizer_config.json", "json")),
           lambda root: _load_model(root, "hf_llama")),
    Loader("gguf", "a GGUF file -> interop.load.load_model (interop.gguf)",
           (("model.gguf", "gguf"),), lambda root: _load_model(root, "model.gguf")),
    Loader("hf-config", "config.json of a Hugging Face folder (GPT-2, Llama) -> interop.load.load_model (from_hf)",
           (("hf_gpt2/config.json", "json"), ("hf_llama/config.json", "json")),
           lambda root: _load_model(root, "hf_gpt2") if (root / "hf_gpt2.mutated").exists()
           else _load_model(root, "hf_llama")),
    Loader("hf-weights", "model.safetensors of a Hugging Face folder -> interop.load.load_model (from_hf)",
           (("hf_gpt2/model.safetensors", "safetensors"), ("hf_llama/model.safetensors", "safetensors")),
           lambda root: _load_model(root, "hf_gpt2") if (root / "hf_gpt2.mutated").exists()
           else _load_model(root, "hf_llama")),
    Loader("tsv", "a TSV file of pairs -> data.corpora.parallel.load_train_valid",
           (("pairs.tsv", "text"),), _load_tsv),
    Loader("parallel-files", "two line-aligned files -> data.corpora.parallel.load_parallel",
           (("train.de", "text"), ("train.en", "text")), _load_parallel_files),
    Loader("text", "a text file or a folder of .txt files -> data.corpora.text.load_text_corpus",
           (("corpus.txt", "text"), ("texts/more/b.txt", "text")),
           lambda root: _load_text(root, "texts" if (root / "texts.mutated").exists() else "corpus.txt")),
    Loader("translate-api", "input lines -> api.Translator.stream (a file opened as UTF-8)",
           (("input.de", "input"),), _translate_api, rss_per_byte=TOKENIZED_RSS_PER_BYTE),
    Loader("translate-cli", "input lines -> attnkit translate (stdin, or --input FILE)",
           (("input.de", "input"),), lambda root: _translate_cli(root, (root / "stdin.mode").exists()),
           rss_per_byte=TOKENIZED_RSS_PER_BYTE),
    Loader("sample-api", "a prompt (bytes decoded as the command line does) -> api.sample",
           (("prompt.txt", "input"),), _sample_api, rss_per_byte=TOKENIZED_RSS_PER_BYTE),
    Loader("sample-cli", "a prompt -> attnkit sample --prompt", (("prompt.txt", "input"),), _sample_cli,
           rss_per_byte=TOKENIZED_RSS_PER_BYTE),
)}


# =================================================================================================================
# making an input and running it
# =================================================================================================================
@dataclass
class Case:
    """One input: the mutated files (path under the seed folder -> bytes) and marker files for the variant."""

    files: dict[str, bytes]
    markers: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.files.values())


MUTATORS: dict[str, Callable[..., bytes]] = {
    "safetensors": mutate_safetensors, "json": mutate_json, "text": mutate_text, "bytes": mutate_bytes,
    "input": lambda data, draw: mutate_text(data, draw, many=False)}


def make_case(loader: Loader, draw: RandomDraw, seeds: Path) -> Case:
    """One mutated input of ``loader``, drawn with ``draw`` from the seed files in ``seeds``."""
    rel, kind = draw.pick(loader.files)
    data = (seeds / rel).read_bytes()
    for _ in range(draw.int(1, 2)):  # one mutation, or two stacked
        if kind == "gguf":
            data = mutate_gguf(data, draw, seeds / rel) if len(data) == (seeds / rel).stat().st_size \
                else mutate_bytes(data, draw)
        else:
            data = MUTATORS[kind](data, draw) if draw.int(0, 4) else mutate_bytes(data, draw)
    markers = []
    top = rel.split("/")[0]
    if top in ("hf_gpt2", "texts"):
        markers.append(top + ".mutated")
    if loader.name == "translate-cli" and draw.int(0, 1):
        markers.append("stdin.mode")
    return Case({rel: data}, tuple(markers))


@dataclass
class Outcome:
    """What one input gave: ``kind`` in :data:`OUTCOMES`, seconds, peak resident growth (bytes), the message."""

    kind: str
    seconds: float  # wall
    rss_growth: int
    detail: str = ""
    cpu_seconds: float = 0.0  # the worker's own CPU time
    notes: dict[str, int] = field(default_factory=dict)  # findings beside the outcome (see NOTES)


def is_clear(err: BaseException) -> bool:
    """A clear error: a ValueError or OSError with a non-empty message of one line, or the trainer's stop at a NaN
    loss (a FloatingPointError, which the command line prints as one line too): a resumed run whose weights are
    finite but wrong (an exponent bit flipped, 1e37 where 0.02 was) can only be caught there."""
    message = str(err).strip()
    return isinstance(err, (ValueError, OSError, FloatingPointError)) and bool(message) and "\n" not in message


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class Sandbox:
    """A copy of the seed folder that inputs are written into (and put back after each)."""

    def __init__(self, seeds: Path, folder: Path):
        self.seeds, self.root = seeds, folder
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(seeds, folder, symlinks=False)

    def run(self, loader: Loader, case: Case, *, timed: bool = True) -> Outcome:
        """Write ``case``, run ``loader`` on it, measure, and put the seed files back (``timed=False``: no input
        counts as a hang, as in the tests, which judge no times)."""
        if loader.copy:
            shutil.rmtree(self.root / loader.copy, ignore_errors=True)
            shutil.copytree(self.seeds / loader.copy, self.root / loader.copy)
        for rel, data in case.files.items():
            (self.root / rel).write_bytes(data)
        for marker in case.markers:
            (self.root / marker).touch()
        NOTES.clear()
        try:
            outcome = measure(lambda: loader.run(self.root), rss_bound(case.size, loader.rss_per_byte),
                              HANG_S if timed else math.inf)
            outcome.notes = dict(NOTES)
            return outcome
        finally:
            for rel in case.files:
                shutil.copyfile(self.seeds / rel, self.root / rel)
            for marker in case.markers:
                (self.root / marker).unlink(missing_ok=True)
            if loader.copy:  # what the loader wrote there (a resumed run's new checkpoints) must not reach the next
                shutil.rmtree(self.root / loader.copy, ignore_errors=True)
                shutil.copytree(self.seeds / loader.copy, self.root / loader.copy)


@lru_cache(maxsize=1)
def sandbox() -> Sandbox:
    """This process's copy of the seed files that inputs are written into."""
    folder = Path(tempfile.mkdtemp(prefix="attnkit-fuzz-work-"))
    import atexit

    atexit.register(shutil.rmtree, folder, True)
    box = Sandbox(seed_folder(), folder / "root")
    for loader in LOADERS.values():  # lazy imports and first-call caches are not what an input costs
        box.run(loader, Case({}), timed=False)
    return box


def check_input(name: str, draw: RandomDraw) -> Outcome:
    """One input of loader ``name`` drawn with ``draw`` (e.g. :class:`HypothesisDraw`), run untimed in this
    process's sandbox; an ``AssertionError`` unless it ends in a clear error or a correct load within the memory
    bound. What the tests call."""
    loader = LOADERS[name]
    case = make_case(loader, draw, seed_folder())
    outcome = sandbox().run(loader, case, timed=False)
    assert outcome.kind in ("error", "load"), f"{name}: {outcome.kind} ({', '.join(case.files)}, {case.size} " \
                                               f"bytes): {outcome.detail}"
    return outcome


def rss_bound(size: int, per_byte: int = RSS_PER_BYTE) -> int:
    """The largest peak resident growth allowed for an input of ``size`` bytes."""
    return RSS_BASE + per_byte * size


def measure(fn: Callable[[], Any], bound: int, hang_s: float = HANG_S) -> Outcome:
    """Run ``fn`` once: its outcome, wall and CPU seconds and peak resident growth (Linux; 0 elsewhere), judged
    against ``hang_s`` (CPU seconds: a loaded machine stretches wall time, not the work) and ``bound`` (bytes of peak
    resident growth)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the high-water mark
        before = _status_kib("VmRSS")
    except OSError:
        before = None
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        fn()
        kind, detail = "load", ""
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # noqa: BLE001 - every other outcome is what is being measured
        if is_clear(err):
            kind, detail = "error", f"{type(err).__name__}: {err}"
        else:
            kind = "other"
            detail = f"{type(err).__name__}: {err}\n" + "".join(traceback.format_exception(err)[-6:])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    growth = 0 if before is None else max(0, _status_kib("VmHWM") - before) * 1024
    if kind in ("error", "load"):
        if cpu > hang_s:
            kind, detail = "hang", f"{cpu:.1f} CPU s ({seconds:.1f} s wall); {detail}"
        elif growth > bound:
            kind, detail = "memory", f"{growth / MiB:.0f} MiB, over the bound of {bound / MiB:.0f} MiB; {detail}"
    return Outcome(kind, seconds, growth, detail[:4000], cpu_seconds=cpu)


# =================================================================================================================
# the benchmark: workers, the table, the record
# =================================================================================================================
def _worker_setup() -> tuple[Path, Sandbox]:
    import torch

    torch.set_num_threads(1)
    from benchmarks.harness import ExactAllocations

    ExactAllocations().__enter__()  # glibc returns large blocks at once: the peak sees every temporary
    return seed_folder(), sandbox()


def _worker(conn: Any, seed: int) -> None:
    """Serve ``(loader name, index)`` requests with outcomes until ``None`` arrives."""
    os.environ.setdefault("ATTNKIT_HOME", tempfile.mkdtemp(prefix="attnkit-fuzz-home-"))
    seeds, box = _worker_setup()
    conn.send(("ready", os.getpid()))
    while True:
        request = conn.recv()
        if request is None:
            break
        name, index = request
        loader = LOADERS[name]
        try:
            case = make_case(loader, RandomDraw(case_seed(seed, name, index)), seeds)
        except Exception as err:  # noqa: BLE001 - a bug of this script, shown as such
            conn.send((name, index, Outcome("other", 0.0, 0, f"harness: making the input failed: {err!r}"), 0))
            continue
        outcome = box.run(loader, case)
        conn.send((name, index, outcome, case.size))


class Worker:
    def __init__(self, ctx: Any, seed: int):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, seed), daemon=True)
        self.proc.start()
        self.task: tuple[str, int] | None = None
        self.started = 0.0
        tag, self.pid = self.conn.recv()
        self.base = self.rss()  # resident memory when ready: a killed worker's growth is counted from here

    def send(self, task: tuple[str, int]) -> None:
        self.task, self.started = task, time.perf_counter()
        self.conn.send(task)

    def rss(self) -> int:
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()

    def stop(self) -> None:
        with contextlib.suppress(OSError, BrokenPipeError):
            self.conn.send(None)
        self.proc.join(timeout=30)


@dataclass
class Tally:
    """The outcomes of one loader."""

    inputs: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    max_seconds: float = 0.0  # wall
    max_cpu_seconds: float = 0.0
    max_rss: int = 0
    max_rss_input: int = 0  # the input size (bytes) of the largest growth
    max_rss_index: int = -1  # ... and its index
    max_seconds_index: int = -1  # the input of the most CPU seconds
    examples: list[dict] = field(default_factory=list)  # the first failures (and a few clear errors)
    notes: dict[str, int] = field(default_factory=dict)
    note_examples: list[int] = field(default_factory=list)  # inputs with a note (the first 10)

    def add(self, index: int, outcome: Outcome, size: int) -> None:
        self.inputs += 1
        self.counts[outcome.kind] += 1
        for note, n in outcome.notes.items():
            self.notes[note] = self.notes.get(note, 0) + n
            if len(self.note_examples) < 10:
                self.note_examples.append(index)
        if outcome.seconds > self.max_seconds:
            self.max_seconds = outcome.seconds
        if outcome.cpu_seconds > self.max_cpu_seconds:
            self.max_cpu_seconds, self.max_seconds_index = outcome.cpu_seconds, index
        if outcome.rss_growth > self.max_rss:
            self.max_rss, self.max_rss_input, self.max_rss_index = outcome.rss_growth, size, index
        shown = sum(1 for e in self.examples if e["kind"] == outcome.kind)
        if (outcome.kind not in ("load", "error") and shown < 10) or (outcome.kind == "error" and shown < 3):
            self.examples.append({"index": index, "kind": outcome.kind, "seconds": round(outcome.seconds, 3),
                                  "cpu_seconds": round(outcome.cpu_seconds, 3),
                                  "rss_growth_mib": round(outcome.rss_growth / MiB, 1), "detail": outcome.detail})


    @classmethod
    def from_record(cls, entry: dict) -> "Tally":
        """The tally of one loader as :func:`write_record` wrote it (``max_rss`` to the 0.1 MiB it kept)."""
        return cls(inputs=entry["inputs"], counts={k: entry[k] for k in OUTCOMES},
                   max_seconds=entry["max_seconds"], max_cpu_seconds=entry["max_cpu_seconds"],
                   max_rss=round(entry["max_rss_growth_mib"] * MiB), max_rss_input=entry["max_rss_input_bytes"],
                   max_rss_index=entry["max_rss_index"], max_seconds_index=entry["max_cpu_seconds_index"],
                   examples=list(entry["examples"]), notes=dict(entry["notes"]),
                   note_examples=list(entry["note_examples"]))

    def merged(self, later: "Tally") -> "Tally":
        """This tally and ``later``'s (inputs after this one's) as one."""
        out = copy.deepcopy(self)
        out.inputs += later.inputs
        out.counts = {k: self.counts[k] + later.counts[k] for k in OUTCOMES}
        out.max_seconds = max(self.max_seconds, later.max_seconds)
        if later.max_cpu_seconds > self.max_cpu_seconds:
            out.max_cpu_seconds, out.max_seconds_index = later.max_cpu_seconds, later.max_seconds_index
        if later.max_rss > self.max_rss:
            out.max_rss, out.max_rss_input, out.max_rss_index = later.max_rss, later.max_rss_input, later.max_rss_index
        for note, n in later.notes.items():
            out.notes[note] = out.notes.get(note, 0) + n
        out.note_examples = (self.note_examples + later.note_examples)[:10]
        for e in later.examples:  # the caps of add(): the first 10 failures and 3 clear errors of each kind
            shown = sum(1 for x in out.examples if x["kind"] == e["kind"])
            if shown < (3 if e["kind"] == "error" else 10):
                out.examples.append(e)
        return out


def _finding(name: str, index: int, outcome: Outcome) -> str:
    """One line for an input that was not a clear error or a correct load, printed as the run goes."""
    first = outcome.detail.splitlines()[0][:200] if outcome.detail else ""
    return f"{outcome.kind}: {name} #{index} (--only {name} --replay {index}): {first}"


def run_benchmark(names: list[str], inputs: int, seed: int, jobs: int, start: int = 0) -> dict[str, Tally]:
    """Inputs ``start`` to ``start + inputs - 1`` of every loader through ``jobs`` worker processes; the tallies."""
    from tqdm.auto import tqdm

    ctx = multiprocessing.get_context("spawn")
    scratch = tempfile.mkdtemp(prefix="attnkit-fuzz-")  # the workers' seeds and sandboxes, even a killed one's
    os.environ["TMPDIR"] = scratch
    tasks = [(name, i) for i in range(start, start + inputs) for name in names]  # interleaved: each loader sees the same load
    tasks.reverse()
    tallies = {name: Tally() for name in names}
    workers = [Worker(ctx, seed) for _ in range(jobs)]
    bar = tqdm(total=len(tasks), unit="input", desc="fuzzing loaders", smoothing=0.02)
    from multiprocessing.connection import wait

    try:
        while tasks or any(w.task for w in workers):
            for w in workers:
                if w.task is None and tasks:
                    w.send(tasks.pop())
            for conn in wait([w.conn for w in workers if w.task], timeout=0.1):
                w = next(w for w in workers if w.conn is conn)
                try:
                    name, index, outcome, size = conn.recv()
                except EOFError:  # the worker died (killed by the system?)
                    name, index = w.task
                    w.proc.join(timeout=10)
                    outcome = Outcome("other", time.perf_counter() - w.started, max(0, w.rss() - w.base),
                                      f"the worker died (exit code {w.proc.exitcode})")
                    size = 0
                    w.kill()
                    workers[workers.index(w)] = w = Worker(ctx, seed)
                tallies[name].add(index, outcome, size)
                if outcome.kind not in ("error", "load"):
                    bar.write(_finding(name, index, outcome))
                w.task = None
                bar.update()
            for i, w in enumerate(workers):
                if w.task is None:
                    continue
                elapsed, rss = time.perf_counter() - w.started, w.rss()
                if elapsed > KILL_S or rss > KILL_RSS:
                    name, index = w.task
                    kind = "hang" if elapsed > KILL_S else "memory"
                    w.kill()
                    outcome = Outcome(kind, elapsed, max(0, rss - w.base), f"killed after {elapsed:.1f} s at "
                                      f"{rss / MiB:.0f} MiB resident")
                    tallies[name].add(index, outcome, 0)
                    bar.write(_finding(name, index, outcome))
                    workers[i] = Worker(ctx, seed)
                    bar.update()
            bar.set_postfix_str(" ".join(f"{k}={sum(t.counts[k] for t in tallies.values())}"
                                         for k in ("other", "hang", "memory")), refresh=False)
    finally:
        bar.close()
        for w in workers:
            w.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return tallies


def table(tallies: dict[str, Tally]) -> str:
    """The summary as a Markdown table."""
    rows = ["| loader | inputs | clear errors | correct loads | other exceptions | hangs (> 5 CPU s) | over the "
            "memory bound | max CPU seconds | max wall seconds | max RSS growth |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, t in tallies.items():
        c = t.counts
        rows.append(f"| {name} | {t.inputs:,} | {c['error']:,} | {c['load']:,} | {c['other']:,} | {c['hang']:,} | "
                    f"{c['memory']:,} | {t.max_cpu_seconds:.2f} | {t.max_seconds:.2f} | {t.max_rss / MiB:.1f} MiB |")
    return "\n".join(rows)


def _machine() -> dict[str, Any]:
    from benchmarks.harness import loadavg, machine_info

    return {**machine_info(), "loadavg": loadavg()}


def read_record(path: Path) -> tuple[dict, dict[str, Tally]]:
    """The runs of the record at ``path`` (without suffix) and its tallies."""
    record = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    runs = record.get("runs") or [{k: record[k] for k in ("command", "date", "minutes", "jobs", "machine")}
                                  | {"first": 0, "last": record["inputs_per_loader"] - 1}]
    return {**record, "runs": runs}, {name: Tally.from_record(e) for name, e in record["loaders"].items()}


def write_record(path: Path, tallies: dict[str, Tally], args: argparse.Namespace, started: float,
                 command: str, earlier: list[dict] = ()) -> None:
    """``path.json`` (everything, with the first failures of each kind) and ``path.md`` (the table); ``earlier``:
    the runs of a record these tallies were merged with."""
    path.parent.mkdir(parents=True, exist_ok=True)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    machine = _machine()
    runs = [*earlier, {"command": command, "date": when, "minutes": round((time.time() - started) / 60, 1),
                       "jobs": args.jobs, "machine": machine, "first": args.start,
                       "last": args.start + args.inputs - 1}]
    total = sum(r["last"] - r["first"] + 1 for r in runs)
    record = {
        "command": command, "date": when, "minutes": round(sum(r["minutes"] for r in runs), 1), "seed": args.seed,
        "inputs_per_loader": total, "jobs": args.jobs, "runs": runs, "hang_cpu_s": HANG_S, "kill_wall_s": KILL_S,
        "rss_bound": f"{RSS_BASE // MiB} MiB + {RSS_PER_BYTE} x input bytes", "machine": machine,
        "loaders": {name: {"what": LOADERS[name].what, "inputs": t.inputs, **t.counts,
                           "max_seconds": round(t.max_seconds, 3), "max_cpu_seconds": round(t.max_cpu_seconds, 3),
                           "max_rss_growth_mib": round(t.max_rss / MiB, 1),
                           "max_rss_input_bytes": t.max_rss_input, "max_rss_index": t.max_rss_index,
                           "max_cpu_seconds_index": t.max_seconds_index, "notes": t.notes,
                           "note_examples": t.note_examples, "examples": t.examples}
                    for name, t in tallies.items()},
    }
    path.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    md = [f"# Fuzzing the loaders ({when})", ""]
    md += [f"- inputs {r['first']:,} to {r['last']:,} of each loader: `{r['command']}` ({r['date']}, {r['minutes']} min, "
           f"{r['jobs']} worker process(es); {r['machine'].get('cpu_model', '?')}, load {r['machine'].get('loadavg')})"
           for r in runs]
    md += ["", table(tallies), "",
          "| loader | what is loaded |", "|---|---|"]
    md += [f"| {name} | {LOADERS[name].what} |" for name in tallies]
    notes = [f"- {name}: {n:,} {note} (inputs {t.note_examples})" for name, t in tallies.items()
             for note, n in t.notes.items()]
    if notes:
        md += ["", "Noted beside the outcomes:", ""] + notes
    path.with_suffix(".md").write_text("\n".join(md) + "\n", encoding="utf-8")


def replay(name: str, index: int, seed: int) -> Outcome:
    """Input ``index`` of loader ``name`` again, in this process (prints the traceback of another exception)."""
    case = make_case(LOADERS[name], RandomDraw(case_seed(seed, name, index)), seed_folder())
    print(f"{name} #{index}: {', '.join(case.files)} ({case.size} bytes), markers {list(case.markers)}")
    return sandbox().run(LOADERS[name], case)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python -m benchmarks.fuzz_loaders")
    parser.add_argument("--inputs", type=int, default=10_000, help="mutated inputs per loader (default 10,000)")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    parser.add_argument("--only", default=None, help=f"comma-separated loaders (default all: {', '.join(LOADERS)})")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--record", type=Path, default=RECORD, help="record path without suffix "
                        "(default benchmarks/records/reliability/fuzz_loaders); --record '' writes none")
    parser.add_argument("--replay", type=int, default=None, help="run input N of the one loader named by --only")
    parser.add_argument("--start", type=int, default=0, help="the first input's index (default 0)")
    parser.add_argument("--merge", action="store_true", help="add to the --record of the inputs before --start "
                        "(same seed and loaders)")
    args = parser.parse_args(argv)
    names = list(LOADERS) if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(LOADERS))
    if unknown or args.inputs < 1 or args.jobs < 1 or args.start < 0:
        parser.error(f"unknown loaders {unknown} (known: {', '.join(LOADERS)})" if unknown
                     else "--inputs and --jobs must be >= 1, --start >= 0")
    earlier: list[dict] = []
    before: dict[str, Tally] = {}
    if args.merge:
        if not args.record.name or not args.record.with_suffix(".json").exists():
            parser.error(f"--merge needs an existing --record; there is no {args.record.with_suffix('.json')}")
        old, before = read_record(args.record)
        end = old["runs"][-1]["last"] + 1
        if old["seed"] != args.seed or set(before) != set(names) or end != args.start:
            parser.error(f"--merge adds inputs right after the record's, of the same seed and loaders: expected "
                         f"--seed {old['seed']} --start {end} and loaders {sorted(before)}, got --seed {args.seed} "
                         f"--start {args.start} and {sorted(names)}")
        earlier = old["runs"]
    if args.replay is not None:
        if len(names) != 1:
            parser.error("--replay needs exactly one loader in --only")
        outcome = replay(names[0], args.replay, args.seed)
        print(f"{outcome.kind} in {outcome.seconds:.2f} s, {outcome.rss_growth / MiB:.1f} MiB\n{outcome.detail}")
        return 0
    started = time.time()
    command = "python -m benchmarks.fuzz_loaders " + " ".join(argv if argv is not None else sys.argv[1:])
    tallies = run_benchmark(names, args.inputs, args.seed, args.jobs, args.start)
    print(table(tallies))
    for name, t in tallies.items():
        for note, n in t.notes.items():
            print(f"note: {name}: {n:,} {note} (inputs {t.note_examples})")
    for name, t in tallies.items():
        for e in t.examples:
            if e["kind"] != "error":
                print(f"\n{name} #{e['index']} ({e['kind']}, replay: --only {name} --replay {e['index']}):\n"
                      f"{e['detail'][:1500]}")
    if args.record.name:  # --record '' writes none
        merged = {name: before[name].merged(t) for name, t in tallies.items()} if before else tallies
        write_record(args.record, merged, args, started, command.strip(), earlier)
        print(f"record: {args.record.with_suffix('.md')}")
    bad = sum(t.counts[k] for t in tallies.values() for k in ("other", "hang", "memory"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
