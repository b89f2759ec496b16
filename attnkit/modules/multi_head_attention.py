"""Multi-head attention: projections, head split, scaled dot-product attention, head merge, output projection.

Axis legend: ``B`` batch, ``T`` query length, ``S`` key length, ``C`` model width (``embed_dim``),
``H`` query heads, ``K`` key/value heads, ``D`` head dim.

    head_h = Attention(x W_q^h, m W_k^g, m W_v^g)       (m = x for self-attention, memory for cross;
    out    = concat(head_1, ..., head_H) W_o              g = h // (H // K), g = h when K = H)

Parameter layout (so torch.nn / GPT-2 / Llama weights are a plain copy):

* self-attention: one packed ``qkv_proj`` Linear(C -> (H + 2K) D) whose output rows are
  ``[q heads | k heads | v heads]`` (torch.nn's ``in_proj_weight``, GPT-2's ``c_attn`` transposed);
* cross-attention: ``q_proj`` Linear(C -> H D) and a packed ``kv_proj`` Linear(kdim -> 2 K D) with rows
  ``[k | v]``; separate ``k_proj``/``v_proj`` when ``kdim != vdim``;
* ``out_proj`` Linear(H D -> out_dim).

``head_dim`` may be chosen freely (seed 000: ``dim_head`` independent of ``dim_emb``), in which case the
inner width ``H * D`` need not equal ``C``. ``num_kv_heads < num_heads`` gives grouped-query attention
(``num_kv_heads = 1``: multi-query attention).
"""

from __future__ import annotations

import torch
from torch import nn

from attnkit.checks import check_int, check_probability

from .attention import check_masks, check_options, scaled_dot_product_attention
from .kv_cache import KVCache
from .rotary import RotaryEmbedding


class MultiHeadAttention(nn.Module):
    """Multi-head (grouped-query) attention, self or cross, with optional RoPE and KV cache.

    Args:
        embed_dim: query width ``C``.
        num_heads: ``H``.
        num_kv_heads: ``K`` (default ``H``); ``H % K == 0``.
        head_dim: ``D`` (default ``C // H``, which then requires ``C % H == 0``).
        kdim, vdim: widths of the key/value inputs (cross-attention; default ``C``).
        out_dim: output width (default ``C``).
        bias: bias of the input projections.
        out_bias: bias of ``out_proj`` (default: same as ``bias``).
        dropout: dropout on the attention weights, in training mode only.
        self_attention: packed ``qkv_proj`` (True) or ``q_proj`` + ``kv_proj`` (False).
        rotary: a :class:`RotaryEmbedding` applied to q and k (self-attention only), or ``None``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        kdim: int | None = None,
        vdim: int | None = None,
        out_dim: int | None = None,
        bias: bool = True,
        out_bias: bool | None = None,
        dropout: float = 0.0,
        self_attention: bool = True,
        rotary: RotaryEmbedding | None = None,
    ):
        super().__init__()
        check_int("MultiHeadAttention embed_dim", embed_dim, minimum=1)
        check_int("MultiHeadAttention num_heads", num_heads, minimum=1)
        for name, value in (("num_kv_heads", num_kv_heads), ("head_dim", head_dim), ("kdim", kdim), ("vdim", vdim),
                            ("out_dim", out_dim)):
            check_int(f"MultiHeadAttention {name}", value, minimum=1, allow_none=True)
        if head_dim is None:
            if embed_dim % num_heads != 0:
                raise ValueError(f"embed_dim must be divisible by num_heads when head_dim is not given: "
                                 f"embed_dim={embed_dim}, num_heads={num_heads} (remainder {embed_dim % num_heads})")
            head_dim = embed_dim // num_heads
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads must be divisible by num_kv_heads: num_heads={num_heads}, "
                             f"num_kv_heads={num_kv_heads}")
        kdim = embed_dim if kdim is None else kdim
        vdim = embed_dim if vdim is None else vdim
        if self_attention and (kdim != embed_dim or vdim != embed_dim):
            raise ValueError(f"self-attention needs kdim == vdim == embed_dim = {embed_dim}, got kdim={kdim}, "
                             f"vdim={vdim} (use self_attention=False for cross-attention)")
        check_probability("dropout", dropout)
        if rotary is not None:
            if not self_attention:
                raise ValueError("rotary embeddings are only supported for self-attention (self_attention=True)")
            if not isinstance(rotary, RotaryEmbedding) or rotary.head_dim != head_dim:
                raise ValueError(f"rotary must be a RotaryEmbedding with head_dim = {head_dim}, got {rotary!r}")

        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.kdim = kdim
        self.vdim = vdim
        self.out_dim = embed_dim if out_dim is None else out_dim
        self.dropout = dropout
        self.self_attention = self_attention
        out_bias = bias if out_bias is None else out_bias

        q_width = num_heads * head_dim  # H * D
        kv_width = num_kv_heads * head_dim  # K * D
        if self_attention:
            self.qkv_proj = nn.Linear(embed_dim, q_width + 2 * kv_width, bias=bias)
        else:
            self.q_proj = nn.Linear(embed_dim, q_width, bias=bias)
            if kdim == vdim:
                self.kv_proj = nn.Linear(kdim, 2 * kv_width, bias=bias)
            else:
                self.k_proj = nn.Linear(kdim, kv_width, bias=bias)
                self.v_proj = nn.Linear(vdim, kv_width, bias=bias)
        self.out_proj = nn.Linear(q_width, self.out_dim, bias=out_bias)
        self.rotary = rotary

    # ------------------------------------------------------------------ projections
    def _split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, heads, self.head_dim).transpose(1, 2)  # (B, heads, L, D)

    @staticmethod
    def _packed_parts(layer: nn.Module, inputs: tuple[torch.Tensor, ...], widths: list[int]) -> list[torch.Tensor]:
        """Part ``i`` of the packed ``layer``'s output on ``inputs[i]``, for inputs that differ.

        The layer itself runs on each distinct input (not a slice of its ``weight``), so a layer that is not a
        plain ``nn.Linear`` (a LoRA adapter, an int8 layer) computes what it does in the one-input case.

        Shape:
            inputs[i] ``(B, T, in)`` (the query) or ``(B, S, in)`` (key, value) -> part i ``(B, T|S, widths[i])``.
        """
        outputs: dict[int, tuple[torch.Tensor, ...]] = {}
        parts = []
        for i, x in enumerate(inputs):
            if id(x) not in outputs:
                outputs[id(x)] = layer(x).split(widths, dim=-1)
            parts.append(outputs[id(x)][i])
        return parts

    def _project_self(self, query: torch.Tensor, key: torch.Tensor | None, value: torch.Tensor | None):
        """q, k, v from the packed projection (rows [q | k | v])."""
        q_width = self.num_heads * self.head_dim
        kv_width = self.num_kv_heads * self.head_dim
        if key is None:  # the usual case: one matmul for all three
            return self.qkv_proj(query).split([q_width, kv_width, kv_width], dim=-1)
        # Self-attention weights applied to distinct key/value inputs (as torch.nn.MultiheadAttention allows).
        return self._packed_parts(self.qkv_proj, (query, key, value), [q_width, kv_width, kv_width])

    def _project_kv_cross(self, key: torch.Tensor, value: torch.Tensor):
        kv_width = self.num_kv_heads * self.head_dim
        if self.kdim == self.vdim:
            if key is value:  # the usual case (the encoder's memory): one matmul for both
                return self.kv_proj(key).split([kv_width, kv_width], dim=-1)
            return self._packed_parts(self.kv_proj, (key, value), [kv_width, kv_width])
        return self.k_proj(key), self.v_proj(value)

    # ------------------------------------------------------------------ validation
    def _check_inputs(self, query: torch.Tensor, key: torch.Tensor | None, value: torch.Tensor | None) -> None:
        if query.dim() != 3 or query.shape[-1] != self.embed_dim:
            raise ValueError(f"query must have shape (B, T, C={self.embed_dim}), got {tuple(query.shape)}")
        B = query.shape[0]
        for name, t, width in (("key", key, self.kdim), ("value", value, self.vdim)):
            if t is None:
                continue
            if t.dim() != 3 or t.shape[-1] != width:
                raise ValueError(f"{name} must have shape (B, S, {name[0]}dim={width}), got {tuple(t.shape)}")
            if t.shape[0] != B:
                raise ValueError(f"{name} batch size must equal the query's B = {B}, got {t.shape[0]}")
            if t.dtype != query.dtype:
                raise ValueError(f"{name} dtype must equal the query's {query.dtype}, got {t.dtype}")
        if key is not None and value is not None and key.shape[1] != value.shape[1]:
            raise ValueError(f"key and value must have the same length S, got {key.shape[1]} and {value.shape[1]}")

    # ------------------------------------------------------------------ the two kinds of keys/values
    def _self_qkv(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None,
        value: torch.Tensor | None,
        kv_cache: KVCache | None,
        position_ids: torch.Tensor | None,
        cache_position: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention: project, split heads, rotate (rotary) and append to / write into the cache.

        Shape:
            query ``(B, T, C)`` -> q ``(B, H, T, D)``, k and v ``(B, K, S, D)`` (``S = T``, ``cached + T`` or
            ``max_len`` with ``cache_position``).
        """
        if self.rotary is not None and key is not None:
            raise ValueError("rotary self-attention takes its keys from the query; got a separate key tensor")
        T = query.shape[1]
        q, k, v = self._project_self(query, key, value)  # (B, T, H*D), (B, T|S, K*D) x2
        q = self._split_heads(q, self.num_heads)  # (B, H, T, D)
        k = self._split_heads(k, self.num_kv_heads)  # (B, K, T|S, D)
        v = self._split_heads(v, self.num_kv_heads)  # (B, K, T|S, D)
        if self.rotary is not None:
            if position_ids is None and cache_position is not None:
                position_ids = cache_position  # (T,)
            elif position_ids is None:
                start = kv_cache.length if kv_cache is not None else 0
                position_ids = torch.arange(start, start + T, device=query.device)  # (T,)
            q = self.rotary(q, position_ids)
            k = self.rotary(k, position_ids)
        if cache_position is not None:
            k, v = kv_cache.update_at(k, v, cache_position)  # (B, K, max_len, D): every slot
        elif kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, K, S, D) with S = cached + T
        return q, k, v

    def _cross_kv(
        self, key: torch.Tensor | None, value: torch.Tensor | None, kv_cache: KVCache | None, static_kv: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys/values: projected from ``key``/``value``, or (``static_kv``) from the cache.

        Shape:
            key ``(B, S, kdim)``, value ``(B, S, vdim)`` -> k, v ``(B, K, S, D)``.
        """
        if kv_cache is not None and static_kv and kv_cache.length > 0:
            return kv_cache.get()  # memory projected on an earlier call
        if key is None:
            raise ValueError("cross-attention needs key (and value) of shape (B, S, kdim), got None")
        k, v = self._project_kv_cross(key, value)
        k = self._split_heads(k, self.num_kv_heads)  # (B, K, S, D)
        v = self._split_heads(v, self.num_kv_heads)  # (B, K, S, D)
        if kv_cache is not None:
            if static_kv:
                kv_cache.reset()
            k, v = kv_cache.update(k, v)
        return k, v

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        attn_mask: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        average_attn_weights: bool = True,
        kv_cache: KVCache | None = None,
        position_ids: torch.Tensor | None = None,
        static_kv: bool = False,
        cache_position: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value`` (or to itself).

        Masks follow torch.nn (bool ``True`` = may not attend; float added). ``is_causal`` is
        bottom-right aligned, so it stays correct when a ``kv_cache`` holds earlier positions.

        With a ``kv_cache``: self-attention appends the new keys/values and attends over every cached
        position (``key_padding_mask`` and ``attn_mask`` then cover all ``S = cached + T`` keys);
        cross-attention with ``static_kv=True`` projects ``key``/``value`` on the first call, stores
        them, and reuses them afterwards (``key`` may then be ``None``).

        With ``cache_position`` (self-attention with a ``kv_cache`` only): the new keys/values go into
        those cache slots (:meth:`KVCache.update_at`) and attention runs over *all* ``max_len`` slots, so
        ``attn_mask``/``key_padding_mask`` cover ``S = max_len`` keys and must mask the slots a query may
        not see (unfilled ones included); rotary positions default to ``cache_position``.

        Shape:
            query ``(B, T, C)``; key ``(B, S, kdim)``; value ``(B, S, vdim)`` (``None`` for self-attention);
            attn_mask ``(T, S)`` / ``(B, T, S)`` / ``(B, H, T, S)``; key_padding_mask ``(B, S)``;
            position_ids ``(B, T)`` or ``(T,)``; cache_position ``(T,)`` int64 ->
            out ``(B, T, out_dim)``, weights ``(B, T, S)`` (averaged) or ``(B, H, T, S)`` or ``None``.
        """
        if value is None and key is not None:
            value = key
        if self.self_attention and key is query and value is query:
            key = value = None  # mha(x, x, x), torch.nn style: plain self-attention
        self._check_inputs(query, key, value)
        if cache_position is not None and (kv_cache is None or not self.self_attention):
            raise ValueError("cache_position needs self-attention with a kv_cache")
        B, T, _ = query.shape
        H, K = self.num_heads, self.num_kv_heads
        dropout_p = self.dropout if self.training else 0.0
        if self.self_attention and kv_cache is not None and cache_position is None:
            # what attention would refuse, refused before the new keys/values are appended to the cache (a call
            # that failed after appending would leave them there, and every later step would see them twice)
            check_options(is_causal, dropout_p, None)
            check_masks(attn_mask, key_padding_mask, B, H, T, kv_cache.length + (T if key is None else key.shape[1]))
        if self.self_attention:
            q, k, v = self._self_qkv(query, key, value, kv_cache, position_ids, cache_position)
        else:
            q = self._split_heads(self.q_proj(query), H)  # (B, H, T, D)
            k, v = self._cross_kv(key, value, kv_cache, static_kv)

        out, weights = scaled_dot_product_attention(
            q, k, v,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            dropout_p=dropout_p,
            need_weights=need_weights,
            enable_gqa=K != H,
        )  # out (B, H, T, D)
        out = out.transpose(1, 2).reshape(B, T, H * self.head_dim)  # (B, T, H*D): heads side by side
        out = self.out_proj(out)  # (B, T, out_dim)
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)  # (B, T, S)
        return out, weights

    def new_cache(self, batch_size: int, max_len: int, *, dtype: torch.dtype | None = None,
                  device: torch.device | str | None = None) -> KVCache:
        """A :class:`KVCache` sized for this layer (dtype/device default to the parameters').

        Shape:
            buffers ``(batch_size, K, max_len, D)``.
        """
        ref = self.out_proj.weight
        return KVCache(batch_size, self.num_kv_heads, max_len, self.head_dim,
                       dtype=ref.dtype if dtype is None else dtype, device=ref.device if device is None else device)

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}, self_attention={self.self_attention}, dropout={self.dropout}")
