"""An interactive attention page: one self-contained HTML file (data and a small script inlined, no network).

Axis legend: ``L`` layers, ``H`` heads, ``T`` query positions, ``S`` key positions, ``k`` next-token candidates.

Three views of the same captured weights, chosen by tabs (or by the address: ``page.html#model``, ``#head``,
``#detail``):

- **model view**: every layer x head as a small heat map in one grid (layers down, heads across); a click on one
  opens it in the detail view;
- **head view**: all heads of one layer at once, one colour per head (each can be hidden or shown alone), lines from
  the chosen query token on the left to the key tokens on the right, thicker and more opaque the more weight they
  carry (target queries and source keys for a translator's cross-attention);
- **detail**: one head: hover or click a query token and every key token shows its weight, the row is lit in the
  heat map, and the model's top-k next-token predictions at that position are listed.

The reader picks the attention (for a translator: encoder, decoder or cross) and the layer for all three, and the
cell size (zoom). Tokens are labelled with the text they spell (:func:`~attnkit.viz.labels.text_labels`: a
character cut into several byte-level tokens is shown on the token that completes it); hovering one shows its id,
piece and bytes (:func:`~attnkit.viz.labels.token_titles`) in its ``title`` and under the controls. The numbers are
the ones :func:`~attnkit.viz.attention_maps.attention_maps` / :func:`~attnkit.viz.attention_maps.seq2seq_attention_maps`
capture with hooks and :func:`~attnkit.viz.predictions.next_token_predictions` computes; nothing is recomputed in
the browser.

    html = lm_attention_page(gpt, tokenizer, ids, top_k=5)
    html = mt_attention_page(translator, tokenizer, src_ids, [bos] + tgt_ids)
    write_page(html, "attention.html")

The page has no external reference (no CDN, no font, no request): it opens from a file, offline. The HTML, style
and script are in :mod:`~attnkit.viz.attention_page_template`, with the page's DOM contract.
"""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from .attention_maps import attention_maps, seq2seq_attention_maps
from .attention_page_template import DEFAULT_CELL, TABS, TEMPLATE
from .labels import text_labels, token_labels, token_titles
from .predictions import next_token_predictions

__all__ = ["lm_attention_page", "mt_attention_page", "render_attention_page", "write_page", "check_page_path", "TABS",
           "MAX_PAGE_WEIGHTS"]

# Weights one page may hold: about 7 characters each in its JSON, so at most ~235 MB of HTML (a browser's string
# limit, ~537 million characters in Chromium, makes a page of ~77 million weights open empty) and ~2.5 GB of Python
# lists while it is written.
MAX_PAGE_WEIGHTS = 1 << 25

_VIEW_TITLES = {"self": "causal self-attention", "encoder": "encoder self-attention",
                "decoder": "decoder self-attention (causal)", "cross": "cross-attention (target → source)"}


def _check_page_size(parts: Sequence[tuple[str, int, int, int, int]], most_tokens: int | None = None) -> None:
    """``ValueError`` (before the model runs) when the views' weights, ``(name, L, H, T, S)`` each, are more than
    :data:`MAX_PAGE_WEIGHTS` together; ``most_tokens``: the longest text that fits, named in the message."""
    total = sum(L * H * T * S for _, L, H, T, S in parts)
    if total <= MAX_PAGE_WEIGHTS:
        return
    sizes = " + ".join(f"{name} {L} layers x {H} heads x {T} x {S}" for name, L, H, T, S in parts)
    fits = f"a text of at most {most_tokens} tokens" if most_tokens else "shorter sentences"
    raise ValueError(f"the page would hold {total:,} attention weights ({sizes}), expected at most "
                     f"{MAX_PAGE_WEIGHTS:,} (a larger page is more than a browser opens): give {fits}, or draw one "
                     f"layer as a PNG (without --html)")


def _heads(layer: nn.Module, attr: str) -> int:
    """Query heads of ``layer.<attr>`` (a MultiHeadAttention), 1 where that is not readable."""
    return int(getattr(getattr(layer, attr, None), "num_heads", 1))


def _weights(maps: Sequence[torch.Tensor]) -> list:
    """``[layer][head][query][key]`` rounded to 4 decimals (plenty for colour and text, a third of the bytes).

    Rounded in float64: a float32 0.5664 is 0.5663999915... as a Python float and would be written out in full.
    """
    return [torch.round(m.double(), decimals=4).tolist() for m in maps]


def _side(tokenizer: Any, ids: Sequence[int]) -> dict:
    """The labels and hover texts of one side's tokens (a running text: see :func:`text_labels`)."""
    return {"labels": text_labels(tokenizer, ids), "titles": token_titles(tokenizer, ids)}


def _predictions(probs: torch.Tensor, top: torch.Tensor, tokenizer: Any, ids: Sequence[int]) -> list[dict]:
    """Per position: the top-k candidates (each decoded on its own), their hover texts and ids, and the real next."""
    rows = []
    for t in range(top.shape[0]):
        cand = top[t].tolist()
        nxt = ids[t + 1] if t + 1 < len(ids) else None
        rows.append({"top": [[lab, round(float(p), 4)] for lab, p in zip(token_labels(tokenizer, cand),
                                                                         probs[t].tolist())],
                     "top_titles": token_titles(tokenizer, cand), "top_ids": cand,
                     "next": None if nxt is None else token_labels(tokenizer, [nxt])[0], "next_id": nxt})
    return rows


def _view(name: str, queries: dict, keys: dict, query_side: str, key_side: str, predicts: bool,
          maps: Sequence[torch.Tensor]) -> dict:
    return {"name": name, "title": _VIEW_TITLES[name], "queries": queries["labels"], "keys": keys["labels"],
            "query_titles": queries["titles"], "key_titles": keys["titles"], "query_side": query_side,
            "key_side": key_side, "predicts": predicts, "weights": _weights(maps)}


def lm_attention_page(model: nn.Module, tokenizer: Any, ids: Sequence[int], *, top_k: int = 5,
                      title: str = "", layer: int | None = None, head: int = 0, tab: str = "model") -> str:
    """The page for a decoder-only model on one sequence ``ids``: causal self-attention of every layer and head.

    ``layer``/``head`` are the ones the head view and the detail open on (and lit in the model view); ``tab`` the
    view shown first (one of :data:`TABS`).

    Shape:
        ids ``(T,)``; the page holds ``L x (H, T, T)`` weights and ``(T, k)`` predictions.
    """
    from attnkit.models.gpt import GPT

    ids = [int(i) for i in ids]
    if isinstance(model, GPT) and len(model.blocks):  # another model: attention_maps says what it expects
        L, H = len(model.blocks), _heads(model.blocks[0], "attn")
        _check_page_size([("self", L, H, len(ids), len(ids))], most_tokens=int((MAX_PAGE_WEIGHTS / (L * H)) ** 0.5))
    maps = attention_maps(model, ids)  # L x (H, T, T)
    probs, top = next_token_predictions(model, ids, top_k=top_k,  # (T, k) each
                                        vocab_size=getattr(tokenizer, "vocab_size", None))
    text = _side(tokenizer, ids)
    data = {"title": title or "attention", "views": [_view("self", text, text, "text", "text", True, maps)],
            "predictions": _predictions(probs, top, tokenizer, ids), "top_k": top_k}
    return render_attention_page(data, layer=layer, head=head, tab=tab)


def mt_attention_page(model: nn.Module, tokenizer: Any, src: Sequence[int], tgt: Sequence[int], *, top_k: int = 5,
                      title: str = "", view: str = "cross", layer: int | None = None, head: int = 0,
                      tab: str = "model") -> str:
    """The page for an encoder-decoder on one sentence pair: encoder, decoder and cross attention.

    ``tgt`` is the decoder input (``<bos>`` + target). Predictions are the decoder's, at target positions.

    Shape:
        src ``(S,)``, tgt ``(T,)``; the page holds encoder ``L x (H, S, S)``, decoder ``L x (H, T, T)``, cross
        ``L x (H, T, S)`` weights and ``(T, k)`` predictions.
    """
    from attnkit.models.transformer import Transformer

    src, tgt = [int(i) for i in src], [int(i) for i in tgt]
    if isinstance(model, Transformer):  # another model: seq2seq_attention_maps says what it expects
        enc, dec = list(model.core.encoder.layers), list(model.core.decoder.layers)
        S, T = len(src), len(tgt)
        _check_page_size([("encoder", len(enc), _heads(enc[0], "self_attn") if enc else 1, S, S),
                          ("decoder", len(dec), _heads(dec[0], "self_attn") if dec else 1, T, T),
                          ("cross", len(dec), _heads(dec[0], "cross_attn") if dec else 1, T, S)])
    maps = seq2seq_attention_maps(model, src, tgt)
    probs, top = next_token_predictions(model, tgt, src=src, top_k=top_k,
                                        vocab_size=getattr(tokenizer, "vocab_size", None))
    source, target = _side(tokenizer, src), _side(tokenizer, tgt)
    views = [_view("encoder", source, source, "source", "source", False, maps.encoder),
             _view("decoder", target, target, "target", "target", True, maps.decoder),
             _view("cross", target, source, "target", "source", True, maps.cross)]
    data = {"title": title or "attention", "views": views, "predictions": _predictions(probs, top, tokenizer, tgt),
            "top_k": top_k}
    return render_attention_page(data, view=view, layer=layer, head=head, tab=tab)


def _check_view(v: dict, n_predictions: int | None) -> None:
    """Every layer has the same heads, every head a ``(T, S)`` matrix matching the labels (ValueError otherwise)."""
    name, T, S = v.get("name"), len(v["queries"]), len(v["keys"])
    W = v.get("weights") or []
    if not W or not W[0]:
        raise ValueError(f"view {name!r} needs weights [layer][head][query][key] with >= 1 layer and head, "
                         f"got {len(W)} layers")
    H = len(W[0])
    for l, heads in enumerate(W):
        if len(heads) != H:
            raise ValueError(f"view {name!r}: every layer must have {H} heads, layer {l} has {len(heads)}")
        for h, rows in enumerate(heads):
            if len(rows) != T or any(len(r) != S for r in rows):
                got = (len(rows), sorted({len(r) for r in rows}))
                raise ValueError(f"view {name!r}: layer {l} head {h} must be (T, S) = ({T}, {S}) like its labels, "
                                 f"got {got[0]} rows of lengths {got[1]}")
    for key, want in (("query_titles", T), ("key_titles", S)):
        if key in v and len(v[key]) != want:
            raise ValueError(f"view {name!r}: {key} must have {want} entries, got {len(v[key])}")
    if v.get("predicts") and n_predictions is not None and n_predictions != T:
        raise ValueError(f"view {name!r} predicts at its {T} query positions, but there are {n_predictions} "
                         f"prediction rows")


def render_attention_page(data: dict, *, view: str | None = None, layer: int | None = None, head: int = 0,
                          tab: str = "model") -> str:
    """The HTML text for ``data`` (``{"title", "views": [...], "predictions": [...], "top_k"}``).

    A view is ``{"name", "title", "queries", "keys", "weights"}`` (labels ``T`` and ``S``, weights
    ``L x H x T x S``), optionally with ``query_titles``/``key_titles`` (hover texts), ``query_side``/``key_side``
    (whose tokens: ``text``, ``source``, ``target``) and ``predicts``. A prediction row is ``{"top": [[label, p],
    ...], "next"}``, optionally with ``top_titles``, ``top_ids`` and ``next_id``.

    ``view``/``layer``/``head`` choose what is selected first (default: the first view, the last layer, head 0),
    ``tab`` the view shown first; they are checked against the data (ValueError naming the valid range), and so
    are the title (a string) and the numbers (finite: NaN is no JSON, the page would open empty).
    """
    # whose tokens the queries and keys are ("text" for a language model; "source"/"target" for a translator)
    views = [{"query_side": "text", "key_side": "text", **v} for v in data.get("views") or []]
    if not views:
        raise ValueError("the page needs at least one attention view, got none")
    predictions = data.get("predictions")
    if predictions is None and any(v.get("predicts") for v in views):
        raise ValueError("a view that predicts needs data['predictions'] (one row per query position), got none")
    for v in views:
        _check_view(v, None if predictions is None else len(predictions))
    names = [v["name"] for v in views]
    view = names[0] if view is None else view
    if view not in names:
        raise ValueError(f"view must be one of {names}, got {view!r}")
    if tab not in TABS:
        raise ValueError(f"tab must be one of {list(TABS)}, got {tab!r}")
    v = views[names.index(view)]
    L, H = len(v["weights"]), len(v["weights"][0])
    layer = L - 1 if layer is None else layer
    if not 0 <= layer < L:
        raise ValueError(f"layer must be in [0, {L}) (the model has {L} layers), got {layer}")
    if not 0 <= head < H:
        raise ValueError(f"head must be in [0, {H}) (the layer has {H} heads), got {head}")
    title = data.get("title", "attention")
    if not isinstance(title, str):
        raise ValueError(f"data['title'] must be a string, got {type(title).__name__}")
    start = {"view": view, "layer": layer, "head": head, "tab": tab, "cell": DEFAULT_CELL}
    try:  # NaN or inf would be written as such, which is no JSON: the browser would show an empty page
        payload = json.dumps({**data, "views": views, "start": start}, ensure_ascii=False, separators=(",", ":"),
                             allow_nan=False)
    except ValueError:
        raise ValueError("the page's weights and probabilities must be finite numbers, got NaN or inf") from None
    # "<" only occurs inside JSON strings, where \u003c is the same character: no token can end the script
    # element ("</script>") or open a comment in it
    payload = payload.replace("<", "\\u003c")
    fill = {"TITLE": html_lib.escape(title), "DATA": payload}
    return re.sub(r"__(TITLE|DATA)__", lambda m: fill[m.group(1)], TEMPLATE)  # one pass: no text is filled twice


def _is_page(path: Path) -> bool:
    with open(path, "rb") as f:
        return b'<script id="attention-data" type="application/json">' in f.read(1 << 20)


def check_page_path(path: str | Path, flag: str = "--html") -> Path:
    """``ValueError`` (before any work) unless ``path`` ends in .html and may be written: not a folder, not a file
    of a training run, and if it exists an earlier attention page, which is replaced."""
    from attnkit.checkpoints.runs import check_output_file

    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"{flag} must name an .html file, got {str(path)!r}")
    return check_output_file(path, flag, replaces=_is_page, may_replace="an earlier attention page")


def write_page(html: str, path: str | Path) -> Path:
    """Write the page atomically (temporary name, then rename) and return its path. ``path`` must end in .html
    and may replace only an earlier attention page (:func:`check_page_path`)."""
    from attnkit.files import write_text_atomic

    path = check_page_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, html)
    return path
