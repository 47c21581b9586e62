"""What the browser receives at 512 tokens on a 12-layer × 12-head model stays under 5 MB per view.

A synthetic map (random softmax rows: noise compresses worst, so this is the
upper end) stands in for a model; the numbers are in docs/app.md.
"""

import pytest
import torch

from app.views import head_view, plots

BUDGET = 5 * 10**6  # bytes per view
LAYERS = HEADS = 12
TOKENS = 512


def _attention() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(LAYERS, HEADS, TOKENS, TOKENS, generator=g) * 3).softmax(-1)  # (L, H, T, T)


def test_views_at_512_tokens_stay_under_budget():
    attn = _attention()
    tokens = [f"token{i % 97}" for i in range(TOKENS)]
    labels = [["sparse"] * HEADS for _ in range(LAYERS)]
    sheet = plots.thumbnail_sheet(attn, labels)
    overview = plots.figure_bytes(plots.overview_figure(sheet, None, (LAYERS, HEADS)))
    heatmap = plots.figure_bytes(plots.heatmap_figure(attn[3, 4], tokens, tokens, log_scale=True))
    view = len(head_view.head_view_html(attn, tokens, tokens, 3, 4).encode())
    assert overview < BUDGET and heatmap < BUDGET and view < BUDGET, (overview, heatmap, view)
    assert heatmap < 10**6  # pooled to MAX_CELLS per side, not 262,144 cells


def test_heatmap_hover_labels_are_unique_even_for_repeated_tokens():
    fig = plots.heatmap_figure(torch.full((3, 3), 1 / 3), ["the", "the", "the"], ["the", "the", "the"])
    assert len(set(fig.data[0].x)) == 3 and len(set(fig.data[0].y)) == 3


def test_bertviz_model_view_is_bounded_and_says_what_it_left_out():
    from app.views import bertviz_view

    attn = _attention()
    tokens = [f"token{i % 97}" for i in range(TOKENS)]
    page = bertviz_view.model_view_page(attn, tokens, tokens, list(range(LAYERS)), list(range(HEADS)))
    assert len(page.html.encode()) <= BUDGET + 50_000  # the data within 5 MB, plus bertviz's own script
    assert page.layers and page.heads and page.note  # random maps are the worst case: not every layer fits
    small = bertviz_view.model_view_page(attn[:, :, :16, :16], tokens[:16], tokens[:16], [0, 3], [1, 2])
    assert (small.layers, small.heads, small.note) == ([0, 3], [1, 2], "")


def test_bertviz_views_are_bounded_by_what_a_browser_draws_in_seconds():
    """MiniLM's 12 heads at 512 tokens drew 3.15 M lines (41.6 s with the app page frozen for 20 s at a stretch): the
    5 MB cap bounds bytes, not lines. Measured in Chromium: 2.4 s for 12 heads at 128 tokens (198 k elements), 5.9 s
    for the neuron view at 256 tokens (516 k)."""
    from app.views import bertviz_view

    attn = _attention()[:1]
    tokens = [f"token{i % 97}" for i in range(TOKENS)]
    page = bertviz_view.model_view_page(attn, tokens, tokens, [0], list(range(HEADS)))
    assert page.heads == [0] and "262,144 lines" in page.note  # one 512 × 512 head is 262,144 lines
    short = bertviz_view.model_view_page(attn[:, :, :128, :128], tokens[:128], tokens[:128], [0], list(range(HEADS)))
    assert (short.heads, short.note) == (list(range(HEADS)), "")  # 12 × 128² = 196,608 lines
    assert bertviz_view.model_view_fits(512, 512) and not bertviz_view.model_view_fits(513, 513)  # the page says so
    cross = bertviz_view.model_view_page(attn[:, :, :5, :300], tokens[:5], tokens[:300], [0], list(range(HEADS)))
    assert (cross.heads, cross.note) == (list(range(HEADS)), "")  # 12 × 5 × 300 lines
    assert bertviz_view.neuron_view_fits(128, 128) and bertviz_view.neuron_view_fits(181, 181)
    assert not bertviz_view.neuron_view_fits(182, 182) and not bertviz_view.neuron_view_fits(512, 512)


def test_a_saved_bertviz_view_carries_its_scripts():
    """The standalone file inlines the app's static copies of the scripts the served page links to."""
    from app.views import bertviz_view

    attn = _attention()[:, :, :8, :8]
    tokens = [f"token{i}" for i in range(8)]
    served = bertviz_view.model_view_page(attn, tokens, tokens, [0], [0]).html
    saved = bertviz_view.model_view_page(attn, tokens, tokens, [0], [0], inline=True).html
    for name in bertviz_view.SCRIPTS:
        assert f'src="/{bertviz_view.STATIC_URL}/{name}"' in served
        assert (bertviz_view.STATIC_JS / name).read_text()[:200] in saved
    assert "<script src=" not in saved



@pytest.mark.parametrize("options, linked", [({"server.baseUrlPath": "/x/"}, "/x/app/static/js/"),
                                            ({"server.enableStaticServing": False}, None)])
def test_bertviz_scripts_load_under_a_base_path_and_without_static_serving(monkeypatch, options, linked):
    """The views linked /app/static/js/ whatever the server's baseUrlPath (404: blank views under /x/), and linked
    it when the server serves no static files (started outside AttnScope's folder: Streamlit's index.html, blank
    views); with no static serving the page now carries the scripts."""
    from app.views import bertviz_view

    settings = {"server.enableStaticServing": True, "server.baseUrlPath": "", **options}
    monkeypatch.setattr(bertviz_view.st, "get_option", settings.__getitem__)
    attn, tokens = _attention()[:, :, :8, :8], [f"token{i}" for i in range(8)]
    page = bertviz_view.model_view_page(attn, tokens, tokens, [0], [0]).html
    for name in bertviz_view.SCRIPTS:
        if linked:
            assert f'<script src="{linked}{name}"></script>' in page
        else:
            assert (bertviz_view.STATIC_JS / name).read_text()[:200] in page and "<script src=" not in page

def test_bertviz_rows_hold_the_nonzero_percent_of_each_weight():
    import json

    from app.views.bertviz_view import _map_json

    weights = torch.tensor([[0.5, 0.004, 0.496], [0.0, 1.0, 0.0]])
    rows = json.loads(_map_json(weights))
    assert rows == [[0, 50, 2, 50], [1, 100]]  # key, percent; weights under 0.005 left out


def test_thumbnail_captions_give_the_pattern_and_the_roles_short_names():
    from diagnostics.classify.patterns import classify_heads

    previous = torch.eye(8).roll(-1, dims=1).tril()  # (8, 8): each token on the one before it
    previous[0, 0] = 1.0
    uniform = torch.ones(8, 8).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)  # (8, 8): causal, even
    attn = torch.stack([previous, uniform])[None]  # (1, 2, 8, 8)
    patterns = classify_heads(attn, causal=True)
    assert [r.role for r in patterns[0][0].roles][:1] == ["previous_token"]
    sheet = plots.thumbnail_sheet(attn, [[p.label for p in row] for row in patterns])
    fig = plots.overview_figure(sheet, patterns, (1, 2))
    first = fig.data[0].text[0]
    assert first.startswith(f"{patterns[0][0].label}<br>") and "prev" in first.split("<br>")[1]
    assert plots.caption(None) == "" and plots.caption(patterns[0][1]).split("<br>")[0] == patterns[0][1].label


def test_neuron_view_vectors_are_numbers_javascript_reads():
    """Python's repr wrote nan and inf, names the page's script stopped at; JSON's NaN and Infinity are numbers."""
    from app.views import bertviz_view

    vectors = torch.tensor([[1.23456, float("nan")], [float("inf"), -2.0]])  # (t, d)
    page = bertviz_view.neuron_view_page(torch.eye(2), vectors, vectors, ["a", "b"], ["a", "b"], causal=False)
    assert "[[[[1.235,NaN],[Infinity,-2.0]]]]" in page and "nan" not in page.replace("NaN", "")
    assert f"min-width:{bertviz_view.NEURON_VIEW_WIDTH}px" in page  # its five columns scroll, not cut off at 820 px
