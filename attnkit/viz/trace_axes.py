"""Axis names for :mod:`attnkit.viz.trace`: which size of which tensor is ``B``, ``T``, ``C``, ``3C`` ...

Axis legend: ``B`` batch, ``T`` target / text positions (queries), ``S`` source positions (keys of the encoder
and of cross-attention), ``C`` model width, ``H`` query heads, ``K`` key/value heads, ``D`` head dim, ``F``
feed-forward width, ``V`` vocabulary (``Vs`` the source vocabulary where it differs). Derived widths:
``3C`` or ``(H+2K)·D`` (q | k | v packed), ``2C`` or ``2K·D`` (k | v packed), ``H·D`` (the heads side by side
where that is not ``C``), ``K·D``.

A name is given only where it is known, never guessed from a size alone:

* widths and head counts come from the model's configuration (GPT, Transformer) or from its
  ``MultiHeadAttention`` layers; a model with neither gets no names at all, only plain sizes ``(2, 8)``;
* the batch and the lengths come from the call (the first input's first axis; ``T`` / ``S`` its lengths);
* a size is named only at the place its axis has in attnkit's layouts: ``(B, T, C)`` activations,
  ``(B, H, T, D)`` heads, ``(B, T)`` ids and masks, ``(T,)`` positions, and lookups, whose output axes are
  their ids' axes plus the width (a position table looked up at ``(T,)`` positions is ``(T, C)``);
* a module whose role is known names its widths by that role (``qkv_proj`` returns ``3C``, ``w_in`` ``F``,
  ``lm_head`` ``V``), checked against the actual size; elsewhere the last axis of a ``(B, T, ·)`` activation
  is the first of ``C``, ``F``, ``V`` with that size.

A size that none of these rules names is printed as a bare number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
from torch import nn

from attnkit.modules.multi_head_attention import MultiHeadAttention

__all__ = ["AXIS_MEANINGS", "Role", "AxisNamer", "model_axes", "derived_widths", "module_roles", "shape_text"]

AXIS_MEANINGS = {
    "B": "batch",
    "S": "source positions (encoder; keys of cross-attention)",
    "T": "text / target positions (queries)",
    "C": "model width",
    "H": "query heads",
    "K": "key/value heads (grouped-query attention)",
    "D": "head width",
    "F": "feed-forward width",
    "V": "vocabulary",
    "Vs": "source vocabulary",
}


def model_axes(model: nn.Module) -> dict[str, int]:
    """Width axes of a model from its config: ``C``, ``H``, ``K``, ``D``, ``F``, ``V`` (those that apply).

    Works for :class:`~attnkit.models.gpt.GPT` and :class:`~attnkit.models.transformer.Transformer` (via
    ``model.config``), and for any module containing :class:`MultiHeadAttention` layers (from the first one).
    An empty dict means nothing is known about the model's axes.
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


@dataclass(frozen=True)
class Width:
    """A derived width: its label (``3C``), its size and what it holds."""

    label: str
    size: int
    meaning: str


def derived_widths(axes: Mapping[str, int]) -> dict[str, Width]:
    """The packed and concatenated widths of the attention projections, keyed by role.

    Roles: ``qkv`` (self-attention's packed projection), ``kv`` (cross-attention's packed keys and values),
    ``kd`` (separate key or value projection), ``hd`` (the heads side by side: ``q_proj``'s output,
    ``out_proj``'s input). Labels are as short as the model allows: ``3C`` when ``K = H`` and ``H·D = C``.
    """
    if not {"C", "H", "D"} <= set(axes):
        return {}
    C, H, D = axes["C"], axes["H"], axes["D"]
    K = axes.get("K", H)
    plain = K == H and H * D == C  # the usual case: every head width adds up to C
    hd = "C" if H * D == C else "H·D"
    if K == H:
        qkv, kv, kd = ("3C", "2C", "C") if plain else ("3H·D", "2H·D", "H·D")
    else:
        qkv, kv, kd = "(H+2K)·D", "2K·D", "K·D"
    each = "each H·D = C" if plain else "each H·D"
    return {
        "qkv": Width(qkv, (H + 2 * K) * D,
                     f"q | k | v packed side by side in qkv_proj's output ({each})" if K == H else
                     "q (H·D) | k (K·D) | v (K·D) packed side by side in qkv_proj's output"),
        "kv": Width(kv, 2 * K * D, "k | v packed side by side in kv_proj's output (cross-attention)"),
        "kd": Width(kd, K * D, "the key/value heads side by side"),
        "hd": Width(hd, H * D, "the H heads of D side by side (not C in this model)"),
    }


@dataclass(frozen=True)
class Role:
    """What a module's input and output widths are called; ``lookup``: its output axes are its ids' plus one."""

    width_in: str | None
    width_out: str | None
    lookup: bool = False


def module_roles(model: nn.Module, axes: Mapping[str, int]) -> dict[int, Role]:
    """``id(module) -> Role`` for the modules of ``model`` whose role is known from attnkit's layouts."""
    from attnkit.modules.embeddings import TokenEmbedding
    from attnkit.modules.feed_forward import FeedForward
    from attnkit.modules.learned_positions import LearnedPositionalEmbedding
    from attnkit.modules.norms import LayerNorm, RMSNorm
    from attnkit.modules.sinusoidal import SinusoidalPositionalEncoding

    if not axes:
        return {}
    w = {role: width.label for role, width in derived_widths(axes).items()}
    roles: dict[int, Role] = {}

    def put(module: nn.Module | None, width_in: str | None, width_out: str | None, lookup: bool = False) -> None:
        if module is not None:
            roles[id(module)] = Role(width_in, width_out, lookup)

    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            put(m, "C", "C")
            put(getattr(m, "qkv_proj", None), "C", w.get("qkv"))
            put(getattr(m, "q_proj", None), "C", w.get("hd"))
            put(getattr(m, "kv_proj", None), "C", w.get("kv"))
            put(getattr(m, "k_proj", None), "C", w.get("kd"))
            put(getattr(m, "v_proj", None), "C", w.get("kd"))
            put(m.out_proj, w.get("hd"), "C")
        elif isinstance(m, FeedForward):
            put(m, "C", "C")
            for up in (m.w_in, m.w_gate):
                put(up, "C", "F")
            put(m.w_out, "F", "C")
        elif isinstance(m, (TokenEmbedding, nn.Embedding, LearnedPositionalEmbedding, SinusoidalPositionalEncoding)):
            put(m, None, "C", lookup=True)
        elif isinstance(m, (RMSNorm, LayerNorm, nn.LayerNorm, nn.RMSNorm)):
            put(m, "C", "C")
    for head in ("lm_head", "generator"):  # GPT's and Transformer's output layers
        put(getattr(model, head, None), "C", "V")
    if "V" in axes:
        put(model, None, "V")
    return roles


def shape_text(dims: Sequence[int], names: Sequence[str | None]) -> str:
    """``B=2 T=11 3C=384``; bare numbers where unnamed; ``(2, 8)`` when no axis is named; ``scalar`` for ``()``."""
    if not dims:
        return "scalar"
    if all(n is None for n in names):
        return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"
    return " ".join(str(d) if n is None else f"{n}={d}" for n, d in zip(names, dims))


class AxisNamer:
    """Names the axes of tensors in one traced call (see the module docstring for the rules).

    Args:
        axes: the model's width axes (:func:`model_axes`); empty = nothing is named.
        batch: ``B``, the first input's first size.
        lengths: the length axes of the call, e.g. ``{"T": 11}`` or ``{"S": 12, "T": 7}``.
    """

    def __init__(self, axes: Mapping[str, int], batch: int, lengths: Mapping[str, int]):
        self.known = bool(axes)
        self.batch = batch
        self.lengths = dict(lengths)
        self.axes = dict(axes)
        self.derived = derived_widths(axes)
        self.sizes = {**axes, **{w.label: w.size for w in self.derived.values()}}
        self.value_widths = [n for n in ("C", "F", "V", "Vs") if n in axes]  # first match wins
        self.heads = [n for n in ("H", "K") if n in axes]

    def length_name(self, size: int, stream: str) -> str | None:
        """The length axis of ``size``: the stream's own (``S`` on the encoder side) first, then the other."""
        if self.lengths.get(stream) == size:
            return stream
        return next((n for n, v in self.lengths.items() if v == size), None)

    def width_name(self, size: int, role: str | None) -> str | None:
        """The role's label if its size matches; without a role the first of C, F, V with that size."""
        if role is not None:
            name = role if self.sizes.get(role) == size else None
        else:
            name = next((n for n in self.value_widths if self.axes[n] == size), None)
        return name

    def names(self, t: torch.Tensor, stream: str, *, width: str | None = None,
              lead: Sequence[str | None] | None = None) -> list[str | None]:
        """Axis names of ``t`` (``None`` = unnamed).

        ``width``: the role label of the last axis; ``lead``: the names of every axis but the last (lookups).
        """
        dims = [int(d) for d in t.shape]
        names: list[str | None] = [None] * len(dims)
        if not self.known or not dims:
            return names
        if lead is not None and len(lead) == len(dims) - 1:
            return [*lead, self.width_name(dims[-1], width)]
        floating = t.is_floating_point()
        if len(dims) == 4 and dims[0] == self.batch and dims[-1] == self.axes.get("D"):
            head = next((n for n in self.heads if self.axes[n] == dims[1]), None)
            if head is not None:
                return ["B", head, self.length_name(dims[2], stream), "D"]
        if len(dims) == 3 and dims[0] == self.batch:
            return ["B", self.length_name(dims[1], stream), self.width_name(dims[2], width) if floating else None]
        if len(dims) == 2 and dims[0] == self.batch and not floating:
            return ["B", self.length_name(dims[1], stream)]  # ids (B, T) or a key padding mask (B, S)
        if len(dims) == 1 and not floating:
            return [self.length_name(dims[0], stream)]  # positions (T,)
        return names

    def text(self, t: torch.Tensor, stream: str, **kwargs) -> str:
        return shape_text(list(t.shape), self.names(t, stream, **kwargs))

    def legend(self) -> dict[str, str]:
        """Every legend line this model may need, by the label it explains (``"axes"`` for the plain axes).

        :meth:`attnkit.viz.trace.Trace.legend_lines` keeps the lines whose label the shown rows use;
        ``"tables"`` explains ``(T, C)`` / ``(S, C)`` outputs.
        """
        if not self.known:
            return {}
        plain = dict.fromkeys(n for n in ("B", *self.lengths, *self.axes) if n in AXIS_MEANINGS)
        entries = {"axes": "; ".join(f"{n} {AXIS_MEANINGS[n]}" for n in plain)}
        for width in self.derived.values():
            if width.label not in self.axes:
                entries.setdefault(width.label, f"{width.label} = {width.size:,}: {width.meaning}")
        entries["tables"] = ("position tables: one row per position, the same for every sequence of the batch "
                             "(added by broadcasting)")
        return entries
