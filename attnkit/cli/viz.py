"""``attnkit viz``: figures of what is inside a Transformer (:mod:`attnkit.api.viz`, drawn by :mod:`attnkit.viz`).

    attnkit viz positions --dim 128 --len 100 --out pe.png          (also: mask, params)
    attnkit viz attention --ckpt runs/char --text "ROMEO:" --layer 0 --out attn.png   (--html: the page)
    attnkit viz predict --ckpt runs/de-en --src "Das Haus ist groß." --top-k 5 --out pred.png

Each command writes one PNG and prints its path on stdout (notes, such as the translation a cross-attention map
was computed for, go to stderr). Axis legend of the figures: ``T`` queries, ``S`` keys, ``H`` heads.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnkit import api
from attnkit.api.viz import ATTENTION_KINDS as _ATTN_KINDS
from attnkit.cli.flags import add_device_flags, add_model_source, command_group, options_from


def register(sub: argparse._SubParsersAction) -> None:
    viz = command_group(sub, "viz", help="draw figures: positional encodings, masks, attention maps, predictions, "
                                         "parameters", metavar="FIGURE",
                        description="Draw a figure of a Transformer's insides and write it as a PNG (its path is "
                                    "printed). One sub-command per figure; each has --help.")

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
                       description="Draw a mask in torch.nn polarity (True = may not attend). causal: look-ahead, "
                                   "bottom-right aligned when --key-len > --len (a KV cache); banded: seed 000's "
                                   "generate_mask_mat(len, masked_len); padding: a (B, S) key padding mask.")
    q.add_argument("--kind", choices=("causal", "banded", "padding"), required=True, help="which mask")
    q.add_argument("--len", dest="length", type=int, default=8, help="query length T (causal, banded; default 8)")
    q.add_argument("--key-len", type=int, help="key length S (causal: default T; padding: default the longest length)")
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
                   help="which attention: self (GPT, the default), encoder / decoder self-attention or cross (default)")
    q.add_argument("--layer", type=int, default=None, help="layer index from 0 (default: the last layer)")
    q.add_argument("--head", type=int, default=None, help="draw only this head (default: all heads in a grid)")
    q.add_argument("--html", type=Path, default=None, metavar="PAGE.html", help="write an interactive page instead of "
                   "the PNG: one self-contained HTML file (no network) with a model view (every layer x head as a "
                   "small heat map; click one to open it), a head view (all heads of a layer in colours, lines from "
                   "the chosen token) and a detail view (one head, the key weights of the token under the mouse, the "
                   "top-k next-token predictions); --layer/--head/--attn choose what it shows first")
    q.add_argument("--top-k", type=int, default=None, help="--html: next-token candidates per position (default 5)")
    _add_output_args(q, "attention.png")
    q.set_defaults(func=run_attention)

    q = viz.add_parser("predict", help="the k most likely next tokens at every position of a text",
                       description="Token-by-token prediction: the model's top-k next-token candidates at every "
                                   "position, with their probabilities; the real next token is outlined.")
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
    add_model_source(q)
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


def _printed(path: Path) -> int:
    print(path)
    return 0


def run_positions(args: argparse.Namespace) -> int:
    dims = None if args.dims is None else _int_list(args.dims, "--dims")
    return _printed(api.draw_positions(args.out, dim=args.dim, length=args.length, dims=dims, base=args.base,
                                       dpi=args.dpi))


def run_mask(args: argparse.Namespace) -> int:
    lengths = None if args.lengths is None else _int_list(args.lengths, "--lengths")
    return _printed(api.draw_mask(args.out, kind=args.kind, length=args.length, key_length=args.key_len,
                                  masked_len=args.masked_len, lengths=lengths, dpi=args.dpi))


def run_params(args: argparse.Namespace) -> int:
    return _printed(api.draw_params(args.out, args.preset, depth=args.depth, dpi=args.dpi))


def run_attention(args: argparse.Namespace) -> int:
    return _printed(api.draw_attention(options_from(api.ModelText, args), out=args.out, attn=args.attn,
                                       layer=args.layer, head=args.head, html=args.html, top_k=args.top_k,
                                       dpi=args.dpi))


def run_predict(args: argparse.Namespace) -> int:
    return _printed(api.draw_predictions(options_from(api.ModelText, args), out=args.out, top_k=args.top_k,
                                         dpi=args.dpi))
