"""Logits processors against hand-computed examples, and their argument checks."""

import math

import numpy as np
import pytest
import torch

from attnkit.generation.processors import (
    apply_repetition_penalty,
    apply_temperature,
    check_repetition_penalty,
    check_temperature,
    check_top_p,
    process_logits,
    top_k_filter,
    top_p_filter,
)

NEG = float("-inf")


def test_temperature_divides_logits():
    logits = torch.tensor([[1.0, 2.0, -3.0], [0.5, 0.0, 4.0]])
    assert torch.equal(apply_temperature(logits, 0.5), torch.tensor([[2.0, 4.0, -6.0], [1.0, 0.0, 8.0]]))
    assert torch.equal(apply_temperature(logits, 2.0), torch.tensor([[0.5, 1.0, -1.5], [0.25, 0.0, 2.0]]))
    assert torch.equal(logits, torch.tensor([[1.0, 2.0, -3.0], [0.5, 0.0, 4.0]]))  # input untouched


def test_top_k_keeps_the_k_largest_per_row():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0], [9.0, -1.0, 0.0, 2.0]])
    expected = torch.tensor([[NEG, 5.0, NEG, 4.0], [9.0, NEG, NEG, 2.0]])
    assert torch.equal(top_k_filter(logits, 2), expected)
    assert torch.equal(top_k_filter(logits, 1), torch.tensor([[NEG, 5.0, NEG, NEG], [9.0, NEG, NEG, NEG]]))


def test_top_k_at_least_vocab_keeps_everything_and_ties_are_kept():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0]])
    assert torch.equal(top_k_filter(logits, 4), logits)
    assert torch.equal(top_k_filter(logits, 10), logits)
    tied = torch.tensor([[2.0, 7.0, 2.0, 1.0]])
    assert torch.equal(top_k_filter(tied, 2), torch.tensor([[2.0, 7.0, 2.0, NEG]]))


def test_top_p_keeps_the_smallest_nucleus():
    # probabilities 0.15, 0.5, 0.05, 0.3 (sorted: 0.5, 0.3, 0.15, 0.05; mass before each: 0, 0.5, 0.8, 0.95)
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])
    logits = probs.log()
    keep = lambda p: torch.isfinite(top_p_filter(logits, p))[0].tolist()  # noqa: E731
    assert keep(0.75) == [False, True, False, True]  # 0.5 < 0.75 -> keep the 0.3; 0.8 >= 0.75 -> stop
    assert keep(0.85) == [True, True, False, True]  # 0.8 < 0.85 -> the 0.15 is in
    assert keep(0.97) == [True, True, True, True]
    assert keep(0.1) == [False, True, False, False]  # the most likely token always stays
    assert keep(1e-46) == [False, True, False, False]  # also for a top_p that rounds to 0 in float32
    assert keep(1.0) == [True, True, True, True]
    out = top_p_filter(logits, 0.75)
    assert out[0, 1] == logits[0, 1] and out[0, 3] == logits[0, 3]  # kept logits are unchanged


def test_top_p_per_row():
    logits = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.2, 0.7]]).log()
    out = top_p_filter(logits, 0.6)
    assert torch.isfinite(out).tolist() == [[True, False, False], [False, False, True]]


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0]])
    ids = torch.tensor([[0, 1, 1]])  # token 1 seen twice: penalised once
    out = apply_repetition_penalty(logits, ids, 2.0)
    assert torch.equal(out, torch.tensor([[1.0, -2.0, 0.5, 3.0]]))
    # ignore_mask marks left padding: the 0 there is not a real token
    out = apply_repetition_penalty(logits, ids, 2.0, ignore_mask=torch.tensor([[True, False, False]]))
    assert torch.equal(out, torch.tensor([[2.0, -2.0, 0.5, 3.0]]))
    assert torch.equal(apply_repetition_penalty(logits, ids, 1.0), logits)


def test_repetition_penalty_per_row():
    logits = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    ids = torch.tensor([[2, 2], [0, 1]])
    out = apply_repetition_penalty(logits, ids, 4.0)
    assert torch.equal(out, torch.tensor([[1.0, 1.0, 0.25], [-4.0, -4.0, -1.0]]))


def test_top_p_of_one_keeps_a_token_whose_probability_underflows_float32():
    """top_p = 1 returns the logits as they are: exp(-120) is 0 in float32, but the token's probability is not 0."""
    logits = torch.tensor([[0.0, -120.0, 1.0]])
    assert torch.equal(top_p_filter(logits, 1.0), logits)


def test_top_p_sums_half_precision_probabilities_in_float32():
    """bfloat16 logits keep exactly the nucleus their float32 values give (a bfloat16 cumulative sum over 1,000
    tokens drifts and kept or dropped a few tokens at the boundary)."""
    logits = torch.randn(2, 1000, generator=torch.Generator().manual_seed(0)).bfloat16()  # (B, V)
    for top_p in (0.5, 0.9):
        assert torch.equal(top_p_filter(logits, top_p).isinf(), top_p_filter(logits.float(), top_p).isinf())


def test_process_logits_applies_penalty_then_temperature_then_top_k_then_top_p():
    logits = torch.tensor([[4.0, 2.0, 1.0, -2.0]])
    ids = torch.tensor([[0]])
    # penalty 2 on token 0: [2, 2, 1, -2]; temperature 0.5: [4, 4, 2, -4]; top-k 3: [4, 4, 2, -inf]
    # softmax of [4, 4, 2]: e^4 / (2 e^4 + e^2) = 0.4683 each, 0.0634; top-p 0.5: mass before the second 4 is
    # 0.4683 < 0.5 -> kept; before the 2 it is 0.9366 -> dropped
    out = process_logits(logits, input_ids=ids, repetition_penalty=2.0, temperature=0.5, top_k=3, top_p=0.5)
    assert torch.equal(out, torch.tensor([[4.0, 4.0, NEG, NEG]]))
    p = math.exp(4) / (2 * math.exp(4) + math.exp(2))
    assert p == pytest.approx(0.4683, abs=1e-4)


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), True])
def test_temperature_must_be_positive(value):
    with pytest.raises(ValueError, match="temperature"):
        apply_temperature(torch.zeros(1, 3), value)


@pytest.mark.parametrize("value", [0, -2, 1.5, None])
def test_top_k_must_be_a_positive_int(value):
    with pytest.raises(ValueError, match="top_k"):
        top_k_filter(torch.zeros(1, 3), value)


@pytest.mark.parametrize("value", [0, 0.0, -0.5, 1.01, float("nan")])
def test_top_p_must_be_in_0_1(value):
    with pytest.raises(ValueError, match="top_p"):
        top_p_filter(torch.zeros(1, 3), value)


@pytest.mark.parametrize("value", [0, -1.0, float("inf")])
def test_repetition_penalty_must_be_positive(value):
    with pytest.raises(ValueError, match="repetition_penalty"):
        apply_repetition_penalty(torch.zeros(1, 3), torch.zeros(1, 2, dtype=torch.long), value)


@pytest.mark.parametrize("check", [check_temperature, check_top_p, check_repetition_penalty])
def test_a_value_of_another_type_is_refused_by_its_type(check):
    """A NumPy float32 of 0.5 used to be refused with "top_p must satisfy 0 < top_p <= 1, got np.float32(0.5)"."""
    with pytest.raises(ValueError, match=r"must be an int or float, got np.float32\(0.5\) \(float32\)"):
        check(np.float32(0.5))


def test_error_message_names_the_value():
    with pytest.raises(ValueError, match="got -0.5"):
        apply_temperature(torch.zeros(1, 3), -0.5)


def test_logits_must_be_2d_float():
    with pytest.raises(ValueError, match=r"\(B, V\)"):
        top_k_filter(torch.zeros(3), 1)
    with pytest.raises(ValueError, match="floating-point"):
        top_k_filter(torch.zeros(1, 3, dtype=torch.long), 1)


def test_repetition_penalty_input_ids_shape_checked():
    with pytest.raises(ValueError, match="input_ids"):
        apply_repetition_penalty(torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.long), 1.5)


# ---- extreme (but valid) temperatures and penalties: the exact logits overflow float32 -------------------------
@pytest.mark.parametrize("temperature", [1e-38, 1e-40, 1e-50, 5e-324])
def test_a_tiny_temperature_gives_the_argmax_distribution_not_nan(temperature):
    """z / t overflows to +-inf (softmax NaN, multinomial raises); the row is shifted by its max first (the same
    distribution): all the mass on the largest logit(s)."""
    logits = torch.tensor([[3.0, 1.0, -2.0], [-3.0, -1.0, -2.0], [0.0, 0.0, -1.0]])
    probs = torch.softmax(apply_temperature(logits, temperature), dim=-1)
    assert torch.equal(probs, torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.0]]))


def test_a_temperature_that_does_not_overflow_still_divides_exactly():
    logits = torch.tensor([[3.0, 1.0, -2.0], [1e30, 0.0, -1e30]])
    assert torch.equal(apply_temperature(logits, 1e-5), logits / 1e-5)  # (the second row: 1e35, in range)


@pytest.mark.parametrize("penalty", [1e-40, 1e-50])
def test_a_tiny_repetition_penalty_does_not_overflow(penalty):
    """z / penalty -> inf for seen positive logits: the seen token with the largest one takes all the mass."""
    logits = torch.tensor([[3.0, 1.0, -2.0, 2.0], [-3.0, -1.0, -2.0, 0.5]])
    ids = torch.tensor([[0, 1, 2], [0, 1, 2]])
    probs = torch.softmax(apply_repetition_penalty(logits, ids, penalty), dim=-1)
    assert torch.equal(probs[0], torch.tensor([1.0, 0.0, 0.0, 0.0]))
    # no seen positive logit: nothing overflows, and the seen negatives are multiplied by ~0
    assert torch.allclose(probs[1], torch.softmax(torch.tensor([0.0, 0.0, 0.0, 0.5]), dim=-1))


@pytest.mark.parametrize("penalty", [1e39, 1.7e308])
def test_a_huge_repetition_penalty_does_not_leave_a_row_without_tokens(penalty):
    """z * penalty -> -inf for every seen negative logit (and 0 * inf = NaN for a seen zero in float32): when every
    token is seen and negative the largest one takes the mass; a seen zero stays zero."""
    logits = torch.tensor([[-3.0, -1.0, -2.0], [0.0, -1.0, -2.0]])
    ids = torch.tensor([[0, 1, 2], [0, 1, 2]])
    probs = torch.softmax(apply_repetition_penalty(logits, ids, penalty), dim=-1)
    assert torch.equal(probs, torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))


def test_generate_samples_with_a_tiny_temperature_or_penalty():
    from attnkit.generation import generate

    torch.manual_seed(0)
    from attnkit.models.gpt import GPT
    import helpers

    model = helpers.spread_weights(GPT(helpers.tiny_gpt_config("gpt2", vocab_size=40, block_size=32)), std=0.3,
                                   seed=0, matrices_only=True).eval()
    greedy = generate(model, [[1, 2, 3]], max_new_tokens=4)
    assert generate(model, [[1, 2, 3]], max_new_tokens=4, do_sample=True, seed=0, temperature=1e-40) == greedy
    for kw in (dict(repetition_penalty=1e-40), dict(repetition_penalty=1e-40, temperature=0.5),
               dict(repetition_penalty=1e39)):
        out = generate(model, [[1, 2, 3]], max_new_tokens=4, do_sample=True, seed=0, **kw)
        assert len(out[0]) == 4 and all(0 <= t < 40 for t in out[0])
