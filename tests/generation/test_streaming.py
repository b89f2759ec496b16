"""The streamer prints exactly the final decoded text, and never half a UTF-8 character."""

import io

import pytest
import torch

from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
from attnkit.generation import TextStreamer, generate


@pytest.fixture(scope="module")
def bpe():
    text = "the cat sat on the mat. the dog sat on the log. " * 20
    return BPETokenizer.train(text, vocab_size=300, special_tokens=["<pad>", "<eos>"])


class Recorder(io.StringIO):
    """A text file that remembers every separate write."""

    def __init__(self):
        super().__init__()
        self.pieces = []

    def write(self, s):
        self.pieces.append(s)
        return super().write(s)


def test_multibyte_character_is_printed_whole(bpe):
    ids = bpe.encode("ok 🐍!")
    snake = bpe.encode("🐍")
    assert len(snake) == 4  # byte-level BPE: four byte tokens for one emoji (none of them merged)
    out = Recorder()
    streamer = TextStreamer(bpe, file=out, end="")
    for i in ids:
        streamer.put([i])
    streamer.end()
    assert out.getvalue() == "ok 🐍!"
    assert "🐍" in out.pieces  # one piece holds the whole emoji...
    assert not any("\ufffd" in p for p in out.pieces)  # ...and no piece holds a broken half of it


def test_streams_to_stdout_same_text_as_final_decode(bpe, make_gpt, capsys):
    model = make_gpt("gpt2", seed=4, vocab_size=bpe.vocab_size)
    prompt = [bpe.encode("the cat")]
    # random tokens include lone byte tokens, i.e. partial UTF-8 characters: the hard case for streaming
    out = generate(model, prompt, max_new_tokens=24, do_sample=True, seed=11, streamer=TextStreamer(bpe))
    printed = capsys.readouterr().out
    assert printed == bpe.decode(out[0]) + "\n"
    assert len(out[0]) == 24


def test_streamer_follows_stopping_and_skips_eos(bpe, make_gpt):
    model = make_gpt("llama", seed=5, vocab_size=bpe.vocab_size)
    prompt = [bpe.encode("the dog")]
    full = generate(model, prompt, max_new_tokens=16)[0]
    eos = full[6]
    sink = Recorder()
    streamer = TextStreamer(bpe, file=sink, end="")
    out = generate(model, prompt, max_new_tokens=16, eos_token_id=eos, streamer=streamer)[0]
    assert out == full[: full.index(eos)]
    assert sink.getvalue() == streamer.text == bpe.decode(out)


def test_streamer_needs_a_tokenizer():
    with pytest.raises(ValueError, match="decode"):
        TextStreamer(object())


def test_streamer_end_must_be_text(bpe):
    with pytest.raises(ValueError, match="end"):
        TextStreamer(bpe, end=None)


def test_tensor_prompt_with_streamer(bpe, make_gpt, capsys):
    model = make_gpt("gpt2", seed=6, vocab_size=bpe.vocab_size)
    out = generate(model, torch.tensor([bpe.encode("on the")]), max_new_tokens=5, streamer=TextStreamer(bpe, end=""))
    assert capsys.readouterr().out == bpe.decode(out[0])


def test_streamer_tokenizer_limits_a_padded_output_layer(bpe, make_gpt):
    """Was: with a streamer but no ``tokenizer=``, a padded output layer's id (no text) reached the streamer, which
    raised ``ValueError: token id must be an integer in [0, V)`` mid-generation, after the model had run."""
    V = bpe.vocab_size
    model = make_gpt("gpt2", seed=4, vocab_size=V + 8)
    model.lm_head.register_forward_hook(lambda mod, inp, out: out + 100.0 * (torch.arange(V + 8) == V + 3))
    prompt = [bpe.encode("the cat")]
    assert generate(model, prompt, max_new_tokens=3) == [[V + 3] * 3]  # the padding id wins without a limit
    sink = Recorder()
    out = generate(model, prompt, max_new_tokens=3, streamer=TextStreamer(bpe, file=sink, end=""))
    assert out == generate(model, prompt, max_new_tokens=3, tokenizer=bpe)  # limited as by tokenizer=
    assert max(out[0]) < V and sink.getvalue() == bpe.decode(out[0])
