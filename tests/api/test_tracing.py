"""``attnkit.api.tracing``: what ``attnkit trace --preset`` refuses before a model is built.

Axis legend: ``B`` batch, ``T`` target length, ``S`` source length, ``V`` vocabulary.
"""

from __future__ import annotations

import pytest

from attnkit.api.tracing import MAX_TRACE_SIZE, TracePreset, trace_model


TOO_MANY = r"^--batch x --len \(or --src-len\) must be at most 2\*\*31 - 1 = 2,147,483,647, got "


@pytest.mark.parametrize("given, message", [
    (dict(preset="char-small", batch=2**63, length=4), TOO_MANY),
    (dict(preset="char-small", batch=2**31, length=1), TOO_MANY),
    (dict(preset="transformer-small", length=3, src_len=10**30), TOO_MANY),
    (dict(preset="char-small", vocab_size=2**63), r"^--vocab-size must be at most 2\*\*31 - 1 = 2,147,483,647, got "),
])
def test_sizes_past_torchs_range_are_refused_before_the_model_is_built(given, message):
    """Was: ``trace --preset char-small --batch 9223372036854775808`` (or ``--vocab-size``, ``--src-len``) ended in a
    traceback from torch ("Overflow when unpacking long long"), and 2**31 in torch's allocator (68 GB asked)."""
    with pytest.raises(ValueError, match=message):
        trace_model(TracePreset(device="cpu", **given))
    assert MAX_TRACE_SIZE == 2**31 - 1


def test_sizes_up_to_torchs_range_are_taken():
    """The bounds themselves pass (the model is not built here)."""
    assert TracePreset(preset="char-small", batch=MAX_TRACE_SIZE, length=1, device="cpu").batch == MAX_TRACE_SIZE
    assert TracePreset(preset="transformer-small", batch=1, length=3, src_len=MAX_TRACE_SIZE, device="cpu")
    assert TracePreset(preset="char-small", vocab_size=MAX_TRACE_SIZE, device="cpu").vocab_size == MAX_TRACE_SIZE


def test_a_small_preset_trace_still_runs():
    result = trace_model(TracePreset(preset="char-small", batch=1, length=3, device="cpu"))
    assert "B=1" in result.format()
