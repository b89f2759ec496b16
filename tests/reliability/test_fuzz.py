"""Everything a user may hand attnkit, fuzzed with hypothesis: one table of targets, one parametrized test.

Each target draws its inputs from ``st.data()`` and checks one promise: the input ends in a **clear error** (a
one-line ``ValueError`` / ``OSError``; the command line exits 2 with one line) or a **correct load** (checked), never
another exception, a wrong load or a traceback.

- **Mutated real files**, one target per loader of ``benchmarks/fuzz_loaders.py`` (which runs 10,000 seeded inputs
  per loader; here a few hundred each, the big-on-purpose ones capped: huge lines of 256 KiB, 10,000 lines). Each
  input starts from real files (a run folder written by ``train_lm``, tokenizer files, Hugging Face folders, a GGUF
  file, TSV and text data, lines to translate, a prompt) and gets bytes flipped, set, inserted or deleted, the file
  cut or extended; safetensors and GGUF headers that claim huge tensors, counts or offsets past the end of the file,
  configs whose sizes disagree with the weights; JSON with wrong types, NaN, huge numbers, deep nesting; text with
  invalid UTF-8, NUL bytes, mixed line endings, byte-order marks, huge lines. Its peak resident memory must stay
  within ``64 MiB + 16 x its bytes`` (256 x for text that is tokenized whole): a claim is refused before it is
  allocated. Times are not judged here; the benchmark counts hangs.
- **Hand-edited configs** (``config-*``): up to three fields of ``TrainConfig``, ``GPTConfig`` or
  ``TransformerConfig`` set to values of any JSON type give a config that round-trips through JSON, or a
  ``ValueError``.
- **Data files of random bytes and text** (``random-*``): the LM text reader, the TSV reader and the parallel-file
  reader give data (non-empty sentences, as many sources as targets; text a character tokenizer round-trips) or a
  ``ValueError``.

The regressions of the bugs this fuzzing found sit beside the code they test, each naming what happened before the
fix: ``tests/checkpoints/test_found_by_fuzzing.py``, ``tests/interop/test_found_by_fuzzing.py`` and
``tests/data/tokenizers/test_found_by_fuzzing.py``.
"""

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnkit.data.corpora.parallel import read_parallel_files, read_tsv
from attnkit.data.corpora.text import load_text_corpus, read_text_file
from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.models.configs import GPTConfig, TransformerConfig
from attnkit.training.config import TrainConfig
from benchmarks.fuzz_loaders import LOADERS, HypothesisDraw, check_input

# ---------------------------------------------------------------------------------------------------------------
# mutated real files: the benchmark's loaders
# ---------------------------------------------------------------------------------------------------------------
# examples per loader: a few hundred, fewer where one input costs more (a model is built and run)
LOADER_EXAMPLES = {
    "checkpoint-weights": 300, "checkpoint-state": 300, "resume": 200, "resume-optimizer": 200,
    "tokenizer-char": 300, "tokenizer-bpe": 300, "tokenizer-hf": 150, "gguf": 200, "hf-config": 200,
    "hf-weights": 200, "tsv": 300, "parallel-files": 300, "text": 300, "translate-api": 200, "translate-cli": 150,
    "sample-api": 150, "sample-cli": 150,
}
# In the benchmark only: the whole `train_lm --resume` around the checkpoint layer (see the benchmark's record).
BENCHMARK_ONLY = {"resume-train"}


def _loader(name: str) -> Callable[[Any], None]:
    def check(data: Any) -> None:
        check_input(name, HypothesisDraw(data))

    return check


# ---------------------------------------------------------------------------------------------------------------
# hand-edited configs
# ---------------------------------------------------------------------------------------------------------------
JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(allow_nan=False, allow_infinity=False),
                        st.text(max_size=4), st.lists(st.integers(0, 3), max_size=2),
                        st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
CONFIG_BASES = {
    TrainConfig: TrainConfig().to_dict(),
    GPTConfig: dict(vocab_size=32, block_size=16, n_layer=1, n_head=2, n_embd=16),
    TransformerConfig: TransformerConfig(src_vocab_size=32, tgt_vocab_size=32, d_model=16, num_heads=2,
                                         num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32).to_dict(),
}


def _config(cls: type) -> Callable[[Any], None]:
    names = [f.name for f in dataclasses.fields(cls)]

    def check(data: Any) -> None:
        edits = data.draw(st.dictionaries(st.sampled_from(names), JSON_VALUES, min_size=1, max_size=3))
        loaded = json.loads(json.dumps(CONFIG_BASES[cls] | edits))  # what a hand-edited state.json reads back as
        try:
            cfg = cls.from_dict(loaded)
        except ValueError:
            return
        assert cls.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg

    return check


# ---------------------------------------------------------------------------------------------------------------
# data files of random bytes and text
# ---------------------------------------------------------------------------------------------------------------
CONTENTS = st.one_of(st.binary(max_size=300), st.text(max_size=300).map(lambda t: t.encode("utf-8")),
                     st.text(alphabet="ab\t\n\r é", max_size=300).map(lambda t: t.encode("utf-8")),
                     st.text(max_size=100).map(lambda t: t.encode("utf-16")))
FOLDER = tempfile.TemporaryDirectory(prefix="attnkit-fuzz-")  # one folder, its files rewritten per example


def _file(data: bytes, name: str) -> Path:
    path = Path(FOLDER.name) / name
    path.write_bytes(data)
    return path


def _random_text(data: Any) -> None:
    path = _file(data.draw(CONTENTS), "corpus.txt")
    try:
        text = read_text_file(path)
    except ValueError:
        return
    assert isinstance(text, str) and text
    try:
        load_text_corpus(path)
    except ValueError:
        pass
    tok = CharTokenizer.train(text)
    assert tok.decode(tok.encode(text)) == text


def _random_tsv(data: Any) -> None:
    try:
        corpus = read_tsv(_file(data.draw(CONTENTS), "pairs.tsv"))
    except ValueError:
        return
    assert all(isinstance(s, str) and isinstance(t, str) and s and t for s, t in zip(corpus.sources, corpus.targets))


def _random_parallel_files(data: Any) -> None:
    try:
        corpus = read_parallel_files(_file(data.draw(CONTENTS), "train.de"), _file(data.draw(CONTENTS), "train.en"))
    except ValueError:
        return
    assert len(corpus.sources) == len(corpus.targets)


# ---------------------------------------------------------------------------------------------------------------
# the table and the test
# ---------------------------------------------------------------------------------------------------------------
TARGETS: dict[str, tuple[int, Callable[[Any], None]]] = {
    **{name: (n, _loader(name)) for name, n in LOADER_EXAMPLES.items()},
    "config-train": (120, _config(TrainConfig)),
    "config-gpt": (120, _config(GPTConfig)),
    "config-transformer": (120, _config(TransformerConfig)),
    "random-text": (60, _random_text),
    "random-tsv": (60, _random_tsv),
    "random-parallel-files": (60, _random_parallel_files),
}


def test_every_loader_of_the_benchmark_is_a_target_or_named_as_benchmark_only():
    assert set(LOADER_EXAMPLES) | BENCHMARK_ONLY == set(LOADERS)


@pytest.mark.parametrize("target", list(TARGETS))
def test_fuzzed_inputs(target):
    examples, check = TARGETS[target]

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def run(data):
        check(data)

    run()
