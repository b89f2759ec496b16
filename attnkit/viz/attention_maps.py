"""Capture the attention weights of a model's attention layers, without changing the model's code.

Axis legend: ``B`` batch, ``H`` query heads, ``T`` query length, ``S`` key length, ``L`` layers.

Every attention layer in attnkit is a :class:`~attnkit.modules.multi_head_attention.MultiHeadAttention`, whose
``forward`` already knows how to return its weights (``need_weights=True, average_attn_weights=False`` runs the
explicit-softmax reference path and returns ``(B, H, T, S)``). The models themselves never ask for them. So
capturing is done from the outside with two PyTorch module hooks per attention layer:

* a *forward pre-hook* rewrites the call's keyword arguments to ``need_weights=True,
  average_attn_weights=False`` (remembering what the caller asked for);
* a *forward hook* stores the weights and hands the caller exactly the output it asked for
  (``(out, None)`` from a model, or averaged weights if the caller wanted those).

The recorded weights are therefore the very ones the layer used to compute its output on that call (after
attention dropout, if the model is in training mode). Because the reference path replaces PyTorch's fused
kernel while capturing, the logits agree with an uncaptured run to float rounding (tested within 1e-5), not
bit for bit. The hooks are removed when the ``with`` block ends.

Usage::

    maps = attention_maps(gpt, ids)                      # list over layers of (H, T, T)
    seq = seq2seq_attention_maps(translator, src, tgt)   # .encoder (H, S, S), .decoder (H, T, T), .cross (H, T, S)
    with capture_attention(model) as cap:                # anything containing MultiHeadAttention layers
        model(...)
    cap.records["blocks.0.attn"]                         # one (B, H, T, S) tensor per call

Works with a KV cache too: during cached generation each call of a self-attention layer records
``(B, H, T_new, S)`` with ``S`` = cached + new keys (the attention of the newest tokens over the whole past).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
from torch import nn

from attnkit.checks import is_int
from attnkit.modules.multi_head_attention import MultiHeadAttention

__all__ = [
    "AttentionCapture",
    "capture_attention",
    "attention_maps",
    "Seq2SeqAttention",
    "seq2seq_attention_maps",
    "select_attention",
]


class AttentionCapture:
    """Context manager that records the per-head attention weights of the given attention layers.

    Args:
        modules: ``{name: MultiHeadAttention}``; the names key :attr:`records`.

    Attributes:
        records: ``{name: [weights of call 1, call 2, ...]}``, each a detached float32 CPU tensor
            ``(B, H, T, S)``. Cleared on ``__enter__``.

    Shape:
        each record ``(B, H, T, S)``.
    """

    def __init__(self, modules: Mapping[str, nn.Module]):
        if not modules:
            raise ValueError("AttentionCapture needs at least one attention module, got none")
        for name, m in modules.items():
            if not isinstance(m, MultiHeadAttention):
                raise ValueError(f"module {name!r} must be a MultiHeadAttention, got {type(m).__name__}")
        self.modules: dict[str, MultiHeadAttention] = dict(modules)
        self.records: dict[str, list[torch.Tensor]] = {name: [] for name in self.modules}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        # per module: a stack of (need_weights, average_attn_weights) the caller asked for
        self._asked: dict[str, list[tuple[bool, bool]]] = {name: [] for name in self.modules}

    def _hooks(self, name: str):
        asked = self._asked[name]
        store = self.records[name]

        def pre_hook(module, args, kwargs):
            asked.append((bool(kwargs.get("need_weights", False)), bool(kwargs.get("average_attn_weights", True))))
            kwargs = dict(kwargs, need_weights=True, average_attn_weights=False)
            return args, kwargs

        def post_hook(module, args, kwargs, output):
            want, average = asked.pop()
            out, weights = output  # weights (B, H, T, S): the reference path ran
            store.append(weights.detach().to(device="cpu", dtype=torch.float32).clone())
            if not want:
                return out, None  # what the model asked for
            return out, (weights.mean(dim=1) if average else weights)  # (B, T, S) or (B, H, T, S)

        return pre_hook, post_hook

    def __enter__(self) -> "AttentionCapture":
        if self._handles:
            raise RuntimeError("this AttentionCapture is already active; use a new one for nested captures")
        for name, module in self.modules.items():
            self.records[name].clear()
            self._asked[name].clear()
            pre_hook, post_hook = self._hooks(name)
            self._handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
            # prepend: post-hooks run in reverse order of registration, so two captures of the same layer
            # nest like brackets (the inner one sees the rewritten call, the outer one restores the caller's)
            self._handles.append(module.register_forward_hook(post_hook, with_kwargs=True, prepend=True))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for stack in self._asked.values():
            stack.clear()  # a forward that raised leaves its entry behind

    def last(self, name: str) -> torch.Tensor:
        """The weights recorded by the latest call of module ``name``.

        Shape:
            returns ``(B, H, T, S)``.
        """
        if name not in self.records:
            raise ValueError(f"no attention module named {name!r}; captured: {list(self.records)}")
        if not self.records[name]:
            raise ValueError(f"attention module {name!r} was not called inside the capture")
        return self.records[name][-1]


def capture_attention(model: nn.Module, names: Sequence[str] | None = None) -> AttentionCapture:
    """An :class:`AttentionCapture` over every :class:`MultiHeadAttention` inside ``model`` (or the named ones).

    Names are the qualified module names (``model.named_modules()``), e.g. ``"blocks.0.attn"`` in a GPT or
    ``"core.decoder.layers.1.cross_attn"`` in a Transformer.

    Shape:
        each record ``(B, H, T, S)``.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"capture_attention expects an nn.Module, got {type(model).__name__}")
    found = {name: m for name, m in model.named_modules() if isinstance(m, MultiHeadAttention)}
    if not found:
        raise ValueError(f"{type(model).__name__} contains no MultiHeadAttention layer to capture")
    if names is not None:
        missing = [n for n in names if n not in found]
        if missing:
            raise ValueError(f"no attention module named {missing}; available: {list(found)}")
        found = {n: found[n] for n in names}
    return AttentionCapture(found)


# ----------------------------------------------------------------------------------------------------
# one sequence through a whole model
# ----------------------------------------------------------------------------------------------------

def _one_sequence(ids, name: str) -> torch.Tensor:
    """Token ids of one sequence as a ``(1, L)`` int64 tensor (from a list, ``(L,)`` or ``(1, L)``)."""
    if not isinstance(ids, torch.Tensor):
        if not isinstance(ids, (list, tuple)) or not all(is_int(i) for i in ids):
            raise ValueError(f"{name} must be a list of ints or an integer tensor of shape (L,) or (1, L), "
                             f"got {type(ids).__name__}")
        ids = torch.tensor(list(ids), dtype=torch.long)
    if ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must hold integer token ids (int64/int32), got {ids.dtype}")
    if ids.dim() == 1:
        ids = ids[None]  # (1, L)
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"{name} must be one sequence, shape (L,) or (1, L), got {tuple(ids.shape)}")
    if ids.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one token, got 0")
    return ids.long()


def _device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def attention_maps(model: nn.Module, idx) -> list[torch.Tensor]:
    """Attention weights of every layer of a decoder-only :class:`~attnkit.models.gpt.GPT` for one sequence.

    The model runs once in eval mode (its training flag is restored), without gradients.

    Args:
        model: a ``GPT`` (GPT-2 or Llama family, also a loaded pretrained model).
        idx: token ids of one sequence: a list of ints, ``(T,)`` or ``(1, T)``.

    Returns:
        one tensor per layer (``L`` of them), each ``(H, T, T)`` float32 on the CPU: entry ``[h, i, j]`` is how
        much query position ``i`` attends to key position ``j`` in head ``h``. Rows sum to 1; the causal mask
        makes every entry above the diagonal exactly 0.

    Shape:
        idx ``(T,)`` or ``(1, T)`` -> ``L`` x ``(H, T, T)``.
    """
    from attnkit.models.gpt import GPT

    if not isinstance(model, GPT):
        raise ValueError(f"attention_maps expects a GPT (decoder-only) model, got {type(model).__name__}; "
                         "use seq2seq_attention_maps for an encoder-decoder Transformer")
    ids = _one_sequence(idx, "idx").to(_device(model))
    names = [f"blocks.{i}.attn" for i in range(len(model.blocks))]
    capture = AttentionCapture({n: b.attn for n, b in zip(names, model.blocks)})
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), capture:
            model(ids)
    finally:
        model.train(was_training)
    return [capture.last(n)[0] for n in names]  # each (H, T, T)


@dataclass
class Seq2SeqAttention:
    """The three kinds of attention of an encoder-decoder Transformer for one sentence pair.

    Attributes:
        encoder: per encoder layer, self-attention over the source, ``(H, S, S)`` (not causal).
        decoder: per decoder layer, causal self-attention over the target prefix, ``(H, T, T)``.
        cross: per decoder layer, attention of target positions over source positions, ``(H, T, S)``.
    """

    encoder: list[torch.Tensor]
    decoder: list[torch.Tensor]
    cross: list[torch.Tensor]

    def kind(self, name: str) -> list[torch.Tensor]:
        """``"encoder"``, ``"decoder"`` or ``"cross"`` by name (unknown -> ValueError listing them)."""
        if name not in ("encoder", "decoder", "cross"):
            raise ValueError(f"attention kind must be one of 'encoder', 'decoder', 'cross', got {name!r}")
        return getattr(self, name)


def seq2seq_attention_maps(model: nn.Module, src, tgt) -> Seq2SeqAttention:
    """Encoder self-, decoder self- and cross-attention weights of a :class:`~attnkit.models.transformer.Transformer`.

    The model runs ``forward(src, tgt)`` once (teacher forcing) in eval mode without gradients. Source padding
    is derived from ``config.pad_id`` as in training; padded key columns get weight 0.

    Args:
        src: source ids of one sentence, list / ``(S,)`` / ``(1, S)``.
        tgt: decoder input ids (usually ``<bos>`` + target tokens), list / ``(T,)`` / ``(1, T)``.

    Shape:
        src ``(S,)``, tgt ``(T,)`` -> encoder ``L_enc`` x ``(H, S, S)``, decoder ``L_dec`` x ``(H, T, T)``,
        cross ``L_dec`` x ``(H, T, S)``.
    """
    from attnkit.models.transformer import Transformer

    if not isinstance(model, Transformer):
        raise ValueError(f"seq2seq_attention_maps expects an encoder-decoder Transformer, got {type(model).__name__}; "
                         "use attention_maps for a GPT")
    device = _device(model)
    src_ids = _one_sequence(src, "src").to(device)
    tgt_ids = _one_sequence(tgt, "tgt").to(device)
    enc_layers = model.core.encoder.layers
    dec_layers = model.core.decoder.layers
    modules: dict[str, nn.Module] = {}
    modules.update({f"encoder.{i}": layer.self_attn for i, layer in enumerate(enc_layers)})
    modules.update({f"decoder.{i}": layer.self_attn for i, layer in enumerate(dec_layers)})
    modules.update({f"cross.{i}": layer.cross_attn for i, layer in enumerate(dec_layers)})
    capture = AttentionCapture(modules)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), capture:
            model(src_ids, tgt_ids)
    finally:
        model.train(was_training)
    return Seq2SeqAttention(
        encoder=[capture.last(f"encoder.{i}")[0] for i in range(len(enc_layers))],  # (H, S, S)
        decoder=[capture.last(f"decoder.{i}")[0] for i in range(len(dec_layers))],  # (H, T, T)
        cross=[capture.last(f"cross.{i}")[0] for i in range(len(dec_layers))],  # (H, T, S)
    )


def select_attention(maps: Sequence[torch.Tensor], *, layer: int | None = None,
                     head: int | None = None) -> torch.Tensor:
    """Pick one layer (default: the last) and optionally one head from per-layer maps, with range checks.

    Shape:
        maps ``L`` x ``(H, T, S)`` -> ``(H, T, S)``, or ``(T, S)`` when ``head`` is given.
    """
    n = len(maps)
    if n == 0:
        raise ValueError("no attention maps to select from (0 layers)")
    layer = n - 1 if layer is None else layer
    if not is_int(layer) or not 0 <= layer < n:
        raise ValueError(f"layer must be in [0, {n}) (the model has {n} layers), got {layer!r}")
    weights = maps[layer]
    if weights.dim() != 3:
        raise ValueError(f"attention maps must be (H, T, S) per layer, got {tuple(weights.shape)} for layer {layer}")
    if head is None:
        return weights
    H = weights.shape[0]
    if not is_int(head) or not 0 <= head < H:
        raise ValueError(f"head must be in [0, {H}) (layer {layer} has {H} heads), got {head!r}")
    return weights[head]  # (T, S)
