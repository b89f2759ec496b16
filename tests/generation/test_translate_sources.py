"""encode_sources: source lines to ids under the model's length limit; a line of megabytes is cut to
CHARS_PER_TOKEN x max_len characters before it is tokenized, and its first tokens are those of the whole line;
translate_sentences' progress bar."""

import io
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
from attnkit.generation.translate import CHARS_PER_TOKEN, encode_sources, single_line, translate_sentences

TEXT = ("Die Katze sitzt auf der Matte. Der Hund schläft im Garten, 42 Mal! Was ist das? "
        "Ein Übersetzer übersetzt Sätze; er zählt Wörter und Zeichen.\n") * 40
MAX_LEN = 8


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train(TEXT, vocab_size=400, special_tokens=["<pad>", "<bos>", "<eos>"])


def test_short_and_long_sentences(tok):
    ids, cut = encode_sources(tok, ["Die Katze", "Die Katze sitzt auf der Matte und der Hund schläft"],
                              max_len=MAX_LEN)
    assert ids[0] == tok.encode("Die Katze") + [tok.eos_id] and len(ids[1]) == MAX_LEN and cut == 1
    assert ids[1][:-1] == tok.encode("Die Katze sitzt auf der Matte und der Hund schläft")[:MAX_LEN - 1]


def test_a_line_of_megabytes_is_cut_before_it_is_tokenized(tok):
    line = "Der Hund schläft im Garten. " * 40_000  # 1.1 million characters
    ids, cut = encode_sources(tok, [line, "Was ist das?"], max_len=MAX_LEN)
    assert cut == 1 and ids[0][:-1] == tok.encode(line[:10_000])[:MAX_LEN - 1] and ids[0][-1] == tok.eos_id
    assert ids[1] == tok.encode("Was ist das?") + [tok.eos_id]
    with pytest.raises(ValueError, match=r"line 3: the sentence is 1,120,000 characters, longer than the model's "
                                         r"max_len = 8"):
        encode_sources(tok, ["Was", line], max_len=MAX_LEN, strict=True, first_line=2)


def test_a_long_line_of_few_tokens_is_cut_and_counted(tok):
    """Whitespace and one word of a million letters: no word boundary to cut at, cut at the limit."""
    for line in [" " * (CHARS_PER_TOKEN * MAX_LEN + 5) + "Katze", "a" * 1_000_000]:
        ids, cut = encode_sources(tok, [line], max_len=MAX_LEN)
        assert cut == 1 and 1 <= len(ids[0]) <= MAX_LEN and ids[0][-1] == tok.eos_id


words = st.text(alphabet="abcKäß0123.,!?'-", min_size=1, max_size=12)
spaces = st.sampled_from([" ", "  ", "\t", " \u00a0", "\u3000"])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(words, spaces), min_size=1, max_size=30), st.integers(2, 12))
def test_the_cut_keeps_the_tokens_of_the_whole_line(tok, pieces, max_len):
    """Cut at a word boundary, the line's first max_len - 1 tokens are those of the whole line."""
    unit = "".join(w + s for w, s in pieces)
    line = unit * (CHARS_PER_TOKEN * max_len // len(unit) + 2)
    ids, cut = encode_sources(tok, [line], max_len=max_len)
    assert cut == 1 and ids[0] == tok.encode(line)[:max_len - 1] + [tok.eos_id]


def test_a_translation_is_one_line():
    """Was: a model that writes a line break split one output line in two (fuzz_loaders, translate-cli)."""
    assert single_line("Das Haus\nist\r\ngroß\u2028.\x85") == "Das Haus ist groß ."
    assert single_line("") == "" and single_line("ein Satz") == "ein Satz"


def test_a_translation_is_one_tsv_field():
    """Was: a tab the model wrote (byte-level BPE has a token for it) stayed in the translation, so `translate
    --output` wrote a pair of three fields and `eval mt --hyps` refused to replace its own translations file."""
    assert single_line("Das\tHaus\n\tist") == "Das Haus  ist"


@pytest.mark.parametrize("sentences, options, message", [
    ("Die Katze", {}, r"sentences must be a list of strings, got str"),  # was: translated letter by letter
    (["Die Katze", None], {}, r"sentences\[1\] must be a string, got NoneType"),  # was: AttributeError
    (["Die Katze"], {"batch_size": 2.5}, r"batch_size must be an int >= 1, got 2.5 \(float\)"),  # was: TypeError
    (["Die Katze"], {"beam": "4"}, r"beam must be an int >= 1, got '4' \(str\)"),  # was: TypeError
])
def test_translate_sentences_refuses_bad_input_before_decoding(tok, sentences, options, message):
    with pytest.raises(ValueError, match=message):
        translate_sentences(None, tok, sentences, **options)  # refused before the model is needed


def test_a_cut_line_keeps_a_word_that_ends_at_the_limit():
    from attnkit.generation.translate import _cut_line

    assert _cut_line("aaaa bbbb cccc", 9) == "aaaa bbbb"  # "bbbb" ends at character 9: it fits
    assert _cut_line("aaaa bbbb cccc", 8) == "aaaa"  # "bbbb" would be cut inside: dropped whole
    assert _cut_line("abcdefghij", 4) == "abcd"  # no word boundary: a plain cut


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("progress, terminal", [(True, True), (True, False), (False, True), (None, True)])
def test_a_progress_bar_counts_the_sentences_on_a_terminal_only(tok, monkeypatch, progress, terminal):
    """``progress=True``: a "translating" bar of the sentences on stderr when it is a terminal (a log file or a
    pipe gets none), advanced by each batch's sentences (2 then 1 here) and erased when done; ``progress=False``
    (the default, None here): none anywhere. The translations are the same either way."""
    import tqdm.auto
    from attnkit.models.transformer import Transformer

    from helpers import tiny_transformer_config

    torch.manual_seed(0)
    config = tiny_transformer_config(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size)
    model = Transformer(config).eval()
    sentences = ["Die Katze", "Der Hund schläft", "Was ist das?"]
    want, _ = translate_sentences(model, tok, sentences, beam=1, batch_size=2, max_len_b=3)
    steps = []

    class _Counted(tqdm.auto.tqdm):
        def update(self, n=1):
            steps.append(n)
            return super().update(n)

    monkeypatch.setattr(tqdm.auto, "tqdm", _Counted)
    err = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    options = {} if progress is None else {"progress": progress}
    got, _ = translate_sentences(model, tok, sentences, beam=1, batch_size=2, max_len_b=3, **options)
    assert got == want and steps == [2, 1]
    shown = bool(progress) and terminal
    assert ("translating" in err.getvalue() and "/3" in err.getvalue()) == shown and (err.getvalue() == "") != shown
    assert "\n" not in err.getvalue()
