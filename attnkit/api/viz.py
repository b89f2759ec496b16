"""Figures of what is inside a Transformer, written as PNG files (``attnkit viz``), and the interactive attention
page (``attnkit viz attention --html``).

    from attnkit.api import draw_attention, ModelText
    draw_attention(ModelText(ckpt="runs/char", text="ROMEO:"), out="attn.png")
    draw_attention(ModelText(ckpt="runs/de-en", src="Das Haus ist groß."), attn="cross", html="attention.html")

Each function writes one file, creating its folder, and returns its path. The drawing itself is
:mod:`attnkit.viz`; here the figures get their data, labels and titles.

Axis legend (of the figures): ``T`` query positions, ``S`` key positions, ``H`` heads, ``B`` batch rows, ``k``
next-token candidates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from .inputs import ModelText, is_seq2seq, lm_ids, load_inspected, mt_ids
from .options import Log, default_log

__all__ = ["ATTENTION_KINDS", "draw_positions", "draw_mask", "draw_params", "draw_attention", "draw_predictions"]

ATTENTION_KINDS = ("self", "encoder", "decoder", "cross")


def draw_positions(out: str | Path, *, dim: int = 128, length: int = 100, dims: Sequence[int] | None = None,
                   base: float = 10000.0, dpi: int = 100) -> Path:
    """The sinusoidal position table as a heatmap (positions x channels) beside a few channels as curves."""
    from attnkit.checks import check_int
    from attnkit.viz.plots import check_figure_path, plot_positional_encoding, save_figure

    check_figure_path(out, dpi)
    check_int("--len", length, minimum=1)  # the flags' names (the figure checks them again as seq_len and dim)
    check_int("--dim", dim, minimum=1)
    fig = plot_positional_encoding(length, dim, dims=None if dims is None else list(dims), base=base)
    return save_figure(fig, out, dpi=dpi)


def draw_mask(out: str | Path, *, kind: str, length: int = 8, key_length: int | None = None,
              masked_len: int | None = None, lengths: Sequence[int] | None = None, dpi: int = 100) -> Path:
    """A boolean mask in torch.nn polarity as a grid: ``causal`` (bottom-right aligned when ``key_length`` >
    ``length``: a KV cache), ``banded`` (seed 000's ``generate_mask_mat``, ``masked_len``) or ``padding`` (from
    ``lengths``); ``masked_len`` and ``lengths`` are refused with another kind."""
    from attnkit.checks import is_int
    from attnkit.viz.plots import (check_figure_path, check_pixels, make_mask, mask_figure_inches, plot_mask,
                                   save_figure)

    check_figure_path(out, dpi)
    for name, value, needs in (("masked-len", masked_len, "banded"), ("lengths", lengths, "padding")):
        if value is not None and kind != needs:  # it would draw the mask without it
            raise ValueError(f"--{name} is for --kind {needs}, got it with --kind {kind}")
    # the figure's size before the mask is built (rows x cols cells; make_mask checks the values themselves)
    rows = len(lengths) if kind == "padding" and lengths else length
    cols = (key_length if key_length is not None and kind != "banded"  # banded: (len, len), --key-len unread
            else max(lengths) if kind == "padding" and lengths else length)
    if is_int(rows) and is_int(cols) and rows >= 1 and cols >= 1:
        check_pixels(*mask_figure_inches(rows, cols), dpi, what=f"{rows} x {cols} mask")
    if kind == "padding":
        if lengths is None:
            raise ValueError("--kind padding needs --lengths, e.g. --lengths 5,3,7")
        if is_int(key_length) and all(is_int(n) for n in lengths) and lengths and key_length < max(lengths):
            raise ValueError(f"--key-len must be >= the longest of --lengths, {max(lengths)}, got {key_length}")
        mask = make_mask("padding", lengths=list(lengths), key_length=key_length)
        title = f"key padding mask, lengths {list(lengths)}  (B, S) = {tuple(mask.shape)}"
        fig = plot_mask(mask, title=title, xlabel="key position j", ylabel="batch row b")
    elif kind == "causal":
        mask = make_mask("causal", length=length, key_length=key_length)
        T, S = mask.shape
        title = f"causal mask (T, S) = ({T}, {S})" + (f": queries see the {S - T} earlier keys" if S > T else "")
        fig = plot_mask(mask, title=title)
    elif kind == "banded":
        mask = make_mask("banded", length=length, masked_len=masked_len)
        m = length - 1 if masked_len is None else masked_len
        fig = plot_mask(mask, title=f"generate_mask_mat({length}, {m}): masked where {length} - j + i <= {m}")
    else:
        raise ValueError(f"kind must be one of ['causal', 'banded', 'padding'], got {kind!r}")
    return save_figure(fig, out, dpi=dpi)


def draw_params(out: str | Path, preset: str, *, depth: int = 1, dpi: int = 100) -> Path:
    """Where a preset's parameters are: one bar per module (built on the meta device: no memory)."""
    from attnkit.models.presets import get_preset
    from attnkit.viz.plots import check_figure_path, plot_parameters, save_figure

    check_figure_path(out, dpi)
    config = get_preset(preset)
    fig = plot_parameters(config, depth=depth, title=f"{preset} ({type(config).__name__})")
    return save_figure(fig, out, dpi=dpi)


def _attention_page(inputs: ModelText, loaded: Any, html: Path, kind: str | None, layer: int | None,
                    head: int | None, top_k: int, log: Log) -> Path:
    from attnkit.viz.attention_page import lm_attention_page, mt_attention_page, write_page

    model, tokenizer = loaded.model, loaded.tokenizer
    title = f"{inputs.name}: attention"
    if is_seq2seq(model):
        src, tgt = mt_ids(inputs, model, tokenizer, log)
        page = mt_attention_page(model, tokenizer, src, tgt, top_k=top_k, title=title, view=kind, layer=layer,
                                 head=head or 0)
    else:
        ids = lm_ids(inputs, loaded, log)
        page = lm_attention_page(model, tokenizer, ids, top_k=top_k, title=title, layer=layer, head=head or 0)
    return write_page(page, html)


def draw_attention(inputs: ModelText, *, out: str | Path = "attention.png", attn: str | None = None,
                   layer: int | None = None, head: int | None = None, html: str | Path | None = None,
                   top_k: int | None = None, dpi: int = 100, log: Log | None = None) -> Path:
    """One layer's attention weights, a panel per head (or one ``head``), tokens on the axes; with ``html`` the
    interactive page instead of the PNG. ``attn``: ``self`` for a GPT; ``encoder``, ``decoder`` or ``cross``
    (default) for a translator. ``layer`` defaults to the last. ``top_k``: the page's next-token candidates per
    position (default 5); refused without ``html`` (a PNG shows none)."""
    from attnkit.viz.attention_maps import attention_maps, select_attention, seq2seq_attention_maps
    from attnkit.viz.labels import text_labels
    from attnkit.viz.attention_page import check_page_path
    from attnkit.viz.plots import check_figure_path, plot_attention, save_figure

    log = default_log(log)
    if attn not in (None, *ATTENTION_KINDS):
        raise ValueError(f"attn must be one of {list(ATTENTION_KINDS)} or None, got {attn!r}")
    if html is None:
        if top_k is not None:  # it would be ignored
            raise ValueError(f"--top-k is for --html (the page's next-token candidates; the PNG shows none), got "
                             f"--top-k {top_k} without --html")
        check_figure_path(out, dpi)  # before the model is loaded
    else:
        check_page_path(html)
    loaded = load_inspected(inputs)
    model, tokenizer = loaded.model, loaded.tokenizer
    if is_seq2seq(model):
        kind = attn or "cross"
        if kind == "self":
            raise ValueError("an encoder-decoder has no plain 'self' attention: use --attn encoder, decoder or cross")
    elif attn not in (None, "self", "decoder"):
        raise ValueError(f"a decoder-only model has causal self-attention only; got --attn {attn}")
    if html is not None:
        return _attention_page(inputs, loaded, Path(html), attn or "cross", layer, head,
                               5 if top_k is None else top_k, log)
    if is_seq2seq(model):
        src, tgt = mt_ids(inputs, model, tokenizer, log)
        maps = seq2seq_attention_maps(model, src, tgt).kind(kind)
        src_labels, tgt_labels = text_labels(tokenizer, src), text_labels(tokenizer, tgt)
        q_labels, k_labels = {"encoder": (src_labels, src_labels), "decoder": (tgt_labels, tgt_labels),
                              "cross": (tgt_labels, src_labels)}[kind]
        what = {"encoder": "encoder self-attention", "decoder": "decoder self-attention (causal)",
                "cross": "cross-attention (target queries, source keys)"}[kind]
    else:
        ids = lm_ids(inputs, loaded, log)
        maps = attention_maps(model, ids)
        q_labels = k_labels = text_labels(tokenizer, ids)
        what = "causal self-attention"
    weights = select_attention(maps, layer=layer, head=head)  # validates the ranges
    shown = len(maps) - 1 if layer is None else layer
    if max(weights.shape[-2:]) > 64:
        log(f"note: {max(weights.shape[-2:])} tokens: token labels are left off (at most 64 are drawn)")
    title = f"{inputs.name}: {what}, layer {shown} of 0..{len(maps) - 1}"
    panels = None if head is None else [f"head {head}"]
    fig = plot_attention(weights, query_labels=q_labels, key_labels=k_labels, title=title, panel_titles=panels)
    return save_figure(fig, out, dpi=dpi)


def draw_predictions(inputs: ModelText, *, out: str | Path = "predictions.png", top_k: int = 5, dpi: int = 100,
                     log: Log | None = None) -> Path:
    """The ``top_k`` most likely next tokens at every position of the text, the one that really follows outlined."""
    import torch

    from attnkit.viz.labels import text_labels, token_labels
    from attnkit.viz.plots import check_figure_path, plot_predictions, save_figure
    from attnkit.viz.predictions import next_token_predictions

    log = default_log(log)
    check_figure_path(out, dpi)  # before the model is loaded
    loaded = load_inspected(inputs)
    model, tokenizer = loaded.model, loaded.tokenizer
    if is_seq2seq(model):
        src, ids = mt_ids(inputs, model, tokenizer, log)
        probs, top = next_token_predictions(model, ids, src=src, top_k=top_k, vocab_size=tokenizer.vocab_size)
    else:
        ids = lm_ids(inputs, loaded, log)
        probs, top = next_token_predictions(model, ids, top_k=top_k, vocab_size=tokenizer.vocab_size)
    nxt = torch.tensor(ids[1:] + [-1])  # (T,) the token that really follows each position (-1: none yet)
    hits = top == nxt[:, None]  # (T, k)
    candidates = [token_labels(tokenizer, row) for row in top.tolist()]
    title = f"{inputs.name}: next-token predictions (top {top_k})"
    fig = plot_predictions(probs, candidates, context_labels=text_labels(tokenizer, ids), hits=hits, title=title)
    return save_figure(fig, out, dpi=dpi)
