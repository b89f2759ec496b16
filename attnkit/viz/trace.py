"""Shape trace: run a model once and list, in forward order, what every module received and returned.

Axis legend: ``B`` batch, ``T`` target / text positions (queries), ``S`` source positions (keys of the encoder
and of cross-attention), ``C`` model width, ``H`` query heads, ``K`` key/value heads, ``D`` head dim,
``F`` feed-forward width, ``V`` vocabulary.

The seeds print a tensor's shape after every step by hand; :func:`trace` does it for a whole model with
PyTorch hooks alone (a forward pre-hook and a forward hook on every module, removed afterwards), so the model's
code is unchanged and the run is the real one::

    t = trace(gpt, ids)                 # ids (B, T)
    t = trace(translator, (src, tgt))   # src (B, S), tgt (B, T): positional arguments of forward
    print(t.format(depth=2))            # modules nested deeper than 2 calls are folded into their parent
    t.to_json()                         # the same rows as plain data

Each :class:`TraceRow` holds the module's qualified name, its class, the shapes of its tensor inputs and of
its output written with named axes (``B=2 T=11 C=128``), the output dtype, its parameters (each shared tensor
counted once, at the module that registered it first: a tied ``lm_head`` shows 0) and their share of the
model's total. Dropout layers are left out (in eval mode they return their input). Attention layers also get the mask they were called with (causal, ``attn_mask``, key padding,
or none) and the head split, e.g. ``(B, T, C) -> (B, H, T, D)  B=2 T=11 C=128 H=4 D=32``.

Axis names come from the model's configuration (widths) and the call (batch and lengths); an axis whose size
matches no known name is printed as a bare number.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from attnkit.modules.multi_head_attention import MultiHeadAttention

__all__ = ["TraceRow", "Trace", "trace", "model_axes"]


@dataclass
class TraceRow:
    """One module call. ``depth`` is the call nesting (0 = the model itself)."""

    name: str
    kind: str
    depth: int
    inputs: list[str]
    output: str = ""
    dtype: str = ""
    params: int = 0
    share: float = 0.0
    tied: bool = False
    attention: dict[str, str] | None = None
    input_shapes: list[list[int]] = field(default_factory=list)
    output_shape: list[int] = field(default_factory=list)


@dataclass
class Trace:
    """The rows of one traced forward call, plus the axis sizes used to name shapes."""

    model: str
    total_params: int
    axes: dict[str, int]
    rows: list[TraceRow] = field(default_factory=list)

    def visible(self, depth: int | None = None) -> list[TraceRow]:
        """Rows at nesting ``<= depth`` (all when ``None``)."""
        if depth is not None and depth < 0:
            raise ValueError(f"depth must be >= 0 (or None for every level), got {depth}")
        return [r for r in self.rows if depth is None or r.depth <= depth]

    def to_json(self, depth: int | None = None) -> str:
        """The trace as JSON: ``{"model", "total_params", "axes", "rows": [...]}``."""
        rows = [asdict(r) for r in self.visible(depth)]
        return json.dumps({"model": self.model, "total_params": self.total_params, "axes": self.axes,
                           "rows": rows}, indent=1, ensure_ascii=False)

    def format(self, depth: int | None = None) -> str:
        """A text table, one line per module call (indented by nesting), attention details underneath."""
        rows = self.visible(depth)
        head = ("module", "input", "output", "dtype", "params", "share")
        table = []
        for r in rows:
            label = "  " * r.depth + (r.name or "(model)") + f" ({r.kind})"
            params = f"{r.params:,}" + (" tied" if r.tied else "")
            table.append((label, " | ".join(r.inputs), r.output, r.dtype, params, f"{100 * r.share:.1f}%"))
        widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(head)]

        def line(cells):
            left = [c.ljust(w) for c, w in zip(cells[:4], widths[:4])]
            right = [c.rjust(w) for c, w in zip(cells[4:], widths[4:])]
            return "  ".join(left + right).rstrip()

        legend = " ".join(f"{k}={v}" for k, v in self.axes.items())
        out = [f"{self.model}: {self.total_params:,} parameters; axes {legend}", line(head),
               line(["-" * w for w in widths])]
        for r, cells in zip(rows, table):
            out.append(line(cells))
            if r.attention:
                pad = "  " * (r.depth + 1) + "  "
                out.append(f"{pad}mask: {r.attention['mask']}")
                out.append(f"{pad}heads: {r.attention['heads']}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.format()


# --------------------------------------------------------------------------------------------------
# axis names
# --------------------------------------------------------------------------------------------------

def model_axes(model: nn.Module) -> dict[str, int]:
    """Width axes of a model from its config: ``C``, ``H``, ``K``, ``D``, ``F``, ``V`` (those that apply).

    Works for :class:`~attnkit.models.gpt.GPT` and :class:`~attnkit.models.transformer.Transformer` (via
    ``model.config``), and for any module containing :class:`MultiHeadAttention` layers (from the first one).
    """
    cfg = getattr(model, "config", None)
    axes: dict[str, int] = {}
    if cfg is not None and hasattr(cfg, "n_embd"):
        axes.update(C=cfg.n_embd, H=cfg.n_head, K=cfg.kv_heads, D=cfg.head_size, F=cfg.ffn_size, V=cfg.vocab_size)
    elif cfg is not None and hasattr(cfg, "d_model"):
        axes.update(C=cfg.d_model, H=cfg.num_heads, K=cfg.num_heads, D=cfg.d_model // cfg.num_heads,
                    F=cfg.dim_feedforward, V=cfg.tgt_vocab_size)
        if cfg.src_vocab_size != cfg.tgt_vocab_size:
            axes["Vs"] = cfg.src_vocab_size
    else:
        mha = next((m for m in model.modules() if isinstance(m, MultiHeadAttention)), None)
        if mha is not None:
            axes.update(C=mha.embed_dim, H=mha.num_heads, K=mha.num_kv_heads, D=mha.head_dim)
    if axes.get("K") == axes.get("H"):
        axes.pop("K", None)  # no grouped-query attention: K would only repeat H
    return axes


class _Namer:
    """Writes shapes as ``B=2 T=11 C=128``: batch and length axes from the call, widths from the config."""

    def __init__(self, axes: Mapping[str, int], batch: int, lengths: Mapping[str, int]):
        self.batch = batch
        self.lengths = dict(lengths)  # e.g. {"T": 11} or {"S": 12, "T": 7}
        # last-axis names, first match wins (C before F before V when sizes coincide)
        self.widths = [(n, axes[n]) for n in ("C", "F", "V", "Vs", "D") if n in axes]
        self.heads = [(n, axes[n]) for n in ("H", "K") if n in axes]  # (B, H, T, D) tensors inside attention
        self.head_dim = axes.get("D")

    def length_name(self, size: int, stream: str) -> str:
        if self.lengths.get(stream) == size:
            return stream
        for name, value in self.lengths.items():
            if value == size:
                return name
        return "L"

    def shape(self, t: torch.Tensor, stream: str = "T") -> str:
        dims = list(t.shape)
        if not dims:
            return "scalar"
        names: list[str | None] = [None] * len(dims)
        heads = [v for n, v in self.heads if v == (dims[1] if len(dims) > 1 else None)]
        if len(dims) == 4 and dims[0] == self.batch and heads and dims[-1] == self.head_dim:
            names = ["B", next(n for n, v in self.heads if v == dims[1]), self.length_name(dims[2], stream), "D"]
        elif len(dims) >= 2 and dims[0] == self.batch:
            names[0] = "B"
            names[1] = self.length_name(dims[1], stream)
            if len(dims) >= 3 and t.is_floating_point():
                names[-1] = next((n for n, v in self.widths if v == dims[-1]), None)
        elif len(dims) == 1:
            names[0] = self.length_name(dims[0], stream) if dims[0] in self.lengths.values() else None
        return " ".join(str(d) if n is None else f"{n}={d}" for n, d in zip(names, dims))


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _stream(name: str) -> str:
    """``S`` for modules that work on the source sentence (encoder side), ``T`` otherwise."""
    parts = name.split(".")
    return "S" if "encoder" in parts or "src_embed" in parts else "T"


# --------------------------------------------------------------------------------------------------
# attention details
# --------------------------------------------------------------------------------------------------

def _mask_text(kwargs: Mapping[str, Any], namer: _Namer, stream: str) -> str:
    parts = []
    if kwargs.get("is_causal"):
        parts.append("causal (is_causal=True, bottom-right aligned; the fused kernel applies it)")
    m = kwargs.get("attn_mask")
    if isinstance(m, torch.Tensor):
        kind = "bool, True = may not attend" if m.dtype == torch.bool else f"{m.dtype} added to the scores"
        parts.append(f"attn_mask ({' '.join(str(d) for d in m.shape)}) {kind}")
    p = kwargs.get("key_padding_mask")
    if isinstance(p, torch.Tensor):
        parts.append(f"key_padding_mask ({namer.shape(p, 'S' if stream == 'S' else 'T')}), "
                     f"{int(p.sum())} padded keys")
    if kwargs.get("kv_cache") is not None:
        parts.append("with a KV cache")
    return "; ".join(parts) if parts else "none: every query sees every key"


def _heads_text(m: MultiHeadAttention, args: Sequence[Any], kwargs: Mapping[str, Any], namer: _Namer,
                stream: str) -> str:
    query = args[0] if args else kwargs.get("query")
    key = args[1] if len(args) > 1 else kwargs.get("key")
    B, T = int(query.shape[0]), int(query.shape[1])
    q_len = "S" if stream == "S" else "T"
    H, K, D = m.num_heads, m.num_kv_heads, m.head_dim
    text = f"(B, {q_len}, C) -> (B, H, {q_len}, D)  B={B} {q_len}={T} C={m.embed_dim} H={H} D={D}"
    cross = isinstance(key, torch.Tensor) and key is not query
    if cross:
        text = f"q {text}; k, v (B, S, C) -> (B, {'K' if K != H else 'H'}, S, D)  S={int(key.shape[1])}"
    elif K != H:
        text += f"; k, v (B, K, {q_len}, D) with K={K} ({H // K} query heads share each key/value head)"
    if H * D != m.embed_dim:
        text += f"; heads concatenated: H*D = {H * D}, projected back to {m.out_dim}"
    return text


# --------------------------------------------------------------------------------------------------
# tracing
# --------------------------------------------------------------------------------------------------

def _owned_params(model: nn.Module) -> tuple[dict[str, int], set[str]]:
    """Parameters per qualified parameter name, each shared tensor at its first name; and the aliases."""
    owned = {name: p.numel() for name, p in model.named_parameters()}  # deduplicated: first name wins
    aliases = {name for name, _ in model.named_parameters(remove_duplicate=False)} - set(owned)
    return owned, aliases


def _forward_args(inputs: Any) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of the forward call: a tensor, a tuple/list of arguments or a dict of keyword arguments."""
    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    if isinstance(inputs, Mapping):
        return (), dict(inputs)
    raise ValueError(f"inputs must be a tensor, a tuple/list or a dict of forward arguments, "
                     f"got {type(inputs).__name__}")


def _default_lengths(model: nn.Module, tensors: list[torch.Tensor]) -> dict[str, int]:
    """``T`` = the first input's length; with an encoder and a decoder, ``S`` = the first's and ``T`` = the second's."""
    from attnkit.models.encoder_decoder import Encoder  # local: attnkit.models imports attnkit.modules only

    seq2seq = any(isinstance(m, Encoder) for m in model.modules())
    lens = [int(t.shape[1]) for t in tensors if t.dim() >= 2]
    if seq2seq and len(lens) >= 2:
        return {"S": lens[0], "T": lens[1]}
    return {"T": lens[0] if lens else int(tensors[0].shape[-1])}


class _Recorder:
    """Forward hooks on every module of ``model`` (dropout left out) that append one row per call to ``result``."""

    def __init__(self, model: nn.Module, namer: _Namer, result: Trace) -> None:
        self.namer, self.result = namer, result
        self.owned, self.aliases = _owned_params(model)
        self.total = result.total_params
        # every qualified name of every module (a shared module, e.g. GPT's one rotary table, has several)
        self.names: dict[int, list[str]] = {}
        for name, m in model.named_modules(remove_duplicate=False):
            self.names.setdefault(id(m), []).append(name)
        self.stack: list[TraceRow] = []
        self.handles = []
        for m in {id(m): m for m in model.modules()}.values():
            if isinstance(m, nn.Dropout):
                continue  # the identity in eval mode: only clutter in the table
            self.handles.append(m.register_forward_pre_hook(self.pre_hook, with_kwargs=True))
            self.handles.append(m.register_forward_hook(self.post_hook, with_kwargs=True))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def name_in_call(self, m: nn.Module) -> str:
        candidates = self.names[id(m)]
        if self.stack:
            parent = self.stack[-1].name
            inside = [n for n in candidates if n.startswith(parent + ".") or parent == ""]
            if inside:
                return min(inside, key=len)
            # a module shared from elsewhere (GPT's rotary table called inside an attention layer)
            return f"{parent}.{candidates[0].rsplit('.', 1)[-1]}"
        return candidates[0]

    def params_of(self, m: nn.Module) -> tuple[int, bool]:
        prefixes = set(self.names[id(m)])
        n = sum(v for k, v in self.owned.items() if any(p == "" or k.startswith(p + ".") for p in prefixes))
        tied = n == 0 and any(any(p == "" or k.startswith(p + ".") for p in prefixes) for k in self.aliases)
        return n, tied

    def pre_hook(self, m, a, kw):
        namer = self.namer
        name = self.name_in_call(m)
        stream = _stream(name)
        ins, shapes = [], []
        for i, t in enumerate({id(t): t for t in _tensors(list(a))}.values()):  # key is value: once
            s = stream if i == 0 else "S"  # a second tensor argument is memory / keys (cross-attention)
            ins.append(namer.shape(t, s))
            shapes.append(list(t.shape))
        for k, v in kw.items():
            if isinstance(v, torch.Tensor) and k in ("memory", "key", "value", "src", "tgt"):
                ins.append(f"{k}: {namer.shape(v, 'T' if k == 'tgt' else 'S')}")
                shapes.append(list(v.shape))
        n, tied = self.params_of(m)
        row = TraceRow(name=name, kind=type(m).__name__, depth=len(self.stack), inputs=ins, params=n,
                       share=n / self.total if self.total else 0.0, tied=tied, input_shapes=shapes)
        if isinstance(m, MultiHeadAttention):
            row.attention = {"mask": _mask_text(kw, namer, stream), "heads": _heads_text(m, a, kw, namer, stream)}
        self.result.rows.append(row)
        self.stack.append(row)

    def post_hook(self, m, a, kw, out):
        row = self.stack.pop()
        outs = _tensors(out)
        if outs:
            row.output = self.namer.shape(outs[0], _stream(row.name))
            row.output_shape = list(outs[0].shape)
            row.dtype = str(outs[0].dtype).replace("torch.", "")


def trace(model: nn.Module, inputs: Any, *, lengths: Mapping[str, int] | None = None) -> Trace:
    """Run ``model`` once on ``inputs`` and record every module call in forward order.

    Args:
        model: any ``nn.Module`` (GPT, Transformer, a single layer, ...). Run in eval mode without gradients;
            its training flag is restored and every hook removed afterwards, also when the forward raises.
        inputs: the forward's arguments: a tensor (``model(inputs)``), a tuple/list (``model(*inputs)``) or a
            dict (``model(**inputs)``).
        lengths: names of the length axes, e.g. ``{"S": 12, "T": 7}``. Default: ``T`` = length of the first
            input; for a model with an encoder and a decoder, ``S`` = the first input's length (the source) and
            ``T`` = the second's.

    Returns:
        a :class:`Trace`; ``print(trace)`` shows the table, ``.format(depth=N)`` folds deeper calls.

    Shape:
        inputs as the model's forward expects, e.g. ids ``(B, T)`` for GPT, ``(B, S)`` and ``(B, T)`` for a
        translator.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"trace needs an nn.Module, got {type(model).__name__}")
    args, kwargs = _forward_args(inputs)
    tensors = _tensors(list(args) + list(kwargs.values()))
    if not tensors:
        raise ValueError("inputs hold no tensor: nothing to trace")
    first = tensors[0]
    batch = int(first.shape[0]) if first.dim() >= 1 else 1
    if lengths is None:
        lengths = _default_lengths(model, tensors)
    axes = model_axes(model)
    owned, _ = _owned_params(model)
    result = Trace(model=type(model).__name__, total_params=sum(owned.values()),
                   axes={"B": batch, **dict(lengths), **axes})
    recorder = _Recorder(model, _Namer(axes, batch, lengths), result)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        recorder.remove()
        model.train(was_training)
    return result
