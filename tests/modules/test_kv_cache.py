"""KVCache: append, views, reset, reorder (beam search), grow, overflow and shape/dtype checks."""

import pytest
import torch

from attnkit.modules import KVCache


def test_update_appends_and_returns_views():
    cache = KVCache(2, 3, 6, 4)
    k1, v1 = torch.randn(2, 3, 2, 4), torch.randn(2, 3, 2, 4)
    k, v = cache.update(k1, v1)
    assert cache.length == 2 and torch.equal(k, k1) and torch.equal(v, v1)
    k2, v2 = torch.randn(2, 3, 3, 4), torch.randn(2, 3, 3, 4)
    k, v = cache.update(k2, v2)
    assert k.shape == (2, 3, 5, 4)
    assert torch.equal(k, torch.cat([k1, k2], 2)) and torch.equal(v, torch.cat([v1, v2], 2))
    assert k.data_ptr() == cache.k_cache.data_ptr()  # a view, no copy


def test_update_at_writes_slots_and_returns_whole_buffers():
    cache = KVCache(2, 3, 6, 4)
    k1, v1 = torch.randn(2, 3, 2, 4), torch.randn(2, 3, 2, 4)
    k, v = cache.update_at(k1, v1, torch.tensor([4, 1]))
    assert k.shape == (2, 3, 6, 4) and k.data_ptr() == cache.k_cache.data_ptr()  # the buffers themselves
    assert torch.equal(k[:, :, 4], k1[:, :, 0]) and torch.equal(k[:, :, 1], k1[:, :, 1])
    assert torch.equal(v[:, :, 4], v1[:, :, 0]) and torch.equal(v[:, :, 1], v1[:, :, 1])
    assert (k[:, :, [0, 2, 3, 5]] == 0).all()
    assert cache.length == 0  # the caller keeps the length


@pytest.mark.parametrize("slots, match", [
    (torch.tensor([6]), r"slots must be in \[0, max_len\) = \[0, 6\), got \[6\]"),
    (torch.tensor([-1]), r"slots must be in \[0, max_len\) = \[0, 6\), got \[-1\]"),
    (torch.tensor([1, 2]), r"slots must be an int64 tensor of shape \(T,\) = \(1,\), got torch.int64 \(2,\)"),
    (torch.tensor([1.0]), r"got torch.float32 \(1,\)"),
    ([1], "got list"),
])
def test_update_at_rejects_bad_slots(slots, match):
    cache = KVCache(1, 2, 6, 4)
    k = torch.randn(1, 2, 1, 4)
    with pytest.raises(ValueError, match=match):
        cache.update_at(k, k, slots)


def test_update_at_checks_shapes_like_update():
    cache = KVCache(1, 2, 6, 4)
    with pytest.raises(ValueError, match=r"k must have shape \(B, K, T, D\) = \(1, 2, T, 4\)"):
        cache.update_at(torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4), torch.tensor([0]))


def test_reset():
    cache = KVCache(1, 1, 4, 2)
    cache.update(torch.randn(1, 1, 3, 2), torch.randn(1, 1, 3, 2))
    cache.reset()
    assert cache.length == 0
    k_new = torch.randn(1, 1, 4, 2)
    k, _ = cache.update(k_new, k_new)
    assert torch.equal(k, k_new)


def test_reorder_selects_batch_rows():
    cache = KVCache(3, 2, 5, 4)
    k, v = torch.randn(3, 2, 2, 4), torch.randn(3, 2, 2, 4)
    cache.update(k, v)
    index = torch.tensor([2, 2, 0, 1])  # beams may duplicate and grow the batch
    cache.reorder(index)
    assert cache.batch_size == 4 and cache.length == 2
    k_all, v_all = cache.get()
    assert torch.equal(k_all, k[index]) and torch.equal(v_all, v[index])
    k_all, _ = cache.update(torch.randn(4, 2, 1, 4), torch.randn(4, 2, 1, 4))
    assert k_all.shape == (4, 2, 3, 4)


def test_buffers_follow_to_and_are_not_saved():
    cache = KVCache(1, 2, 4, 8).to(torch.float64)
    assert cache.k_cache.dtype == torch.float64 and cache.v_cache.dtype == torch.float64
    assert cache.state_dict() == {}


def test_overflow():
    cache = KVCache(1, 1, 3, 2)
    cache.update(torch.randn(1, 1, 2, 2), torch.randn(1, 1, 2, 2))
    with pytest.raises(ValueError, match=r"max_len = 3, cached 2 \+ new 2 = 4"):
        cache.update(torch.randn(1, 1, 2, 2), torch.randn(1, 1, 2, 2))


def test_update_wrong_shape():
    cache = KVCache(2, 3, 4, 8)
    with pytest.raises(ValueError, match=r"\(B, K, T, D\) = \(2, 3, T, 8\), got \(2, 4, 1, 8\)"):
        cache.update(torch.randn(2, 4, 1, 8), torch.randn(2, 4, 1, 8))


def test_update_wrong_dtype():
    cache = KVCache(1, 1, 4, 2)
    with pytest.raises(ValueError, match=r"dtype torch.float32, got torch.float64"):
        cache.update(torch.randn(1, 1, 1, 2, dtype=torch.float64), torch.randn(1, 1, 1, 2, dtype=torch.float64))


def test_reorder_index_out_of_range():
    cache = KVCache(2, 1, 4, 2)
    with pytest.raises(ValueError, match=r"\[0, 2\), got min 0 max 2"):
        cache.reorder(torch.tensor([0, 2]))


@pytest.mark.parametrize("args, message", [
    ((2.0, 1, 4, 8), r"KVCache batch_size must be an int >= 1, got 2\.0 \(float\)"),
    ((2, True, 4, 8), r"KVCache num_kv_heads must be an int >= 1, got True \(bool\)"),
    ((2, 1, None, 8), r"KVCache max_len must be an int >= 1, got None"),
    ((2, 1, 4, 0), r"KVCache head_dim must be an int >= 1, got 0"),
])
def test_sizes_must_be_positive_ints(args, message):
    with pytest.raises(ValueError, match=message):
        KVCache(*args)


def test_grow_keeps_the_cached_positions_and_makes_room():
    cache = KVCache(2, 3, 4, 5)
    k1, v1 = torch.randn(2, 3, 3, 5), torch.randn(2, 3, 3, 5)
    cache.update(k1, v1)
    cache.grow(7)
    assert cache.max_len == 7 and cache.k_cache.shape == (2, 3, 7, 5) and cache.length == 3
    k2, v2 = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)  # 3 + 4 = 7 would overflow the old buffers
    k, v = cache.update(k2, v2)
    assert torch.equal(k, torch.cat([k1, k2], 2)) and torch.equal(v, torch.cat([v1, v2], 2))
    with pytest.raises(ValueError, match=r"max_len must be an int >= the current max_len = 7, got 6"):
        cache.grow(6)
    with pytest.raises(ValueError, match=r"got 8.0"):
        cache.grow(8.0)


def test_drop_front_keeps_the_newest_positions_in_order():
    """drop_front(n) moves positions n .. length - 1 to the front (the sliding-window cache shifts by it)."""
    cache = KVCache(2, 3, 8, 4)
    k, v = torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4)
    cache.update(k, v)
    cache.drop_front(2)
    assert cache.length == 4
    k_kept, v_kept = cache.k_cache.narrow(2, 0, 4), cache.v_cache.narrow(2, 0, 4)
    assert torch.equal(k_kept, k[:, :, 2:]) and torch.equal(v_kept, v[:, :, 2:])
    k_all, _ = cache.update(k[:, :, :1], v[:, :, :1])  # appends after the kept positions
    assert torch.equal(k_all, torch.cat([k[:, :, 2:], k[:, :, :1]], 2))
    cache.drop_front(0)
    assert cache.length == 5
    cache.drop_front(5)
    assert cache.length == 0
