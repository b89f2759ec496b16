"""Key/value cache for incremental (token-by-token) decoding.

Axis legend: ``B`` batch, ``K`` key/value heads, ``T`` new positions in one step, ``D`` head dim.

During generation each new token only needs its own query; the keys and values of all earlier tokens
do not change, so they are stored once and reused. The cache preallocates ``(B, K, max_len, D)``
buffers and fills them from the left; ``length`` counts the filled positions. :meth:`KVCache.grow` moves them
into larger buffers (generation starts small and doubles a full cache).

Two ways to write: :meth:`KVCache.update` appends at ``length`` (a Python int) and returns the filled
part, whose length grows by one every step; :meth:`KVCache.update_at` writes at slots given as a *tensor*
and returns the whole buffers, so every shape stays the same from step to step and nothing on the host
changes. The second is what a ``torch.compile``-d decoding step needs (a growing shape or a changing int
would recompile or fall back to dynamic shapes); the caller then masks the slots not filled yet and keeps
``length`` itself.

The cache is meant for inference (``torch.no_grad()``): it writes into its buffers in place.
"""

from __future__ import annotations

import torch
from torch import nn

from attnkit.checks import check_int, is_int, no_host_reads


def cache_dtype(weight: torch.Tensor) -> torch.dtype:
    """The dtype a model's keys and values come out in, for its cache: autocast's where autocast is on for the
    weight's device (the projections then run in it), else the weight's."""
    device = weight.device.type
    if weight.is_floating_point() and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return weight.dtype


class KVCache(nn.Module):
    """Preallocated key/value buffers for one attention layer.

    Args:
        batch_size: ``B``.
        num_kv_heads: ``K``.
        max_len: capacity in positions; writing past it raises ``ValueError``.
        head_dim: ``D``.
        dtype, device: of the buffers (they also follow ``.to()``).

    Shape:
        k_cache, v_cache: ``(B, K, max_len, D)`` (non-persistent buffers, not in ``state_dict``).
    """

    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        max_len: int,
        head_dim: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        super().__init__()
        for name, value in (("batch_size", batch_size), ("num_kv_heads", num_kv_heads),
                            ("max_len", max_len), ("head_dim", head_dim)):
            check_int(f"KVCache {name}", value, minimum=1)
        self.max_len = max_len
        shape = (batch_size, num_kv_heads, max_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.length = 0

    @property
    def batch_size(self) -> int:
        return self.k_cache.shape[0]

    @property
    def num_kv_heads(self) -> int:
        return self.k_cache.shape[1]

    @property
    def head_dim(self) -> int:
        return self.k_cache.shape[3]

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``T`` new positions and return everything cached so far.

        Shape:
            k, v: ``(B, K, T, D)`` -> k_all, v_all: ``(B, K, length, D)`` (views into the buffers).
        """
        k_cache, v_cache = self.k_cache, self.v_cache
        T = self._new_length(k, v)
        start, end = self.length, self.length + T
        if end > self.max_len:
            raise ValueError(f"KVCache overflow: max_len = {self.max_len}, cached {start} + new {T} = {end}")
        k_cache.narrow(2, start, T).copy_(k)  # (B, K, T, D) slot of the buffer
        v_cache.narrow(2, start, T).copy_(v)
        self.length = end
        return k_cache.narrow(2, 0, end), v_cache.narrow(2, 0, end)  # (B, K, length, D) views

    def update_at(self, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``T`` new positions into the given cache slots and return the *whole* buffers.

        ``length`` is not read or changed: the caller knows which slots are filled and masks the others
        (``GPT.forward(..., cache_position=)`` does). Nothing here depends on a Python int, so a compiled
        step can call it with the same shapes every time.

        Shape:
            k, v: ``(B, K, T, D)``; slots: ``(T,)`` int64 in ``[0, max_len)`` ->
            k_all, v_all: ``(B, K, max_len, D)`` (the buffers themselves).
        """
        k_cache, v_cache = self.k_cache, self.v_cache
        T = self._new_length(k, v)
        if not isinstance(slots, torch.Tensor) or slots.dtype != torch.int64 or tuple(slots.shape) != (T,):
            got = f"{slots.dtype} {tuple(slots.shape)}" if isinstance(slots, torch.Tensor) else type(slots).__name__
            raise ValueError(f"KVCache.update_at: slots must be an int64 tensor of shape (T,) = ({T},), got {got}")
        if no_host_reads():  # no host sync inside a compiled graph: checked when it runs
            torch._assert_async(((slots >= 0) & (slots < self.max_len)).all(),
                                f"KVCache.update_at: slots must be in [0, max_len) = [0, {self.max_len})")
        elif T and (int(slots.min()) < 0 or int(slots.max()) >= self.max_len):
            raise ValueError(f"KVCache.update_at: slots must be in [0, max_len) = [0, {self.max_len}), got "
                             f"{slots.tolist()}")
        k_cache.index_copy_(2, slots, k)  # (B, K, max_len, D): slot slots[t] <- k[:, :, t]
        v_cache.index_copy_(2, slots, v)
        return k_cache, v_cache

    def _new_length(self, k: torch.Tensor, v: torch.Tensor) -> int:
        """``T`` of new keys/values ``(B, K, T, D)`` that fit these buffers (``ValueError`` otherwise)."""
        T = k.shape[2] if k.dim() == 4 else -1
        if k.shape != v.shape or k.dtype != self.k_cache.dtype or v.dtype != self.k_cache.dtype or T < 0 or (
            k.shape[:2] != self.k_cache.shape[:2] or k.shape[3] != self.k_cache.shape[3]
        ):  # one cheap test on the hot path; the detailed message only when it fails
            self._shape_error(k, v)
        return T

    def _shape_error(self, k: torch.Tensor, v: torch.Tensor) -> None:
        B, K, _, D = self.k_cache.shape
        for name, t in (("k", k), ("v", v)):
            if t.dim() != 4 or t.shape[0] != B or t.shape[1] != K or t.shape[3] != D:
                raise ValueError(f"KVCache.update: {name} must have shape (B, K, T, D) = ({B}, {K}, T, {D}), "
                                 f"got {tuple(t.shape)}")
            if t.dtype != self.k_cache.dtype:
                raise ValueError(f"KVCache.update: {name} must have dtype {self.k_cache.dtype}, got {t.dtype}")
        raise ValueError(f"KVCache.update: k and v must have the same length T, got {k.shape[2]} and {v.shape[2]}")

    def get(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The filled part of the cache.

        Shape:
            returns k_all, v_all: ``(B, K, length, D)``.
        """
        return self.k_cache[:, :, : self.length], self.v_cache[:, :, : self.length]

    def drop_front(self, n: int) -> None:
        """Forget the ``n`` oldest positions: positions ``n .. length-1`` move to ``0 .. length-n-1``.

        The kept keys are moved as they are; a rotary model must renumber them (see
        :meth:`~attnkit.modules.rotary.RotaryEmbedding.shift`).

        Shape:
            the buffers stay ``(B, K, max_len, D)``; the filled part goes from ``length`` to ``length - n``.
        """
        if not is_int(n) or not 0 <= n <= self.length:
            raise ValueError(f"drop_front: n must be an int in [0, length = {self.length}], got {n!r}")
        keep = self.length - n
        for buf in (self.k_cache, self.v_cache):
            buf.narrow(2, 0, keep).copy_(buf.narrow(2, n, keep).clone())  # (B, K, keep, D); clone: overlap
        self.length = keep

    def reset(self) -> None:
        """Forget every cached position (the buffers are kept for reuse)."""
        self.length = 0

    def grow(self, max_len: int) -> None:
        """Make room for ``max_len`` positions, keeping the cached ones: new buffers, the filled part copied in.
        (Generation starts a cache with room for the prompt and some new tokens and doubles it when full.)

        Shape:
            the buffers become ``(B, K, max_len, D)``.
        """
        if not is_int(max_len) or max_len < self.max_len:
            raise ValueError(f"KVCache.grow: max_len must be an int >= the current max_len = {self.max_len}, "
                             f"got {max_len!r}")
        for name in ("k_cache", "v_cache"):
            old = getattr(self, name)  # (B, K, old max_len, D)
            new = old.new_zeros(old.shape[0], old.shape[1], max_len, old.shape[3])  # (B, K, max_len, D)
            new.narrow(2, 0, self.length).copy_(old.narrow(2, 0, self.length))
            setattr(self, name, new)  # a registered buffer: this replaces it
        self.max_len = max_len

    def reorder(self, index: torch.Tensor) -> None:
        """Select/reorder batch rows, e.g. to follow the surviving hypotheses of a beam search.

        Shape:
            index: ``(B',)`` int64 with values in ``[0, B)``; the cache becomes ``(B', K, max_len, D)``.
        """
        if index.dim() != 1 or index.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"reorder index must be a 1-D integer tensor (B',), got shape {tuple(index.shape)} "
                             f"dtype {index.dtype}")
        B = self.k_cache.shape[0]
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= B):
            raise ValueError(f"reorder index values must be in [0, {B}), got min {int(index.min())} "
                             f"max {int(index.max())}")
        index = index.to(self.k_cache.device)
        self.k_cache = self.k_cache.index_select(0, index)
        self.v_cache = self.v_cache.index_select(0, index)

    def extra_repr(self) -> str:
        B, K, L, D = self.k_cache.shape
        return f"batch_size={B}, num_kv_heads={K}, max_len={L}, head_dim={D}, length={self.length}"


class LayerCaches:
    """What the caches of a whole model have in common: one self-attention :class:`KVCache` per layer
    (:attr:`self_caches`, set by the subclass), all filled to the same length. ``len()`` is the number of layers;
    ``length``, ``batch_size`` and ``max_len`` are those of the layers' caches."""

    self_caches: list[KVCache]

    def __len__(self) -> int:
        return len(self.self_caches)

    @property
    def length(self) -> int:
        """Positions already cached (the same in every layer after a full forward)."""
        return self.self_caches[0].length

    @property
    def batch_size(self) -> int:
        return self.self_caches[0].batch_size

    @property
    def max_len(self) -> int:
        return self.self_caches[0].max_len

    def grow(self, max_len: int) -> None:
        """Give every layer's self-attention cache room for ``max_len`` positions (see :meth:`KVCache.grow`)."""
        for cache in self.self_caches:
            cache.grow(max_len)
