"""Complete models: the decoder-only GPT (GPT-2 / Llama family) and the encoder-decoder Transformer.

Configs (``GPTConfig``, ``TransformerConfig``) are validated dataclasses; ``PRESETS``/``get_preset`` name
the usual sizes; ``build_model`` turns a config into a model; ``count_parameters`` and
``format_parameter_table`` count them (tied weights once, big models on the meta device).
"""

from .builders import build_gpt, build_model, build_transformer
from .configs import GPTConfig, TransformerConfig, config_from_dict, config_from_json
from .encoder_decoder import Decoder, DecoderCache, DecoderLayer, Encoder, EncoderDecoder, EncoderLayer
from .gpt import GPT, Block, GPTCache
from .params import __all__ as _PARAMS_ALL
from .params import (analytic_parameter_count, analytic_total, count_parameters, format_parameter_table,
                     parameter_table, tied_parameters)
from .presets import PRESETS, get_preset, preset_names
from .transformer import Transformer

__all__ = [
    "GPT",
    "Block",
    "GPTCache",
    "GPTConfig",
    "Transformer",
    "TransformerConfig",
    "EncoderDecoder",
    "Encoder",
    "EncoderLayer",
    "Decoder",
    "DecoderLayer",
    "DecoderCache",
    "PRESETS",
    "get_preset",
    "preset_names",
    "build_gpt",
    "build_transformer",
    "build_model",
    "config_from_dict",
    "config_from_json",
    *_PARAMS_ALL,
]
