"""The attention page's HTML, style and script (filled in by :func:`~attnkit.viz.attention_page.render_attention_page`).

Axis legend: ``L`` layers, ``H`` heads, ``T`` query positions, ``S`` key positions.

``__TITLE__`` is replaced by the escaped title and ``__DATA__`` by the JSON of the page (``{"title", "views",
"predictions", "top_k", "start"}``); nothing else is filled in, and nothing is fetched: the file works offline.

DOM contract (what tests and scripts rely on):

- ``button.tab[data-tab=model|head|detail]`` switch the view (the shown one has class ``active``); the views are
  ``section#model-view``, ``#head-view`` and ``#detail-view`` (hidden ones carry ``hidden``); ``page.html#head``
  opens on that view;
- ``button.view[data-view=...]`` choose the attention, ``select#layer`` the layer (head view and detail),
  ``input#zoom`` (range, with ``#zoom-out``/``#zoom-in``) the cell size in CSS pixels, shown in ``#zoom-value``;
- ``#status`` says what is shown (detail: ``view layer l head h query i (label)``); hovering any token shows
  ``label: hover text`` in ``#token-info``; every token element (class ``piece``) carries its hover text (id,
  piece, bytes) in its ``title``;
- model view: ``#model-grid`` holds one ``.panel[data-layer=l][data-head=h]`` per layer and head, each with a
  ``canvas`` of ``S x T`` cells of ``c`` pixels (the cell's alpha is its weight); a click opens the detail view on
  that layer and head; the chosen panel has class ``active``;
- head view: ``button.head-toggle[data-head=h]`` (class ``on`` when its lines are shown; click toggles,
  double-click shows it alone; ``#heads-all`` shows all), ``input#all-queries`` (lines from every query),
  ``.hv-query[data-i=i]`` on the left and ``.hv-key[data-j=j]`` on the right; ``svg#hv-lines`` holds one
  ``line.hv-line[data-head][data-i][data-j][data-weight]`` per shown head, query and key with weight >= 0.01;
- detail: ``button.head[data-head=h]`` the head (the chosen one has class ``active``); ``.query[data-i=i]`` are the
  query tokens and ``.key[data-j=j]`` the key tokens, each key carrying the shown weight in ``data-weight`` (and as
  text); ``#query-side`` / ``#key-side`` name whose tokens they are (``text``, ``source``, ``target``); the heat map
  ``#heat`` has a header row of key labels (``th.col``) and one ``tr[data-i]`` per query, cells of the zoom's
  size; ``#predictions`` lists ``tr.pred`` rows with ``.pred-token`` and ``.pred-prob`` (``tr.hit``: the token that
  really comes next).
"""

from __future__ import annotations

__all__ = ["TABS", "DEFAULT_CELL", "TEMPLATE"]

TABS = ("model", "head", "detail")
DEFAULT_CELL = 28  # CSS pixels per heat-map cell at the start (the zoom goes from 12 to 64)

TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>__TITLE__</title>
<style>
:root { --accent: #2a5db0; --hot: #d2452d; }
[hidden] { display: none !important; }
body { font-family: system-ui, sans-serif; margin: 1.2em; color: #222; }
h1 { font-size: 1.25em; margin: 0 0 .5em 0; }
.tabs { display: flex; border-bottom: 2px solid var(--accent); margin-bottom: .6em; }
button.tab { border-radius: 4px 4px 0 0; border-bottom: none; margin-right: 3px; padding: .35em 1.1em; }
.bar { margin: .4em 0; display: flex; flex-wrap: wrap; gap: .3em; align-items: center; }
.bar .label { width: 5em; color: #555; }
button { font: inherit; padding: .15em .6em; border: 1px solid #999; background: #f5f5f5; border-radius: 3px;
         cursor: pointer; }
button.active { background: var(--accent); color: white; border-color: var(--accent); }
.hint { color: #666; font-size: .88em; margin: .3em 0 .7em 0; max-width: 60em; }
.side { color: #555; }
#status { color: #555; font-size: .9em; margin: .5em 0 .2em 0; }
#token-info { font-family: ui-monospace, monospace; font-size: .85em; color: #333; background: #f4f4ee;
              padding: .2em .5em; border-radius: 3px; display: inline-block; min-height: 1.2em; white-space: pre; }
#zoom { width: 9em; }
/* model view */
#model-grid { display: grid; gap: 6px; align-items: center; justify-items: center; justify-content: start; }
#model-grid .col-label, #model-grid .row-label { font-size: .8em; color: #555; white-space: nowrap; }
.panel { cursor: pointer; padding: 2px; border: 1px solid #ccc; border-radius: 3px; line-height: 0;
         background: white; }
.panel:hover { border-color: var(--accent); box-shadow: 0 0 0 1px var(--accent); }
.panel.active { border-color: var(--hot); box-shadow: 0 0 0 2px var(--hot); }
.panel canvas { display: block; image-rendering: pixelated; }
/* head view */
#hv { display: grid; grid-template-columns: max-content max-content max-content; align-items: start; }
#hv .hv-head { font-size: .8em; color: #555; padding: 0 .4em .3em .4em; }
#hv-qside { text-align: right; }
.hv-col { display: flex; flex-direction: column; }
#hv-left { align-items: flex-end; }
#hv-right { align-items: flex-start; }
.hv-tok { font-family: ui-monospace, monospace; white-space: pre; padding: 0 .4em; border-radius: 3px;
          box-sizing: border-box; }
.hv-query { cursor: pointer; }
.hv-query.active { background: #fde8e4; box-shadow: inset 0 0 0 2px var(--hot); }
#hv-lines line { stroke-linecap: round; }
button.head-toggle { min-width: 2.3em; border-width: 2px; font-weight: bold; }
/* detail */
.tokens { display: flex; flex-wrap: wrap; gap: 3px; margin: .3em 0 .8em 0; }
.tok { font-family: ui-monospace, monospace; padding: .15em .35em; border: 1px solid #ccc; border-radius: 3px;
       white-space: pre; text-align: center; min-width: 1.2em; }
.query { cursor: pointer; }
.query.active { outline: 2px solid var(--hot); }
.key .w { display: block; font-size: .7em; color: inherit; }
#main { display: flex; gap: 2em; align-items: flex-start; flex-wrap: wrap; }
table.heat { border-collapse: collapse; margin-top: 6px; --cell: 28px; }
table.heat td { width: var(--cell); min-width: var(--cell); height: var(--cell); padding: 0; border: 1px solid #fff;
                box-sizing: border-box; }
table.heat tr.active th { color: var(--hot); font-weight: bold; }
table.heat tr.active td { border-color: var(--hot); }
table.heat th { font-family: ui-monospace, monospace; font-size: clamp(11px, calc(var(--cell) * 0.45), 20px);
                font-weight: normal; text-align: right; padding-right: 4px; white-space: pre; }
table.heat th.col { writing-mode: vertical-rl; writing-mode: sideways-lr; text-align: left; padding: 6px 0 3px 0;
                    vertical-align: bottom; line-height: var(--cell); }
table.heat tr.keys-head th { border: none; }
.scale { display: inline-block; width: 8em; height: .8em; vertical-align: middle; border: 1px solid #ccc;
         background: linear-gradient(to right, rgba(42, 93, 176, 0), rgba(42, 93, 176, 1)); }
#predictions { border-collapse: collapse; min-width: 14em; }
#predictions td, #predictions th { padding: .15em .5em; border-bottom: 1px solid #eee; text-align: left;
                                   font-family: ui-monospace, monospace; white-space: pre; }
#predictions tr.hit td { font-weight: bold; color: #1a7f37; }
</style>
</head>
<body>
<h1>__TITLE__</h1>
<div class="tabs" id="tabs">
  <button class="tab" data-tab="model" title="every layer x head as a small heat map">model view</button>
  <button class="tab" data-tab="head" title="all heads of one layer in colours, lines from a token">head view</button>
  <button class="tab" data-tab="detail" title="one head: weights, heat map, next-token predictions">detail</button>
</div>
<div class="bar" id="views"><span class="label">attention</span></div>
<div class="bar"><span class="label"></span><span id="view-title" class="side"></span></div>
<div class="bar" id="layer-bar"><span class="label">layer</span><select id="layer"></select>
  <span id="layer-count" class="side"></span></div>
<div class="bar"><span class="label">zoom</span><button id="zoom-out" title="smaller cells">−</button>
  <input type="range" id="zoom" min="12" max="64" step="2"><button id="zoom-in" title="larger cells">+</button>
  <span id="zoom-value" class="side"></span></div>
<p id="status"></p>
<div id="token-info">hover a token to see its id, piece and bytes</div>

<section id="model-view" data-tab="model">
  <p class="hint">Every layer (rows) and head (columns) of the chosen attention as a small heat map: queries down,
    keys across, the darker the more weight. Click one to open it in the detail view.</p>
  <div id="model-grid"></div>
</section>

<section id="head-view" data-tab="head">
  <div class="bar" id="head-toggles"><span class="label">heads</span></div>
  <div class="bar"><span class="label"></span><label><input type="checkbox" id="all-queries"> lines from every
    query at once</label></div>
  <p class="hint">All heads of the layer, one colour each. A line goes from the chosen query token (left; hover or
    click one) to every key token (right) it gives at least 1% of its weight, thicker and more opaque the more weight.
    Click a head's button to hide or show it, double-click to show it alone.</p>
  <div id="hv">
    <div class="hv-head" id="hv-qside"></div><div></div><div class="hv-head" id="hv-kside"></div>
    <div class="hv-col" id="hv-left"></div><svg id="hv-lines" width="320" height="10"></svg>
    <div class="hv-col" id="hv-right"></div>
  </div>
</section>

<section id="detail-view" data-tab="detail">
  <div class="bar" id="heads"><span class="label">head</span></div>
  <div><b>queries</b>: <span id="query-side" class="side"></span> tokens (hover or click one)</div>
  <div class="tokens" id="queries"></div>
  <div><b>keys</b>: <span id="key-side" class="side"></span> tokens (weight from the chosen query)</div>
  <div class="tokens" id="keys"></div>
  <div id="main">
    <div><div><b>weights</b> (queries down, keys across) &nbsp;<span class="side">0</span> <span class="scale"></span>
      <span class="side">1</span></div><table class="heat" id="heat"></table></div>
    <div><div><b>next-token predictions</b> <span id="pred-where"></span></div><table id="predictions"></table></div>
  </div>
</section>

<script id="attention-data" type="application/json">__DATA__</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("attention-data").textContent);
const TABS = ["model", "head", "detail"];
const MIN_LINE = 0.01;  // the head view draws a line for a weight of at least this
const state = Object.assign({tab: "model", query: null, allQueries: false, shown: null}, DATA.start);
if (TABS.includes(location.hash.slice(1))) state.tab = location.hash.slice(1);
window.addEventListener("hashchange", () => {
  if (TABS.includes(location.hash.slice(1)) && location.hash.slice(1) !== state.tab) showTab(location.hash.slice(1));
});

const $ = id => document.getElementById(id);
const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text; return e; };
const view = () => DATA.views.find(v => v.name === state.view);
const colour = w => `rgba(42, 93, 176, ${Math.min(1, Math.max(0, w)).toFixed(3)})`;
const headColour = (h, H) => `hsl(${Math.round(h * 360 / H)}, 72%, 42%)`;
const rowHeight = () => Math.max(20, state.cell);
const queryTitles = v => v.query_titles || v.queries;
const keyTitles = v => v.key_titles || v.keys;

// an element that shows a token; hovering it (or its title) tells what the token is underneath
function piece(tag, cls, label, title) {
  const e = el(tag, cls + " piece", label); e.title = title; e.dataset.label = label; return e;
}
document.addEventListener("mouseover", e => {
  const t = e.target.closest && e.target.closest(".piece");
  if (t) $("token-info").textContent = `${t.dataset.label}   ${t.title}`;
});

function buildControls() {
  for (const b of document.querySelectorAll("button.tab")) b.onclick = () => showTab(b.dataset.tab);
  const views = $("views");
  for (const v of DATA.views) {
    const b = el("button", "view", v.name); b.dataset.view = v.name; b.title = v.title;
    b.onclick = () => { state.view = v.name; state.layer = Math.min(state.layer, v.weights.length - 1);
                        state.query = null; render(); };
    views.appendChild(b);
  }
  if (DATA.views.length === 1) views.style.display = "none";
  $("layer").onchange = e => { state.layer = +e.target.value; render(); };
  $("zoom").oninput = e => setCell(+e.target.value);
  $("zoom-out").onclick = () => setCell(state.cell - 4);
  $("zoom-in").onclick = () => setCell(state.cell + 4);
  $("all-queries").onchange = e => { state.allQueries = e.target.checked; drawLines(); status(); };
}

function setCell(c) { const z = $("zoom"); state.cell = Math.max(+z.min, Math.min(+z.max, c)); render(); }

function showTab(t) {
  state.tab = t;
  try { history.replaceState(null, "", "#" + t); } catch (err) { /* some viewers forbid it: the tab still shows */ }
  render();
}

function render() {
  const v = view(), L = v.weights.length, H = v.weights[0].length;
  state.layer = Math.min(state.layer, L - 1);
  state.head = Math.min(state.head, H - 1);
  // the last query sees the most (all of a causal text): a page and a newly chosen attention start there
  state.query = state.query === null ? v.queries.length - 1 : Math.min(state.query, v.queries.length - 1);
  if (!state.shown || state.shown.length !== H) state.shown = Array(H).fill(true);
  for (const b of document.querySelectorAll("button.tab")) b.classList.toggle("active", b.dataset.tab === state.tab);
  for (const s of document.querySelectorAll("section[data-tab]")) s.hidden = s.dataset.tab !== state.tab;
  for (const b of document.querySelectorAll("button.view")) b.classList.toggle("active", b.dataset.view === v.name);
  const sel = $("layer"); sel.innerHTML = "";
  for (let l = 0; l < L; l++) { const o = el("option", "", `${l}`); o.value = l; sel.appendChild(o); }
  sel.value = state.layer;
  $("layer-bar").hidden = state.tab === "model";
  $("layer-count").textContent = ` of 0–${L - 1}`;
  $("view-title").textContent = v.title;
  $("zoom").value = state.cell;
  $("zoom-value").textContent = `${state.cell} px cells`;
  if (state.tab === "model") renderModel(); else if (state.tab === "head") renderHeadView(); else renderDetail();
  status();
}

function status() {
  const v = view(), q = v.queries[state.query];
  const query = `query ${state.query} (${q.trim() || q})`;
  let text;
  if (state.tab === "model") {
    text = `${v.name}: ${v.weights.length} layers × ${v.weights[0].length} heads; chosen: layer ${state.layer} ` +
           `head ${state.head}`;
  } else if (state.tab === "head") {
    const on = state.shown.flatMap((shown, h) => shown ? [h] : []);
    text = `${v.name} layer ${state.layer} heads ${on.join(" ") || "none"} ` +
           (state.allQueries ? "every query" : query);
  } else {
    text = `${v.name} layer ${state.layer} head ${state.head} ${query}`;
  }
  $("status").textContent = text;
}

function selectQuery(i) {
  state.query = i;
  if (state.tab === "detail") selectDetail(i); else if (state.tab === "head") drawLines();
  status();
}

// ------------------------------------------------------------------------------------------------ model view
function renderModel() {
  const v = view(), W = v.weights, L = W.length, H = W[0].length, T = v.queries.length, S = v.keys.length;
  const grid = $("model-grid"); grid.innerHTML = "";
  grid.style.gridTemplateColumns = `auto repeat(${H}, auto)`;
  grid.appendChild(el("div"));
  for (let h = 0; h < H; h++) grid.appendChild(el("div", "col-label", `head ${h}`));
  const c = Math.max(1, Math.floor(4 * state.cell / Math.max(T, S)));  // pixels per cell: a panel is ~4 cells wide
  for (let l = 0; l < L; l++) {
    grid.appendChild(el("div", "row-label", `layer ${l}`));
    for (let h = 0; h < H; h++) {
      const p = el("div", "panel" + (l === state.layer && h === state.head ? " active" : ""));
      p.dataset.layer = l; p.dataset.head = h; p.dataset.cell = c;
      p.title = `layer ${l}, head ${h}: click to open it in the detail view`;
      const cv = el("canvas"); cv.width = S * c; cv.height = T * c;
      const ctx = cv.getContext("2d");
      W[l][h].forEach((row, i) => row.forEach((w, j) => {
        if (w > 0) { ctx.fillStyle = colour(w); ctx.fillRect(j * c, i * c, c, c); } }));
      p.appendChild(cv);
      p.onclick = () => { state.layer = l; state.head = h; showTab("detail"); };
      grid.appendChild(p);
    }
  }
}

// ------------------------------------------------------------------------------------------------- head view
function renderHeadView() {
  const v = view(), H = v.weights[0].length, rh = rowHeight();
  const bar = $("head-toggles");
  for (const b of bar.querySelectorAll("button")) b.remove();
  for (let h = 0; h < H; h++) {
    const b = el("button", "head-toggle", `${h}`); b.dataset.head = h;
    b.title = `head ${h}: click to hide or show its lines, double-click to show it alone`;
    b.onclick = () => { state.shown[h] = !state.shown[h]; headsChanged(); };
    b.ondblclick = () => { state.shown = state.shown.map((_, k) => k === h); headsChanged(); };
    bar.appendChild(b);
  }
  const all = el("button", "", "all"); all.id = "heads-all"; all.title = "show every head";
  all.onclick = () => { state.shown.fill(true); headsChanged(); };
  bar.appendChild(all);
  paintToggles();
  $("all-queries").checked = state.allQueries;
  $("hv-qside").textContent = `queries: ${v.query_side}`;
  $("hv-kside").textContent = `keys: ${v.key_side}`;
  const left = $("hv-left"), right = $("hv-right");
  left.innerHTML = ""; right.innerHTML = "";
  const size = s => { s.style.height = s.style.lineHeight = `${rh}px`; return s; };
  v.queries.forEach((t, i) => {
    const s = size(piece("div", "hv-tok hv-query", t, queryTitles(v)[i])); s.dataset.i = i;
    s.onmouseenter = () => selectQuery(i); s.onclick = () => selectQuery(i);
    left.appendChild(s);
  });
  v.keys.forEach((t, j) => {
    const s = size(piece("div", "hv-tok hv-key", t, keyTitles(v)[j])); s.dataset.j = j; right.appendChild(s);
  });
  $("hv-lines").setAttribute("height", Math.max(v.queries.length, v.keys.length) * rh);
  drawLines();
}

function headsChanged() { paintToggles(); drawLines(); status(); }

function paintToggles() {
  const H = state.shown.length;
  for (const b of document.querySelectorAll("button.head-toggle")) {
    const h = +b.dataset.head, on = state.shown[h], c = headColour(h, H);
    b.classList.toggle("on", on);
    b.style.borderColor = c; b.style.background = on ? c : "white"; b.style.color = on ? "white" : c;
  }
}

function drawLines() {
  if (state.tab !== "head") return;
  const v = view(), M = v.weights[state.layer], H = M.length, rh = rowHeight();
  const spread = Math.min(2.5, 0.5 * rh / H);  // the lines of the heads run side by side, a little apart
  const svg = $("hv-lines"), width = +svg.getAttribute("width");
  while (svg.firstChild) svg.firstChild.remove();
  const queries = state.allQueries ? v.queries.map((_, i) => i) : [state.query];
  const lines = [];
  for (let h = 0; h < H; h++) {
    if (!state.shown[h]) continue;
    for (const i of queries) M[h][i].forEach((w, j) => { if (w >= MIN_LINE) lines.push([w, h, i, j]); });
  }
  lines.sort((a, b) => a[0] - b[0]);  // the heaviest drawn last, on top
  for (const [w, h, i, j] of lines) {
    const ln = document.createElementNS(svg.namespaceURI, "line");
    const dy = (h - (H - 1) / 2) * spread;
    const attrs = {x1: 4, y1: (i + 0.5) * rh + dy, x2: width - 4, y2: (j + 0.5) * rh + dy, stroke: headColour(h, H),
                   "stroke-width": (0.5 + 5 * w).toFixed(2), "stroke-opacity": Math.min(1, 0.15 + 0.85 * w).toFixed(3)};
    for (const [k, val] of Object.entries(attrs)) ln.setAttribute(k, val);
    ln.classList.add("hv-line");
    ln.dataset.head = h; ln.dataset.i = i; ln.dataset.j = j; ln.dataset.weight = w.toFixed(4);
    const tip = document.createElementNS(svg.namespaceURI, "title");
    tip.textContent = `head ${h}: ${v.queries[i]} → ${v.keys[j]}: ${w.toFixed(4)}`;
    ln.appendChild(tip);
    svg.appendChild(ln);
  }
  for (const q of document.querySelectorAll(".hv-query")) {
    q.classList.toggle("active", !state.allQueries && +q.dataset.i === state.query);
  }
}

// ---------------------------------------------------------------------------------------------------- detail
function renderDetail() {
  const v = view(), W = v.weights, H = W[0].length;
  $("query-side").textContent = v.query_side;
  $("key-side").textContent = v.key_side;
  const heads = $("heads");
  for (const b of heads.querySelectorAll("button")) b.remove();
  for (let h = 0; h < H; h++) {
    const b = el("button", "head" + (h === state.head ? " active" : ""), `${h}`); b.dataset.head = h;
    b.onclick = () => { state.head = h; render(); };
    heads.appendChild(b);
  }
  const qs = $("queries"); qs.innerHTML = "";
  v.queries.forEach((t, i) => {
    const s = piece("span", "tok query", t, queryTitles(v)[i]); s.dataset.i = i;
    s.onmouseenter = () => selectQuery(i); s.onclick = () => selectQuery(i);
    qs.appendChild(s);
  });
  const heat = $("heat"); heat.innerHTML = "";
  heat.style.setProperty("--cell", `${state.cell}px`);
  const M = W[state.layer][state.head];
  const head = el("tr", "keys-head"); head.appendChild(el("th"));
  v.keys.forEach((t, j) => head.appendChild(piece("th", "col", t, keyTitles(v)[j])));
  heat.appendChild(head);
  M.forEach((row, i) => {
    const tr = el("tr"); tr.dataset.i = i;
    tr.appendChild(piece("th", "", v.queries[i], queryTitles(v)[i]));
    row.forEach((w, j) => { const td = el("td"); td.style.background = colour(w);
      td.title = `${v.queries[i]} → ${v.keys[j]}: ${w.toFixed(4)}`; tr.appendChild(td); });
    tr.onmouseenter = () => selectQuery(i);
    heat.appendChild(tr);
  });
  selectDetail(state.query);
}

function selectDetail(i) {
  const v = view(), row = v.weights[state.layer][state.head][i];
  for (const q of document.querySelectorAll(".query")) q.classList.toggle("active", +q.dataset.i === i);
  for (const tr of document.querySelectorAll("#heat tr[data-i]")) tr.classList.toggle("active", +tr.dataset.i === i);
  const ks = $("keys"); ks.innerHTML = "";
  v.keys.forEach((t, j) => {
    const s = piece("span", "tok key", t, keyTitles(v)[j]), w = row[j];
    s.dataset.j = j; s.dataset.weight = w.toFixed(4); s.style.background = colour(w);
    s.style.color = w > 0.5 ? "white" : "";
    s.appendChild(el("span", "w", w.toFixed(3)));
    ks.appendChild(s);
  });
  const pt = $("predictions"); pt.innerHTML = "";
  const where = $("pred-where");
  if (!v.predicts) { where.textContent = "(at target positions: choose decoder or cross)"; return; }
  const p = DATA.predictions[i];
  where.textContent = `after position ${i}` + (p.next !== null ? ` (really next: ${p.next})` : "");
  const hd = el("tr"); hd.appendChild(el("th", "", "token")); hd.appendChild(el("th", "", "probability"));
  pt.appendChild(hd);
  p.top.forEach(([tok, prob], k) => {
    const hit = p.top_ids ? p.top_ids[k] === p.next_id : tok === p.next;
    const tr = el("tr", "pred" + (hit ? " hit" : ""));
    tr.appendChild(piece("td", "pred-token", tok, p.top_titles ? p.top_titles[k] : tok));
    tr.appendChild(el("td", "pred-prob", prob.toFixed(4)));
    pt.appendChild(tr);
  });
}

buildControls();
render();
</script>
</body>
</html>
"""
