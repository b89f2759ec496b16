"""Every loader of a file a user may receive, fuzzed (hypothesis): the loaders and mutations of
``benchmarks/fuzz_loaders.py`` (which runs 10,000 seeded inputs per loader), here with inputs drawn by hypothesis,
a few hundred per loader, the big-on-purpose ones capped (huge lines of 256 KiB, 10,000 lines).

Each input starts from real files (a run folder written by ``train_lm``, tokenizer files, Hugging Face folders, a
GGUF file, TSV and text data, lines to translate, a prompt) and gets bytes flipped, set, inserted or deleted, the
file cut or extended; safetensors and GGUF headers that claim huge tensors, counts or offsets past the end of the
file, configs whose sizes disagree with the weights; JSON with wrong types, NaN, huge numbers, deep nesting; text
with invalid UTF-8, NUL bytes, mixed line endings, byte-order marks, huge lines. Each must end in a clear error
(a one-line ``ValueError`` / ``OSError``; the command line exits 2 with one line) or a correct load (checked), and
its peak resident memory must stay within ``64 MiB + 16 x its bytes`` (256 x for text that is tokenized whole): a
claim is refused before it is allocated. Times are not judged here; the benchmark counts hangs.

The regressions of the bugs this fuzzing found are in ``test_checkpoint_fuzz.py``, ``test_fuzz_interop.py`` and
``test_fuzz_tokenizers.py``.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.fuzz_loaders import LOADERS, HypothesisDraw, check_input

# examples per loader: a few hundred, fewer where one input costs more (a model is built and run)
EXAMPLES = {
    "checkpoint-weights": 300, "checkpoint-state": 300, "resume": 200, "resume-optimizer": 200,
    "tokenizer-char": 300, "tokenizer-bpe": 300, "tokenizer-hf": 150, "gguf": 200, "hf-config": 200,
    "hf-weights": 200, "tsv": 300, "parallel-files": 300, "text": 300, "translate-api": 200, "translate-cli": 150,
    "sample-api": 150, "sample-cli": 150,
}
# In the benchmark only: the whole `train_lm --resume` around the checkpoint layer (see the benchmark's record).
BENCHMARK_ONLY = {"resume-train"}


def test_every_loader_is_fuzzed_here_or_named_as_benchmark_only():
    assert set(EXAMPLES) | BENCHMARK_ONLY == set(LOADERS)


@pytest.mark.parametrize("loader", sorted(EXAMPLES))
def test_mutated_inputs(loader):
    @settings(max_examples=EXAMPLES[loader], deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def run(data):
        check_input(loader, HypothesisDraw(data))

    run()
