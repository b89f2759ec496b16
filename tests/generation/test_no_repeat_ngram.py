"""No-repeat n-grams: ``no_repeat_ngram_filter`` against hand-computed examples and transformers'
NoRepeatNGramLogitsProcessor (random histories, hypothesis), left padding, ``generate`` against transformers'
``generate(no_repeat_ngram_size=...)``, a padded output layer, the argument checks and ``SampleOptions``.

Axis legend: B batch, V vocabulary, L history length.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import api
from attnkit.generation import GenerationConfig, generate
from attnkit.generation.processors import no_repeat_ngram_filter, process_logits

from helpers import tiny_hf_folder

logits_processors = pytest.importorskip("transformers.generation.logits_process")
NEG = float("-inf")


def _banned(logits: torch.Tensor) -> list[list[int]]:
    return [torch.nonzero(row == NEG).flatten().tolist() for row in logits]


def test_the_tokens_that_followed_the_last_n_minus_1_tokens_are_banned():
    ids = torch.tensor([[1, 2, 3, 1, 2], [4, 4, 4, 0, 5]])  # (B, L)
    logits = torch.zeros(2, 6)  # (B, V)
    assert _banned(no_repeat_ngram_filter(logits, ids, 3)) == [[3], []]  # "1 2" was followed by 3; "0 5" is new
    assert _banned(no_repeat_ngram_filter(logits, ids, 2)) == [[3], []]  # "2" was followed by 3
    assert _banned(no_repeat_ngram_filter(logits, ids, 1)) == [[1, 2, 3], [0, 4, 5]]  # every token seen
    assert _banned(no_repeat_ngram_filter(logits, ids, 6)) == [[], []]  # no 6-gram in 5 tokens
    assert _banned(no_repeat_ngram_filter(logits, ids, 0)) == [[], []]  # off
    assert torch.equal(logits, torch.zeros(2, 6))  # the input is untouched


def test_left_padding_is_no_part_of_an_n_gram_and_a_row_is_never_left_without_a_token():
    """An n-gram (or the last n - 1 tokens) reaching into the padding bans nothing; a row whose every finite logit
    would be banned keeps them all (transformers would pick id 0)."""
    ids = torch.tensor([[0, 0, 7, 7], [0, 1, 2, 1]])  # (B, L): row 0 padded twice, row 1 once
    pad = torch.tensor([[True, True, False, False], [True, False, False, False]])
    logits = torch.zeros(2, 8)
    assert _banned(no_repeat_ngram_filter(logits, ids, 2, ignore_mask=pad)) == [[7], [2]]  # not the padding's 0
    assert _banned(no_repeat_ngram_filter(logits, ids, 4, ignore_mask=pad)) == [[], []]
    assert _banned(no_repeat_ngram_filter(logits, ids, 2)) == [[7], [2]]  # without the mask "0 0 7" etc. count
    narrow = torch.tensor([[0.0, NEG, NEG, NEG, NEG, NEG, NEG, 1.0]])  # only ids 0 and 7 possible
    assert _banned(no_repeat_ngram_filter(narrow, torch.tensor([[7, 0, 7]]), 1)) == [[1, 2, 3, 4, 5, 6]]
    with pytest.raises(ValueError, match=r"ignore_mask must be a bool tensor of shape \(2, 4\), got torch.int64"):
        no_repeat_ngram_filter(logits, ids, 2, ignore_mask=pad.long())


def test_an_ignored_position_anywhere_breaks_the_n_grams_that_hold_it_and_the_tail():
    """``ignore_mask`` in the middle of a row (an id past a padded vocabulary in a prompt, read as padding): an n-gram
    holding an ignored position, at its start or as the token it would ban, bans nothing, the last ``n - 1`` tokens
    holding one ban nothing, and an ignored position just before them does not matter; ``process_logits`` passes
    the mask on."""
    ids = torch.tensor([[3, 1, 0, 1], [3, 0, 5, 0], [1, 2, 0, 1]])  # (B, L)
    pad = torch.tensor([[False, False, True, False], [False, False, False, True], [False, False, True, False]])
    logits = torch.zeros(3, 6)  # (B, V)
    # row 0: "1 0" holds the ignored 0 (not banned); row 1: the tail "0" is ignored; row 2: "1 2" is whole text
    assert _banned(no_repeat_ngram_filter(logits, ids, 2, ignore_mask=pad)) == [[], [], [2]]
    assert _banned(no_repeat_ngram_filter(logits, ids, 2)) == [[0], [5], [2]]  # what the mask leaves out
    assert torch.equal(process_logits(logits, input_ids=ids, ignore_mask=pad, no_repeat_ngram_size=2),
                       no_repeat_ngram_filter(logits, ids, 2, ignore_mask=pad))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(1, 4), st.integers(0, 12), st.integers(2, 6), st.data())
def test_it_bans_what_transformers_bans(n, L, V, data):
    """Random histories over a small vocabulary (so that n-grams repeat) and random logits: the same logits out as
    transformers' NoRepeatNGramLogitsProcessor, whenever it leaves some token (see the test above)."""
    B = 3
    ids = torch.tensor(data.draw(st.lists(st.lists(st.integers(0, V - 1), min_size=L, max_size=L), min_size=B,
                                          max_size=B)), dtype=torch.long).reshape(B, L)  # (B, L)
    logits = torch.randn(B, V, generator=torch.Generator().manual_seed(L * 31 + V))  # (B, V)
    want = logits_processors.NoRepeatNGramLogitsProcessor(n)(ids, logits.clone())
    got = no_repeat_ngram_filter(logits, ids, n)
    for b in range(B):
        if torch.isfinite(want[b]).any():
            assert torch.equal(got[b], want[b])
        else:
            assert torch.equal(got[b], logits[b])


def test_it_runs_after_the_repetition_penalty_and_before_top_p():
    """transformers' order: the ban comes before the warpers, so top-p sums the mass of the tokens left."""
    logits = torch.tensor([[2.0, 1.0, 0.0]]).log_softmax(-1)  # probabilities ~0.67, 0.24, 0.09
    ids = torch.tensor([[0, 0]])  # "0" was followed by 0: 0 is banned
    out = process_logits(logits, input_ids=ids, no_repeat_ngram_size=2, top_p=0.5)
    assert _banned(out) == [[0, 2]]  # of 1 and 2 (0.73, 0.27 once renormalised) top-p 0.5 keeps 1
    with pytest.raises(ValueError, match=r"no_repeat_ngram_size > 0 needs input_ids"):
        process_logits(logits, no_repeat_ngram_size=2)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    return tiny_hf_folder(tmp_path_factory.mktemp("hf") / "model", std=0.02)  # std 0.02: it repeats itself


@pytest.mark.parametrize("n", [1, 2, 3])
def test_greedy_generation_equals_transformers_generate(hf_folder, n):
    """A small random model that loops: with ``no_repeat_ngram_size`` greedy decoding gives transformers' tokens
    (without it, it repeats an n-gram)."""
    import transformers

    from attnkit.interop.load import load_model

    loaded = load_model(str(hf_folder))
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(hf_folder), dtype=torch.float32).eval()
    prompt = loaded.tokenizer.encode("the cat sat on")
    ref = hf.generate(torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False,
                      no_repeat_ngram_size=n, pad_token_id=0)[0, len(prompt):].tolist()
    got = generate(loaded.model, [prompt], max_new_tokens=12, no_repeat_ngram_size=n)[0]
    assert got == ref
    seq = prompt + got
    grams = [tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)]
    assert len(grams) == len(set(grams))
    plain = prompt + generate(loaded.model, [prompt], max_new_tokens=12)[0]
    plain_grams = [tuple(plain[i:i + n]) for i in range(len(plain) - n + 1)]
    assert len(plain_grams) > len(set(plain_grams))  # the test model does repeat itself without the ban


def test_a_padded_output_layer_and_a_batch_of_prompts(hf_folder):
    """Ids past ``vocab_size`` in a prompt (a padded output layer's) and left padding in a batch are no part of
    an n-gram: each row generates what it generates alone."""
    from attnkit.interop.load import load_model

    loaded = load_model(str(hf_folder))
    V = loaded.model.config.vocab_size
    prompts = [loaded.tokenizer.encode("the cat sat on"), [V - 1] + loaded.tokenizer.encode("the mat")]
    alone = [generate(loaded.model, [p], max_new_tokens=8, no_repeat_ngram_size=2, vocab_size=V - 1)[0]
             for p in prompts]
    assert generate(loaded.model, prompts, max_new_tokens=8, no_repeat_ngram_size=2, vocab_size=V - 1) == alone


def test_the_size_is_checked_and_reaches_generate_from_the_sample_options(hf_folder):
    for bad, message in [(-1, r"no_repeat_ngram_size must be an int >= 0, got -1"),
                         (1.5, r"no_repeat_ngram_size must be an int >= 0, got 1.5")]:
        with pytest.raises(ValueError, match=message):
            GenerationConfig(max_new_tokens=1, no_repeat_ngram_size=bad)
    sampler = api.Sampler(model=str(hf_folder), prompt="the cat", max_new_tokens=3, greedy=True,
                          no_repeat_ngram_size=2)
    assert sampler.config.no_repeat_ngram_size == 2
    assert GenerationConfig.from_dict(sampler.config.to_dict()) == sampler.config
