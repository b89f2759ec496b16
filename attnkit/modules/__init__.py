"""Building blocks of the Transformer, one concept per file."""

from .attention import merge_masks, reference_attention, scaled_dot_product_attention
from .embeddings import POSITION_KINDS, TokenEmbedding, TransformerEmbedding
from .feed_forward import ACTIVATIONS, GATED_ACTIVATIONS, FeedForward, get_activation
from .kv_cache import KVCache
from .learned_positions import LearnedPositionalEmbedding
from .masks import (causal_mask, combine_masks, drop_if_unpadded, generate_mask_mat, pad_right, padding_mask,
                    to_additive)
from .multi_head_attention import MultiHeadAttention
from .norms import NORM_KINDS, LayerNorm, RMSNorm, build_norm
from .rotary import RotaryEmbedding, rotate_half
from .sinusoidal import SinusoidalPositionalEncoding, positional_encoding, sinusoidal_table

__all__ = [
    "ACTIVATIONS",
    "GATED_ACTIVATIONS",
    "KVCache",
    "LayerNorm",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "NORM_KINDS",
    "POSITION_KINDS",
    "RMSNorm",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "TokenEmbedding",
    "TransformerEmbedding",
    "FeedForward",
    "build_norm",
    "causal_mask",
    "combine_masks",
    "drop_if_unpadded",
    "generate_mask_mat",
    "get_activation",
    "merge_masks",
    "pad_right",
    "padding_mask",
    "positional_encoding",
    "reference_attention",
    "rotate_half",
    "scaled_dot_product_attention",
    "sinusoidal_table",
    "to_additive",
]
