"""Shape trace: run a model once and list, in forward order, what every module received, returned and cost.

Axis legend: ``B`` batch, ``T`` target / text positions (queries), ``S`` source positions (keys of the encoder
and of cross-attention), ``C`` model width, ``H`` query heads, ``K`` key/value heads, ``D`` head dim,
``F`` feed-forward width, ``V`` vocabulary; derived widths such as ``3C`` (q | k | v packed) are explained in
each trace's legend (:mod:`attnkit.viz.trace_axes`).

The seeds print a tensor's shape after every step by hand; :func:`trace` does it for a whole model with
PyTorch hooks (a forward pre-hook and a forward hook on every module, removed afterwards), so the model's
code is unchanged and the run is the real one::

    t = trace(gpt, ids)                 # ids (B, T)
    t = trace(translator, (src, tgt))   # src (B, S), tgt (B, T): positional arguments of forward
    print(t.format(depth=2))            # modules nested deeper than 2 calls are folded into their parent
    t.to_json()                         # the same rows, legend and totals as plain data

Each :class:`TraceRow` holds the module's qualified name, its class, the shapes of its tensor inputs and of
its output written with named axes (``B=2 T=11 C=128``; plain sizes ``(2, 8)`` where no axis is known), the
output dtype, its parameters (each shared tensor counted once, at the module that registered it first: a tied
``lm_head`` shows 0; a module called again shows 0, "tied", at its later calls), how many of them train, their
share of the model's total, the mult-adds of the call (its children's included; :mod:`attnkit.viz.trace_cost`
says what is counted) and the bytes of its output. Dropout layers (in eval mode they return their input) and
``nn.Identity`` are left out. Attention layers also get the mask they were called with, the head split, e.g.
``(B, T, C) -> (B, H, T, D)  B=2 T=11 C=128 H=4 D=32``, and the mult-adds of their own scores and weighted sum.

A module registered under several names (``share_embeddings=True``: ``tgt_embed`` is ``src_embed``) is named
by its first name at its first call and by its next name at the next (the decoder-side call is ``tgt_embed``,
on the target axis ``T``).

Position tables read with ``forward_len(T)`` (``TransformerEmbedding``'s sinusoidal or learned table), which
no hook sees, get a row too: for the trace only, the instance's ``forward_len`` is wrapped, and restored after.

The footer has the totals as torchinfo gives them: parameters (trainable / frozen), mult-adds, the input's
size, the forward activations (each tensor the calls returned counted once, views of parameters or buffers
not at all; the trace keeps them alive until it returns), the parameters' and buffers' sizes and their sum.
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from attnkit.checks import is_int
from attnkit.modules.multi_head_attention import MultiHeadAttention
from attnkit.modules.quantized_linear import QuantizedLinear, fast_int8_is_exact

from .trace_axes import AxisNamer, model_axes, module_roles, shape_text
from .trace_cost import MultAddCounter, row_bytes, tensor_bytes
from .trace_result import Trace, TraceRow, TraceTotals

__all__ = ["TraceRow", "TraceTotals", "Trace", "trace", "model_axes"]


# --------------------------------------------------------------------------------------------------
# arguments and streams
# --------------------------------------------------------------------------------------------------

# Which length a tensor argument runs along, by its parameter name; others follow the module (see _stream).
_ARG_STREAM = {"src": "S", "memory": "S", "key": "S", "value": "S", "tgt": "T"}
# Keyword tensors not listed among a row's inputs: masks (the attention lines describe them) and positions.
_HIDDEN_KEYWORDS = ("position_ids", "cache_position")


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


def _positional_names(m: nn.Module) -> list[str]:
    """The names of ``m.forward``'s positional parameters (empty where the signature cannot be read)."""
    try:
        params = inspect.signature(m.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in params if p.kind in kinds]


def _shown_inputs(m: nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any]):
    """``(label prefix, parameter name, tensor)`` of the tensors a row lists: each tensor once, masks left out."""
    names = _positional_names(m)
    found, seen = [], set()
    for i, a in enumerate(args):
        pname = names[i] if i < len(names) else None
        found += [("", pname, t) for t in _tensors(a)]
    for k, v in kwargs.items():
        if k not in _HIDDEN_KEYWORDS:
            found += [(f"{k}: ", k, t) for t in _tensors(v)]
    shown = []
    for prefix, pname, t in found:
        if id(t) in seen or (pname is not None and "mask" in pname):
            continue
        seen.add(id(t))
        shown.append((prefix, pname, t))
    return shown


# --------------------------------------------------------------------------------------------------
# attention details
# --------------------------------------------------------------------------------------------------

def _mask_text(kwargs: Mapping[str, Any], namer: AxisNamer, stream: str, cross: bool) -> str:
    parts = []
    if kwargs.get("is_causal"):
        parts.append("causal (is_causal=True, bottom-right aligned; the fused kernel applies it)")
    m = kwargs.get("attn_mask")
    if isinstance(m, torch.Tensor):
        kind = "bool, True = may not attend" if m.dtype == torch.bool else f"{m.dtype} added to the scores"
        dims = [int(d) for d in m.shape]
        names: list[str | None] = [None] * len(dims)
        if namer.known and 2 <= len(dims) <= 4:  # (T, S), (B, T, S) or (B, H, T, S)
            lead = [("B", namer.batch), ("H", namer.axes.get("H"))][: len(dims) - 2]
            names = [n if size == d else None for (n, size), d in zip(lead, dims)]
            names += [namer.length_name(dims[-2], stream), namer.length_name(dims[-1], "S" if cross else stream)]
        parts.append(f"attn_mask ({shape_text(dims, names)}) {kind}")
    p = kwargs.get("key_padding_mask")
    if isinstance(p, torch.Tensor):
        parts.append(f"key_padding_mask ({namer.text(p, 'S' if stream == 'S' or cross else 'T')}), "
                     f"{int(p.sum())} padded keys")
    if kwargs.get("kv_cache") is not None:
        parts.append("with a KV cache")
    return "; ".join(parts) if parts else "none: every query sees every key"


def _heads_text(m: MultiHeadAttention, query: torch.Tensor, key: Any, stream: str) -> str:
    T = int(query.shape[1])
    q_len = "S" if stream == "S" else "T"
    H, K, D = m.num_heads, m.num_kv_heads, m.head_dim
    text = f"(B, {q_len}, C) -> (B, H, {q_len}, D)  B={int(query.shape[0])} {q_len}={T} C={m.embed_dim} H={H} D={D}"
    if isinstance(key, torch.Tensor) and key is not query:
        text = f"q {text}; k, v (B, S, C) -> (B, {'K' if K != H else 'H'}, S, D)  S={int(key.shape[1])}"
    elif K != H:
        text += f"; k, v (B, K, {q_len}, D) with K={K} ({H // K} query heads share each key/value head)"
    if H * D != m.embed_dim:
        text += f"; heads concatenated: H*D = {H * D}, projected back to {m.out_dim}"
    return text


# --------------------------------------------------------------------------------------------------
# tracing
# --------------------------------------------------------------------------------------------------

class _Recorder:
    """Hooks on every module of ``model`` (dropout left out) that append one row per call to ``result``;
    mult-adds are added to the innermost open call, and each open call's total to its parent when it ends."""

    def __init__(self, model: nn.Module, namer: AxisNamer, result: Trace) -> None:
        self.namer, self.result = namer, result
        self.roles = module_roles(model, result.axes)
        # parameters by qualified name, each shared tensor at its first name: (count, trains); and the aliases
        self.owned = {n: (p.numel(), p.requires_grad) for n, p in model.named_parameters()}
        self.aliases = {n for n, _ in model.named_parameters(remove_duplicate=False)} - set(self.owned)
        # every qualified name of every module (a shared module, e.g. GPT's one rotary table, has several)
        self.names: dict[int, list[str]] = {}
        for name, m in model.named_modules(remove_duplicate=False):
            self.names.setdefault(id(m), []).append(name)
        self.calls: dict[tuple[int, int], int] = {}  # (id(module), id(parent row)) -> calls so far
        self.counted: set[int] = set()  # modules whose parameters a row already shows
        self.stack: list[TraceRow] = []
        self.leads: dict[int, list[str | None]] = {}  # id(row) -> the ids' axis names, for lookups
        self.outputs: dict[int, torch.Tensor] = {}  # storage address -> a returned tensor (kept alive)
        self.handles, self.wrapped = [], []
        for m in {id(m): m for m in model.modules()}.values():
            if isinstance(m, (nn.Dropout, nn.Identity)):
                continue  # the identity (dropout: in eval mode): only clutter in the table
            self.handles.append(m.register_forward_pre_hook(self.pre_hook, with_kwargs=True))
            self.handles.append(m.register_forward_hook(self.post_hook, with_kwargs=True))
            if callable(getattr(type(m), "forward_len", None)) and "forward_len" not in vars(m):
                m.forward_len = self._wrap_forward_len(m)  # instance attribute: shadows the method for now
                self.wrapped.append(m)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        for m in self.wrapped:
            del m.forward_len

    def _wrap_forward_len(self, m: nn.Module):
        method = type(m).forward_len.__get__(m)

        def forward_len(T: int) -> torch.Tensor:
            row = self.open(m, (), {}, call="forward_len")
            length = self.namer.length_name(int(T), _stream(row.name)) if self.namer.known else None
            row.inputs, row.input_axes, row.input_shapes = [shape_text([int(T)], [length])], [[length]], [[]]
            self.leads[id(row)] = [length]
            out = method(T)
            self.close(m, out)
            return out

        return forward_len

    def name_in_call(self, m: nn.Module) -> str:
        candidates = self.names[id(m)]
        if self.stack:
            parent = self.stack[-1].name
            inside = [n for n in candidates if n.startswith(parent + ".") or parent == ""]
            if len(inside) > 1:
                # one module under several names in this parent (share_embeddings: tgt_embed is src_embed): its
                # first call takes the shallowest name (registration order breaks ties), each repeated call the
                # next alias, the last alias from then on
                inside = sorted(inside, key=lambda n: n.count("."))
                key = (id(m), id(self.stack[-1]))
                k = self.calls.get(key, 0)
                self.calls[key] = k + 1
                return inside[min(k, len(inside) - 1)]
            if inside:
                return inside[0]
            # a module shared from elsewhere (GPT's rotary table called inside an attention layer)
            return f"{parent}.{candidates[0].rsplit('.', 1)[-1]}"
        return candidates[0]

    def params_of(self, m: nn.Module) -> tuple[int, int, bool]:
        """(parameters, of which trainable, tied: owns none but uses another module's)."""
        prefixes = set(self.names[id(m)])

        def under(k: str) -> bool:
            return any(p == "" or k.startswith(p + ".") for p in prefixes)

        mine = [v for k, v in self.owned.items() if under(k)]
        n = sum(c for c, _ in mine)
        return n, sum(c for c, trains in mine if trains), n == 0 and any(under(k) for k in self.aliases)

    def add_mult_adds(self, n: int) -> None:
        if self.stack:
            self.stack[-1].own_mult_adds += n
            self.stack[-1].mult_adds += n

    def open(self, m: nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any], call: str = "forward") -> TraceRow:
        """Start a row for a call of ``m`` with the given arguments."""
        name = self.name_in_call(m)
        stream = _stream(name)
        role = self.roles.get(id(m))
        row = TraceRow(name=name, kind=type(m).__name__, depth=len(self.stack), inputs=[], call=call)
        for prefix, pname, t in _shown_inputs(m, args, kwargs):
            names = self.namer.names(t, _ARG_STREAM.get(pname, stream),
                                     width=role.width_in if role and not row.inputs else None)
            row.inputs.append(prefix + shape_text(list(t.shape), names))
            row.input_axes.append(names)
            row.input_shapes.append(list(t.shape))
        if role and role.lookup and row.input_axes:
            self.leads[id(row)] = row.input_axes[0]
        n, trainable, tied = self.params_of(m)
        if id(m) in self.counted:  # called again (e.g. tgt_embed, which is src_embed): counted at its first call
            n, trainable, tied = 0, 0, tied or n > 0
        self.counted.add(id(m))
        total = self.result.total_params
        row.params, row.trainable, row.tied, row.share = n, trainable, tied, (n / total if total else 0.0)
        if isinstance(m, MultiHeadAttention):
            query = args[0] if args else kwargs.get("query")
            key = args[1] if len(args) > 1 else kwargs.get("key")
            cross = isinstance(key, torch.Tensor) and key is not query
            row.attention = {"mask": _mask_text(kwargs, self.namer, stream, cross),
                             "heads": _heads_text(m, query, key, stream)}
        self.result.rows.append(row)
        self.stack.append(row)
        return row

    def close(self, m: nn.Module, out: Any) -> None:
        """End the innermost row with the call's output."""
        row = self.stack.pop()
        if self.stack:
            self.stack[-1].mult_adds += row.mult_adds
        role = self.roles.get(id(m))
        outs = _tensors(out)
        if outs:
            lead = self.leads.pop(id(row), None)
            names = self.namer.names(outs[0], _stream(row.name), width=role.width_out if role else None,
                                     lead=lead if role and role.lookup else None)
            row.output, row.output_axes = shape_text(list(outs[0].shape), names), names
            row.output_shape = list(outs[0].shape)
            row.dtype = str(outs[0].dtype).replace("torch.", "")
        row.output_bytes = row_bytes(out)
        for t in outs:
            if t.numel():
                self.outputs.setdefault(t.untyped_storage().data_ptr(), t)
        if row.attention is not None:
            row.attention["products"] = (f"scores q·kᵀ and weighted sum of v: {row.own_mult_adds:,} mult-adds "
                                         f"(the whole score matrix, masked or not)")

    def pre_hook(self, m, args, kwargs):
        self.open(m, args, kwargs)

    def post_hook(self, m, args, kwargs, out):
        self.close(m, out)


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
    if not lens and tensors[0].dim() == 0:
        return {}  # a scalar has no length: the model's forward says what it expects
    return {"T": lens[0] if lens else int(tensors[0].shape[-1])}


def _storage_bytes(tensors: Mapping[int, torch.Tensor], skip: set[int]) -> int:
    return sum(t.untyped_storage().nbytes() for ptr, t in tensors.items() if ptr not in skip)


def _totals(model: nn.Module, inputs: list[torch.Tensor], recorder: _Recorder, mult_adds: int) -> TraceTotals:
    params = list(model.parameters())  # each shared tensor once
    buffers = list(model.buffers())
    held = {t.untyped_storage().data_ptr() for t in (*params, *buffers)}
    given = {t.untyped_storage().data_ptr(): t for t in inputs if t.numel()}
    return TraceTotals(params=sum(p.numel() for p in params),
                       trainable_params=sum(p.numel() for p in params if p.requires_grad),
                       mult_adds=mult_adds, input_bytes=tensor_bytes({id(t): t for t in inputs}.values()),
                       activation_bytes=_storage_bytes(recorder.outputs, held | set(given)),
                       param_bytes=tensor_bytes(params), buffer_bytes=tensor_bytes(buffers))


def trace(model: nn.Module, inputs: Any, *, lengths: Mapping[str, int] | None = None) -> Trace:
    """Run ``model`` once on ``inputs`` and record every module call in forward order.

    Args:
        model: any ``nn.Module`` (GPT, Transformer, a single layer, an ``nn.Sequential`` ...). Run in eval mode
            without gradients; its training flag is restored and every hook removed afterwards, also when the
            forward raises. Axes are named for attnkit models and layers only (:mod:`attnkit.viz.trace_axes`).
        inputs: the forward's arguments: a tensor (``model(inputs)``), a tuple/list (``model(*inputs)``) or a
            dict (``model(**inputs)``).
        lengths: names of the length axes, e.g. ``{"S": 12, "T": 7}``. Default: ``T`` = length of the first
            input; for a model with an encoder and a decoder, ``S`` = the first input's length (the source) and
            ``T`` = the second's. Only for models with known axes.

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
    axes = model_axes(model)
    if lengths is not None and (not isinstance(lengths, Mapping) or not lengths
                                or any(k not in ("S", "T") or not is_int(v) or v < 1 for k, v in lengths.items())):
        raise ValueError(f"lengths must map 'S' and/or 'T' to positive ints, e.g. {{'S': 12, 'T': 7}}, "
                         f"got {lengths!r}")
    if lengths is not None and not axes:
        raise ValueError(f"lengths names the length axes of an attnkit model; {type(model).__name__} has no "
                         f"known axes (expected a GPT, a Transformer or a model with MultiHeadAttention layers)")
    first = tensors[0]
    batch = int(first.shape[0]) if first.dim() >= 1 else 1
    if lengths is None:
        lengths = _default_lengths(model, tensors) if axes else {}
    namer = AxisNamer(axes, batch, lengths)
    result = Trace(model=type(model).__name__, total_params=sum(p.numel() for p in model.parameters()),
                   axes={"B": batch, **dict(lengths), **axes} if axes else {}, legend=namer.legend())
    recorder = _Recorder(model, namer, result)
    counter = MultAddCounter(recorder.add_mult_adds)
    if any(isinstance(m, QuantizedLinear) for m in model.modules()):
        fast_int8_is_exact()  # the int8 kernel's one-time probe runs now, not inside the counted forward
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), counter:
            model(*args, **kwargs)
    finally:
        recorder.remove()
        model.train(was_training)
    result.uncounted = dict(counter.uncounted)
    result.totals = _totals(model, tensors, recorder, result.rows[0].mult_adds if result.rows else 0)
    return result
