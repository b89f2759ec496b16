"""Decoder-only language model: GPT-2 and the Llama family in one class.

Axis legend: ``B`` batch, ``T`` new (query) positions, ``S`` key positions (cached + new),
``C`` model width (``n_embd``), ``H`` query heads, ``K`` key/value heads, ``D`` head dim,
``F`` feed-forward width, ``V`` vocabulary.

The whole model is::

    x = drop(wte(idx) [+ wpe(positions)])          # (B, T, C)   wpe only for learned/sinusoidal positions
    for block in blocks:                             # pre-norm residual blocks
        x = x + drop(attn(ln_1(x)))                  # causal self-attention (RoPE inside for Llama)
        x = x + drop(mlp(ln_2(x)))                   # GELU MLP (GPT-2) or SwiGLU (Llama)
    logits = lm_head(ln_f(x))                        # (B, T, V)

What varies between GPT-2 and Llama is only configuration (:class:`~attnkit.models.configs.GPTConfig`):

============  ======================  ==============================
field         GPT-2                   Llama / SmolLM2
============  ======================  ==============================
position      ``learned`` (``wpe``)   ``rope`` (rotary in attention)
norm          ``layernorm``           ``rmsnorm``
activation    ``gelu_tanh``           ``swiglu``
bias          True                    False
n_kv_head     = n_head                < n_head (grouped-query)
head          tied to ``wte``         tied or separate
============  ======================  ==============================

Attribute names follow nanoGPT / HF GPT-2 (``wte``, ``wpe``, ``blocks[i].ln_1/attn/ln_2/mlp``, ``ln_f``,
``lm_head``), so checkpoints map name by name (see ``attnkit.interop.hf``).

Padding: batches are *left*-padded for generation. Pass ``key_padding_mask`` (``True`` = padding) and,
unless you give ``position_ids``, each row's positions are counted from its first real token, so a
padded row produces the same logits as the same row alone.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from attnkit.checks import check_index_tensor, check_int, check_padding_mask, check_token_ids, no_host_reads
from attnkit.modules.activation_checkpointing import ActivationCheckpointing, run_block
from attnkit.modules.dropout import Dropout
from attnkit.modules.embeddings import TokenEmbedding
from attnkit.modules.feed_forward import FeedForward
from attnkit.modules.kv_cache import KVCache, LayerCaches, cache_dtype
from attnkit.modules.learned_positions import LearnedPositionalEmbedding
from attnkit.modules.masks import drop_if_unpadded
from attnkit.modules.multi_head_attention import MultiHeadAttention
from attnkit.modules.norms import build_norm
from attnkit.modules.rotary import RotaryEmbedding
from attnkit.modules.sinusoidal import SinusoidalPositionalEncoding

from .configs import GPTConfig



class GPTCache(LayerCaches):
    """Key/value caches of every layer of a :class:`GPT` (one :class:`KVCache` per block).

    Made by :meth:`GPT.new_cache`. ``length`` is the number of positions already processed;
    ``reorder(index)`` selects/reorders batch rows (beam search); ``reset()`` empties it for reuse.

    Shape:
        each layer's buffers are ``(B, K, max_len, D)``.
    """

    def __init__(self, layers: list[KVCache]):
        if not layers:
            raise ValueError("GPTCache needs at least one layer cache, got 0")
        self.layers = self.self_caches = layers

    def __getitem__(self, i: int) -> KVCache:
        return self.layers[i]

    def __iter__(self):
        return iter(self.layers)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep/reorder batch rows: row ``b`` of the new cache is row ``index[b]`` of the old one.

        Shape:
            index: ``(B',)`` integer.
        """
        for layer in self.layers:
            layer.reorder(index)

    def reset(self) -> None:
        """Forget all cached positions (buffers are kept)."""
        for layer in self.layers:
            layer.reset()

    def __repr__(self) -> str:
        return (f"GPTCache(layers={len(self.layers)}, batch_size={self.batch_size}, length={self.length}, "
                f"max_len={self.max_len})")


class Block(nn.Module):
    """One pre-norm decoder block: ``x + attn(ln_1(x))`` then ``x + mlp(ln_2(x))``.

    Shape:
        x: ``(B, T, C)`` -> ``(B, T, C)``.
    """

    def __init__(self, config: GPTConfig, rotary: RotaryEmbedding | None = None):
        super().__init__()
        C = config.n_embd
        self.ln_1 = build_norm(config.norm, C, eps=config.norm_eps, bias=config.bias)
        self.attn = MultiHeadAttention(
            C,
            config.n_head,
            num_kv_heads=config.kv_heads,
            head_dim=config.head_size,
            bias=config.bias,
            dropout=config.attn_dropout,  # on the attention weights (GPT-2's attn_pdrop)
            self_attention=True,
            rotary=rotary,
        )
        self.ln_2 = build_norm(config.norm, C, eps=config.norm_eps, bias=config.bias)
        # GPT-2 has no dropout inside the MLP; the residual dropout below plays that role.
        self.mlp = FeedForward(C, config.ffn_size, activation=config.activation, dropout=0.0, bias=config.bias)
        self.resid_drop = Dropout(config.dropout)  # on each residual branch (GPT-2's resid_pdrop)

    def forward(
        self,
        x: torch.Tensor,
        *,
        key_padding_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        kv_cache: KVCache | None = None,
        attn_mask: torch.Tensor | None = None,
        cache_position: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Causal self-attention then feed-forward, each with a residual connection.

        ``attn_mask`` (``True`` = may not attend), when given, *replaces* the causal mask and must
        include causality itself (``GPT.forward`` builds it for ``cache_position``).

        Shape:
            x: ``(B, T, C)``; key_padding_mask: ``(B, S)``; position_ids: ``(B, T)`` or ``(T,)``;
            attn_mask: ``(T, S)``; cache_position: ``(T,)`` -> ``(B, T, C)``.
        """
        a, _ = self.attn(
            self.ln_1(x),
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=attn_mask is None,
            kv_cache=kv_cache,
            position_ids=position_ids,
            cache_position=cache_position,
        )
        x = x + self.resid_drop(a)
        x = x + self.resid_drop(self.mlp(self.ln_2(x)))
        return x


class GPT(ActivationCheckpointing, nn.Module):
    """Decoder-only Transformer language model configured by a :class:`GPTConfig`.

    ``model.enable_activation_checkpointing()`` (:mod:`attnkit.modules.activation_checkpointing`): in training,
    each block's activations are computed again in the backward pass instead of kept (same numbers, less memory).

    Shape:
        idx: ``(B, T)`` int64/int32 token ids in ``[0, V)`` -> logits ``(B, T, V)``.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ValueError(f"GPT expects a GPTConfig, got {type(config).__name__}")
        self.config = config
        C = config.n_embd

        self.wte = TokenEmbedding(config.vocab_size, C)
        if config.position == "learned":
            self.wpe = LearnedPositionalEmbedding(config.block_size, C)
        elif config.position == "sinusoidal":
            self.wpe = SinusoidalPositionalEncoding(C, max_len=config.block_size)
        else:
            self.wpe = None
        # One rotary module shared by every block (its cos/sin tables are buffers, not parameters).
        self.rotary = (
            RotaryEmbedding(config.head_size, max_len=config.block_size, theta=config.rope_theta)
            if config.position == "rope" else None
        )
        self.drop = Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config, self.rotary) for _ in range(config.n_layer)])
        self.ln_f = build_norm(config.norm, C, eps=config.norm_eps, bias=config.bias)
        self.lm_head = nn.Linear(C, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.wte.weight  # one tensor, used for input and output (weight tying)
        self.reset_parameters()

    def output_layer(self) -> nn.Linear:
        """The layer that turns hidden states into vocabulary logits (``lm_head``). Optimizers treat it like an
        embedding, not like a hidden matrix (:func:`attnkit.training.optim.param_groups`)."""
        return self.lm_head

    # ------------------------------------------------------------------------------------------------
    # initialisation
    # ------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2 / nanoGPT initialisation.

        Linear and embedding weights ~ N(0, 0.02^2), biases 0; the two projections
        that write into the residual stream (``attn.out_proj`` and ``mlp.w_out``) get
        std ``0.02 / sqrt(2 * n_layer)`` so the residual's variance does not grow with depth. Norm weights
        and biases are not touched (ones and zeros from construction; a trained model's stay as they are).
        """
        std = 0.02
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (TokenEmbedding, LearnedPositionalEmbedding, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
        residual_std = std / math.sqrt(2 * self.config.n_layer)
        for block in self.blocks:
            nn.init.normal_(block.attn.out_proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.w_out.weight, mean=0.0, std=residual_std)
        # (norm weights/biases keep their ones/zeros from construction)

    # ------------------------------------------------------------------------------------------------
    # caches
    # ------------------------------------------------------------------------------------------------
    def new_cache(self, batch_size: int, max_len: int | None = None, *, dtype: torch.dtype | None = None) -> GPTCache:
        """Empty key/value caches for incremental decoding, on the model's device.

        Args:
            batch_size: ``B``.
            max_len: capacity in positions (prompt + generated); default ``block_size``.
            dtype: of the buffers; default the model's parameter dtype (autocast's under ``torch.autocast``).

        Shape:
            each layer holds ``(B, K, max_len, D)`` keys and values.
        """
        cfg = self.config
        max_len = cfg.block_size if max_len is None else max_len
        check_int("batch_size", batch_size, minimum=1)
        check_int("max_len", max_len, minimum=1)
        if cfg.position == "learned" and max_len > cfg.block_size:
            raise ValueError(f"max_len must be <= block_size = {cfg.block_size} with learned positions, got {max_len}")
        ref = self.wte.weight
        dtype = cache_dtype(ref) if dtype is None else dtype
        return GPTCache([
            KVCache(batch_size, cfg.kv_heads, max_len, cfg.head_size, dtype=dtype, device=ref.device)
            for _ in range(cfg.n_layer)
        ])

    # ------------------------------------------------------------------------------------------------
    # forward
    # ------------------------------------------------------------------------------------------------
    def _positions(
        self,
        B: int,
        T: int,
        past: int,
        key_padding_mask: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        device: torch.device,
        cache_position: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Position of every new token: given, or counted from each row's first non-padding key.

        Shape:
            returns ``(B, T)`` or ``(T,)`` int64.
        """
        if position_ids is not None:
            check_index_tensor("position_ids", position_ids)
            if tuple(position_ids.shape) not in ((B, T), (T,)):
                raise ValueError(
                    f"position_ids must have shape (B, T) = ({B}, {T}) or (T,) = ({T},), "
                    f"got {tuple(position_ids.shape)}"
                )
            if no_host_reads():
                torch._assert_async((position_ids >= 0).all(), "position_ids must be >= 0")
            elif position_ids.numel() and int(position_ids.min()) < 0:
                raise ValueError(f"position_ids must be >= 0, got {int(position_ids.min())}")
            return position_ids.to(device=device, dtype=torch.int64)
        if key_padding_mask is not None:
            # left padding: a row's first real token is position 0. cumsum over real keys, minus one.
            real = (~key_padding_mask).to(torch.int64)  # (B, S)
            pos = (real.cumsum(dim=1) - 1).clamp(min=0)  # (B, S)
            if cache_position is not None:
                return pos.index_select(1, cache_position)  # (B, T): the keys in the new tokens' slots
            return pos[:, past:]  # (B, T): the new tokens are the last T keys
        if cache_position is not None:
            return cache_position  # (T,): unpadded, a token's slot is its position
        return torch.arange(past, past + T, device=device)  # (T,)

    def _check_cache_position(self, cache_position: torch.Tensor, T: int, max_len: int) -> None:
        if not isinstance(cache_position, torch.Tensor) or cache_position.dtype != torch.int64 or (
            tuple(cache_position.shape) != (T,)
        ):
            got = (f"{cache_position.dtype} {tuple(cache_position.shape)}" if isinstance(cache_position, torch.Tensor)
                   else type(cache_position).__name__)
            raise ValueError(f"cache_position must be an int64 tensor of shape (T,) = ({T},), got {got}")
        if no_host_reads():  # no host sync inside a compiled graph
            torch._assert_async(((cache_position >= 0) & (cache_position < max_len)).all(),
                                f"cache_position must be in [0, cache.max_len) = [0, {max_len})")
        elif int(cache_position.min()) < 0 or int(cache_position.max()) >= max_len:
            raise ValueError(f"cache_position must be in [0, cache.max_len) = [0, {max_len}), "
                             f"got {cache_position.tolist()}")

    def _cached_length(self, cache: GPTCache | None, cache_position: torch.Tensor | None, B: int, T: int) -> int:
        """Check ``cache`` against a batch of ``B`` rows and ``T`` new tokens; the cached length ``past`` (0 with
        ``cache_position``, where the slots say where the tokens go)."""
        cfg = self.config
        if cache_position is not None and cache is None:
            raise ValueError("cache_position needs a cache (GPT.new_cache())")
        if cache is None:
            return 0
        if not isinstance(cache, GPTCache):
            raise ValueError(f"cache must be a GPTCache from GPT.new_cache(), got {type(cache).__name__}")
        if len(cache) != cfg.n_layer:
            raise ValueError(f"cache must have n_layer = {cfg.n_layer} layer caches, got {len(cache)}")
        if cache.batch_size != B:
            raise ValueError(f"cache batch size must equal idx batch size B = {B}, got {cache.batch_size}")
        if cache_position is not None:
            return 0
        past = cache.length
        if past + T > cache.max_len:
            raise ValueError(f"cache overflow: max_len = {cache.max_len}, cached {past} + new {T} = {past + T}")
        return past

    def _check_learned_positions(self, pos: torch.Tensor, *, counted: bool, S: int, past: int, T: int) -> None:
        """Learned positions stop at ``block_size``: check the ``S`` keys when the positions are counted from
        the cache (no device sync per step), else the given or padding-derived positions themselves.

        Shape:
            pos ``(B, T)`` or ``(T,)``.
        """
        block_size = self.config.block_size
        if counted:
            if S > block_size:
                raise ValueError(f"sequence length must be <= block_size = {block_size} with learned positions, "
                                 f"got {S} (cached {past} + new {T})")
        elif no_host_reads():
            torch._assert_async((pos < block_size).all(),
                                f"position ids must be < block_size = {block_size} with learned positions")
        elif int(pos.max()) >= block_size:
            raise ValueError(f"position ids must be < block_size = {block_size} with learned positions, "
                             f"got {int(pos.max())}")

    def forward(
        self,
        idx: torch.Tensor,
        *,
        key_padding_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: GPTCache | None = None,
        cache_position: torch.Tensor | None = None,
        output_fn: Callable[[torch.Tensor, nn.Module], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Next-token logits for every position.

        Args:
            idx: token ids.
            key_padding_mask: bool, ``True`` = padding, covering *all* keys: the ``cache.length`` cached
                positions followed by the ``T`` new ones (with ``cache_position``: all ``cache.max_len`` slots).
            position_ids: positions of the new tokens; default counted from each row's first non-padding
                key (when a mask is given) or ``cache.length + arange(T)`` (or ``cache_position``).
            cache: a :class:`GPTCache` from :meth:`new_cache`; the new keys/values are appended to it.
            cache_position: the cache slots of the new tokens (needs ``cache``). They are written there
                (:meth:`KVCache.update_at`) and each query attends to every slot up to its own, over buffers
                of the fixed length ``cache.max_len``; ``cache.length`` is neither read nor moved (the caller
                keeps it). Every shape then stays the same from one decoding step to the next, which is what
                a ``torch.compile``-d step needs (:mod:`attnkit.generation.compiled`).
            output_fn: ``output_fn(h, lm_head)`` of the final hidden states ``h`` (after ``ln_f``) is returned
                instead of the logits: the chunked loss (:mod:`attnkit.modules.chunked_cross_entropy`) reads the
                head there, inside the forward pass, where DDP's and FSDP2's hooks expect every parameter to be used.

        Shape:
            idx ``(B, T)``; key_padding_mask ``(B, S)`` with ``S = cache.length + T`` (``S = cache.max_len``
            with cache_position); position_ids ``(B, T)`` or ``(T,)``; cache_position ``(T,)`` int64 ->
            logits ``(B, T, V)``.
        """
        cfg = self.config
        check_token_ids(idx, name="idx", vocab_size=cfg.vocab_size, length_axis="T", range_label="token ids")
        B, T = idx.shape
        past = self._cached_length(cache, cache_position, B, T)
        attn_mask = None
        if cache_position is not None:
            S = cache.max_len
            self._check_cache_position(cache_position, T, S)
            cache_position = cache_position.to(idx.device)
            # slot j is visible to the query in slot s iff j <= s: earlier tokens and itself, never the
            # unfilled (or stale) slots after it. True = may not attend.
            attn_mask = torch.arange(S, device=idx.device)[None, :] > cache_position[:, None]  # (T, S)
        else:
            S = past + T
        if key_padding_mask is not None:
            check_padding_mask("key_padding_mask", key_padding_mask, (B, S), detail=f" (S = cached {past} + new {T})")
            key_padding_mask = drop_if_unpadded(key_padding_mask.to(idx.device))  # nothing padded: fast path
        pos = self._positions(B, T, past, key_padding_mask, position_ids, idx.device, cache_position)

        if cfg.position == "learned":
            counted = position_ids is None and key_padding_mask is None and cache_position is None
            self._check_learned_positions(pos, counted=counted, S=S, past=past, T=T)

        x = self.wte(idx)  # (B, T, C)
        if self.wpe is not None:
            x = x + self.wpe(pos)  # (B, T, C), or (T, C) broadcast over the batch when pos is (T,)
        x = self.drop(x)
        rope_pos = pos if self.rotary is not None else None
        checkpointed = self.checkpoints_blocks(cached=cache is not None)  # in training, when switched on
        for i, block in enumerate(self.blocks):
            x = run_block(
                block,
                x,
                checkpointed=checkpointed,
                key_padding_mask=key_padding_mask,
                position_ids=rope_pos,
                kv_cache=None if cache is None else cache[i],
                attn_mask=attn_mask,
                cache_position=cache_position,
            )
        x = self.ln_f(x)  # (B, T, C)
        return self.lm_head(x) if output_fn is None else output_fn(x, self.lm_head)  # (B, T, V)

    # ------------------------------------------------------------------------------------------------
    # conveniences
    # ------------------------------------------------------------------------------------------------
    def num_parameters(self) -> int:
        """Parameter count, tied weights once (see :mod:`attnkit.models.params`)."""
        return sum(p.numel() for p in self.parameters())

    def extra_repr(self) -> str:
        c = self.config
        return (f"vocab_size={c.vocab_size}, block_size={c.block_size}, position={c.position!r}, "
                f"tie_embeddings={c.tie_embeddings}")
