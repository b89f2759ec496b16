"""The encoder-decoder stack of "Attention Is All You Need", at the embedding level.

Axis legend: ``B`` batch, ``S`` source length, ``T`` target length, ``C`` model width (``d_model``),
``H`` heads, ``D`` head dim (``C // H``), ``F`` feed-forward width.

This is the equivalent of ``torch.nn.Transformer(batch_first=True)``: it maps embedded source and
target sequences ``(B, S, C)``, ``(B, T, C)`` to decoder states ``(B, T, C)``. Token embeddings and the
output projection live in :class:`attnkit.models.transformer.Transformer`.

Every sublayer (self-attention, cross-attention, feed-forward) is wrapped in a residual connection, in
one of two orders:

* post-norm (the paper, ``norm_first=False``):   ``x = norm(x + dropout(sublayer(x)))``
* pre-norm  (``norm_first=True``):                ``x = x + dropout(sublayer(norm(x)))``

Layer parts are named like torch's ``TransformerEncoderLayer``/``TransformerDecoderLayer`` so that
weights copy one to one: ``self_attn``, ``cross_attn`` (torch: ``multihead_attn``), ``ff`` (torch:
``linear1``/``linear2`` = ``ff.w_in``/``ff.w_out``), ``norm1/2/3``, ``dropout1/2/3``.

Two things the seed write-ups got wrong are right here: the encoder's self-attention is *not* causal,
and the decoder's cross-attention is its own module (``cross_attn``) reading the encoder memory, with
every layer fed the previous layer's output.

Incremental decoding: :class:`DecoderCache` keeps, per decoder layer, a growing self-attention
:class:`KVCache` and a *static* cross-attention cache (the memory's keys/values are projected once, on
the first step). Decoding token by token with it gives the same result as one full pass.
"""

from __future__ import annotations

import torch
from torch import nn

from attnkit.checks import check_int, check_padding_mask
from attnkit.modules.activation_checkpointing import ActivationCheckpointing, run_block
from attnkit.modules.dropout import Dropout
from attnkit.modules.feed_forward import FeedForward
from attnkit.modules.kv_cache import KVCache, LayerCaches, cache_dtype
from attnkit.modules.layer_drop import check_layer_drop, kept_layers
from attnkit.modules.multi_head_attention import MultiHeadAttention
from attnkit.modules.norms import build_norm


# ----------------------------------------------------------------------------------------------------
# cache
# ----------------------------------------------------------------------------------------------------

class DecoderCache(LayerCaches):
    """Per-layer caches for incremental decoding with a :class:`Decoder`.

    ``self_attn[i]`` grows by the new target positions at every step; ``cross_attn[i]`` holds the
    projected encoder memory, filled on the first step (created then if ``memory_len`` was not given)
    and reused afterwards. The cache also remembers the target padding flags seen so far and the memory
    padding mask, so later steps need not pass them again.

    Shape:
        self-attention buffers ``(B, H, max_len, D)``; cross-attention buffers ``(B, H, S, D)``.
    """

    def __init__(
        self,
        num_layers: int,
        batch_size: int,
        num_heads: int,
        head_dim: int,
        max_len: int,
        *,
        memory_len: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        for name, value in (("num_layers", num_layers), ("batch_size", batch_size), ("num_heads", num_heads),
                            ("head_dim", head_dim), ("max_len", max_len)):
            check_int(f"DecoderCache {name}", value, minimum=1)
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = device
        self.self_attn: list[KVCache] = [
            KVCache(batch_size, num_heads, max_len, head_dim, dtype=dtype, device=device) for _ in range(num_layers)
        ]
        self.self_caches = self.self_attn  # LayerCaches: length (target positions decoded), batch_size, max_len
        self.memory_len = memory_len  # None: each cross-attention cache is sized by the first memory it sees
        self.cross_attn: list[KVCache | None] = [None] * num_layers
        if memory_len is not None:
            self.cross_attn = [
                KVCache(batch_size, num_heads, memory_len, head_dim, dtype=dtype, device=device)
                for _ in range(num_layers)
            ]
        self.tgt_padding: torch.Tensor | None = None  # (B, length) bool, padding flags of cached positions
        self.memory_key_padding_mask: torch.Tensor | None = None  # (B, S) bool, remembered on first use

    def cross_cache(self, layer: int, memory_len: int) -> KVCache:
        """The cross-attention cache of ``layer``, created for ``memory_len`` source positions if needed.

        A cache sized by an earlier source (``memory_len`` not given) is made again for a longer one after
        :meth:`reset`; a filled cache only serves the memory it was filled from (same length).
        """
        cache = self.cross_attn[layer]
        if cache is not None and cache.length == 0 and cache.max_len < memory_len:
            if self.memory_len is not None:
                raise ValueError(f"DecoderCache was made for memory_len = {cache.max_len}, "
                                 f"got memory of length {memory_len}")
            cache = None  # sized by a shorter source before reset()
        if cache is None:
            cache = KVCache(self.batch_size, self.num_heads, memory_len, self.head_dim,
                            dtype=self.dtype, device=self.device)
            self.cross_attn[layer] = cache
        elif cache.length not in (0, memory_len):
            raise ValueError(f"DecoderCache holds the projections of a memory of length {cache.length}, got memory "
                             f"of length {memory_len}; reset() the cache for a new source")
        return cache

    def _snapshot(self) -> tuple:
        """What a decoding step changes: the caches' lengths, the cross-attention caches, the remembered masks."""
        return ([c.length for c in self.self_attn], list(self.cross_attn),
                [None if c is None else c.length for c in self.cross_attn], self.tgt_padding,
                self.memory_key_padding_mask)

    def _restore(self, snapshot: tuple) -> None:
        """Undo a step that failed part way (positions written past the saved lengths are then ignored)."""
        self_lengths, cross, cross_lengths, self.tgt_padding, self.memory_key_padding_mask = snapshot
        for c, n in zip(self.self_attn, self_lengths):
            c.length = n
        self.cross_attn = cross
        for c, n in zip(cross, cross_lengths):
            if c is not None:
                c.length = n

    def reorder(self, index: torch.Tensor) -> None:
        """Keep/reorder batch rows (beam search): new row ``b`` is old row ``index[b]``.

        Shape:
            index: ``(B',)`` integer.
        """
        for cache in self.self_attn:
            cache.reorder(index)
        for cache in self.cross_attn:
            if cache is not None:
                cache.reorder(index)
        if self.tgt_padding is not None:
            self.tgt_padding = self.tgt_padding.index_select(0, index.to(self.tgt_padding.device))
        if self.memory_key_padding_mask is not None:
            m = self.memory_key_padding_mask
            self.memory_key_padding_mask = m.index_select(0, index.to(m.device))

    def reset(self) -> None:
        """Forget everything (a new source sentence): buffers are kept, lengths go to zero."""
        for cache in self.self_attn:
            cache.reset()
        for cache in self.cross_attn:
            if cache is not None:
                cache.reset()
        self.tgt_padding = None
        self.memory_key_padding_mask = None

    def __repr__(self) -> str:
        return (f"DecoderCache(layers={len(self)}, batch_size={self.batch_size}, length={self.length}, "
                f"max_len={self.max_len})")


# ----------------------------------------------------------------------------------------------------
# layers
# ----------------------------------------------------------------------------------------------------

def _check_width(name: str, x: torch.Tensor, d_model: int, *, axes: str = "(B, L, C)") -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != d_model:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name} must have shape {axes} with C = d_model = {d_model}, got {shape}")


def check_memory(memory: torch.Tensor, batch_size: int, d_model: int, *, axes: str = "(B, L, C)") -> None:
    """Raise ``ValueError`` unless ``memory`` is a 3-D tensor of width ``d_model`` and ``batch_size`` rows.

    Shape:
        memory ``(B, S, C)`` with ``B = batch_size``, ``C = d_model`` (``axes`` is how the message names them).
    """
    _check_width("memory", memory, d_model, axes=axes)
    if memory.shape[0] != batch_size:
        raise ValueError(f"memory batch size must equal tgt batch size B = {batch_size}, got {memory.shape[0]}")


class _ResidualSublayers(nn.Module):
    """What the encoder and decoder layers share: their construction.

    Builds, in this order, ``self_attn``, ``cross_attn`` (decoder only: the class sets ``cross_attention``),
    ``ff``, one norm and one dropout per sub-layer (``norm1``…, ``dropout1``…: two in the encoder, three in the
    decoder), with torch.nn's names so that weights map one to one. ``attention_dropout`` (default: ``dropout``)
    acts on the attention weights; ``dropout`` on each sub-layer's output and inside the feed-forward (torch's
    ``dropout`` between ``linear1`` and ``linear2``).
    """

    cross_attention = False

    def __init__(
        self,
        d_model: int,
        nhead: int,
        *,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        attention_dropout: float | None = None,
        activation: str = "relu",
        norm_first: bool = False,
        norm: str = "layernorm",
        norm_eps: float = 1e-5,
        bias: bool = True,
    ):
        super().__init__()
        self.norm_first = norm_first
        attn_p = dropout if attention_dropout is None else attention_dropout  # on the attention weights
        self.self_attn = MultiHeadAttention(d_model, nhead, bias=bias, dropout=attn_p, self_attention=True)
        if self.cross_attention:
            self.cross_attn = MultiHeadAttention(d_model, nhead, bias=bias, dropout=attn_p, self_attention=False)
        self.ff = FeedForward(d_model, dim_feedforward, activation=activation, dropout=dropout, bias=bias)
        n_sublayers = 3 if self.cross_attention else 2
        for i in range(1, n_sublayers + 1):
            setattr(self, f"norm{i}", build_norm(norm, d_model, eps=norm_eps, bias=bias))
        for i in range(1, n_sublayers + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))


class EncoderLayer(_ResidualSublayers):
    """Self-attention (not causal) + feed-forward, each in a residual connection.

    Constructor: see :class:`_ResidualSublayers` (``d_model``, ``nhead``, then keyword-only options).

    Shape:
        x: ``(B, S, C)`` -> ``(B, S, C)``.
    """

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x, _ = self.self_attn(x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal)
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.ff(x))

    def forward(
        self,
        src: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        src_key_padding_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """Shape:
            src ``(B, S, C)``; src_mask ``(S, S)``/``(B, S, S)``/``(B, H, S, S)``; src_key_padding_mask ``(B, S)``
            -> ``(B, S, C)``.
        """
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x


class DecoderLayer(_ResidualSublayers):
    """Causal self-attention + cross-attention over the memory + feed-forward, each residual.

    Constructor: see :class:`_ResidualSublayers` (``d_model``, ``nhead``, then keyword-only options).

    Shape:
        x: ``(B, T, C)``, memory: ``(B, S, C)`` -> ``(B, T, C)``.
    """

    cross_attention = True

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal, kv_cache):
        x, _ = self.self_attn(x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal,
                              kv_cache=kv_cache)
        return self.dropout1(x)

    def _ca_block(self, x, memory, attn_mask, key_padding_mask, kv_cache):
        # queries from the decoder, keys/values from the encoder memory (projected once when cached)
        x, _ = self.cross_attn(x, memory, memory, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                               kv_cache=kv_cache, static_kv=kv_cache is not None)
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.ff(x))

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        tgt_is_causal: bool = True,
        *,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Shape:
            tgt ``(B, T, C)``; memory ``(B, S, C)``; tgt_mask ``(T, T')``; memory_mask ``(T, S)``;
            tgt_key_padding_mask ``(B, T')`` (``T'`` = cached + new); memory_key_padding_mask ``(B, S)``
            -> ``(B, T, C)``.
        """
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal, self_cache)
            x = x + self._ca_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, cross_cache)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal, self_cache))
            x = self.norm2(x + self._ca_block(x, memory, memory_mask, memory_key_padding_mask, cross_cache))
            x = self.norm3(x + self._ff_block(x))
        return x


# ----------------------------------------------------------------------------------------------------
# stacks
# ----------------------------------------------------------------------------------------------------

class Encoder(ActivationCheckpointing, nn.Module):
    """``num_layers`` :class:`EncoderLayer` s, each fed the previous one's output, then an optional norm.

    ``layer_drop`` (LayerDrop, :mod:`attnkit.modules.layer_drop`): in training, each layer is skipped with this
    probability, for the whole batch. Activation checkpointing (:mod:`attnkit.modules.activation_checkpointing`,
    off until :meth:`enable_activation_checkpointing`): in training, each layer that runs is computed again in the
    backward pass instead of keeping its activations.

    Shape:
        src: ``(B, S, C)`` -> memory ``(B, S, C)``.
    """

    def __init__(self, num_layers: int, d_model: int, nhead: int, *, final_norm: bool = False,
                 norm: str = "layernorm", norm_eps: float = 1e-5, bias: bool = True, layer_drop: float = 0.0,
                 **layer_kwargs):
        super().__init__()
        self.d_model = d_model
        self.layer_drop = check_layer_drop("Encoder layer_drop", layer_drop)
        self.layers = nn.ModuleList([
            EncoderLayer(d_model, nhead, norm=norm, norm_eps=norm_eps, bias=bias, **layer_kwargs)
            for _ in range(num_layers)
        ])
        self.norm = build_norm(norm, d_model, eps=norm_eps, bias=bias) if final_norm else None

    def forward(
        self,
        src: torch.Tensor,
        mask: torch.Tensor | None = None,
        src_key_padding_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """Shape:
            src ``(B, S, C)``; mask ``(S, S)``; src_key_padding_mask ``(B, S)`` -> ``(B, S, C)``.
        """
        _check_width("src", src, self.d_model)
        x = src
        checkpointed = self.checkpoints_blocks()
        for layer, runs in zip(self.layers, kept_layers(len(self.layers), self.layer_drop, self.training)):
            if runs:
                x = run_block(layer, x, mask, src_key_padding_mask, is_causal, checkpointed=checkpointed)
        return x if self.norm is None else self.norm(x)


class Decoder(ActivationCheckpointing, nn.Module):
    """``num_layers`` :class:`DecoderLayer` s, each fed the previous one's output, then an optional norm.

    ``layer_drop`` (LayerDrop, :mod:`attnkit.modules.layer_drop`): in training and without a cache, each layer is
    skipped with this probability, for the whole batch. Decoding with a cache runs every layer (every layer's
    cache must grow at every step). Activation checkpointing (:mod:`attnkit.modules.activation_checkpointing`, off
    until :meth:`enable_activation_checkpointing`): in training and without a cache, each layer that runs is
    computed again in the backward pass instead of keeping its activations.

    Shape:
        tgt: ``(B, T, C)``, memory: ``(B, S, C)`` -> ``(B, T, C)``.
    """

    def __init__(self, num_layers: int, d_model: int, nhead: int, *, final_norm: bool = False,
                 norm: str = "layernorm", norm_eps: float = 1e-5, bias: bool = True, layer_drop: float = 0.0,
                 **layer_kwargs):
        super().__init__()
        self.d_model = d_model
        self.layer_drop = check_layer_drop("Decoder layer_drop", layer_drop)
        self.nhead = nhead
        self.layers = nn.ModuleList([
            DecoderLayer(d_model, nhead, norm=norm, norm_eps=norm_eps, bias=bias, **layer_kwargs)
            for _ in range(num_layers)
        ])
        self.norm = build_norm(norm, d_model, eps=norm_eps, bias=bias) if final_norm else None

    def new_cache(self, batch_size: int, max_len: int, *, memory_len: int | None = None,
                  dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> DecoderCache:
        """An empty :class:`DecoderCache` for this decoder (dtype/device default to the parameters'; the dtype to
        autocast's under ``torch.autocast``).

        Shape:
            self-attention buffers ``(batch_size, H, max_len, D)``; cross-attention ``(batch_size, H, S, D)``.
        """
        ref = next(self.parameters())
        return DecoderCache(len(self.layers), batch_size, self.nhead, self.d_model // self.nhead, max_len,
                            memory_len=memory_len, dtype=cache_dtype(ref) if dtype is None else dtype,
                            device=ref.device if device is None else device)

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        tgt_is_causal: bool = True,
        *,
        cache: DecoderCache | None = None,
    ) -> torch.Tensor:
        """Run every layer; with ``cache`` the new positions are appended to the cached ones.

        With a cache, ``tgt_key_padding_mask`` covers all target keys (cached + new, like GPT) or only the
        new ``T`` positions (the cached flags are remembered); ``memory_key_padding_mask`` may be omitted
        after the first step.

        Shape:
            tgt ``(B, T, C)``; memory ``(B, S, C)``; tgt_key_padding_mask ``(B, T)`` or ``(B, cached + T)``;
            memory_key_padding_mask ``(B, S)`` -> ``(B, T, C)``.
        """
        _check_width("tgt", tgt, self.d_model)
        B, T, _ = tgt.shape
        check_memory(memory, B, self.d_model)
        if cache is None:
            return self._run(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                             tgt_is_causal, None)
        if not isinstance(cache, DecoderCache):
            raise ValueError(f"cache must be a DecoderCache, got {type(cache).__name__}")
        if len(cache) != len(self.layers):
            raise ValueError(f"cache must have {len(self.layers)} layers, got {len(cache)}")
        if cache.batch_size != B:
            raise ValueError(f"cache batch size must equal tgt batch size B = {B}, got {cache.batch_size}")
        snapshot = cache._snapshot()
        try:  # a step that fails part way (a bad mask met by a later layer) must leave the cache as it was
            return self._run(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                             tgt_is_causal, cache)
        except BaseException:
            cache._restore(snapshot)
            raise

    def _run(self, tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
             tgt_is_causal, cache):
        """:meth:`forward` after its checks.

        Shape:
            tgt ``(B, T, C)``; memory ``(B, S, C)`` -> ``(B, T, C)``.
        """
        B, T, _ = tgt.shape
        if cache is not None:
            tgt_key_padding_mask = self._cached_padding(cache, tgt_key_padding_mask, B, T)
            if memory_key_padding_mask is None:
                memory_key_padding_mask = cache.memory_key_padding_mask
            else:
                cache.memory_key_padding_mask = memory_key_padding_mask
        x = tgt
        runs = kept_layers(len(self.layers), self.layer_drop, self.training and cache is None)
        checkpointed = self.checkpoints_blocks(cached=cache is not None)
        for i, layer in enumerate(self.layers):
            if not runs[i]:
                continue
            x = run_block(
                layer, x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                tgt_is_causal, checkpointed=checkpointed,
                self_cache=None if cache is None else cache.self_attn[i],
                cross_cache=None if cache is None else cache.cross_cache(i, memory.shape[1]),
            )
        return x if self.norm is None else self.norm(x)

    @staticmethod
    def _cached_padding(cache: DecoderCache, mask: torch.Tensor | None, B: int, T: int) -> torch.Tensor | None:
        """Full ``(B, cached + T)`` target padding mask, updating the flags the cache remembers."""
        past = cache.length
        if mask is not None:
            check_padding_mask("tgt_key_padding_mask", mask)
            if tuple(mask.shape) == (B, past + T):
                full = mask
            elif tuple(mask.shape) == (B, T):
                prev = cache.tgt_padding
                if prev is None:
                    prev = torch.zeros(B, past, dtype=torch.bool, device=mask.device)
                full = torch.cat([prev.to(mask.device), mask], dim=1)
            else:
                raise ValueError(
                    f"tgt_key_padding_mask with a cache must have shape (B, T) = ({B}, {T}) or "
                    f"(B, cached + T) = ({B}, {past + T}), got {tuple(mask.shape)}"
                )
            cache.tgt_padding = full
            return full
        if cache.tgt_padding is None:
            return None
        # nothing new is padding: extend the remembered flags
        prev = cache.tgt_padding
        full = torch.cat([prev, torch.zeros(B, T, dtype=torch.bool, device=prev.device)], dim=1)
        cache.tgt_padding = full
        return full


@torch.no_grad()
def xavier_init_(module: nn.Module) -> None:
    """Xavier-uniform for every matrix of ``module`` (in ``named_parameters`` order), zeros for the biases
    outside the norms; norm parameters are not touched (they keep their current values)."""
    for name, p in module.named_parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
        elif name.endswith("bias") and "norm" not in name:
            nn.init.zeros_(p)


class EncoderDecoder(ActivationCheckpointing, nn.Module):
    """The embedding-level encoder-decoder (the counterpart of ``torch.nn.Transformer``, batch first).

    Args (keyword-only): as ``torch.nn.Transformer`` plus ``attention_dropout`` (on the attention weights;
    ``None`` = ``dropout``), ``norm`` (``"layernorm"``/``"rmsnorm"``), ``norm_eps``,
    ``encoder_final_norm``/``decoder_final_norm`` (``None`` = ``norm_first``; torch always has both final norms,
    so set them True when copying a ``nn.Transformer``) and ``layer_drop`` (LayerDrop in both stacks,
    :mod:`attnkit.modules.layer_drop`; 0 = off). :meth:`enable_activation_checkpointing` switches activation
    checkpointing on in both stacks (:mod:`attnkit.modules.activation_checkpointing`).

    Parameters are initialised like ``nn.Transformer``: Xavier-uniform for every matrix; the biases outside the
    norms start at zero (torch leaves ``linear1``/``linear2``'s at ``nn.Linear``'s default).

    Shape:
        src ``(B, S, C)``, tgt ``(B, T, C)`` -> ``(B, T, C)``.
    """

    def __init__(
        self,
        *,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        attention_dropout: float | None = None,
        activation: str = "relu",
        norm_first: bool = False,
        norm: str = "layernorm",
        norm_eps: float = 1e-5,
        bias: bool = True,
        encoder_final_norm: bool | None = None,
        decoder_final_norm: bool | None = None,
        layer_drop: float = 0.0,
    ):
        super().__init__()
        for name, value in (("d_model", d_model), ("nhead", nhead), ("num_encoder_layers", num_encoder_layers),
                            ("num_decoder_layers", num_decoder_layers), ("dim_feedforward", dim_feedforward)):
            check_int(f"EncoderDecoder {name}", value, minimum=1)
        if d_model % nhead != 0:
            raise ValueError(f"EncoderDecoder d_model must be divisible by nhead, got d_model={d_model}, nhead={nhead}")
        self.d_model = d_model
        self.nhead = nhead
        self.norm_first = norm_first
        layer_kwargs = dict(dim_feedforward=dim_feedforward, dropout=dropout, attention_dropout=attention_dropout,
                            activation=activation, norm_first=norm_first, norm=norm, norm_eps=norm_eps, bias=bias)
        self.encoder = Encoder(num_encoder_layers, d_model, nhead,
                               final_norm=norm_first if encoder_final_norm is None else encoder_final_norm,
                               layer_drop=layer_drop, **layer_kwargs)
        self.decoder = Decoder(num_decoder_layers, d_model, nhead,
                               final_norm=norm_first if decoder_final_norm is None else decoder_final_norm,
                               layer_drop=layer_drop, **layer_kwargs)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Xavier-uniform for every weight matrix (as ``nn.Transformer``), biases outside the norms 0; norm
        weights and biases are left as they are (ones and zeros from construction, not reset on a trained model)."""
        xavier_init_(self)

    def encode(
        self,
        src: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        src_key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run the encoder.

        Shape:
            src ``(B, S, C)``; src_mask ``(S, S)``; src_key_padding_mask ``(B, S)`` -> memory ``(B, S, C)``.
        """
        return self.encoder(src, src_mask, src_key_padding_mask)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        tgt_is_causal: bool = True,
        *,
        cache: DecoderCache | None = None,
    ) -> torch.Tensor:
        """Run the decoder over the memory (see :meth:`Decoder.forward`).

        Shape:
            tgt ``(B, T, C)``; memory ``(B, S, C)`` -> ``(B, T, C)``.
        """
        return self.decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                            tgt_is_causal, cache=cache)

    def new_cache(self, batch_size: int, max_len: int, *, memory_len: int | None = None,
                  dtype: torch.dtype | None = None) -> DecoderCache:
        """An empty :class:`DecoderCache` for :meth:`decode` (see :meth:`Decoder.new_cache`).

        Shape:
            self-attention buffers ``(batch_size, H, max_len, D)``; cross-attention ``(batch_size, H, S, D)``.
        """
        return self.decoder.new_cache(batch_size, max_len, memory_len=memory_len, dtype=dtype)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        src_key_padding_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        tgt_is_causal: bool = True,
    ) -> torch.Tensor:
        """Encode ``src``, then decode ``tgt`` against it.

        Unlike ``torch.nn.Transformer`` the decoder's self-attention is causal by default
        (``tgt_is_causal=True``); an explicit ``tgt_mask`` is combined with it.

        Shape:
            src ``(B, S, C)``; tgt ``(B, T, C)``; src_mask ``(S, S)``; tgt_mask ``(T, T)``;
            memory_mask ``(T, S)``; src/memory_key_padding_mask ``(B, S)``; tgt_key_padding_mask ``(B, T)``
            -> ``(B, T, C)``.
        """
        _check_width("src", src, self.d_model)
        _check_width("tgt", tgt, self.d_model)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"src and tgt must have the same batch size, got src B = {src.shape[0]}, "
                             f"tgt B = {tgt.shape[0]}")
        memory = self.encoder(src, src_mask, src_key_padding_mask)
        return self.decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                            tgt_is_causal)
