"""An interactive attention page: one self-contained HTML file (data and a small script inlined, no network).

Axis legend: ``L`` layers, ``H`` heads, ``T`` query positions, ``S`` key positions, ``k`` next-token candidates.

The reader picks the attention (for a translator: encoder, decoder or cross), the layer and the head, and
hovers (or clicks) a query token: every key token then shows the weight that query gives it, the row is
highlighted in the heatmap, and the model's top-k next-token predictions at that position are listed. The
numbers are the ones :func:`~attnkit.viz.attention_maps.attention_maps` /
:func:`~attnkit.viz.attention_maps.seq2seq_attention_maps` capture with hooks and
:func:`~attnkit.viz.predictions.next_token_predictions` computes; nothing is recomputed in the browser.

    html = lm_attention_page(gpt, tokenizer, ids, top_k=5)
    html = mt_attention_page(translator, tokenizer, src_ids, [bos] + tgt_ids)
    write_page(html, "attention.html")

The page has no external reference (no CDN, no font, no request): it opens from a file, offline.

DOM contract (what tests and scripts rely on): ``button.view[data-view=...]`` choose the attention,
``select#layer`` the layer, ``button.head[data-head=h]`` the head (the chosen one has class ``active``);
``.query[data-i=i]`` are the query tokens and ``.key[data-j=j]`` the key tokens, each key carrying the shown
weight in ``data-weight`` (and as text); ``#query-side`` / ``#key-side`` name whose tokens they are (``text``,
``source``, ``target``); the heatmap ``#heat`` has a header row of key labels (``th.col``) and one ``tr[data-i]``
per query; ``#status`` says ``view layer l head h query i``; ``#predictions`` lists ``tr.pred`` rows with
``.pred-token`` and ``.pred-prob``.
"""

from __future__ import annotations

import html as html_lib
import json
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from .attention_maps import attention_maps, seq2seq_attention_maps
from .labels import token_labels
from .predictions import next_token_predictions

__all__ = ["lm_attention_page", "mt_attention_page", "render_attention_page", "write_page"]

_VIEW_TITLES = {"self": "causal self-attention", "encoder": "encoder self-attention",
                "decoder": "decoder self-attention (causal)", "cross": "cross-attention (target → source)"}


def _weights(maps: Sequence[torch.Tensor]) -> list:
    """``[layer][head][query][key]`` rounded to 4 decimals (plenty for colour and text, a third of the bytes).

    Rounded in float64: a float32 0.5664 is 0.5663999915... as a Python float and would be written out in full.
    """
    return [torch.round(m.double(), decimals=4).tolist() for m in maps]


def _predictions(probs: torch.Tensor, top: torch.Tensor, tokenizer: Any, ids: Sequence[int]) -> list[dict]:
    rows = []
    for t in range(top.shape[0]):
        labels = token_labels(tokenizer, top[t].tolist())
        nxt = token_labels(tokenizer, [ids[t + 1]])[0] if t + 1 < len(ids) else None
        rows.append({"top": [[lab, round(float(p), 4)] for lab, p in zip(labels, probs[t].tolist())],
                     "next": nxt})
    return rows


def lm_attention_page(model: nn.Module, tokenizer: Any, ids: Sequence[int], *, top_k: int = 5,
                      title: str = "", layer: int | None = None, head: int = 0) -> str:
    """The page for a decoder-only model on one sequence ``ids``: causal self-attention of every layer and head.

    Shape:
        ids ``(T,)``; the page holds ``L x (H, T, T)`` weights and ``(T, k)`` predictions.
    """
    ids = [int(i) for i in ids]
    maps = attention_maps(model, ids)  # L x (H, T, T)
    probs, top = next_token_predictions(model, ids, top_k=top_k)  # (T, k) each
    labels = token_labels(tokenizer, ids)
    data = {"title": title or "attention", "views": [
        {"name": "self", "title": _VIEW_TITLES["self"], "queries": labels, "keys": labels,
         "query_side": "text", "key_side": "text", "predicts": True, "weights": _weights(maps)}],
        "predictions": _predictions(probs, top, tokenizer, ids), "top_k": top_k}
    return render_attention_page(data, layer=layer, head=head)


def mt_attention_page(model: nn.Module, tokenizer: Any, src: Sequence[int], tgt: Sequence[int], *, top_k: int = 5,
                      title: str = "", view: str = "cross", layer: int | None = None, head: int = 0) -> str:
    """The page for an encoder-decoder on one sentence pair: encoder, decoder and cross attention.

    ``tgt`` is the decoder input (``<bos>`` + target). Predictions are the decoder's, at target positions.

    Shape:
        src ``(S,)``, tgt ``(T,)``; the page holds encoder ``L x (H, S, S)``, decoder ``L x (H, T, T)``, cross
        ``L x (H, T, S)`` weights and ``(T, k)`` predictions.
    """
    src, tgt = [int(i) for i in src], [int(i) for i in tgt]
    maps = seq2seq_attention_maps(model, src, tgt)
    probs, top = next_token_predictions(model, tgt, src=src, top_k=top_k)
    s_labels, t_labels = token_labels(tokenizer, src), token_labels(tokenizer, tgt)
    views = [
        {"name": "encoder", "title": _VIEW_TITLES["encoder"], "queries": s_labels, "keys": s_labels,
         "query_side": "source", "key_side": "source", "predicts": False, "weights": _weights(maps.encoder)},
        {"name": "decoder", "title": _VIEW_TITLES["decoder"], "queries": t_labels, "keys": t_labels,
         "query_side": "target", "key_side": "target", "predicts": True, "weights": _weights(maps.decoder)},
        {"name": "cross", "title": _VIEW_TITLES["cross"], "queries": t_labels, "keys": s_labels,
         "query_side": "target", "key_side": "source", "predicts": True, "weights": _weights(maps.cross)},
    ]
    data = {"title": title or "attention", "views": views, "predictions": _predictions(probs, top, tokenizer, tgt),
            "top_k": top_k}
    return render_attention_page(data, view=view, layer=layer, head=head)


def render_attention_page(data: dict, *, view: str | None = None, layer: int | None = None, head: int = 0) -> str:
    """The HTML text for ``data`` (``{"title", "views": [...], "predictions": [...], "top_k"}``).

    ``view``/``layer``/``head`` choose what is shown first (default: the first view, the last layer, head 0);
    they are checked against the data (ValueError naming the valid range).
    """
    # whose tokens the queries and keys are ("text" for a language model; "source"/"target" for a translator)
    views = [{"query_side": "text", "key_side": "text", **v} for v in data.get("views") or []]
    if not views:
        raise ValueError("the page needs at least one attention view, got none")
    names = [v["name"] for v in views]
    view = names[0] if view is None else view
    if view not in names:
        raise ValueError(f"view must be one of {names}, got {view!r}")
    v = views[names.index(view)]
    L, H = len(v["weights"]), len(v["weights"][0])
    layer = L - 1 if layer is None else layer
    if not 0 <= layer < L:
        raise ValueError(f"layer must be in [0, {L - 1}], got {layer}")
    if not 0 <= head < H:
        raise ValueError(f"head must be in [0, {H - 1}], got {head}")
    start = {"view": view, "layer": layer, "head": head}
    payload = json.dumps({**data, "views": views, "start": start}, ensure_ascii=False, separators=(",", ":"))
    payload = payload.replace("</", "<\\/")  # a token "</script>" must not end the script element
    return (_TEMPLATE.replace("__TITLE__", html_lib.escape(data.get("title", "attention")))
            .replace("__DATA__", payload))


def write_page(html: str, path: str | Path) -> Path:
    """Write the page atomically (temporary name, then rename) and return its path. ``path`` must end in .html."""
    from attnkit.checkpoints.atomic import write_text_atomic

    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"the page is written as .html, got {path.name!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, html)
    return path


_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>__TITLE__</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.2em; color: #222; }
h1 { font-size: 1.2em; margin: 0 0 .6em 0; }
.bar { margin: .4em 0; display: flex; flex-wrap: wrap; gap: .3em; align-items: center; }
.bar .label { width: 5em; color: #555; }
button { font: inherit; padding: .15em .6em; border: 1px solid #999; background: #f5f5f5; border-radius: 3px;
         cursor: pointer; }
button.active { background: #2a5db0; color: white; border-color: #2a5db0; }
.tokens { display: flex; flex-wrap: wrap; gap: 3px; margin: .3em 0 .8em 0; }
.tok { font-family: ui-monospace, monospace; padding: .15em .35em; border: 1px solid #ccc; border-radius: 3px;
       white-space: pre; text-align: center; min-width: 1.2em; }
.query { cursor: pointer; }
.query.active { outline: 2px solid #d2452d; }
.key .w { display: block; font-size: .7em; color: #333; }
#main { display: flex; gap: 2em; align-items: flex-start; flex-wrap: wrap; }
table.heat { border-collapse: collapse; margin-top: 6px; }
table.heat td { width: 18px; height: 18px; padding: 0; border: 1px solid #fff; }
table.heat tr.active th { color: #d2452d; font-weight: bold; }
table.heat tr.active td { border-color: #d2452d; }
table.heat th { font: .7em ui-monospace, monospace; font-weight: normal; text-align: right; padding-right: 4px;
                white-space: pre; }
table.heat th.col { writing-mode: vertical-rl; writing-mode: sideways-lr; text-align: left; padding: 6px 0 3px 0;
                    vertical-align: bottom; line-height: 18px; }
table.heat tr.keys-head th { border: none; }
.scale { display: inline-block; width: 8em; height: .8em; vertical-align: middle; border: 1px solid #ccc;
         background: linear-gradient(to right, rgba(42, 93, 176, 0), rgba(42, 93, 176, 1)); }
.side { color: #555; }
#predictions { border-collapse: collapse; min-width: 14em; }
#predictions td, #predictions th { padding: .15em .5em; border-bottom: 1px solid #eee; text-align: left;
                                   font-family: ui-monospace, monospace; white-space: pre; }
#predictions tr.hit td { font-weight: bold; color: #1a7f37; }
#status { color: #555; font-size: .9em; }
</style>
</head>
<body>
<h1>__TITLE__</h1>
<div class="bar" id="views"><span class="label">attention</span></div>
<div class="bar"><span class="label"></span><span id="view-title" class="side"></span></div>
<div class="bar"><span class="label">layer</span><select id="layer"></select><span id="layer-count" class="side"></span></div>
<div class="bar" id="heads"><span class="label">head</span></div>
<p id="status"></p>
<div><b>queries</b>: <span id="query-side" class="side"></span> tokens (hover or click one)</div>
<div class="tokens" id="queries"></div>
<div><b>keys</b>: <span id="key-side" class="side"></span> tokens (weight from the chosen query)</div>
<div class="tokens" id="keys"></div>
<div id="main">
  <div><div><b>weights</b> (queries down, keys across) &nbsp;<span class="side">0</span> <span class="scale"></span>
    <span class="side">1</span></div><table class="heat" id="heat"></table></div>
  <div><div><b>next-token predictions</b> <span id="pred-where"></span></div><table id="predictions"></table></div>
</div>
<script id="attention-data" type="application/json">__DATA__</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("attention-data").textContent);
const state = Object.assign({query: 0}, DATA.start);
const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text; return e; };
const view = () => DATA.views.find(v => v.name === state.view);
const colour = w => `rgba(42, 93, 176, ${Math.min(1, w).toFixed(3)})`;

function buildControls() {
  const views = document.getElementById("views");
  for (const v of DATA.views) {
    const b = el("button", "view", v.name); b.dataset.view = v.name; b.title = v.title;
    b.onclick = () => { state.view = v.name; state.layer = Math.min(state.layer, v.weights.length - 1);
                        state.query = 0; render(); };
    views.appendChild(b);
  }
  if (DATA.views.length === 1) views.style.display = "none";
  document.getElementById("layer").onchange = e => { state.layer = +e.target.value; render(); };
}

function render() {
  const v = view(), W = v.weights, L = W.length, H = W[0].length;
  state.head = Math.min(state.head, H - 1);
  state.query = Math.min(state.query, v.queries.length - 1);
  for (const b of document.querySelectorAll("button.view")) b.classList.toggle("active", b.dataset.view === v.name);
  const sel = document.getElementById("layer");
  sel.innerHTML = "";
  for (let l = 0; l < L; l++) { const o = el("option", "", `${l}`); o.value = l; sel.appendChild(o); }
  sel.value = state.layer;
  document.getElementById("layer-count").textContent = ` of 0–${L - 1}`;
  document.getElementById("view-title").textContent = v.title;
  document.getElementById("query-side").textContent = v.query_side;
  document.getElementById("key-side").textContent = v.key_side;
  const heads = document.getElementById("heads");
  for (const b of heads.querySelectorAll("button")) b.remove();
  for (let h = 0; h < H; h++) {
    const b = el("button", "head" + (h === state.head ? " active" : ""), `${h}`); b.dataset.head = h;
    b.onclick = () => { state.head = h; render(); };
    heads.appendChild(b);
  }
  const qs = document.getElementById("queries"); qs.innerHTML = "";
  v.queries.forEach((t, i) => {
    const s = el("span", "tok query", t); s.dataset.i = i;
    s.onmouseenter = () => select(i); s.onclick = () => select(i);
    qs.appendChild(s);
  });
  const heat = document.getElementById("heat"); heat.innerHTML = "";
  const M = W[state.layer][state.head];
  const head = el("tr", "keys-head"); head.appendChild(el("th"));
  v.keys.forEach(t => head.appendChild(el("th", "col", t)));
  heat.appendChild(head);
  M.forEach((row, i) => {
    const tr = el("tr"); tr.dataset.i = i;
    tr.appendChild(el("th", "", v.queries[i]));
    row.forEach((w, j) => { const td = el("td"); td.style.background = colour(w);
      td.title = `${v.queries[i]} → ${v.keys[j]}: ${w.toFixed(4)}`; tr.appendChild(td); });
    tr.onmouseenter = () => select(i);
    heat.appendChild(tr);
  });
  select(state.query);
}

function select(i) {
  state.query = i;
  const v = view(), row = v.weights[state.layer][state.head][i];
  for (const q of document.querySelectorAll(".query")) q.classList.toggle("active", +q.dataset.i === i);
  for (const tr of document.querySelectorAll("#heat tr[data-i]")) tr.classList.toggle("active", +tr.dataset.i === i);
  const ks = document.getElementById("keys"); ks.innerHTML = "";
  v.keys.forEach((t, j) => {
    const s = el("span", "tok key", t), w = row[j];
    s.dataset.j = j; s.dataset.weight = w.toFixed(4); s.style.background = colour(w);
    s.style.color = w > 0.5 ? "white" : "";
    const lab = el("span", "w", w.toFixed(3)); s.appendChild(lab);
    ks.appendChild(s);
  });
  document.getElementById("status").textContent =
    `${v.name} layer ${state.layer} head ${state.head} query ${i} (${v.queries[i].trim() || v.queries[i]})`;
  const pt = document.getElementById("predictions"); pt.innerHTML = "";
  const where = document.getElementById("pred-where");
  if (!v.predicts) { where.textContent = "(at target positions: choose decoder or cross)"; return; }
  const p = DATA.predictions[i];
  where.textContent = `after position ${i}` + (p.next !== null ? ` (really next: ${p.next})` : "");
  const hd = el("tr"); hd.appendChild(el("th", "", "token")); hd.appendChild(el("th", "", "probability"));
  pt.appendChild(hd);
  for (const [tok, prob] of p.top) {
    const tr = el("tr", "pred" + (tok === p.next ? " hit" : ""));
    tr.appendChild(el("td", "pred-token", tok)); tr.appendChild(el("td", "pred-prob", prob.toFixed(4)));
    pt.appendChild(tr);
  }
}

buildControls();
render();
</script>
</body>
</html>
"""
