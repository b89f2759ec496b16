"""The token-level encoder-decoder Transformer (translation model) configured by a ``TransformerConfig``.

Axis legend: ``B`` batch, ``S`` source length, ``T`` target length, ``L`` either length, ``C`` model width
(``d_model``), ``H`` heads, ``D`` head dim (``C // H``), ``V`` target vocabulary.

    memory = encoder(src_embed(src))                           # (B, S, C)
    logits = generator(decoder(tgt_embed(tgt), memory))        # (B, T, V)

``src_embed``/``tgt_embed`` are :class:`~attnkit.modules.embeddings.TransformerEmbedding` (token x sqrt(C)
+ sinusoidal position, dropout) and may be one shared module; ``generator`` is the output Linear, whose
weight may be tied to the target token table (paper section 3.4). ``core`` is the embedding-level
:class:`~attnkit.models.encoder_decoder.EncoderDecoder`.

Inference uses the two halves separately: ``memory = model.encode(src)`` once, then
``model.decode(prefix, memory, memory_key_padding_mask=..., cache=cache)`` step by step with a
:class:`~attnkit.models.encoder_decoder.DecoderCache` from :meth:`Transformer.new_cache`.

Padding masks: when ``config.pad_id`` is set and no mask is passed, ``src == pad_id`` (and
``tgt == pad_id``) are treated as padding. ``decode`` cannot see the source ids, so pass
``memory_key_padding_mask`` (``model.padding_mask(src)``) when the source is padded.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from attnkit.checks import check_padding_mask, check_token_ids
from attnkit.modules.activation_checkpointing import ActivationCheckpointing
from attnkit.modules.embeddings import TransformerEmbedding
from attnkit.modules.masks import drop_if_unpadded

from .configs import TransformerConfig
from .encoder_decoder import DecoderCache, EncoderDecoder, check_memory, xavier_init_



class Transformer(ActivationCheckpointing, nn.Module):
    """Encoder-decoder Transformer over token ids.

    ``model.enable_activation_checkpointing()`` (:mod:`attnkit.modules.activation_checkpointing`): in training,
    the encoder's and decoder's layers are computed again in the backward pass instead of keeping their
    activations (same numbers, less memory).

    Shape:
        src ``(B, S)``, tgt ``(B, T)`` int64/int32 -> logits ``(B, T, V)`` (``V`` = ``tgt_vocab_size``).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise ValueError(f"Transformer expects a TransformerConfig, got {type(config).__name__}")
        self.config = config
        c = config
        emb = dict(max_len=c.max_len, position=c.position, dropout=c.dropout, scale=c.scale_embeddings)
        self.src_embed = TransformerEmbedding(c.src_vocab_size, c.d_model, **emb)
        if c.share_embeddings:
            self.tgt_embed = self.src_embed  # one module: same token table (and positions) both sides
        else:
            self.tgt_embed = TransformerEmbedding(c.tgt_vocab_size, c.d_model, **emb)
        self.core = EncoderDecoder(
            d_model=c.d_model, nhead=c.num_heads, num_encoder_layers=c.num_encoder_layers,
            num_decoder_layers=c.num_decoder_layers, dim_feedforward=c.dim_feedforward, dropout=c.dropout,
            attention_dropout=c.attention_dropout, activation=c.activation, norm_first=c.norm_first, norm=c.norm, norm_eps=c.norm_eps, bias=c.bias,
            encoder_final_norm=c.use_encoder_final_norm, decoder_final_norm=c.use_decoder_final_norm,
            layer_drop=c.layer_drop,
        )
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size, bias=c.bias)
        if c.tie_output:
            self.generator.weight = self.tgt_embed.tok.weight  # (V, C) used both ways
        self.reset_parameters()

    def output_layer(self) -> nn.Linear:
        """The layer that turns decoder states into target-vocabulary logits (``generator``). Optimizers treat it
        like an embedding, not like a hidden matrix (:func:`attnkit.training.optim.param_groups`)."""
        return self.generator

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Xavier-uniform for every matrix (embeddings included, as the Annotated Transformer), biases 0.

        With ``scale_embeddings`` the token vectors are multiplied by sqrt(C) in the forward pass, which brings
        Xavier-sized embeddings (std ``sqrt(2 / (V + C))``) up towards the scale of the positional signal (sines
        and cosines, rms 0.71): std ``sqrt(2C / (V + C))`` after scaling, 0.17 for ``transformer-base``, 0.35 for
        ``transformer-cpu``.
        """
        xavier_init_(self)

    def padding_mask(self, ids: torch.Tensor) -> torch.Tensor | None:
        """``ids == pad_id`` (``None`` when ``config.pad_id`` is None).

        Shape:
            ids ``(B, L)`` -> ``(B, L)`` bool, ``True`` = padding.
        """
        return None if self.config.pad_id is None else ids == self.config.pad_id

    def _src_mask(self, src: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor | None:
        if mask is None:
            return drop_if_unpadded(self.padding_mask(src))  # nothing padded: no mask, fast path
        return check_padding_mask("src_key_padding_mask", mask, tuple(src.shape)).to(src.device)

    # ------------------------------------------------------------------------------------------------
    # the two halves
    # ------------------------------------------------------------------------------------------------
    def encode(self, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Encode source token ids (the encoder's self-attention sees the whole sentence: not causal).

        Shape:
            src ``(B, S)``; src_key_padding_mask ``(B, S)`` bool -> memory ``(B, S, C)``.
        """
        check_token_ids(src, name="src", vocab_size=self.config.src_vocab_size, vocab_name="src_vocab_size")
        mask = self._src_mask(src, src_key_padding_mask)
        return self.core.encode(self.src_embed(src), src_key_padding_mask=mask)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        *,
        memory_key_padding_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        cache: DecoderCache | None = None,
        output_fn: Callable[[torch.Tensor, nn.Module], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Next-token logits for target ids given the encoder memory.

        Without a cache, ``tgt`` is the whole prefix. With a cache (from :meth:`new_cache`), ``tgt`` holds
        only the new positions; positions continue from ``cache.length``, earlier keys/values and the
        memory's projections are reused, and ``memory_key_padding_mask`` is remembered after the first
        call. ``tgt_key_padding_mask`` may cover the new positions ``(B, T)`` or all ``(B, cached + T)``.
        ``output_fn(h, generator)`` of the decoder's final states ``h (B, T, C)`` is returned instead of the logits
        (the chunked loss, :mod:`attnkit.modules.chunked_cross_entropy`; see :meth:`GPT.forward
        <attnkit.models.gpt.GPT.forward>`).

        Shape:
            tgt ``(B, T)``; memory ``(B, S, C)``; memory_key_padding_mask ``(B, S)``;
            tgt_key_padding_mask ``(B, T)`` -> logits ``(B, T, V)``.
        """
        c = self.config
        check_token_ids(tgt, name="tgt", vocab_size=c.tgt_vocab_size, vocab_name="tgt_vocab_size")
        B, T = tgt.shape
        check_memory(memory, B, c.d_model, axes="(B, S, C)")
        S = memory.shape[1]
        if memory_key_padding_mask is not None:
            check_padding_mask("memory_key_padding_mask", memory_key_padding_mask, (B, S))
        past = 0 if cache is None else cache.length
        if tgt_key_padding_mask is None:
            tgt_key_padding_mask = drop_if_unpadded(self.padding_mask(tgt))  # nothing padded: fused causal path
        elif cache is None:
            check_padding_mask("tgt_key_padding_mask", tgt_key_padding_mask, (B, T), axes="(B, T)")
        # (with a cache the decoder accepts (B, T) or (B, cached + T) and checks it)
        positions = None if past == 0 else torch.arange(past, past + T, device=tgt.device)  # (T,)
        x = self.tgt_embed(tgt, positions)  # (B, T, C)
        h = self.core.decode(x, memory, tgt_key_padding_mask=tgt_key_padding_mask,
                             memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=True, cache=cache)
        return self.generator(h) if output_fn is None else output_fn(h, self.generator)  # (B, T, V)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_key_padding_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        *,
        output_fn: Callable[[torch.Tensor, nn.Module], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Teacher-forced logits: encode ``src``, decode ``tgt`` (causally) against it; with ``output_fn``, what it
        returns instead (see :meth:`decode`).

        Shape:
            src ``(B, S)``; tgt ``(B, T)``; src_key_padding_mask ``(B, S)``; tgt_key_padding_mask ``(B, T)``
            -> logits ``(B, T, V)``.
        """
        c = self.config
        check_token_ids(src, name="src", vocab_size=c.src_vocab_size, vocab_name="src_vocab_size")
        check_token_ids(tgt, name="tgt", vocab_size=c.tgt_vocab_size, vocab_name="tgt_vocab_size")
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"src and tgt must have the same batch size, got src B = {src.shape[0]}, "
                             f"tgt B = {tgt.shape[0]}")
        src_mask = self._src_mask(src, src_key_padding_mask)  # given, or derived from pad_id
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, memory_key_padding_mask=src_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                           output_fn=output_fn)

    def predict_proba(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_key_padding_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Softmax probabilities over the target vocabulary (what seed 000's ``Transformer`` returned).

        Training should use :meth:`forward`'s logits with ``cross_entropy`` (numerically safer).

        Shape:
            src ``(B, S)``; tgt ``(B, T)`` -> probabilities ``(B, T, V)``, each row summing to 1.
        """
        return torch.softmax(self.forward(src, tgt, src_key_padding_mask, tgt_key_padding_mask), dim=-1)

    def new_cache(self, batch_size: int, max_len: int, *, memory_len: int | None = None,
                  dtype: torch.dtype | None = None) -> DecoderCache:
        """An empty :class:`DecoderCache` for incremental :meth:`decode` (self-attn KV per layer + static
        cross-attn KV, created on the first step unless ``memory_len`` is given).

        Shape:
            buffers ``(B, H, max_len, D)`` (self) and ``(B, H, S, D)`` (cross).
        """
        return self.core.new_cache(batch_size, max_len, memory_len=memory_len, dtype=dtype)
