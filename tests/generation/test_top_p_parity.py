"""``top_p_filter`` and the other logits processors against transformers' warpers, on random logits (hypothesis):
ties, ``-inf`` entries, ``top_p = 1`` and a tiny ``top_p``, batch rows, vocabularies of 50,000.

Nucleus ties: where the nucleus ends inside a run of equal logits, the tokens with the lowest ids are kept (a
stable sort). transformers keeps as many, but which of them follows its unstable sort, so the sets are compared
as multisets of kept logits there.

Axis legend: B batch, V vocabulary, L history length.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.generation.processors import apply_repetition_penalty, apply_temperature, top_k_filter, top_p_filter

from helpers import logit_rows

logits_processors = pytest.importorskip("transformers.generation.logits_process")
SETTINGS = settings(max_examples=200, deadline=None, derandomize=True)


top_ps = st.one_of(st.sampled_from([1.0, 1e-9, 1e-46, 0.5, 0.75, 0.875, 0.9, 0.95]),
                   st.floats(0.0, 1.0, exclude_min=True))


def _kept(logits: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(logits)  # (B, V)


def _lowest_ids_among_boundary_ties(logits: torch.Tensor, kept: torch.Tensor) -> bool:
    """Of the tokens equal to a row's least likely kept one, the kept ones are those with the lowest ids."""
    for row, keep in zip(logits, kept):
        tied = row == row[keep].min()  # (V,) (every row keeps its most likely token)
        flags = keep[tied].tolist()
        if flags != sorted(flags, reverse=True):
            return False
    return True


@SETTINGS
@given(logit_rows(), top_ps)
def test_top_p_keeps_what_transformers_keeps_and_the_lowest_ids_of_a_tie(logits, top_p):
    ours = top_p_filter(logits, top_p)
    theirs = logits_processors.TopPLogitsWarper(top_p)(None, logits.clone())
    finite = torch.isfinite(logits)  # (B, V): -inf entries are -inf in both (kept or not)
    kept, kept_hf = _kept(ours) & finite, _kept(theirs) & finite
    assert torch.equal(kept.sum(dim=1), kept_hf.sum(dim=1))
    for b in range(logits.shape[0]):  # the same logits, up to which of equal ones
        assert torch.equal(logits[b][kept[b]].sort().values, logits[b][kept_hf[b]].sort().values)
        torch.testing.assert_close(ours[b][kept[b]], logits[b][kept[b]])
    assert _lowest_ids_among_boundary_ties(logits, kept)
    if top_p == 1.0:
        assert torch.equal(ours, logits)


@pytest.mark.parametrize("V", [100, 1000, 50000])
def test_top_p_ties_keep_the_lowest_ids_whatever_the_vocabulary_size(V):
    """torch's CPU sort is unstable above about 100 tokens: the tied tokens kept used to be arbitrary ones."""
    logits = torch.randint(0, 3, (4, V), generator=torch.Generator().manual_seed(0)).float()  # (B, V): ties
    for top_p in (0.3, 0.5, 0.9):
        kept = _kept(top_p_filter(logits, top_p))
        assert _lowest_ids_among_boundary_ties(logits, kept)
        theirs = _kept(logits_processors.TopPLogitsWarper(top_p)(None, logits.clone()))
        assert torch.equal(kept.sum(dim=1), theirs.sum(dim=1))


def test_top_p_over_a_large_vocabulary_keeps_as_many_tokens_as_transformers():
    """The mass before each token summed from the top in float32 kept or dropped a token too many over 50,000."""
    logits = torch.randn(8, 50000, generator=torch.Generator().manual_seed(1)) * 2  # (B, V)
    for top_p in (0.9, 0.99):
        theirs = _kept(logits_processors.TopPLogitsWarper(top_p)(None, logits.clone()))
        assert torch.equal(_kept(top_p_filter(logits, top_p)), theirs)  # (no ties: the very same set)


@SETTINGS
@given(logit_rows(), st.integers(1, 14), st.sampled_from([1e-3, 0.5, 0.7, 1.0, 1.3, 2.0]),
       st.sampled_from([0.5, 0.8, 1.0, 1.2, 2.0]), st.integers(1, 6), st.data())
def test_top_k_temperature_and_repetition_penalty_equal_transformers(logits, top_k, temperature, penalty, L, data):
    B, V = logits.shape
    ids = torch.tensor(data.draw(st.lists(st.integers(0, V - 1), min_size=B * L, max_size=B * L))).view(B, L)
    assert torch.equal(top_k_filter(logits, top_k), logits_processors.TopKLogitsWarper(top_k)(None, logits.clone()))
    assert torch.equal(apply_temperature(logits, temperature),
                       logits_processors.TemperatureLogitsWarper(temperature)(None, logits.clone()))
    assert torch.equal(apply_repetition_penalty(logits, ids, penalty),
                       logits_processors.RepetitionPenaltyLogitsProcessor(penalty)(ids, logits.clone()))
