"""Nucleus filtering where a prefix's mass equals ``top_p`` exactly (binary fractions: no rounding): the smallest set
of most likely tokens whose mass *reaches* ``top_p`` is kept, nothing more (as transformers' TopPLogitsWarper).

Axis legend: B batch, V vocabulary.
"""

from __future__ import annotations

import pytest
import torch

from attnkit.generation.processors import top_p_filter


@pytest.mark.parametrize("top_p, kept", [(0.5, 1), (0.75, 2), (0.875, 3), (0.8, 3)])
def test_the_set_whose_mass_reaches_top_p_exactly_is_kept_and_nothing_more(top_p, kept):
    logits = torch.log(torch.tensor([[0.125, 0.5, 0.125, 0.25]]))  # (1, V): sorted 0.5, 0.25, 0.125, 0.125
    out = top_p_filter(logits, top_p)
    finite = torch.isfinite(out[0])  # (V,)
    assert int(finite.sum()) == kept
    assert bool(finite[1]) and (kept < 2 or bool(finite[3]))  # the most likely tokens first (0.125 twice: a tie)
    torch.testing.assert_close(out[0, finite], logits[0, finite])
