"""Hugging Face transformers checkpoints <-> attnkit's ``GPT`` (GPT-2 and Llama families).

Axis legend: ``C`` model width, ``H`` query heads, ``K`` key/value heads, ``D`` head dim, ``F`` feed-forward
width, ``V`` vocabulary, ``P`` learned positions.

attnkit's :class:`~attnkit.models.gpt.GPT` was named after nanoGPT/HF GPT-2, so most tensors map one to one.
The differences, all handled here:

* **GPT-2** (``GPT2LMHeadModel``) stores its linear layers as ``Conv1D`` with the weight *transposed*
  (``(in, out)`` instead of ``nn.Linear``'s ``(out, in)``). ``c_attn`` already packs q, k, v in attnkit's
  row order, so it only needs the transpose.
* **Llama** (``LlamaForCausalLM``) has separate ``q_proj``/``k_proj``/``v_proj``; attnkit packs them into
  one ``qkv_proj`` (rows ``[q heads | k heads | v heads]``). The SwiGLU MLP is ``down(silu(gate(x)) * up(x))``:
  ``gate_proj``/``up_proj``/``down_proj`` are attnkit's ``w_gate``/``w_in``/``w_out``. Both use the same
  rotary convention (rotate-half), so q/k rows need no permutation.
* A tied head (``tie_word_embeddings``) is one tensor in attnkit; HF files usually omit ``lm_head.weight``.
* Llama has no residual or embedding dropout, only ``attention_dropout``: a Llama-style model's ``dropout``
  (a training setting; inference is unaffected) is not exported, and a Llama export reads back with 0.

The name templates (``{i}`` = layer index) are :data:`GPT2_KEY_TEMPLATES` and :data:`LLAMA_KEY_TEMPLATES`:
each row is ``(attnkit name, HF name(s), how)`` with ``how`` one of ``"copy"``, ``"transpose"``, ``"cat"``.

Public API::

    model = from_hf(hf_model)                  # a transformers GPT2LMHeadModel / LlamaForCausalLM
    model = from_hf("path/to/folder")          # config.json + model.safetensors (or pytorch_model.bin)
    model = from_hf(state_dict, config=cfg)    # HF-named tensors + an HF config (dict or PretrainedConfig)
    hf_model = to_hf(model)                    # needs transformers
    save_hf(model, "out/")                     # config.json + model.safetensors, loadable by transformers
    save_hf(model, "out/", tokenizer=tok, chat_template=template)   # + tokenizer.json, tokenizer_config.json
    save_hf(m.model, "out/", tokenizer=m.tokenizer, chat_template=m.chat_template,   # m = load(run):
            stop_token_ids=m.stop_ids, add_bos=m.add_bos)      # + generation_config.json, <bos> first
    hf_config, state_dict = load_hf_folder("path/to/folder")

Every mismatch raises ``ValueError``: a config of one family with weights of the other, missing or
unexpected tensors (listed), a tensor of the wrong shape (named, with both shapes), an unsupported
config option (named), a state dict with a key that is not a string or a value that is not a tensor (the
first one named), a tensor that is not floating-point or holds NaN/inf (named). Pickled ``.bin`` files are
only read with ``torch.load(weights_only=True)``.

A model with un-merged LoRA adapters exports its merged weights (``W + (alpha / r) B A``, what
:func:`~attnkit.modules.lora.merge_lora` would give; the model itself is unchanged), so the exported model
computes what the adapted one does. Any other tensor the HF layout has no place for is refused.
Files are written atomically and with the user's umask (like any file the user creates); :func:`save_hf`
writes only into a new or empty folder, or over its own earlier export, never over another model's files. A
re-export replaces the earlier export as a whole: its files this one does not write are removed, ``config.json``
is written last, and a reader meanwhile finds the old export, the new one or a folder without ``config.json``.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnkit.files import fsync_dir, write_atomic
from attnkit.checkpoints.checkpoint import check_table_sizes
from attnkit.checkpoints.runs import check_output_file
from attnkit.data.json_files import read_json_file
from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT

__all__ = [
    "GPT2_KEY_TEMPLATES",
    "LLAMA_KEY_TEMPLATES",
    "from_hf",
    "to_hf",
    "save_hf",
    "load_hf_folder",
    "gpt_config_from_hf",
    "hf_config_from_gpt",
    "hf_family",
    "state_dict_from_hf",
    "state_dict_to_hf",
]

# ----------------------------------------------------------------------------------------------------------
# name templates
# ----------------------------------------------------------------------------------------------------------

# (attnkit name, HF name(s), how). Rows marked bias/lm_head are used only when the config has them.
GPT2_KEY_TEMPLATES: list[tuple[str, tuple[str, ...], str]] = [
    ("wte.weight", ("transformer.wte.weight",), "copy"),
    ("wpe.weight", ("transformer.wpe.weight",), "copy"),
    ("blocks.{i}.ln_1.weight", ("transformer.h.{i}.ln_1.weight",), "copy"),
    ("blocks.{i}.ln_1.bias", ("transformer.h.{i}.ln_1.bias",), "copy"),
    ("blocks.{i}.attn.qkv_proj.weight", ("transformer.h.{i}.attn.c_attn.weight",), "transpose"),
    ("blocks.{i}.attn.qkv_proj.bias", ("transformer.h.{i}.attn.c_attn.bias",), "copy"),
    ("blocks.{i}.attn.out_proj.weight", ("transformer.h.{i}.attn.c_proj.weight",), "transpose"),
    ("blocks.{i}.attn.out_proj.bias", ("transformer.h.{i}.attn.c_proj.bias",), "copy"),
    ("blocks.{i}.ln_2.weight", ("transformer.h.{i}.ln_2.weight",), "copy"),
    ("blocks.{i}.ln_2.bias", ("transformer.h.{i}.ln_2.bias",), "copy"),
    ("blocks.{i}.mlp.w_in.weight", ("transformer.h.{i}.mlp.c_fc.weight",), "transpose"),
    ("blocks.{i}.mlp.w_in.bias", ("transformer.h.{i}.mlp.c_fc.bias",), "copy"),
    ("blocks.{i}.mlp.w_out.weight", ("transformer.h.{i}.mlp.c_proj.weight",), "transpose"),
    ("blocks.{i}.mlp.w_out.bias", ("transformer.h.{i}.mlp.c_proj.bias",), "copy"),
    ("ln_f.weight", ("transformer.ln_f.weight",), "copy"),
    ("ln_f.bias", ("transformer.ln_f.bias",), "copy"),
    ("lm_head.weight", ("lm_head.weight",), "copy"),
]

LLAMA_KEY_TEMPLATES: list[tuple[str, tuple[str, ...], str]] = [
    ("wte.weight", ("model.embed_tokens.weight",), "copy"),
    ("blocks.{i}.ln_1.weight", ("model.layers.{i}.input_layernorm.weight",), "copy"),
    ("blocks.{i}.attn.qkv_proj.weight", ("model.layers.{i}.self_attn.q_proj.weight",
                                         "model.layers.{i}.self_attn.k_proj.weight",
                                         "model.layers.{i}.self_attn.v_proj.weight"), "cat"),
    ("blocks.{i}.attn.qkv_proj.bias", ("model.layers.{i}.self_attn.q_proj.bias",
                                       "model.layers.{i}.self_attn.k_proj.bias",
                                       "model.layers.{i}.self_attn.v_proj.bias"), "cat"),
    ("blocks.{i}.attn.out_proj.weight", ("model.layers.{i}.self_attn.o_proj.weight",), "copy"),
    ("blocks.{i}.attn.out_proj.bias", ("model.layers.{i}.self_attn.o_proj.bias",), "copy"),
    ("blocks.{i}.ln_2.weight", ("model.layers.{i}.post_attention_layernorm.weight",), "copy"),
    ("blocks.{i}.mlp.w_gate.weight", ("model.layers.{i}.mlp.gate_proj.weight",), "copy"),
    ("blocks.{i}.mlp.w_gate.bias", ("model.layers.{i}.mlp.gate_proj.bias",), "copy"),
    ("blocks.{i}.mlp.w_in.weight", ("model.layers.{i}.mlp.up_proj.weight",), "copy"),
    ("blocks.{i}.mlp.w_in.bias", ("model.layers.{i}.mlp.up_proj.bias",), "copy"),
    ("blocks.{i}.mlp.w_out.weight", ("model.layers.{i}.mlp.down_proj.weight",), "copy"),
    ("blocks.{i}.mlp.w_out.bias", ("model.layers.{i}.mlp.down_proj.bias",), "copy"),
    ("ln_f.weight", ("model.norm.weight",), "copy"),
    ("lm_head.weight", ("lm_head.weight",), "copy"),
]

_TEMPLATES = {"gpt2": GPT2_KEY_TEMPLATES, "llama": LLAMA_KEY_TEMPLATES}
_PREFIX = {"gpt2": "transformer.", "llama": "model."}
# non-parameter entries that old checkpoints carry (causal-mask buffers, rotary tables): skipped on load
_IGNORED_SUFFIXES = {"gpt2": (".attn.bias", ".attn.masked_bias"), "llama": ("rotary_emb.inv_freq",)}

# HF activation names <-> attnkit's
_GPT2_ACT_FROM_HF = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu",
                     "silu": "silu", "swish": "silu", "tanh": "tanh", "sigmoid": "sigmoid"}
_GPT2_ACT_TO_HF = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu", "tanh": "tanh",
                   "sigmoid": "sigmoid"}
_LLAMA_ACT_FROM_HF = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu"}
_LLAMA_ACT_TO_HF = {"swiglu": "silu", "geglu": "gelu"}


# ----------------------------------------------------------------------------------------------------------
# configs
# ----------------------------------------------------------------------------------------------------------


def _unless_equal(attention: float, dropout: float) -> float | None:
    """``attention_dropout`` for our config: None (= "same as dropout") when it equals ``dropout``."""
    return None if attention == dropout else attention

def _config_dict(config: Any) -> dict[str, Any]:
    """An HF config as a plain dict (accepts a dict or a transformers ``PretrainedConfig``)."""
    if isinstance(config, Mapping):
        return dict(config)
    if hasattr(config, "to_dict"):
        return dict(config.to_dict())
    raise ValueError(f"config must be a dict or a transformers PretrainedConfig, got {type(config).__name__}")


def hf_family(config: Any) -> str:
    """``"gpt2"`` or ``"llama"`` from an HF config's ``model_type`` (or ``architectures``)."""
    cfg = _config_dict(config)
    kind = cfg.get("model_type")
    if kind is None:
        archs = cfg.get("architectures")
        archs = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
        kind = "gpt2" if any(a.startswith("GPT2") for a in archs) else "llama" if any(
            a.startswith("Llama") for a in archs) else None
    if not isinstance(kind, str) or kind not in _TEMPLATES:
        raise ValueError(f"unsupported Hugging Face model_type {kind!r}; expected one of {sorted(_TEMPLATES)}")
    return kind


def _get(cfg: dict[str, Any], *names: str, default: Any = None, kind: str = "any") -> Any:
    """The first of ``names`` that ``cfg`` sets (not None), else ``default``; with ``kind`` ``"int"``, ``"float"``
    or ``"bool"`` the value must be one (an integer-valued float counts as an int), else ``ValueError`` naming the
    key: a hand-edited ``config.json`` may hold anything."""
    name = next((n for n in names if cfg.get(n) is not None), None)
    if name is None:
        return default
    value = cfg[name]
    if kind == "any":
        return value
    if kind == "bool":
        ok = isinstance(value, bool)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        ok = False
    elif isinstance(value, float):
        ok = math.isfinite(value) and (kind == "float" or value.is_integer())
        value = int(value) if ok and kind == "int" else value
    else:
        ok = True
    if not ok:
        expected = {"int": "an integer", "float": "a finite number", "bool": "true or false"}[kind]
        raise ValueError(f"Hugging Face config {name!r} must be {expected}, got {value!r}")
    return float(value) if kind == "float" else value


def _int(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    return _get(cfg, *names, default=default, kind="int")


def _float(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    return _get(cfg, *names, default=default, kind="float")


def gpt_config_from_hf(config: Any) -> GPTConfig:
    """Translate an HF ``GPT2Config``/``LlamaConfig`` (dict or object) into a :class:`GPTConfig`.

    Options attnkit does not implement (RoPE scaling, GPT-2's layer-index attention scaling, Llama with
    different attention/MLP bias settings, other activations) raise ``ValueError`` naming the option.
    """
    cfg = _config_dict(config)
    family = hf_family(cfg)
    if family == "gpt2":
        act = _get(cfg, "activation_function", default="gelu_new")
        if not isinstance(act, str) or act not in _GPT2_ACT_FROM_HF:
            raise ValueError(f"GPT-2 activation_function must be one of {sorted(_GPT2_ACT_FROM_HF)}, got {act!r}")
        if _get(cfg, "scale_attn_by_inverse_layer_idx", default=False, kind="bool"):
            raise ValueError("GPT-2 option scale_attn_by_inverse_layer_idx=True is not supported (expected False)")
        if not _get(cfg, "scale_attn_weights", default=True, kind="bool"):
            raise ValueError("GPT-2 option scale_attn_weights=False is not supported (expected True)")
        if _get(cfg, "add_cross_attention", default=False, kind="bool"):
            raise ValueError("GPT-2 option add_cross_attention=True is not supported (expected False)")
        dropout = _float(cfg, "resid_pdrop", default=0.0)
        return GPTConfig(
            vocab_size=_int(cfg, "vocab_size", default=50257),
            block_size=_int(cfg, "n_positions", "n_ctx", default=1024),
            n_layer=_int(cfg, "n_layer", default=12),
            n_head=_int(cfg, "n_head", default=12),
            n_embd=_int(cfg, "n_embd", default=768),
            ffn_hidden=_int(cfg, "n_inner"),
            activation=_GPT2_ACT_FROM_HF[act],
            norm="layernorm",
            norm_eps=_float(cfg, "layer_norm_epsilon", default=1e-5),
            bias=True,
            position="learned",
            tie_embeddings=_get(cfg, "tie_word_embeddings", default=True, kind="bool"),
            dropout=dropout,
            attention_dropout=_unless_equal(_float(cfg, "attn_pdrop", "resid_pdrop", default=0.0), dropout),
        )
    # llama
    act = _get(cfg, "hidden_act", default="silu")
    if not isinstance(act, str) or act not in _LLAMA_ACT_FROM_HF:
        raise ValueError(f"Llama hidden_act must be one of {sorted(_LLAMA_ACT_FROM_HF)}, got {act!r}")
    attention_bias = _get(cfg, "attention_bias", default=False, kind="bool")
    mlp_bias = _get(cfg, "mlp_bias", default=False, kind="bool")
    if attention_bias != mlp_bias:
        raise ValueError(f"attnkit uses one bias flag: Llama attention_bias and mlp_bias must be equal, "
                         f"got attention_bias={attention_bias}, mlp_bias={mlp_bias}")
    rope = cfg.get("rope_parameters") or {}
    scaling = cfg.get("rope_scaling") or {}
    for name, r in (("rope_parameters", rope), ("rope_scaling", scaling)):
        if not isinstance(r, dict):
            raise ValueError(f"Hugging Face config {name!r} must be an object, got {r!r}")
        rope_type = r.get("rope_type", r.get("type", "default"))
        if rope_type not in ("default", None):
            raise ValueError(f"RoPE scaling is not supported: expected rope_type 'default', got {rope_type!r}")
    if _float(rope, "partial_rotary_factor", default=_float(cfg, "partial_rotary_factor", default=1.0)) != 1.0:
        raise ValueError("partial rotary embeddings are not supported (expected partial_rotary_factor 1.0)")
    theta = _float(rope, "rope_theta", default=_float(cfg, "rope_theta", default=10000.0))
    C = _int(cfg, "hidden_size", default=4096)
    H = _int(cfg, "num_attention_heads", default=32)
    head_dim = _int(cfg, "head_dim")
    return GPTConfig(
        vocab_size=_int(cfg, "vocab_size", default=32000),
        block_size=_int(cfg, "max_position_embeddings", default=2048),
        n_layer=_int(cfg, "num_hidden_layers", default=32),
        n_head=H,
        n_embd=C,
        n_kv_head=_int(cfg, "num_key_value_heads", default=H),
        head_dim=None if head_dim is None or head_dim * H == C else head_dim,
        ffn_hidden=_int(cfg, "intermediate_size", default=11008),
        activation=_LLAMA_ACT_FROM_HF[act],
        norm="rmsnorm",
        norm_eps=_float(cfg, "rms_norm_eps", default=1e-6),
        bias=attention_bias,
        position="rope",
        rope_theta=theta,
        tie_embeddings=_get(cfg, "tie_word_embeddings", default=False, kind="bool"),
        dropout=0.0,  # Llama has no residual/embedding dropout, only on the attention weights
        attention_dropout=_unless_equal(_float(cfg, "attention_dropout", default=0.0), 0.0),
    )


def _family_problems(c: GPTConfig, position: str, norm: str, activations: dict[str, str]) -> list[str]:
    """What keeps ``c`` out of the HF family with these position, norm and activation choices."""
    problems = []
    if c.position != position:
        problems.append(f"position={c.position!r} (needs {position!r})")
    if c.norm != norm:
        problems.append(f"norm={c.norm!r} (needs {norm!r})")
    if c.activation not in activations:
        problems.append(f"activation={c.activation!r} (needs one of {sorted(activations)})")
    return problems


def _export_family(config: GPTConfig) -> str:
    """Which HF architecture can hold this GPT (ValueError naming the obstacles when neither can)."""
    c = config
    gpt2_problems = _family_problems(c, "learned", "layernorm", _GPT2_ACT_TO_HF)
    if not c.bias:
        gpt2_problems.append("bias=False (needs True)")
    if c.kv_heads != c.n_head:
        gpt2_problems.append(f"n_kv_head={c.kv_heads} (needs n_head={c.n_head})")
    if c.head_size * c.n_head != c.n_embd:
        gpt2_problems.append(f"head_dim={c.head_size} (needs n_embd // n_head = {c.n_embd // c.n_head})")
    if not gpt2_problems:
        return "gpt2"
    llama_problems = _family_problems(c, "rope", "rmsnorm", _LLAMA_ACT_TO_HF)
    if not llama_problems:
        return "llama"
    raise ValueError("this GPTConfig matches no Hugging Face architecture: as GPT-2 it has "
                     + ", ".join(gpt2_problems) + "; as Llama it has " + ", ".join(llama_problems))


def hf_config_from_gpt(config: GPTConfig) -> dict[str, Any]:
    """The HF ``config.json`` dict (``GPT2Config`` or ``LlamaConfig`` fields) for a :class:`GPTConfig`."""
    c = config
    family = _export_family(c)
    if family == "gpt2":
        token = 50256 if c.vocab_size >= 50257 else None  # GPT-2 tokenizer's <|endoftext|>, if it fits
        return {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "vocab_size": c.vocab_size,
            "n_positions": c.block_size,
            "n_embd": c.n_embd,
            "n_layer": c.n_layer,
            "n_head": c.n_head,
            "n_inner": c.ffn_hidden,  # None = 4 * n_embd, in both libraries
            "activation_function": _GPT2_ACT_TO_HF[c.activation],
            "resid_pdrop": c.dropout,
            "embd_pdrop": c.dropout,
            "attn_pdrop": c.attn_dropout,
            "layer_norm_epsilon": c.norm_eps,
            "scale_attn_weights": True,
            "tie_word_embeddings": c.tie_embeddings,
            "bos_token_id": token,
            "eos_token_id": token,
            "torch_dtype": "float32",
        }
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": c.vocab_size,
        "hidden_size": c.n_embd,
        "intermediate_size": c.ffn_size,
        "num_hidden_layers": c.n_layer,
        "num_attention_heads": c.n_head,
        "num_key_value_heads": c.kv_heads,
        "head_dim": c.head_size,
        "hidden_act": _LLAMA_ACT_TO_HF[c.activation],
        "max_position_embeddings": c.block_size,
        "rms_norm_eps": c.norm_eps,
        "rope_theta": c.rope_theta,  # transformers 4.x
        "rope_parameters": {"rope_type": "default", "rope_theta": c.rope_theta},  # transformers 5.x
        "attention_bias": c.bias,
        "mlp_bias": c.bias,
        "attention_dropout": c.attn_dropout,  # (HF Llama has no residual dropout)
        "tie_word_embeddings": c.tie_embeddings,
        "bos_token_id": None,
        "eos_token_id": None,
        "torch_dtype": "float32",
    }


# ----------------------------------------------------------------------------------------------------------
# state dicts
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Entry:
    ours: str
    hf: tuple[str, ...]
    how: str
    hf_shapes: tuple[tuple[int, ...], ...]  # expected shape of each HF tensor


def _entries(config: GPTConfig, family: str) -> list[_Entry]:
    """Every tensor of a GPT with this config, with its HF name(s) and expected HF shape(s)."""
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in GPT(config).state_dict().items()}
    H, K, D = config.n_head, config.kv_heads, config.head_size
    out = []
    for ours_t, hf_t, how in _TEMPLATES[family]:
        layers = range(config.n_layer) if "{i}" in ours_t else [None]
        for i in layers:
            ours = ours_t.format(i=i) if i is not None else ours_t
            if ours not in shapes:
                continue  # a bias the config does not have, a tied/absent lm_head, ...
            if ours == "lm_head.weight" and config.tie_embeddings:
                continue
            hf = tuple(t.format(i=i) if i is not None else t for t in hf_t)
            shape = shapes[ours]
            if how == "transpose":
                hf_shapes = (shape[::-1],)
            elif how == "cat":
                sizes = (H * D, K * D, K * D)
                hf_shapes = tuple((n,) + shape[1:] for n in sizes)
            else:
                hf_shapes = (shape,)
            out.append(_Entry(ours, hf, how, hf_shapes))
    return out


def _weights_family(keys) -> str | None:
    """Guess the family of HF-named tensors from telltale names."""
    keys = list(keys)
    if any(".c_attn." in k or k.endswith("wte.weight") or ".h.0." in k or k.startswith("h.0.") for k in keys):
        return "gpt2"
    if any("embed_tokens" in k or ".self_attn.q_proj." in k or "input_layernorm" in k for k in keys):
        return "llama"
    return None


def _normalise_prefix(sd: Mapping[str, torch.Tensor], family: str) -> dict[str, torch.Tensor]:
    """Accept bare ``GPT2Model``/``LlamaModel`` names (``h.0...``, ``layers.0...``) by adding the prefix."""
    prefix = _PREFIX[family]
    out = {}
    for k, v in sd.items():
        if k.startswith(prefix) or k.startswith("lm_head."):
            out[k] = v
        else:
            out[prefix + k] = v
    return out


def _check_named_tensors(state: Mapping, where: str) -> None:
    """``ValueError`` naming the first key that is not a ``str`` or value that is not a ``torch.Tensor``."""
    for key, value in state.items():
        if not isinstance(key, str):
            raise ValueError(f"{where} must map tensor names (str) to tensors, got the key {key!r} "
                             f"({type(key).__name__})")
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{where} must map tensor names to tensors, got {type(value).__name__} for {key!r}")


def _list(names: list[str], limit: int = 40) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def state_dict_from_hf(
    state_dict: Mapping[str, torch.Tensor], config: Any
) -> tuple[GPTConfig, dict[str, torch.Tensor]]:
    """HF-named tensors + HF config -> (:class:`GPTConfig`, attnkit-named state dict).

    Raises ValueError when the weights belong to the other family, tensors are missing or unexpected
    (all listed), a tensor's shape differs from the config's (named, with both shapes), or a tensor is not
    floating-point or holds NaN/inf (named).
    """
    hf_cfg = _config_dict(config)
    family = hf_family(hf_cfg)
    gcfg = gpt_config_from_hf(hf_cfg)
    if not isinstance(state_dict, Mapping):
        raise ValueError(f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}")
    _check_named_tensors(state_dict, "state_dict")
    found = _weights_family(state_dict.keys())
    if found is not None and found != family:
        example = next(iter(state_dict))
        raise ValueError(f"config describes a {family} model but the weights are {found}-style "
                         f"(e.g. {example!r}); config and weights belong to different model families")
    sd = _normalise_prefix(state_dict, family)
    sd = {k: v for k, v in sd.items() if not k.endswith(_IGNORED_SUFFIXES[family])}
    if gcfg.tie_embeddings:
        sd.pop("lm_head.weight", None)  # tied: the head is the embedding (HF ties it the same way)

    if gcfg.n_layer > len(sd):  # every layer has tensors: do not even build a million empty layers
        raise ValueError(f"{family} config has {gcfg.n_layer} layers, but the checkpoint holds only {len(sd)} tensors")
    try:
        entries = _entries(gcfg, family)
    except (RuntimeError, OverflowError, TypeError) as err:  # sizes past what torch can hold, even on meta
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{family} config sizes cannot be built ({first}); they disagree with the weights") from None
    expected = {name: shape for e in entries for name, shape in zip(e.hf, e.hf_shapes)}
    missing = sorted(set(expected) - set(sd))
    extra = sorted(set(sd) - set(expected))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensor(s): {_list(missing)}")
        if extra:
            parts.append(f"unexpected {len(extra)} tensor(s): {_list(extra)}")
        raise ValueError(f"{family} checkpoint does not match its config ({gcfg.n_layer} layers, bias={gcfg.bias}, "
                         f"tie_embeddings={gcfg.tie_embeddings}): " + "; ".join(parts))
    for name, shape in expected.items():
        got = tuple(sd[name].shape)
        if got != shape:
            raise ValueError(f"tensor {name!r} has shape {got}, expected {shape} for this config")
        if not sd[name].is_floating_point():
            raise ValueError(f"tensor {name!r} has dtype {sd[name].dtype}, expected a floating-point dtype")
        if not bool(torch.isfinite(sd[name].float()).all()):  # (float8 tensors have no isfinite of their own)
            raise ValueError(f"tensor {name!r} holds non-finite values (NaN or inf); expected finite weights")

    out: dict[str, torch.Tensor] = {}
    for e in entries:
        tensors = [sd[n] for n in e.hf]
        if e.how == "transpose":
            out[e.ours] = tensors[0].t().contiguous()  # Conv1D (in, out) -> Linear (out, in)
        elif e.how == "cat":
            out[e.ours] = torch.cat(tensors, dim=0)  # rows [q | k | v]
        else:
            out[e.ours] = tensors[0]
    return gcfg, out


def _merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with every LoRA adapter folded into its weight, ``W + (alpha / r) B A`` computed as
    :meth:`~attnkit.modules.lora.LoRALinear.merged` does, and its ``lora_A``/``lora_B`` left out; the model
    itself is not changed. Shape: each merged weight ``(C_out, C_in)``, like the frozen one."""
    from attnkit.modules.lora import LoRALinear

    sd = model.state_dict()
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, LoRALinear):
                prefix = f"{name}." if name else ""
                w = m.weight.detach()
                sd[prefix + "weight"] = w + m.delta_weight().detach().to(w.dtype)
                sd.pop(prefix + "lora_A", None)
                sd.pop(prefix + "lora_B", None)
    return sd


def state_dict_to_hf(model: GPT, *, include_tied: bool = True) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """attnkit ``GPT`` -> (HF config dict, HF-named state dict).

    ``include_tied=False`` leaves out a tied ``lm_head.weight`` (what HF writes to safetensors files).
    LoRA adapters are merged into the exported weights (the model is unchanged); a tensor the HF layout has
    no place for raises ``ValueError`` (it would be lost).
    """
    if not isinstance(model, GPT):
        raise ValueError(f"expected an attnkit GPT, got {type(model).__name__}")
    cfg = model.config
    hf_cfg = hf_config_from_gpt(cfg)
    family = hf_cfg["model_type"]
    ours = _merged_state_dict(model)
    entries = _entries(cfg, family)
    used = {e.ours for e in entries} | ({"lm_head.weight"} if cfg.tie_embeddings else set())
    left = sorted(k for k in ours if k not in used)
    if left:
        raise ValueError(f"cannot export to the Hugging Face {family} layout: expected only its tensors, got "
                         f"{len(left)} more that it has no place for and would be lost: {_list(left)}")
    H, K, D = cfg.n_head, cfg.kv_heads, cfg.head_size
    out: dict[str, torch.Tensor] = {}
    for e in entries:
        t = ours[e.ours].detach()
        if e.how == "transpose":
            out[e.hf[0]] = t.t().contiguous()  # Linear (out, in) -> Conv1D (in, out)
        elif e.how == "cat":
            for name, part in zip(e.hf, t.split([H * D, K * D, K * D], dim=0)):
                out[name] = part.contiguous()
        else:
            out[e.hf[0]] = t
    if cfg.tie_embeddings and include_tied:
        out["lm_head.weight"] = out[_TEMPLATES[family][0][1][0]]  # the embedding, shared
    return hf_cfg, out


# ----------------------------------------------------------------------------------------------------------
# folders
# ----------------------------------------------------------------------------------------------------------

def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except Exception as err:  # safetensors' own error type for bad headers / short files
        raise ValueError(f"{path} is not a readable safetensors file (truncated or corrupt?): {err}") from None


def _load_bin(path: Path) -> dict[str, torch.Tensor]:
    # never unpickle arbitrary objects: tensors and plain containers only
    import pickle

    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"refusing {path}: it is a pickle file that holds more than tensors (or is damaged), and unpickling "
            "arbitrary objects can run code. attnkit reads .bin weights only with torch.load(weights_only=True); "
            f"convert the weights to safetensors with a tool you trust. ({first[:200]})") from None
    if not isinstance(obj, Mapping):
        raise ValueError(f"{path} must hold a state dict (a mapping of names to tensors), got {type(obj).__name__}")
    _check_named_tensors(obj, str(path))
    return dict(obj)


def load_hf_folder(folder: str | os.PathLike) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Read an HF model folder: ``config.json`` and the weights, as ``(config dict, HF-named state dict)``.

    Weights are looked for in this order: ``model.safetensors``, ``model.safetensors.index.json`` (shards),
    ``pytorch_model.bin``, ``pytorch_model.bin.index.json``. ``.bin`` files are read with
    ``torch.load(weights_only=True)`` only.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"expected a model folder (config.json + weights), got {str(folder)!r}, "
                         f"which is not a directory")
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        interrupted = ": an interrupted save_hf export (run save_hf again)" if _earlier_export(folder) else ""
        raise ValueError(f"{str(folder)!r} has no config.json{interrupted}")
    config = read_json_file(cfg_path, lambda err: ValueError(f"{cfg_path} is not valid UTF-8 JSON ({err})"))
    if not isinstance(config, dict):
        raise ValueError(f"{cfg_path} must hold a JSON object, got {type(config).__name__}")

    candidates = [("model.safetensors", _load_safetensors), ("model.safetensors.index.json", _load_safetensors),
                  ("pytorch_model.bin", _load_bin), ("pytorch_model.bin.index.json", _load_bin)]
    for name, loader in candidates:
        path = folder / name
        if not path.is_file():
            continue
        if name.endswith(".index.json"):
            index = read_json_file(path, lambda err: ValueError(f"{path} is not valid UTF-8 JSON ({err})"))
            weight_map = index.get("weight_map") if isinstance(index, dict) else None
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise ValueError(f"{path} must hold a weight_map of tensor names to shard files")
            shards = sorted(set(weight_map.values()))
            if not shards:
                raise ValueError(f"{path} lists no shards in its weight_map")
            state: dict[str, torch.Tensor] = {}
            for shard in shards:
                if Path(shard).name != shard:
                    raise ValueError(f"{path} names the shard {shard!r}; shards must be files in {str(folder)!r}")
                shard_path = folder / shard
                if not shard_path.is_file():
                    raise ValueError(f"{path} refers to shard {shard!r}, which is missing from {str(folder)!r}")
                state.update(loader(shard_path))
            return config, state
        return config, loader(path)
    raise ValueError(f"{str(folder)!r} has no weights: expected one of {[n for n, _ in candidates]}")


# ----------------------------------------------------------------------------------------------------------
# the public converters
# ----------------------------------------------------------------------------------------------------------

def from_hf(source: Any, *, config: Any = None, dtype: torch.dtype | None = None) -> GPT:
    """Build an attnkit :class:`GPT` from a Hugging Face GPT-2 or Llama checkpoint.

    Args:
        source: a transformers model (``GPT2LMHeadModel``, ``LlamaForCausalLM``, or their base models),
            a folder path (see :func:`load_hf_folder`), or a state dict of HF-named tensors.
        config: the HF config (dict or ``PretrainedConfig``); required for a state dict, optional
            otherwise (it overrides the model's/folder's own).
        dtype: parameter dtype of the result (default float32); a weight beyond its range (a bf16 value of 1e5 in
            float16) raises ``ValueError`` naming it.

    Returns:
        the model in eval mode (like ``from_pretrained``).
    """
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"dtype must be a floating torch.dtype or None, got {dtype!r}")
    if isinstance(source, (str, os.PathLike)):
        folder_cfg, state = load_hf_folder(source)
        hf_cfg = folder_cfg if config is None else config
    elif isinstance(source, torch.nn.Module):
        if not hasattr(source, "config"):
            raise ValueError(f"expected a transformers model with a .config, got {type(source).__name__}")
        state = source.state_dict()
        hf_cfg = source.config if config is None else config
    elif isinstance(source, Mapping):
        if config is None:
            raise ValueError("from_hf(state_dict) needs config= (the HF config as a dict or PretrainedConfig), "
                             "got None")
        state, hf_cfg = source, config
    else:
        raise ValueError(f"from_hf expects a transformers model, a folder path or a state dict, "
                         f"got {type(source).__name__}")

    gcfg, ours = state_dict_from_hf(state, hf_cfg)
    with torch.device("meta"):
        check_table_sizes(GPT(gcfg), "the Hugging Face model")  # e.g. max_position_embeddings = 10**9
    model = GPT(gcfg)
    with torch.no_grad():
        params = model.state_dict()
        for name, tensor in ours.items():
            params[name].copy_(tensor)  # also converts dtype (bf16/fp16 checkpoints -> float32)
    if dtype is not None and dtype != torch.float32:  # (the model's float32 weights are finite)
        _check_fits(model, dtype)
        model = model.to(dtype=dtype)
    return model.eval()


def _check_fits(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """``ValueError`` naming the first parameter whose values lie beyond ``dtype``'s largest finite value: cast, they
    would be inf (a bf16 weight of 1e5 in float16), and every logit NaN."""
    limit = torch.finfo(dtype).max
    for name, p in model.named_parameters():
        big = float(p.detach().abs().max()) if p.numel() else 0.0
        if big > limit:
            raise ValueError(f"tensor {name!r} does not fit dtype={dtype}: expected magnitudes up to its largest "
                             f"finite value {limit:.6g}, got {big:.6g} (they would become inf); load it in float32 "
                             "or bfloat16")


def to_hf(model: GPT):
    """The equivalent transformers model (``GPT2LMHeadModel`` or ``LlamaForCausalLM``), eval mode, same dtype.

    Needs the ``transformers`` package.
    """
    hf_cfg, state = state_dict_to_hf(model, include_tied=True)
    try:
        import transformers
    except ImportError as err:  # pragma: no cover - transformers is a test dependency
        raise ValueError("to_hf needs the 'transformers' package (pip install transformers)") from err
    kwargs = {k: v for k, v in hf_cfg.items() if k not in ("architectures", "model_type", "torch_dtype")}
    if hf_cfg["model_type"] == "gpt2":
        hf_model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**kwargs))
    else:
        hf_model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kwargs))
    dtype = model.wte.weight.dtype
    hf_model = hf_model.to(dtype=dtype)
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(_IGNORED_SUFFIXES[hf_cfg["model_type"]])]
    if missing or unexpected:  # would be a bug in the templates
        raise ValueError(f"to_hf: transformers model did not accept the tensors: missing {missing}, "
                         f"unexpected {list(unexpected)}")
    return hf_model.eval()


# written into the safetensors metadata of every export: the mark of a file a later save_hf may replace
_EXPORT_WRITER = "attnkit.save_hf"
# the files of a Hugging Face model folder: an existing one is a model of the user's, unless save_hf wrote it
_HF_FOLDER_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                    "pytorch_model.bin.index.json")
# the other files save_hf may write: listed in the export's metadata, so that a later export removes those it does not
# write (never any other file)
_EXPORT_EXTRA_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def _earlier_export(folder: Path) -> tuple[str, ...] | None:
    """The files of the :func:`save_hf` export in ``folder`` that a later export may replace or remove (its
    ``model.safetensors``'s metadata names them), or None when ``folder/model.safetensors`` is no export. An export
    of an attnkit that did not list them counts as having written every file an export may write."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            metadata = f.metadata() or {}
    except (OSError, SafetensorError):  # absent, or not a safetensors file
        return None
    if metadata.get("writer") != _EXPORT_WRITER:
        return None
    try:
        listed = json.loads(metadata["files"]) if "files" in metadata else list(_EXPORT_EXTRA_FILES)
    except ValueError:
        listed = []
    listed = listed if isinstance(listed, list) else []
    return ("config.json", "model.safetensors", *(name for name in _EXPORT_EXTRA_FILES if name in listed))


def _check_export_folder(folder: Path, tokenizer_files: tuple[str, ...] = ()) -> tuple[str, ...]:
    """``ValueError`` unless :func:`save_hf` may write into ``folder``: a new or empty folder, or an earlier export
    (replaced; also one interrupted before its ``config.json``); never a file, a checkpoint folder (or a run's
    ``checkpoints/``), or a folder holding another model. ``tokenizer_files`` (written with a tokenizer) may only
    replace files an earlier export wrote. Returns the earlier export's files (:func:`_earlier_export`), or ()."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"save_hf needs a folder, got {str(folder)!r}, which is a file")
    for name in ("model.safetensors", "config.json", *tokenizer_files):
        check_output_file(folder / name, "save_hf")  # refuses files inside a checkpoint, new or not
    found = [name for name in _HF_FOLDER_FILES if (folder / name).exists()]
    complete_or_interrupted = found in (["config.json", "model.safetensors"], ["model.safetensors"])
    earlier = _earlier_export(folder) if complete_or_interrupted else None
    if found and earlier is None:
        raise ValueError(f"save_hf: {str(folder)!r} already holds {', '.join(found)}, not an earlier save_hf "
                         "export; expected a new or empty folder (nothing is overwritten): choose another folder")
    clash = [name for name in tokenizer_files if (folder / name).exists() and name not in (earlier or ())]
    if clash:
        raise ValueError(f"save_hf: {str(folder)!r} already holds {', '.join(clash)}, not part of an earlier save_hf "
                         "export; expected a new or empty folder (nothing is overwritten): choose another folder")
    return earlier or ()


def _publish_export(folder: Path, writes: dict[str, Any], earlier: tuple[str, ...]) -> None:
    """Write the export's files (``{name: write(path)}``, ``config.json`` last) into ``folder`` in place of the
    earlier export's ``earlier`` files, so that a reader finds the old export, the new one, or a folder without
    ``config.json`` (which refuses to load, and which the next :func:`save_hf` replaces). Each file is first written
    whole under a hidden temporary name beside it (a failure there leaves the old export as it was); then the old
    ``config.json`` and the earlier export's files this one does not write are removed, the new files renamed into
    place, ``config.json`` last."""
    staged: list[tuple[Path, Path]] = []  # (temporary file, target); a symbolic link's target is the one replaced
    try:
        for name, write in writes.items():
            target = Path(os.path.realpath(folder / name))
            tmp = target.with_name(f".{target.name}.save_hf.{os.getpid()}.{secrets.token_hex(4)}")
            write_atomic(tmp, write)
            staged.append((tmp, target))
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    parents = {folder, *(target.parent for _, target in staged)}
    try:
        if "config.json" in earlier:  # from here until the new one is in place the folder is no model
            Path(os.path.realpath(folder / "config.json")).unlink(missing_ok=True)
        for name in earlier:
            if name not in writes:  # e.g. the tokenizer of an earlier export with one
                (folder / name).unlink(missing_ok=True)
        for parent in parents:
            fsync_dir(parent)
        for name, (tmp, target) in zip(writes, staged):
            if name == "config.json":  # the others are in place first
                for parent in parents:
                    fsync_dir(parent)
            os.replace(tmp, target)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)  # those not renamed (an error on the way)
        for parent in parents:
            fsync_dir(parent)


def _bos_first(backend: Any, bos: int, spelling: str) -> Any:
    """A copy of the ``tokenizers.Tokenizer`` ``backend`` whose post-processor puts ``<bos>`` (id ``bos``) before
    the text when special tokens are added, as Llama folders' ``tokenizer.json`` does (what transformers 5 reads;
    it ignores ``add_bos_token`` beside a ``tokenizer.json``). Unchanged when it does so already."""
    import tokenizers
    from tokenizers import processors

    if backend.encode("a", add_special_tokens=True).ids[:1] == [bos]:
        return backend
    copy = tokenizers.Tokenizer.from_str(backend.to_str())
    template = processors.TemplateProcessing(single=f"{spelling}:0 $A:0", pair=f"{spelling}:0 $A:0 {spelling}:1 $B:1",
                                             special_tokens=[(spelling, bos)])
    old = copy.post_processor
    copy.post_processor = template if old is None else processors.Sequence([old, template])
    return copy


def _tokenizer_files(tokenizer: Any, chat_template: str | None, add_bos: bool | None = None) -> dict[str, str]:
    """``{file name: text}`` of a Hugging Face tokenizer: ``tokenizer.json`` (the ``tokenizers`` JSON of a byte-level
    BPE tokenizer) and ``tokenizer_config.json`` (the special tokens' spellings, the chat template, and
    ``add_bos_token`` when ``add_bos`` is given), what ``transformers.AutoTokenizer`` and attnkit's ``load_model`` /
    ``finetune --from`` read. With ``add_bos`` true, ``tokenizer.json`` also puts ``<bos>`` first."""
    import tokenizers

    from attnkit.data.tokenizers.chat_template import check_chat_template

    backend = getattr(tokenizer, "backend", None)
    if not isinstance(backend, tokenizers.Tokenizer):
        raise ValueError(f"save_hf(tokenizer=) needs a byte-level BPE tokenizer (a BPETokenizer, whose "
                         f"tokenizers.Tokenizer becomes tokenizer.json), got {type(tokenizer).__name__}")
    chat_template = check_chat_template(chat_template, "save_hf(chat_template=)")
    cfg: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    for role in ("bos", "eos", "pad", "unk"):
        tid = getattr(tokenizer, f"{role}_id")
        if tid is not None:
            cfg[f"{role}_token"] = tokenizer.id_to_token(tid)
    if chat_template is not None:
        cfg["chat_template"] = chat_template
    if add_bos is not None:
        if add_bos and tokenizer.bos_id is None:
            raise ValueError("save_hf(add_bos=True) needs a tokenizer with a <bos> token, got one whose bos_id is "
                             "None")
        cfg["add_bos_token"] = bool(add_bos)
        if add_bos:
            backend = _bos_first(backend, tokenizer.bos_id, cfg["bos_token"])
    return {"tokenizer.json": backend.to_str(pretty=True) + "\n",
            "tokenizer_config.json": json.dumps(cfg, indent=2, ensure_ascii=False) + "\n"}


def _generation_config(stop_token_ids: Any, tokenizer: Any, vocab_size: int) -> dict[str, Any]:
    """``generation_config.json``'s dict: ``eos_token_id`` the stop ids (a list when several, as transformers
    writes Llama 3's), ``bos_token_id`` / ``pad_token_id`` the tokenizer's."""
    from attnkit.checks import is_int

    if stop_token_ids is None:
        stops = [] if tokenizer is None or tokenizer.eos_id is None else [tokenizer.eos_id]
    else:
        stops = list(stop_token_ids) if isinstance(stop_token_ids, (list, tuple)) else None
        if stops is None or not stops or not all(is_int(i) and 0 <= i < vocab_size for i in stops):
            raise ValueError(f"save_hf(stop_token_ids=) must be a non-empty list of token ids in [0, {vocab_size}), "
                             f"got {stop_token_ids!r}")
        stops = list(dict.fromkeys(int(i) for i in stops))
    return {"bos_token_id": None if tokenizer is None else tokenizer.bos_id,
            "eos_token_id": (stops[0] if len(stops) == 1 else stops) if stops else None,
            "pad_token_id": None if tokenizer is None else tokenizer.pad_id}


def save_hf(model: GPT, folder: str | os.PathLike, *, tokenizer: Any = None, chat_template: str | None = None,
            stop_token_ids: list[int] | None = None, add_bos: bool | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors`` that ``transformers`` loads with ``from_pretrained``.

    A tied ``lm_head.weight`` is not stored (HF re-ties it from ``tie_word_embeddings``). With ``tokenizer`` (a
    byte-level BPE tokenizer, e.g. ``load(run).tokenizer``) the folder also gets ``tokenizer.json`` and
    ``tokenizer_config.json`` (its special tokens, and ``chat_template`` when given), and ``config.json`` its
    bos / eos / pad ids: a complete model folder for ``transformers.AutoTokenizer`` and for attnkit's
    ``finetune --from`` / :func:`attnkit.interop.load.load_model`. ``chat_template`` needs ``tokenizer``.
    A model's prompting conventions (``load(run).stop_ids`` / ``.add_bos``, what a fine-tune records in its
    ``prompting``): ``stop_token_ids`` writes ``generation_config.json`` (``eos_token_id``: those ids, a list when
    several, so ``transformers``' ``generate`` stops at ``<|im_end|>`` too); ``add_bos`` (needs ``tokenizer``) writes
    ``add_bos_token`` into ``tokenizer_config.json``, and when true makes ``tokenizer.json`` put ``<bos>`` first,
    as ``AutoTokenizer`` then does (and ``generation_config.json`` gets the bos id).
    ``folder`` must be new, empty, or an earlier ``save_hf`` export (which is replaced); any other model or
    tokenizer files in it, or a checkpoint folder, raise ``ValueError`` and nothing is written. Replacing an export
    removes the files it wrote that this export does not (its ``tokenizer.json``, ``tokenizer_config.json``,
    ``generation_config.json``), so the folder holds exactly this export, plus the files no export wrote (a
    ``README.md`` stays; a tokenizer file no export wrote is not replaced: ``ValueError``). Every file is first
    written whole under a temporary name (an error there leaves the earlier export as it was); then the earlier
    ``config.json`` is removed and the new files take their places, ``config.json`` last: a reader finds the old
    export, the new one, or, after a crash in between, a folder without ``config.json`` that refuses to load and
    that ``save_hf`` replaces when run again. Returns the folder.
    """
    from safetensors.torch import save_file

    from attnkit.modules.quantized_linear import QuantizedLinear

    quantized = [name for name, m in model.named_modules() if isinstance(m, QuantizedLinear)] if isinstance(
        model, torch.nn.Module) else []
    if quantized:  # its int8 weights and scales have no place in the float layout transformers reads
        raise ValueError(f"save_hf exports float weights, but {len(quantized)} Linear layers of this model are "
                         f"quantized to int8 ({quantized[0]}, ...): export the model before quantize_linear_layers")
    if chat_template is not None and tokenizer is None:
        raise ValueError("save_hf(chat_template=) needs tokenizer= too (the template goes into "
                         "tokenizer_config.json), got tokenizer=None")
    if add_bos is not None and tokenizer is None:
        raise ValueError(f"save_hf(add_bos=) needs tokenizer= too (add_bos_token goes into tokenizer_config.json), "
                         f"got add_bos={add_bos!r} and tokenizer=None")
    hf_cfg, state = state_dict_to_hf(model, include_tied=False)
    files = {} if tokenizer is None else _tokenizer_files(tokenizer, chat_template, add_bos)
    if stop_token_ids is not None or add_bos is not None:
        generation = _generation_config(stop_token_ids, tokenizer, hf_cfg["vocab_size"])
        files["generation_config.json"] = json.dumps(generation, indent=2) + "\n"
    given = Path(folder)
    folder = given.parent.resolve() / given.name  # where the writes land once missing folders are made ("new/../x")
    earlier = _check_export_folder(folder, tuple(files))
    if tokenizer is not None:
        if tokenizer.vocab_size > hf_cfg["vocab_size"]:
            raise ValueError(f"save_hf: the tokenizer has {tokenizer.vocab_size} tokens but the model only "
                             f"{hf_cfg['vocab_size']} embeddings: they do not belong together")
        hf_cfg.update(bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    hf_cfg = dict(hf_cfg, torch_dtype=str(model.wte.weight.dtype).replace("torch.", ""))
    metadata = {"format": "pt", "writer": _EXPORT_WRITER, "files": json.dumps(sorted(files))}
    writes: dict[str, Any] = {"model.safetensors": lambda p: save_file(tensors, p, metadata=metadata)}
    for name, body in files.items():
        writes[name] = lambda p, body=body: Path(p).write_text(body, encoding="utf-8")
    text = json.dumps(hf_cfg, indent=2) + "\n"
    writes["config.json"] = lambda p: Path(p).write_text(text, encoding="utf-8")  # last: the export is complete
    _publish_export(folder, writes, earlier)
    return given
