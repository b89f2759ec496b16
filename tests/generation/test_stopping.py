"""Per-sequence stopping: EOS (not kept), stop strings (kept), length limits."""

import pytest

from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
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
