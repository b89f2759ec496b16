"""Mask helpers: causal (bottom-right), padding, the seed-000 banded mask, combine_masks, to_additive."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.modules import causal_mask, combine_masks, generate_mask_mat, pad_right, padding_mask, to_additive
from helpers import assert_close


@pytest.mark.parametrize("T,S", [(4, 4), (3, 6), (5, 2), (1, 5)])
def test_causal_mask_bottom_right(T, S):
    m = causal_mask(T, S)
    assert m.shape == (T, S) and m.dtype == torch.bool
    for i in range(T):
        for j in range(S):
            assert bool(m[i, j]) == (j > i + (S - T))


def test_causal_mask_square_default():
    assert torch.equal(causal_mask(3), torch.tensor([[False, True, True], [False, False, True], [False, False, False]]))


def seed_generate_mask_mat(seq_len, masked_len):
    """Seed 000's element formula, element by element: a[i, j] = (seq_len - j + i <= masked_len)."""
    out = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(seq_len):
        for j in range(seq_len):
            out[i][j] = torch.tensor(seq_len - j + i <= masked_len, dtype=torch.bool)
    return out


@pytest.mark.parametrize("seq_len,masked_len", [(7, 6), (7, 3), (5, 0), (6, 10), (1, 0), (4, 4)])
def test_generate_mask_mat_matches_seed_formula(seq_len, masked_len):
    assert torch.equal(generate_mask_mat(seq_len, masked_len), seed_generate_mask_mat(seq_len, masked_len))


def test_generate_mask_mat_full_length_is_causal():
    assert torch.equal(generate_mask_mat(6, 5), causal_mask(6))


def test_padding_mask_from_lengths():
    m = padding_mask(torch.tensor([3, 1, 4]))
    exp = torch.tensor([[False, False, False, True], [False, True, True, True], [False, False, False, False]])
    assert torch.equal(m, exp)
    assert padding_mask([2, 1], max_len=4).shape == (2, 4)


def test_padding_mask_from_ids():
    ids = torch.tensor([[5, 6, 0, 0], [0, 7, 8, 9]])
    assert torch.equal(padding_mask(ids=ids, pad_id=0), ids == 0)


def test_pad_right_gives_ids_and_their_padding_mask():
    ids, mask = pad_right([[5, 6, 7], [8], []], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]] and ids.dtype == torch.long
    assert torch.equal(mask, padding_mask([3, 1, 0]))
    ids, mask = pad_right([[1, 2]], pad_id=-100, length=4)
    assert ids.tolist() == [[1, 2, -100, -100]] and mask.tolist() == [[False, False, True, True]]
    with pytest.raises(ValueError, match="at least one sequence"):
        pad_right([], pad_id=0)
    with pytest.raises(ValueError, match=r"length must be >= the longest sequence \(3\), got 2"):
        pad_right([[1, 2, 3]], pad_id=0, length=2)


@given(st.lists(st.lists(st.integers(0, 2**40), max_size=7), min_size=1, max_size=9), st.integers(-100, 5),
       st.booleans())
@settings(max_examples=60, deadline=None)
def test_pad_right_puts_each_sequence_in_its_row(sequences, pad_id, as_tensors):
    # the vectorised fill against the plain definition: row b is sequence b, then pad_id
    rows = [torch.tensor(s, dtype=torch.long) for s in sequences] if as_tensors else sequences
    ids, mask = pad_right(rows, pad_id)
    S = max(map(len, sequences))
    assert ids.shape == (len(sequences), S) and ids.dtype == torch.long
    assert ids.tolist() == [list(s) + [pad_id] * (S - len(s)) for s in sequences]
    assert torch.equal(mask, padding_mask([len(s) for s in sequences], max_len=S))


def test_padding_mask_needs_exactly_one_source():
    with pytest.raises(ValueError, match="exactly one"):
        padding_mask()
    with pytest.raises(ValueError, match="pad_id"):
        padding_mask(ids=torch.zeros(2, 3, dtype=torch.long))


def test_padding_mask_max_len_too_small():
    with pytest.raises(ValueError, match=r"max_len must be >= max\(lengths\) = 5, got 3"):
        padding_mask(torch.tensor([5, 2]), max_len=3)


def test_combine_masks_bool_or_broadcast():
    a = causal_mask(3)  # (3, 3)
    kpm = torch.tensor([[False, False, True], [False, False, False]])[:, None, :]  # (2, 1, 3)
    m = combine_masks(a, None, kpm)
    assert m.dtype == torch.bool and m.shape == (2, 3, 3)
    assert torch.equal(m, a[None] | kpm)
    assert combine_masks(None, None) is None


def test_combine_masks_float_and_mixed():
    f1, f2 = torch.randn(3, 3), torch.randn(3, 3)
    assert_close(combine_masks(f1, f2), f1 + f2, "exact")
    b = causal_mask(3)
    m = combine_masks(f1, b)
    assert m.dtype == torch.float32
    assert torch.equal(m, f1.masked_fill(b, float("-inf")))


def test_to_additive():
    b = causal_mask(3)
    a = to_additive(b, torch.float64)
    assert a.dtype == torch.float64
    assert torch.equal(torch.isneginf(a), b) and torch.all(a[~b] == 0)
    f = torch.randn(2, 2)
    assert torch.equal(to_additive(f, torch.float64), f.double())


def test_mask_integer_dtype_rejected():
    with pytest.raises(ValueError, match=r"bool or floating point, got torch.int32"):
        to_additive(torch.zeros(2, 2, dtype=torch.int32))


def test_drop_if_unpadded():
    from attnkit.modules.masks import drop_if_unpadded

    assert drop_if_unpadded(None) is None
    assert drop_if_unpadded(torch.zeros(2, 5, dtype=torch.bool)) is None
    padded = torch.tensor([[False, False, True], [False, False, False]])
    assert drop_if_unpadded(padded) is padded
    from attnkit.checks import checks_on_device

    unpadded = torch.zeros(2, 5, dtype=torch.bool)
    with checks_on_device():  # testing the mask would read it back from the device: it is kept
        assert drop_if_unpadded(unpadded) is unpadded


@pytest.mark.parametrize("make, message", [
    (lambda: padding_mask([2, 3], max_len=3.5), r"max_len must be an int >= 0, got 3\.5 \(float\)"),
    (lambda: pad_right([[1, 2], [3]], 0, length=2.5), r"pad_right length must be an int >= 0, got 2\.5"),
    (lambda: generate_mask_mat(2.5, 1), r"seq_len must be an int >= 0, got 2\.5"),
    (lambda: generate_mask_mat(3, 1.0), r"masked_len must be an int, got 1\.0 \(float\)"),
])
def test_lengths_must_be_ints(make, message):
    # a float length used to give a mask of the rounded-up size (or a TypeError inside numpy)
    with pytest.raises(ValueError, match=message):
        make()
