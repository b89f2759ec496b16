"""Per-sequence stopping: EOS (not kept), stop strings (kept), length limits."""

import io

import pytest
import torch

import helpers
from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.generation import TextStreamer, generate
from attnkit.generation.stopping import StoppingCriteria, contains_stop_string

TOK = CharTokenizer("abcdefgh.\n ")


def ids(text):
    return TOK.encode(text)


def test_each_sequence_stops_for_its_own_reason():
    eos = ids(".")[0]
    sc = StoppingCriteria(3, max_new_tokens=4, eos_token_id=eos, stop_strings=["cd"], tokenizer=TOK)
    feeds = {0: ids("ab."), 1: ids("bcd"), 2: ids("hhhh")}
    kept = {b: [sc.add(b, t) for t in toks] for b, toks in feeds.items()}
    assert kept[0] == [True, True, False]  # EOS is not kept
    assert sc.outputs == [ids("ab"), ids("bcd"), ids("hhhh")]  # stop string kept; length limit 4
    assert sc.reasons == ["eos", "stop_string", "length"]
    assert sc.all_done


def test_stop_string_spanning_two_tokens_and_only_in_generated_text():
    sc = StoppingCriteria(1, max_new_tokens=10, stop_strings=["\n\n"], tokenizer=TOK)
    for t in ids("a\n"):
        sc.add(0, t)
    assert sc.done == [False]  # one newline is not the stop string
    sc.add(0, ids("\n")[0])
    assert sc.reasons == ["stop_string"] and TOK.decode(sc.outputs[0]) == "a\n\n"


def test_per_sequence_length_limits_and_zero():
    sc = StoppingCriteria(3, max_new_tokens=[1, 2, 0])
    assert sc.done == [False, False, True]
    sc.add(0, 5)
    sc.add(1, 5)
    assert sc.done == [True, False, True]
    sc.add(1, 6)
    assert sc.all_done and sc.outputs == [[5], [5, 6], []]


def test_several_eos_ids():
    sc = StoppingCriteria(2, max_new_tokens=5, eos_token_id=[7, 9])
    sc.add(0, 9)
    sc.add(1, 7)
    assert sc.reasons == ["eos", "eos"] and sc.outputs == [[], []]


def test_a_stopped_sequence_takes_no_more_tokens():
    sc = StoppingCriteria(1, max_new_tokens=1)
    sc.add(0, 3)
    with pytest.raises(ValueError, match="already stopped"):
        sc.add(0, 4)


def test_contains_stop_string():
    assert contains_stop_string("hello world", ["xyz", "lo w"])
    assert not contains_stop_string("hello", ["world"])


def test_stop_strings_need_a_tokenizer():
    with pytest.raises(ValueError, match="tokenizer"):
        StoppingCriteria(1, max_new_tokens=3, stop_strings=["x"])


@pytest.mark.parametrize("bad", ["", [""], [3], 5])
def test_stop_strings_must_be_non_empty_strings(bad):
    with pytest.raises(ValueError, match="stop_strings"):
        StoppingCriteria(1, max_new_tokens=3, stop_strings=bad, tokenizer=TOK)


@pytest.mark.parametrize("bad", [-1, "2", [1, "x"], True])
def test_eos_token_id_must_be_ids(bad):
    with pytest.raises(ValueError, match="eos_token_id"):
        StoppingCriteria(1, max_new_tokens=3, eos_token_id=bad)


@pytest.mark.parametrize("bad", [-1, 2.5, None])
def test_max_new_tokens_must_be_a_non_negative_int(bad):
    with pytest.raises(ValueError, match="max_new_tokens"):
        StoppingCriteria(1, max_new_tokens=bad)


def test_per_sequence_limits_must_match_batch():
    with pytest.raises(ValueError, match="B = 2"):
        StoppingCriteria(2, max_new_tokens=[1, 2, 3])


# ---- stop strings read final text, as the generated text continues the prompt -------------------------------------
class Scripted(torch.nn.Module):
    """A decoder-only "model" that continues every prompt with ``script`` (its n-th new token is ``script[n]``).

    Shape: idx ``(B, T)`` -> logits ``(B, T, V)``."""

    def __init__(self, script, prompt_len, vocab_size):
        super().__init__()
        self.script, self.prompt_len, self.vocab_size = script, prompt_len, vocab_size

    def forward(self, idx, key_padding_mask=None, position_ids=None, cache=None):
        B, T = idx.shape
        logits = torch.zeros(B, T, self.vocab_size)
        logits[:, -1, self.script[min(T - self.prompt_len, len(self.script) - 1)]] = 10.0
        return logits


def _bpe():
    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer

    return BPETokenizer.train("the cat sat on the mat. " * 20, vocab_size=300, special_tokens=["<pad>", "<eos>"])


@pytest.mark.parametrize("stop", ["\ufffd", "ok \ufffd", ["x", "\ufffd"]])
def test_a_stop_string_ending_in_fffd_never_matches_a_character_still_being_generated(stop):
    """A byte-level decoder shows the first bytes of an emoji as U+FFFD: "\\ufffd" used to stop there, mid-character,
    and the output ended in a broken emoji."""
    tok = _bpe()
    script = tok.encode("ok 🐍! ok")  # the emoji is four byte tokens
    sink = io.StringIO()
    out = generate(Scripted(script, 1, tok.vocab_size), [[5]], max_new_tokens=len(script), use_cache=False,
                   stop_strings=stop, tokenizer=tok, streamer=TextStreamer(tok, file=sink, end=""))[0]
    assert tok.decode(out) == sink.getvalue() == "ok 🐍! ok"
    sc = StoppingCriteria(1, max_new_tokens=10, stop_strings=stop, tokenizer=tok)
    for t in tok.encode("ok \ufffd!"):  # a real U+FFFD in the text: found once text follows it
        sc.add(0, t)
    assert sc.reasons == ["stop_string"] and tok.decode(sc.outputs[0]) == "ok \ufffd!"


def test_a_stop_string_is_read_as_the_text_continues_the_prompt():
    """A SentencePiece decoder drops the space of a first ``▁time``: " time" did not stop after "once upon a"."""
    tok = helpers.metaspace_tokenizer()
    prompt = tok.encode("once upon a")
    script = tok.encode("once upon a time there")[len(prompt):]  # ▁time ▁there
    model = Scripted(script, len(prompt), tok.vocab_size)
    run = lambda stop: generate(model, [prompt], max_new_tokens=2, use_cache=False, stop_strings=stop,  # noqa: E731
                                tokenizer=tok)[0]
    assert run(" time") == script[:1]  # a stop on the first token
    assert run("a time") == script  # the prompt's text is never searched
    assert run([" there", " time"]) == script[:1]  # several: the first one found


def test_a_prompt_id_without_text_leaves_the_generated_text_alone():
    """A model's padded output layer: a prompt may hold ids the tokenizer cannot decode; stop strings still work."""
    tok = _bpe()
    script = tok.encode("the cat. the mat")
    model = Scripted(script, 2, tok.vocab_size + 8)  # (output layer padded past the tokenizer)
    out = generate(model, [[5, tok.vocab_size + 3]], max_new_tokens=len(script), use_cache=False, stop_strings=".",
                   tokenizer=tok)[0]
    assert tok.decode(out) == "the cat."


def test_contexts_must_be_one_per_sequence():
    with pytest.raises(ValueError, match=r"contexts must be None or B = 2 lists of ids, got 1"):
        StoppingCriteria(2, max_new_tokens=3, stop_strings="x", tokenizer=TOK, contexts=[[1]])


def test_a_real_fffd_at_the_start_of_the_generated_text_is_text_a_stop_string_matches():
    """Only trailing U+FFFD characters wait for the text that follows them; a leading one is final text."""
    tok = _bpe()
    sc = StoppingCriteria(1, max_new_tokens=10, stop_strings="\ufffd", tokenizer=tok)
    for t in tok.encode("\ufffd!"):
        sc.add(0, t)
    assert sc.reasons == ["stop_string"] and tok.decode(sc.outputs[0]) == "\ufffd!"


def test_the_context_is_the_prompts_last_ids():
    """The generated text continues the end of the prompt: its last ids are decoded before it (here the first id,
    one the tokenizer has no text for, is not among them, and " time" is found after "there once upon a")."""
    tok = helpers.metaspace_tokenizer()
    prompt = [tok.vocab_size + 3, *tok.encode("there once upon a")]
    (time,) = tok.encode("once upon a time")[len(tok.encode("once upon a")):]
    sc = StoppingCriteria(1, max_new_tokens=3, stop_strings=" time", tokenizer=tok, contexts=[prompt])
    sc.add(0, time)
    assert sc.reasons == ["stop_string"]
