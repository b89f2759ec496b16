"""Complete models: the decoder-only GPT (GPT-2 / Llama family) and the encoder-decoder Transformer.

Configs (``GPTConfig``, ``TransformerConfig``) are validated dataclasses; ``PRESETS``/``get_preset`` name
the usual sizes; ``build_model`` turns a config into a model; ``count_parameters`` and
``format_parameter_table`` count them (tied weights once, big models on the meta device).

The names below are imported on first use (module ``__getattr__``), so that ``attnkit.models.configs`` and
``attnkit.models.presets`` import without torch (the command line's ``--help`` and config checks stay fast).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the submodule that defines it
_EXPORTS: dict[str, str] = {
    "GPT": "gpt", "Block": "gpt", "GPTCache": "gpt",
    "GPTConfig": "configs", "TransformerConfig": "configs", "config_from_dict": "configs",
    "config_from_json": "configs",
    "Transformer": "transformer",
    "EncoderDecoder": "encoder_decoder", "Encoder": "encoder_decoder", "EncoderLayer": "encoder_decoder",
    "Decoder": "encoder_decoder", "DecoderLayer": "encoder_decoder", "DecoderCache": "encoder_decoder",
    "PRESETS": "presets", "get_preset": "presets", "preset_names": "presets",
    "build_gpt": "builders", "build_transformer": "builders", "build_model": "builders",
    "count_parameters": "params", "parameter_table": "params", "format_parameter_table": "params",
    "tied_parameters": "params", "analytic_parameter_count": "params", "analytic_total": "params",
}
_SUBMODULES = ("builders", "configs", "encoder_decoder", "gpt", "params", "presets", "transformer")

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from .builders import build_gpt, build_model, build_transformer
    from .configs import GPTConfig, TransformerConfig, config_from_dict, config_from_json
    from .encoder_decoder import Decoder, DecoderCache, DecoderLayer, Encoder, EncoderDecoder, EncoderLayer
    from .gpt import GPT, Block, GPTCache
    from .params import (analytic_parameter_count, analytic_total, count_parameters, format_parameter_table,
                         parameter_table, tied_parameters)
    from .presets import PRESETS, get_preset, preset_names
    from .transformer import Transformer
