"""Model configurations: validated dataclasses that round-trip through JSON.

Two families live here:

* ``GPTConfig`` -- a decoder-only language model. The same class describes GPT-2 (learned positions,
  LayerNorm, tanh-GELU MLP, biases, tied head) and the Llama family (rotary positions, RMSNorm, SwiGLU,
  grouped-query attention, no biases); which one you get is decided by the fields alone.
* ``TransformerConfig`` -- the encoder-decoder of "Attention Is All You Need" (post-norm by default,
  pre-norm with ``norm_first=True``).

Every config validates itself in ``__post_init__`` and raises ``ValueError`` naming the field, what was
expected and what was given. ``to_dict()/from_dict()`` and ``to_json()/from_json()`` round-trip exactly;
``to_dict()`` adds a ``"model_type"`` key so that :func:`config_from_dict` can rebuild the right class
from a checkpoint's JSON.

Axis legend (for the derived sizes below): C model width, H query heads, K key/value heads,
D head dim, F feed-forward hidden width, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from attnkit.checks import check_bool, check_choice, check_float, check_int

# Names the rest of attnkit understands. The modules own the activation, norm and embedding-position names
# (``modules.feed_forward.ACTIVATIONS``, ``modules.norms.NORM_KINDS``, ``modules.embeddings.POSITION_KINDS``);
# these copies let configs import without torch (``attnkit.models`` imports its torch models lazily), and
# tests/models/test_configs.py checks that they match. GPT_POSITIONS is owned here (read by models/gpt.py).
ACTIVATIONS: tuple[str, ...] = (
    "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "leaky_relu", "elu", "swiglu", "geglu",
)
NORMS: tuple[str, ...] = ("layernorm", "rmsnorm")
GPT_POSITIONS: tuple[str, ...] = ("learned", "rope", "sinusoidal", "none")
TRANSFORMER_POSITIONS: tuple[str, ...] = ("sinusoidal", "learned", "none")


# ----------------------------------------------------------------------------------------------------
# small validators (each raises ValueError naming the field, the expectation and the actual value)
# ----------------------------------------------------------------------------------------------------

def _check_int(owner: str, name: str, value: Any, *, minimum: int = 1) -> int:
    return check_int(f"{owner}.{name}", value, minimum=minimum)


def _check_float(owner: str, name: str, value: Any, *, low: float, high: float | None = None,
                 low_inclusive: bool = False, high_inclusive: bool = False) -> float:
    return check_float(f"{owner}.{name}", value, low=low, high=high, low_inclusive=low_inclusive,
                       high_inclusive=high_inclusive)


def _check_bool(owner: str, name: str, value: Any) -> bool:
    return check_bool(f"{owner}.{name}", value)


def _check_choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> str:
    return check_choice(f"{owner}.{name}", value, choices)


def _check_divisible(config: Any, name: str, by: str, when: str = "") -> None:
    """``config.<name>`` must be a multiple of ``config.<by>``; ``when`` says why or when it must."""
    value, divisor = getattr(config, name), getattr(config, by)
    if value % divisor != 0:
        raise ValueError(f"{type(config).__name__}.{name} must be divisible by {by}{when}, "
                         f"got {name}={value}, {by}={divisor}")


class _ConfigMixin:
    """Dict/JSON round-trip shared by both configs, and their two dropout rates (``dropout`` on the residual
    branches and embeddings, ``attention_dropout`` on the attention weights)."""

    model_type: ClassVar[str]

    @property
    def attn_dropout(self) -> float:
        """Dropout on the attention weights: ``attention_dropout``, or ``dropout`` when that is None."""
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    def _check_dropouts(self, owner: str) -> None:
        """``dropout`` and ``attention_dropout`` (when given) in [0, 1]; ints become floats."""
        self.dropout = _check_float(owner, "dropout", self.dropout, low=0.0, high=1.0, low_inclusive=True)
        if self.attention_dropout is not None:
            self.attention_dropout = _check_float(owner, "attention_dropout", self.attention_dropout, low=0.0,
                                                  high=1.0, low_inclusive=True)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field plus ``"model_type"``; ``from_dict(to_dict())`` equals ``self``."""
        out: dict[str, Any] = {"model_type": self.model_type}
        out.update(dataclasses.asdict(self))  # type: ignore[call-overload]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """Build from a dict made by :meth:`to_dict` (``"model_type"`` optional); unknown keys raise."""
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__}.from_dict expects a dict, got {type(data).__name__}")
        data = dict(data)
        kind = data.pop("model_type", cls.model_type)
        if kind != cls.model_type:
            raise ValueError(f"{cls.__name__}.from_dict expects model_type {cls.model_type!r}, got {kind!r}")
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{cls.__name__}.from_dict got unknown keys {unknown}; valid keys are {sorted(names)}")
        missing = [f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                   if f.init and f.name not in data and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ValueError(f"{cls.__name__}.from_dict is missing the required keys {missing}")
        return cls(**data)

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_json(cls, text: str):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{cls.__name__}.from_json: invalid JSON ({err})") from None
        return cls.from_dict(data)

    def replace(self, **overrides):
        """A copy with some fields changed (validated again)."""
        names = {f.name for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"{type(self).__name__} has no fields {unknown}; valid fields are {sorted(names)}")
        return dataclasses.replace(self, **overrides)  # type: ignore[type-var]


# ----------------------------------------------------------------------------------------------------
# decoder-only
# ----------------------------------------------------------------------------------------------------

@dataclass
class GPTConfig(_ConfigMixin):
    """Decoder-only language model (GPT-2 or Llama family, chosen by the fields).

    ``n_kv_head`` (None = ``n_head``, i.e. plain multi-head attention), ``head_dim``
    (None = ``n_embd // n_head``) and ``ffn_hidden`` (None = ``4 * n_embd``) stay ``None`` in the config
    so that overriding ``n_embd`` rescales them; the resolved sizes are the properties
    :attr:`kv_heads`, :attr:`head_size` and :attr:`ffn_size`.
    """

    model_type: ClassVar[str] = "gpt"

    vocab_size: int = 50257
    block_size: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    n_kv_head: int | None = None
    head_dim: int | None = None
    ffn_hidden: int | None = None
    activation: str = "gelu_tanh"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    bias: bool = True
    position: str = "learned"
    rope_theta: float = 10000.0
    tie_embeddings: bool = True
    dropout: float = 0.0
    attention_dropout: float | None = None  # on the attention weights; None = same as ``dropout``

    def __post_init__(self) -> None:
        o = "GPTConfig"
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            _check_int(o, name, getattr(self, name))
        if self.n_kv_head is not None:
            _check_int(o, "n_kv_head", self.n_kv_head)
            _check_divisible(self, "n_head", "n_kv_head", " (grouped-query attention)")
        if self.head_dim is not None:
            _check_int(o, "head_dim", self.head_dim)
        else:
            _check_divisible(self, "n_embd", "n_head", " when head_dim is None")
        if self.ffn_hidden is not None:
            _check_int(o, "ffn_hidden", self.ffn_hidden)
        _check_choice(o, "activation", self.activation, ACTIVATIONS)
        _check_choice(o, "norm", self.norm, NORMS)
        self.norm_eps = _check_float(o, "norm_eps", self.norm_eps, low=0.0)
        _check_bool(o, "bias", self.bias)
        _check_choice(o, "position", self.position, GPT_POSITIONS)
        self.rope_theta = _check_float(o, "rope_theta", self.rope_theta, low=0.0)
        if self.position == "rope" and self.head_size % 2 != 0:
            raise ValueError(f"GPTConfig: rotary positions need an even head dim, got head_dim={self.head_size}")
        _check_bool(o, "tie_embeddings", self.tie_embeddings)
        self._check_dropouts(o)

    # resolved sizes ---------------------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        """K: number of key/value heads (``n_kv_head`` or ``n_head``)."""
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def head_size(self) -> int:
        """D: per-head width (``head_dim`` or ``n_embd // n_head``)."""
        return self.n_embd // self.n_head if self.head_dim is None else self.head_dim

    @property
    def ffn_size(self) -> int:
        """F: feed-forward hidden width (``ffn_hidden`` or ``4 * n_embd``)."""
        return 4 * self.n_embd if self.ffn_hidden is None else self.ffn_hidden

    @property
    def is_gated(self) -> bool:
        """True for SwiGLU/GeGLU feed-forwards (three matrices instead of two)."""
        return self.activation in ("swiglu", "geglu")


# ----------------------------------------------------------------------------------------------------
# encoder-decoder
# ----------------------------------------------------------------------------------------------------

@dataclass
class TransformerConfig(_ConfigMixin):
    """Encoder-decoder Transformer ("Attention Is All You Need").

    ``norm_first=False`` is the paper's post-norm (``x = norm(x + sublayer(x))``); ``True`` is pre-norm
    (``x = x + sublayer(norm(x))``). ``encoder_final_norm``/``decoder_final_norm`` add a norm after the
    last layer; ``None`` means "same as ``norm_first``" (pre-norm stacks need one, post-norm stacks do not;
    ``torch.nn.Transformer`` always has them, so a converter sets both to True).
    ``share_embeddings`` uses one token table for source and target (needs equal vocabularies);
    ``tie_output`` shares the output projection with the target token table.
    ``pad_id`` (or None) is used to derive key padding masks when none are passed.
    ``layer_drop`` is LayerDrop (Fan et al. 2019): in training, each encoder and each decoder layer is skipped
    with this probability, for the whole batch (:mod:`attnkit.modules.layer_drop`); 0 = off.
    """

    model_type: ClassVar[str] = "transformer"

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    num_heads: int = 8
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dim_feedforward: int = 2048
    dropout: float = 0.1
    attention_dropout: float | None = None  # on the attention weights; None = same as ``dropout`` (torch.nn)
    layer_drop: float = 0.0  # LayerDrop: the probability of skipping a whole layer in training
    activation: str = "relu"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    norm_first: bool = False
    encoder_final_norm: bool | None = None
    decoder_final_norm: bool | None = None
    max_len: int = 5000
    position: str = "sinusoidal"
    share_embeddings: bool = False
    tie_output: bool = False
    scale_embeddings: bool = True
    bias: bool = True
    pad_id: int | None = 0

    def __post_init__(self) -> None:
        o = "TransformerConfig"
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "num_encoder_layers",
                     "num_decoder_layers", "dim_feedforward", "max_len"):
            _check_int(o, name, getattr(self, name))
        _check_divisible(self, "d_model", "num_heads")
        self._check_dropouts(o)
        self.layer_drop = _check_float(o, "layer_drop", self.layer_drop, low=0.0, high=1.0, low_inclusive=True)
        _check_choice(o, "activation", self.activation, ACTIVATIONS)
        _check_choice(o, "norm", self.norm, NORMS)
        self.norm_eps = _check_float(o, "norm_eps", self.norm_eps, low=0.0)
        _check_bool(o, "norm_first", self.norm_first)
        for name in ("encoder_final_norm", "decoder_final_norm"):
            if getattr(self, name) is not None:
                _check_bool(o, name, getattr(self, name))
        _check_choice(o, "position", self.position, TRANSFORMER_POSITIONS)
        for name in ("share_embeddings", "tie_output", "scale_embeddings", "bias"):
            _check_bool(o, name, getattr(self, name))
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"TransformerConfig.share_embeddings needs src_vocab_size == tgt_vocab_size, "
                f"got {self.src_vocab_size} and {self.tgt_vocab_size}"
            )
        if self.pad_id is not None:
            _check_int(o, "pad_id", self.pad_id, minimum=0)
            smallest = min(self.src_vocab_size, self.tgt_vocab_size)
            if self.pad_id >= smallest:
                raise ValueError(
                    f"TransformerConfig.pad_id must be in [0, {smallest}) (both vocabularies), got {self.pad_id}"
                )

    @property
    def use_encoder_final_norm(self) -> bool:
        return self.norm_first if self.encoder_final_norm is None else self.encoder_final_norm

    @property
    def use_decoder_final_norm(self) -> bool:
        return self.norm_first if self.decoder_final_norm is None else self.decoder_final_norm

    @property
    def head_size(self) -> int:
        """D: per-head width ``d_model // num_heads``."""
        return self.d_model // self.num_heads


ModelConfig = GPTConfig | TransformerConfig
_CONFIG_CLASSES: dict[str, type] = {"gpt": GPTConfig, "transformer": TransformerConfig}


def config_from_dict(data: dict[str, Any]) -> GPTConfig | TransformerConfig:
    """Rebuild a config of the right class from ``to_dict()`` output (dispatch on ``"model_type"``)."""
    if not isinstance(data, dict):
        raise ValueError(f"config_from_dict expects a dict, got {type(data).__name__}")
    kind = data.get("model_type")
    if not isinstance(kind, str) or kind not in _CONFIG_CLASSES:
        raise ValueError(f"config dict must have model_type in {sorted(_CONFIG_CLASSES)}, got {kind!r}")
    return _CONFIG_CLASSES[kind].from_dict(data)


def config_from_json(text: str) -> GPTConfig | TransformerConfig:
    """JSON counterpart of :func:`config_from_dict`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"config_from_json: invalid JSON ({err})") from None
    return config_from_dict(data)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``--set`` items as config overrides: ``["n_layer=6", "dropout=0.2", "bias=false"]`` →
    ``{"n_layer": 6, "dropout": 0.2, "bias": False}`` (values read as JSON, else true/false/none, else text).
    Which fields exist and what values they take is checked by the config they are applied to."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set expects FIELD=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = {"true": True, "false": False, "none": None}.get(raw.lower(), raw)
        out[key.strip()] = value
    return out
