"""BertViz's model view (Vig 2019), offline and bounded in size.

The picture and its JavaScript are bertviz's own (``bertviz/model_view.js`` of
the installed package: a thumbnail per layer × head, click one to enlarge it).
What changes is how the page is put together:

- bertviz loads require.js, d3 and jQuery from a CDN. Here they come from the
  app's static files (``app/static/js``, copied from their npm packages; see
  ``app/static/README.md``), linked in the app and inlined in the export, so
  neither makes a request outside the machine.
- bertviz sends every weight of every head as JSON (1.7 GB at 512 tokens on a
  12 × 12 model). Here each row travels as its non-zero weights in whole
  percent, ``[key, percent, key, percent, …]`` (a line of weight < 0.005 is
  invisible anyway), rebuilt into bertviz's dense arrays in the page; and only
  the chosen layers and heads are sent, as many as fit in ``MAX_BYTES``; the
  page says what was left out.
- bertviz writes its data into the page with ``json.dumps``; a token
  ``</script>`` would end the script. Here the JSON goes through
  ``app.plain.json_for_html``.
"""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import streamlit as st
import torch

from app.plain import json_for_html

STATIC_JS = Path(__file__).parents[1] / "static" / "js"  # app/static/js
SCRIPTS = ("d3-5.7.0.min.js", "jquery-2.2.4.min.js", "require-2.3.6.js")  # d3/jQuery first: globals, not modules
STATIC_URL = "app/static/js"  # where streamlit serves app/static (server.enableStaticServing)
MAX_BYTES = 5 * 10**6  # the page, scripts excluded (the app links them; they are 0.41 MB)
# SVG elements a view may draw: Chromium takes ~11 µs each (2.4 s for 12 heads at 128 tokens, on the 2-core build
# machine), on the app page's own thread (a same-origin frame): MiniLM's 12 heads at 512 tokens froze it for 40 s.
# The model view draws one line per query-key pair of each head; the neuron view ~8 per pair (143k at 128 tokens;
# python scripts/measure_bertviz_draw.py).
MAX_DRAWN = 2**18
NEURON_PER_PAIR = 8
MODEL_VIEW_MAX_TOKENS = math.isqrt(MAX_DRAWN)  # 512: one head of a square map
NEURON_VIEW_MAX_TOKENS = math.isqrt(MAX_DRAWN // NEURON_PER_PAIR)  # 181
# The neuron view's five columns (query, key, q × k, q · k, softmax) need ~1,010 px; its SVG takes the frame's width,
# so in a narrower frame (a 1,280 px window gives 820) the last two were cut off: the page scrolls sideways instead.
NEURON_VIEW_WIDTH = 1040
PERCENT = 100  # weights are sent as integers 0..PERCENT: "7" instead of "0.07"
# Rebuilds one map's dense rows (what bertviz reads) from its sparse percent rows.
_DENSE = """function attnscopeDense(rows, n) {
  return rows.map(function (r) {
    var a = new Array(n).fill(0);
    for (var i = 0; i < r.length; i += 2) a[r[i]] = r[i + 1] / 100;
    return a;
  });
}
"""
# bertviz's model_view.js starts with a require.config pointing at the CDN; the modules are defined locally instead.
_CDN_CONFIG = re.compile(r"require\.config\(\{.*?\}\);", re.DOTALL)
_LOCAL_MODULES = "define('d3', [], function () { return d3; }); define('jquery', [], function () { return jQuery; });"


@dataclass
class ModelViewPage:
    html: str  # the page (scripts linked or inlined)
    layers: list[int]  # the layers it holds
    heads: list[int]  # the heads of each layer it holds
    note: str  # what was left out to stay within MAX_BYTES, or ""


def _map_json(weights: torch.Tensor) -> str:
    """One ``(q, k)`` map as JSON rows of ``key, percent`` pairs, zeros left out."""
    percent = torch.round(weights.float() * PERCENT).to(torch.int16)  # (q, k)
    rows = []
    for row in percent:  # (k,)
        keys = row.nonzero().squeeze(1)  # (n,)
        pairs = torch.stack([keys, row[keys].long()], dim=1).reshape(-1)  # (2n,)
        rows.append(",".join(map(str, pairs.tolist())))
    return "[" + ",".join(f"[{r}]" for r in rows) + "]"


def _vectors_json(vectors: torch.Tensor) -> str:
    """Query or key vectors ``(t, d)`` as compact JSON, 3 decimals; a non-finite one as JavaScript reads it (NaN,
    Infinity: Python's repr gave nan and inf, names the page's script stopped at)."""
    return json.dumps((torch.round(vectors.double() * 1000) / 1000).tolist(), separators=(",", ":"))


def _bounded(attentions: torch.Tensor, layers: list[int], heads: list[int], budget: int):
    """The layer rows (each a list of head-map JSON) that fit in ``budget`` bytes and ``MAX_DRAWN`` lines: whole
    layers, then heads."""
    rows, used, pairs = [], 0, attentions.shape[-2] * attentions.shape[-1]
    for layer in layers:
        row, row_used = [], 0
        for head in heads:
            text = _map_json(attentions[layer, head])  # (q, k)
            drawn = (sum(map(len, rows)) + len(row) + 1) * pairs
            if (used + row_used + len(text) > budget or drawn > MAX_DRAWN) and (rows or row):  # the first map is
                return rows or [row]  # always sent (``model_view_fits`` says if it can)
            row.append(text)
            row_used += len(text) + 1
        rows.append(row)
        used += row_used
    return rows


def model_view_fits(n_queries: int, n_keys: int) -> bool:
    """Whether one head's model view of a ``(q, k)`` map stays within ``MAX_DRAWN`` lines (square maps of up to
    ``MODEL_VIEW_MAX_TOKENS``)."""
    return n_queries * n_keys <= MAX_DRAWN


def neuron_view_fits(n_queries: int, n_keys: int) -> bool:
    """Whether the neuron view of a ``(q, k)`` map stays within ``MAX_DRAWN`` shapes (``NEURON_VIEW_MAX_TOKENS``)."""
    return NEURON_PER_PAIR * n_queries * n_keys <= MAX_DRAWN


def _script(inline: bool) -> str:
    """The scripts BertViz needs, linked from where the server serves them, or held in the page: for a saved page,
    and when the server serves no static files (started outside AttnScope's folder, its .streamlit/config.toml
    unread: the views were blank)."""
    served = st.get_option("server.enableStaticServing")
    if inline or not served:
        return "".join(f"<script>{(STATIC_JS / name).read_text()}</script>\n" for name in SCRIPTS)
    base = st.get_option("server.baseUrlPath").strip("/")  # --server.baseUrlPath /x serves them under /x/
    return "".join(f'<script src="{"/" + base if base else ""}/{STATIC_URL}/{name}"></script>\n' for name in SCRIPTS)


def _bertviz_js(params: str, view: str = "model_view") -> str:
    source = _CDN_CONFIG.sub(_LOCAL_MODULES, (files("bertviz") / f"{view}.js").read_text(), count=1)
    dense = ("p.attention.forEach(function (d) { d.attn = d.attn.map(function (layer) { return layer.map("
             "function (head) { return attnscopeDense(head, d.right_text.length); }); }); }); return p;")
    if view == "neuron_view":  # it reads window.bertviz_params, whose attention is a dict
        dense = ("var d = p.attention.all; d.attn = [[attnscopeDense(d.attn[0][0], d.right_text.length)]]; "
                 "return p;")
        return f"{_DENSE}window.bertviz_params = (function (p) {{ {dense} }})({params});\n{source}"
    # once: a comment names PYTHON_PARAMS too
    return _DENSE + source.replace("PYTHON_PARAMS", f"(function (p) {{ {dense} }})({params})", 1)


def model_view_page(attentions: torch.Tensor, queries: list[str], keys: list[str], layers: list[int],
                    heads: list[int], title: str = "", inline: bool = False) -> ModelViewPage:
    """BertViz's model view of ``layers`` × ``heads`` of ``attentions`` ``[layers, heads, q, k]``.

    ``inline`` puts the scripts in the page (a standalone file); otherwise it links the app's static copies.
    """
    rows = _bounded(attentions, layers, heads, MAX_BYTES)
    kept_layers, kept_heads = layers[:len(rows)], heads[:len(rows[-1])]  # a partial row only when alone
    note = ""
    if (kept_layers, kept_heads) != (layers, heads):
        tokens = f"{len(keys)} tokens" if len(queries) == len(keys) else f"{len(queries)} × {len(keys)} tokens"
        note = (f"At {tokens} only {len(kept_layers)} layer(s) × {len(kept_heads)} head(s) fit in "
                f"{MAX_BYTES / 1e6:g} MB and {MAX_DRAWN:,} lines (one per query–key pair of each head, about what "
                "a browser draws in 3 seconds); choose fewer layers or heads to see the others.")
    attn = "[" + ",".join("[" + ",".join(row) + "]" for row in rows) + "]"
    meta = json_for_html({"attention": [{"name": None, "attn": "ATTN", "left_text": queries, "right_text": keys}],
                          "default_filter": "0", "display_mode": "light", "root_div_id": "bertviz",
                          "include_layers": kept_layers, "include_heads": kept_heads,
                          "total_heads": int(attentions.shape[1])})
    params = meta.replace('"ATTN"', attn, 1)  # numbers only: nothing to escape
    heading = html.escape(title)
    page = ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{heading or 'BertViz model view'}</title></head><body style='margin:4px'>"
            "<div id='bertviz' style=\"font-family:'Helvetica Neue', Helvetica, Arial, sans-serif;\">"
            "<div id='vis'></div></div>\n"
            f"{_script(inline)}<script>{_bertviz_js(params)}</script></body></html>")
    return ModelViewPage(page, kept_layers, kept_heads, note)


def neuron_view_page(weights: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor, query_tokens: list[str],
                     key_tokens: list[str], causal: bool, title: str = "", inline: bool = False) -> str:
    """BertViz's neuron view of one head: ``weights (q, k)``, ``queries (q, d)``, ``keys (k, d)``.

    One head only (the app picks the layer and head), so bertviz's own layer and head menus are hidden.
    """
    vectors = [_vectors_json(v) for v in (queries, keys)]  # (t, d) each
    data = {"all": {"attn": "ATTN", "queries": "QUERIES", "keys": "KEYS", "left_text": query_tokens,
                    "right_text": key_tokens}}
    meta = json_for_html({"attention": data, "default_filter": "all", "root_div_id": "bertviz",
                          "bidirectional": not causal, "display_mode": "light", "layer": 0, "head": 0})
    params = (meta.replace('"ATTN"', f"[[{_map_json(weights)}]]", 1).replace('"QUERIES"', f"[[{vectors[0]}]]", 1)
              .replace('"KEYS"', f"[[{vectors[1]}]]", 1))  # numbers only: nothing to escape
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{html.escape(title) or 'BertViz neuron view'}</title></head><body style='margin:4px'>"
            f"<div id='bertviz' style=\"min-width:{NEURON_VIEW_WIDTH}px; font-family:'Helvetica Neue', Helvetica, "
            "Arial, sans-serif;\">"
            "<span style='display:none'><select id='layer'></select><select id='att_head'></select></span>"
            f"<div id='vis'></div></div>\n{_script(inline)}<script>{_bertviz_js(params, 'neuron_view')}</script>"
            "</body></html>")
