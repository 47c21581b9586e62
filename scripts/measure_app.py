"""Bytes the app sends and seconds it takes at 512 tokens on a 12-layer × 12-head model.

A random-init BERT (12 layers, 12 heads, hidden 96) runs on 512 tokens; every
step the Inspect page takes for its first heatmap is timed, and the payload of
each view is measured as the bytes the browser receives (figure JSON, iframe
HTML). Run: ``python scripts/measure_app.py``; docs/app.md holds the numbers.
"""

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402
from transformers import BertConfig, BertModel  # noqa: E402

import core  # noqa: E402
from app.views import head_view, plots  # noqa: E402
from app.views.head_detail import MODES  # noqa: E402,F401  (imports the page helpers the app uses)
from diagnostics.measure.metrics import head_metrics  # noqa: E402
from diagnostics.classify.patterns import classify_heads  # noqa: E402
from tiny import wordpiece_tokenizer  # noqa: E402


def timed(label, fn, times):
    start = time.perf_counter()
    out = fn()
    times[label] = time.perf_counter() - start
    return out


def main():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=200, hidden_size=96, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=128, max_position_embeddings=512)
    model = BertModel(config, add_pooling_layer=False).eval()
    tokenizer = wordpiece_tokenizer()
    tokenizer.model_max_length = 512
    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 80)
    times = {}
    r = timed("extract_attention", lambda: core.extract_attention(model, tokenizer, text), times)
    tokens = list(r.tokens)
    pats = timed("classify_heads (144 heads)",
                 lambda: classify_heads(r.attentions, r.causal, r.keys_special, r.keys_padding, r.windows), times)
    labels = [[p.label for p in row] for row in pats]
    sheet = timed("thumbnail sheet PNG", lambda: plots.thumbnail_sheet(r.attentions, labels), times)
    overview = timed("overview figure", lambda: plots.overview_figure(sheet, pats, (12, 12)), times)
    heat = timed("heatmap figure", lambda: plots.heatmap_figure(r.attentions[3, 4], tokens, tokens), times)
    heat_log = plots.heatmap_figure(r.attentions[3, 4], tokens, tokens, log_scale=True)
    timed("head metrics (1 head)", lambda: head_metrics(r.attentions[3, 4], causal=r.causal), times)
    view = timed("head view HTML", lambda: head_view.head_view_html(r.attentions, tokens, tokens, 3, 4), times)
    g = torch.Generator().manual_seed(0)
    peaked = (torch.randn(12, 12, 512, 512, generator=g) * 3).softmax(-1)  # many links above 0.01: worst case
    peaked_view = head_view.head_view_html(peaked, tokens, tokens, 3, 4)
    peaked_sheet = plots.thumbnail_sheet(peaked, labels)
    peaked_overview = plots.overview_figure(peaked_sheet, pats, (12, 12))
    full = 4 * r.attentions.numel()
    print(f"tokens: {len(tokens)}; attention tensor {tuple(r.attentions.shape)} = {full / 1e6:.0f} MB float32")
    for name, size in [("overview (figure JSON incl. thumbnail PNG)", plots.figure_bytes(overview)),
                       ("  of which thumbnail PNG", len(sheet)),
                       ("head detail heatmap, linear (figure JSON)", plots.figure_bytes(heat)),
                       ("head detail heatmap, log (figure JSON)", plots.figure_bytes(heat_log)),
                       ("head view (iframe HTML, 12 heads of a layer)", len(view.encode())),
                       ("overview, synthetic peaked softmax maps", plots.figure_bytes(peaked_overview)),
                       ("head view, synthetic peaked softmax maps", len(peaked_view.encode()))]:
        print(f"{name:48s} {size / 1e6:7.3f} MB")
    for name, seconds in times.items():
        print(f"{name:48s} {seconds:7.2f} s")
    # Inspect draws the selected head before labelling every head (the overview is filled last)
    first = times["extract_attention"] + times["head metrics (1 head)"] + times["heatmap figure"]
    overview = times["classify_heads (144 heads)"] + times["thumbnail sheet PNG"] + times["overview figure"]
    print(f"{'server time to first heatmap':48s} {first:7.2f} s")
    print(f"{'  then to the full overview':48s} {first + overview:7.2f} s")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
