"""An offline head view: query tokens on the left, key tokens on the right, one line per link.

bertviz's ``head_view`` loads require.js, d3 and jQuery from a CDN (a blank
frame offline) and ships every weight of every head (≈1.7 GB of HTML at 512
tokens on a 12 × 12 model). This view is one self-contained HTML page with a
few dozen lines of plain JavaScript and no external request. Each head sends
only its ``top_k`` strongest keys per query (``core.views.top_links``), so the
page stays well under a megabyte at 512 tokens. Hover a token to see only its
links; click a head's swatch to show or hide it.
"""

from __future__ import annotations

import html

import torch

from app.plain import json_for_html, short_label
from core.views import top_links

HEAD_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
               "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
ALL_KEYS_UP_TO = 40  # inputs this short draw every link above MIN_WEIGHT
TOP_K = 8  # longer inputs draw each query's TOP_K strongest keys
MIN_WEIGHT = 0.01
ROW_PX = 18

_SCRIPT = """
const D = JSON.parse(document.getElementById('data').textContent);
const svg = document.getElementById('view'), NS = 'http://www.w3.org/2000/svg';
const R = D.row, X0 = 150, X1 = 450, shown = new Set([D.selected]);
svg.setAttribute('height', 30 + R * Math.max(D.queries.length, D.keys.length));
function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  svg.appendChild(e); return e;
}
const lines = [];
function drawHead(hi) {  // a head's lines are made when it is first shown: 12 heads x 512 tokens is 49k lines
  const h = D.heads[hi];
  if (h.drawn) return;
  h.drawn = true;
  for (let i = 0; i < h.q.length; i++) {
    const l = el('line', {x1: X0 + 5, y1: 25 + R * h.q[i], x2: X1 - 5, y2: 25 + R * h.k[i], stroke: h.color,
                          'stroke-width': 1 + 3 * h.w[i], 'stroke-opacity': h.w[i], class: 'link'});
    lines.push({el: l, head: hi, q: h.q[i], k: h.k[i]});
  }
}
function draw(focus) {
  shown.forEach(drawHead);
  for (const l of lines) {
    const on = shown.has(l.head) && (!focus || (focus.side === 'q' ? l.q === focus.i : l.k === focus.i));
    l.el.style.display = on ? '' : 'none';
  }
}
function said(side, i) {  // a token and its strongest links in each shown head, as words
  const own = side === 'q' ? D.queries : D.keys, other = side === 'q' ? D.keys : D.queries;
  const parts = [...shown].map(hi => {
    const h = D.heads[hi], mine = side === 'q' ? h.q : h.k, theirs = side === 'q' ? h.k : h.q;
    const links = mine.map((m, n) => [m, n]).filter(([m]) => m === i).map(([, n]) => [h.w[n], other[theirs[n]]]);
    links.sort((a, b) => b[0] - a[0]);
    const top = links.slice(0, 3).map(([w, t]) => t + ' ' + w.toFixed(2)).join(', ');
    return 'head ' + h.index + ': ' + (top || 'no link shown');
  });
  return (side === 'q' ? 'query ' : 'key ') + own[i] + '; ' + (parts.join('; ') || 'no head shown');
}
function tokens(list, shown, x, anchor, side) {  // one Tab stop per column, on the token last focused; arrows
  let stop = 0;  // move it. A long token is shown cut (whole, an 80-character one ran 430 px past the frame's edge),
  const items = list.map((t, i) => {  // the mouse's tooltip and the spoken label say it whole
    const e = el('text', {x: x, y: 29 + R * i, 'text-anchor': anchor, class: 'tok', tabindex: i ? -1 : 0,
                          role: 'img', 'aria-roledescription': 'token', 'aria-label': t}, shown[i]);
    if (shown[i] !== t) { const tip = document.createElementNS(NS, 'title'); tip.textContent = t; e.appendChild(tip); }
    for (const [on, off] of [['mouseenter', 'mouseleave'], ['focus', 'blur']]) {  // focus: the keyboard's hover
      e.addEventListener(on, () => draw({side: side, i: i}));
      e.addEventListener(off, () => draw(null));
    }
    e.addEventListener('focus', () => {  // by key or by click: the column's one stop moves here; a screen reader
      e.setAttribute('aria-label', said(side, i));  // hears in words what the lines show
      items[stop].setAttribute('tabindex', -1);
      e.setAttribute('tabindex', 0);
      stop = i;
    });
    e.addEventListener('keydown', ev => {
      const next = {ArrowDown: i + 1, ArrowUp: i - 1, Home: 0, End: list.length - 1}[ev.key];
      if (next === undefined || next < 0 || next >= list.length) return;
      ev.preventDefault();
      items[next].focus();
    });
    return e;
  });
}
tokens(D.queries, D.shown_queries, X0, 'end', 'q');
tokens(D.keys, D.shown_keys, X1, 'start', 'k');
el('text', {x: X0, y: 12, 'text-anchor': 'end', class: 'hdr'}, 'query');
el('text', {x: X1, y: 12, class: 'hdr'}, 'key');
const bar = document.getElementById('heads');
D.heads.forEach((h, hi) => {
  const b = document.createElement('button');  // a button: Tab reaches it, Enter and Space press it
  b.type = 'button'; b.className = 'sw'; b.style.borderColor = h.color;
  const paint = () => {  // shown: ticked and tinted, not told by colour alone; dark text on a pale tint
    const on = shown.has(hi);
    b.textContent = (on ? '\u2713 ' : '') + 'H' + h.index;
    b.setAttribute('aria-pressed', on ? 'true' : 'false');
    b.style.background = on ? h.color + '40' : 'white';
  };
  b.addEventListener('click', () => { shown.has(hi) ? shown.delete(hi) : shown.add(hi); paint(); draw(null); });
  paint(); bar.appendChild(b);
});
draw(null);
"""

_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>
body {{ font: 13px sans-serif; margin: 4px; }}
.tok {{ font: 12px monospace; cursor: default; }} .tok:hover, .tok:focus {{ font-weight: bold; }}
.hdr {{ font: bold 12px sans-serif; fill: #555; }}
.sw {{ display: inline-block; border: 2px solid; border-radius: 3px; padding: 0 4px; margin: 0 3px 4px 0;
       cursor: pointer; font-size: 11px; color: #000; font-family: sans-serif; }}
</style></head><body>
<div id="heads">{caption} </div>
<svg id="view" xmlns="http://www.w3.org/2000/svg" width="600"></svg>
<noscript>The head view needs JavaScript; the heatmap shows the same weights.</noscript>
<script type="application/json" id="data">{data}</script>
<script>{script}</script>
</body></html>"""


def head_view_data(attentions: torch.Tensor, queries: list[str], keys: list[str], layer: int, head: int) -> dict:
    """The links of every head of ``layer`` as plain lists, the chosen head first shown."""
    top_k = len(keys) if len(keys) <= ALL_KEYS_UP_TO else TOP_K
    heads = []
    for h, weights in enumerate(attentions[layer]):  # (q, k) per head
        q, k, w = top_links(weights, top_k, MIN_WEIGHT)
        heads.append({"index": h, "color": HEAD_COLORS[h % len(HEAD_COLORS)], "q": q.tolist(), "k": k.tolist(),
                      "w": [round(v, 3) for v in w.tolist()]})
    return {"queries": queries, "keys": keys, "heads": heads, "selected": head, "row": ROW_PX, "top_k": top_k,
            "shown_queries": [short_label(t) for t in queries], "shown_keys": [short_label(t) for t in keys]}


def head_view_html(attentions: torch.Tensor, queries: list[str], keys: list[str], layer: int, head: int,
                   title: str = "") -> str:
    """A self-contained HTML page (no external requests) showing the heads of ``layer``."""
    return head_view_page(head_view_data(attentions, queries, keys, layer, head), layer, head, title)


def head_view_page(data: dict, layer: int, head: int, title: str = "") -> str:
    """The page of ``head_view_data`` (of any selected head) with ``head`` selected: no recomputation. ``title``
    (plain text) names the saved file's tab; it defaults to the layer."""
    data = {**data, "selected": head}
    keys = data["keys"]
    limit = "every key" if data["top_k"] >= len(keys) else f"the {data['top_k']} strongest keys"
    caption = html.escape(f"Layer {layer}; lines show {limit} of each query (weight ≥ {MIN_WEIGHT}); point at a "
                          "token, or Tab to a column and move with ↑ ↓, to see its lines alone. Heads:")
    payload = json_for_html(data)  # tokens are data: no "</script>" or "<!--" can end the script
    title = html.escape(title or f"Head view, layer {layer}")
    return _PAGE.format(title=title, caption=caption, data=payload, script=_SCRIPT)


def frame_height(queries: list[str], keys: list[str]) -> int:
    return min(640, 80 + ROW_PX * max(len(queries), len(keys)))
