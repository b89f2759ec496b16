"""Min-p sampling: ``min_p_filter`` against hand-computed examples and transformers' MinPLogitsWarper (random
logits, hypothesis), its place in ``process_logits`` and ``generate`` (transformers' order), its argument checks,
and ``SampleOptions(min_p=...)``.

Axis legend: B batch, V vocabulary, L history length.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnkit.generation.processors as P
from attnkit.generation import GenerationConfig, generate
from attnkit.generation.processors import check_min_p, min_p_filter, process_logits

from helpers import logit_rows

logits_processors = pytest.importorskip("transformers.generation.logits_process")
SETTINGS = settings(max_examples=200, deadline=None, derandomize=True)
NEG = float("-inf")


def _hf_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    return logits_processors.MinPLogitsWarper(min_p)(None, logits.clone())


# ---- hand-computed examples ------------------------------------------------------------------------------------
def test_min_p_keeps_the_tokens_above_min_p_times_the_largest_probability():
    # probabilities 0.15, 0.5, 0.05, 0.3: the cut-off is min_p * 0.5
    logits = torch.tensor([[0.15, 0.5, 0.05, 0.3]]).log()
    keep = lambda p: torch.isfinite(min_p_filter(logits, p))[0].tolist()  # noqa: E731
    assert keep(0.2) == [True, True, False, True]  # cut-off 0.1: the 0.05 goes
    assert keep(0.5) == [False, True, False, True]  # cut-off 0.25: the 0.15 goes too
    assert keep(0.7) == [False, True, False, False]  # cut-off 0.35: only the most likely token stays
    assert keep(1.0) == [False, True, False, False]
    assert keep(0.0) == [True, True, True, True]
    out = min_p_filter(logits, 0.2)
    assert torch.equal(out[0, [0, 1, 3]], logits[0, [0, 1, 3]])  # kept logits are unchanged
    assert torch.equal(logits, torch.tensor([[0.15, 0.5, 0.05, 0.3]]).log())  # input untouched


def test_min_p_per_row_ties_and_minus_inf():
    logits = torch.tensor([[2.0, 2.0, 0.0, NEG], [NEG, 1.0, 1.0 + math.log(0.3), 1.0 + math.log(0.05)]])
    out = min_p_filter(logits, 1.0)
    assert torch.isfinite(out).tolist() == [[True, True, False, False], [False, True, False, False]]  # ties stay
    out = min_p_filter(logits, 0.1)
    assert torch.isfinite(out).tolist() == [[True, True, True, False], [False, True, True, False]]


def test_a_row_without_a_distribution_is_returned_as_it_is():
    """Every logit -inf, or a NaN: the probabilities are NaN and no comparison removes anything (as transformers)."""
    logits = torch.tensor([[NEG, NEG, NEG], [0.0, float("nan"), 1.0]])
    out = min_p_filter(logits, 0.5)
    assert torch.equal(out.isnan(), logits.isnan()) and torch.equal(out[0], logits[0])
    assert torch.equal(out.isnan(), _hf_min_p(logits, 0.5).isnan())


def test_process_logits_applies_min_p_after_temperature():
    """Probabilities 0.9, 0.05, 0.05: min-p 0.1 on them alone keeps one token; after temperature 2 (probabilities
    proportional to their square roots: 0.05 / 0.9 becomes 0.236 > 0.1) it keeps all three."""
    logits = torch.tensor([[0.9, 0.05, 0.05]]).log()
    assert torch.isfinite(process_logits(logits, min_p=0.1)).tolist() == [[True, False, False]]
    assert torch.isfinite(process_logits(logits, temperature=2.0, min_p=0.1)).tolist() == [[True, True, True]]


# ---- against transformers' MinPLogitsWarper ----------------------------------------------------------------------
min_ps = st.one_of(st.sampled_from([0.0, 1.0, 1e-46, 1e-9, 0.01, 0.05, 0.1, 0.125, 0.25, 0.5, 0.9]),
                   st.floats(0.0, 1.0))


@SETTINGS
@given(logit_rows(dead_rows=True), min_ps)
def test_min_p_equals_transformers(logits, min_p):
    ours = min_p_filter(logits, min_p)
    assert torch.equal(ours, _hf_min_p(logits, min_p))  # the same -inf, the same kept logits
    # and the rule itself: a kept token is at least min_p times as likely as the most likely one
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    finite_rows = torch.isfinite(probs).all(dim=-1)  # (B,): rows with a distribution
    kept = torch.isfinite(ours)  # (B, V)
    assert torch.equal(kept[finite_rows], (probs >= min_p * probs.amax(dim=-1, keepdim=True))[finite_rows]
                       & torch.isfinite(logits)[finite_rows])
    assert kept[finite_rows].gather(1, logits[finite_rows].argmax(dim=-1, keepdim=True)).all()  # the top one stays


@pytest.mark.parametrize("V", [100, 1000, 50000])
def test_min_p_equals_transformers_over_large_vocabularies_with_ties_and_minus_inf(V):
    g = torch.Generator().manual_seed(V)
    spread = torch.randn(4, V, generator=g) * 3  # (B, V): no ties
    tied = torch.randint(0, 4, (4, V), generator=g).float()  # (B, V): many ties
    holes = spread.masked_fill(torch.rand(4, V, generator=g) < 0.3, NEG)  # (B, V): -inf entries
    for logits in (spread, tied, holes):
        for min_p in (1e-4, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0):
            ours = min_p_filter(logits, min_p)
            assert torch.equal(ours, _hf_min_p(logits, min_p)), (V, min_p)
            n = torch.isfinite(ours).sum(dim=1)
            assert (n >= 1).all() and (min_p > 0.01 or (n > 1).all())


def test_min_p_at_a_tokens_own_ratio_is_decided_as_transformers_decides():
    """min_p set to exactly a token's probability ratio to the most likely token (in float64): float32 rounding
    decides whether it stays, and it must be decided as transformers does (the same rule in logits,
    z_i - max z < log(min_p), decides a third of these the other way)."""
    logits = torch.randn(4, 1000, generator=torch.Generator().manual_seed(0)) * 3  # (B, V)
    probs = torch.softmax(logits.double(), dim=-1)  # (B, V)
    ratios = probs / probs.amax(dim=-1, keepdim=True)  # (B, V) in (0, 1]
    for b in range(4):
        for i in range(0, 1000, 7):
            min_p = float(ratios[b, i])
            assert torch.equal(min_p_filter(logits[b:b + 1], min_p), _hf_min_p(logits[b:b + 1], min_p)), (b, i)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_logits_keep_the_set_of_their_float32_values(dtype):
    """transformers' generate casts the next-token logits to float32 before its processors: a bfloat16 model's
    min-p set is MinPLogitsWarper's on the float32 values, which is what min_p_filter keeps. (MinPLogitsWarper on
    the bfloat16 tensor itself rounds the probabilities to bfloat16 and differs for tokens within that rounding of
    the cut-off.)"""
    logits = (torch.randn(8, 50000, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)  # (B, V)
    for min_p in (1e-3, 0.05, 0.1, 0.3):
        ours = min_p_filter(logits, min_p)
        assert ours.dtype == dtype
        assert torch.equal(ours, _hf_min_p(logits.float(), min_p).to(dtype))
        assert torch.equal(ours.isinf(), min_p_filter(logits.float(), min_p).isinf())
        # the in-dtype reference agrees except within its rounding of the cut-off
        theirs = _hf_min_p(logits, min_p)
        differ = ours.isinf() != theirs.isinf()  # (B, V)
        probs = torch.softmax(logits.float(), dim=-1)  # (B, V)
        ratio = probs / (min_p * probs.amax(dim=-1, keepdim=True))  # (B, V): 1 at the cut-off
        assert ((ratio[differ] - 1).abs() < 2 ** -6).all()


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.integers(1, 3), st.integers(1, 30), st.integers(0, 999), st.sampled_from([1.0, 0.5, 0.7, 1.5, 3.0]),
       st.none() | st.integers(1, 12), st.none() | st.floats(0.05, 1.0),
       st.sampled_from([0.0, 0.05, 0.1, 0.3, 0.8, 1.0]), st.sampled_from([1.0, 1.3]), st.integers(1, 5), st.data())
def test_process_logits_equals_transformers_warpers_in_generate_order(B, V, seed, temperature, top_k, top_p, min_p,
                                                                      penalty, L, data):
    """process_logits = transformers' processors in the order its generate builds them: repetition penalty, then
    the sampling warpers temperature, top-k, top-p, min-p. Spread float logits only: where top-p's nucleus ends
    among tied tokens, transformers' unstable sort keeps other tied ids (see test_top_p_parity.py)."""
    logits = torch.randn(B, V, generator=torch.Generator().manual_seed(seed)) * 4  # (B, V)
    ids = torch.tensor(data.draw(st.lists(st.integers(0, V - 1), min_size=B * L, max_size=B * L))).view(B, L)
    hf = logits_processors.LogitsProcessorList([logits_processors.RepetitionPenaltyLogitsProcessor(penalty)])
    if temperature != 1.0:
        hf.append(logits_processors.TemperatureLogitsWarper(temperature))
    if top_k is not None:
        hf.append(logits_processors.TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        hf.append(logits_processors.TopPLogitsWarper(top_p))
    hf.append(logits_processors.MinPLogitsWarper(min_p))
    ours = process_logits(logits, input_ids=ids, repetition_penalty=penalty, temperature=temperature, top_k=top_k,
                          top_p=top_p, min_p=min_p)
    assert torch.equal(ours.isinf(), hf(ids, logits.clone()).isinf())
    torch.testing.assert_close(ours, hf(ids, logits.clone()))


# ---- generate ---------------------------------------------------------------------------------------------------
PROMPTS = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])  # (B, T): no padding


@pytest.mark.parametrize("options", [
    dict(min_p=0.3),
    dict(min_p=0.1, temperature=1.5),
    dict(min_p=0.2, temperature=2.0, top_k=20, top_p=0.95),
    dict(min_p=0.05, temperature=0.7, top_p=0.9, repetition_penalty=1.3),
])
def test_generate_samples_from_transformers_processing(gpt, monkeypatch, options):
    """Seeded sampling with min-p (and temperature, top-k, top-p, penalty) gives the tokens that transformers'
    processors, in its generate order, give on the same logits with the same draws. The reference is built from the
    test's own options, not from what generate passes on, so an option generate dropped would show."""
    kw = dict(max_new_tokens=10, do_sample=True, seed=3)
    ours = generate(gpt, PROMPTS, **kw, **options)

    hf = logits_processors.LogitsProcessorList()
    if options.get("repetition_penalty", 1.0) != 1.0:
        hf.append(logits_processors.RepetitionPenaltyLogitsProcessor(options["repetition_penalty"]))
    if options.get("temperature", 1.0) != 1.0:
        hf.append(logits_processors.TemperatureLogitsWarper(options["temperature"]))
    if options.get("top_k") is not None:
        hf.append(logits_processors.TopKLogitsWarper(options["top_k"]))
    if options.get("top_p") is not None:
        hf.append(logits_processors.TopPLogitsWarper(options["top_p"]))
    hf.append(logits_processors.MinPLogitsWarper(options["min_p"]))
    seen = []

    def reference(logits, *, input_ids=None, **passed):
        seen.append(passed["min_p"])
        return hf(input_ids, logits.clone())

    monkeypatch.setattr(P, "process_logits", reference)
    assert generate(gpt, PROMPTS, **kw, **options) == ours
    assert seen and set(seen) == {options["min_p"]}
    monkeypatch.undo()
    # min-p changed the samples (the comparison above could not have passed with min-p left out)
    assert generate(gpt, PROMPTS, **kw, **{**options, "min_p": None}) != ours


def test_min_p_is_used_only_when_sampling(gpt, monkeypatch):
    greedy = generate(gpt, PROMPTS, max_new_tokens=6)
    passed = []
    real = P.process_logits
    monkeypatch.setattr(P, "process_logits", lambda logits, **kw: passed.append(kw["min_p"]) or real(logits, **kw))
    assert generate(gpt, PROMPTS, max_new_tokens=6, min_p=0.9) == greedy
    assert passed and set(passed) == {None}
    passed.clear()
    generate(gpt, PROMPTS, max_new_tokens=2, do_sample=True, min_p=0.9, seed=0)
    assert set(passed) == {0.9}


def test_min_p_of_one_samples_the_greedy_tokens(gpt):
    """min_p = 1 keeps only the most likely token(s): sampling is greedy decoding (random weights: no ties)."""
    greedy = generate(gpt, PROMPTS, max_new_tokens=8)
    assert generate(gpt, PROMPTS, max_new_tokens=8, do_sample=True, temperature=2.0, min_p=1.0, seed=4) == greedy
    assert generate(gpt, PROMPTS, max_new_tokens=8, do_sample=True, temperature=2.0, seed=4) != greedy


# ---- argument checks --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value,shown", [(-0.1, "-0.1"), (1.5, "1.5"), (float("nan"), "nan"), (float("inf"), "inf"),
                                         (2, "2")])
def test_min_p_out_of_range_is_refused_naming_the_value(value, shown):
    message = rf"min_p must satisfy 0 <= min_p <= 1, got {shown}$"
    with pytest.raises(ValueError, match=message):
        check_min_p(value)
    with pytest.raises(ValueError, match=message):
        min_p_filter(torch.zeros(1, 3), value)
    with pytest.raises(ValueError, match=message):
        GenerationConfig(max_new_tokens=3, do_sample=True, min_p=value)
    with pytest.raises(ValueError, match=message):  # greedy too: validated always, used only when sampling
        GenerationConfig(max_new_tokens=3, min_p=value)


@pytest.mark.parametrize("value,shown", [("0.1", r"'0.1' \(str\)"), (True, r"True \(bool\)"),
                                         (np.float32(0.5), r"np.float32\(0.5\) \(float32\)"), ([0.1], r"\[0.1\]")])
def test_min_p_of_another_type_is_refused_by_its_type(value, shown):
    with pytest.raises(ValueError, match=rf"min_p must be an int or float, got {shown}"):
        check_min_p(value)
    with pytest.raises(ValueError, match=rf"min_p must be an int or float, got {shown}"):
        GenerationConfig(max_new_tokens=3, min_p=value)


def test_bad_min_p_is_refused_before_the_model_runs():
    class Untouchable:  # any call would fail the test with another error
        def __call__(self, *a, **k):
            raise AssertionError("the model ran")

    with pytest.raises(ValueError, match="min_p must satisfy 0 <= min_p <= 1, got 1.01"):
        generate(Untouchable(), [[1]], max_new_tokens=3, do_sample=True, min_p=1.01)


@pytest.mark.parametrize("value", [0, 0.0, 1, 1.0, 0.05, 1e-300])
def test_the_ends_of_the_range_are_accepted(value):
    assert check_min_p(value) == float(value)
    assert GenerationConfig(max_new_tokens=1, do_sample=True, min_p=value).min_p == value


def test_min_p_round_trips_through_json():
    import json

    cfg = GenerationConfig(max_new_tokens=5, do_sample=True, min_p=0.05, top_p=0.9)
    back = GenerationConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and back.min_p == 0.05
    assert GenerationConfig(max_new_tokens=1).min_p is None


def test_sample_options_pass_min_p_to_the_generation_config():
    from attnkit.api import SampleOptions

    assert SampleOptions(ckpt="x", min_p=0.1).generation_config().min_p == 0.1
    assert SampleOptions(ckpt="x").generation_config().min_p is None
    with pytest.raises(ValueError, match="min_p must satisfy 0 <= min_p <= 1, got 2"):
        SampleOptions(ckpt="x", min_p=2).generation_config()


def test_min_p_filter_refuses_logits_that_are_not_2d_float():
    """min_p_filter checks its logits as the other filters do: shape (B, V), floating point."""
    with pytest.raises(ValueError, match=r"logits must have shape \(B, V\), got \(3,\)"):
        min_p_filter(torch.zeros(3), 0.1)
    with pytest.raises(ValueError, match="logits must be a floating-point tensor"):
        min_p_filter(torch.zeros(1, 3, dtype=torch.long), 0.1)
