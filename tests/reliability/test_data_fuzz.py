"""Data files, fuzzed (hypothesis): random bytes and random text through the LM text reader, the TSV reader
and the tokenizers must give data or one ValueError naming the problem, never another exception. (Mutations of
real data files, as the benchmark makes them, are in ``test_fuzz_loaders.py``.)
"""

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.data.corpora.parallel import read_parallel_files, read_tsv
from attnkit.data.corpora.text import load_text_corpus, read_text_file

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)
contents = st.one_of(st.binary(max_size=300), st.text(max_size=300).map(lambda t: t.encode("utf-8")),
                     st.text(alphabet="ab\t\n\r é", max_size=300).map(lambda t: t.encode("utf-8")),
                     st.text(max_size=100).map(lambda t: t.encode("utf-16")))


FOLDER = tempfile.TemporaryDirectory(prefix="attnkit-fuzz-")  # one folder, files rewritten per example


def _file(data: bytes, name: str) -> Path:
    path = Path(FOLDER.name) / name
    path.write_bytes(data)
    return path


@SETTINGS
@given(contents)
def test_lm_text_file_reads_or_refuses(data):
    path = _file(data, "corpus.txt")
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


@SETTINGS
@given(contents)
def test_tsv_reads_or_refuses(data):
    try:
        corpus = read_tsv(_file(data, "pairs.tsv"))
    except ValueError:
        return
    assert all(isinstance(s, str) and isinstance(t, str) and s and t for s, t in zip(corpus.sources, corpus.targets))


@SETTINGS
@given(contents, contents)
def test_parallel_files_read_or_refuse(src, tgt):
    try:
        corpus = read_parallel_files(_file(src, "train.de"), _file(tgt, "train.en"))
    except ValueError:
        return
    assert len(corpus.sources) == len(corpus.targets)
