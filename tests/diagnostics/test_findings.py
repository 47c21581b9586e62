"""Findings: the severity scale rule, the metric thresholds on hand-built metrics, redundancy by JS distance."""

import pytest
import torch

from diagnostics import FINDING_TEXTS, Finding
from diagnostics.findings import (
    DIFFUSE_GAP, attention_findings, cap_severity, head_names, make_finding, severity_for, sort_findings,
)
from diagnostics.measure.redundancy import PairwiseJS, js_distance, redundant_pairs


def test_severity_scales_with_the_share_of_heads():
    assert severity_for("diffuse_heads", 1, 12) == "info"  # the issue's "one diffuse head in twelve"
    assert severity_for("diffuse_heads", 3, 12) == "warning"
    assert severity_for("diffuse_heads", 6, 12) == "error"
    assert severity_for("saturated_heads", 12, 12) == "error"
    assert severity_for("sink_heads", 12, 12) == "info"  # healthy SmolLM2 sinks with 60% of its heads on Spanish
    assert severity_for("positional_heads", 12, 12) == "warning"  # benign codes never reach error
    assert severity_for("redundant_heads", 5, 12) == "warning"
    assert severity_for("redundant_heads", 6, 12) == "error"  # copies of half the heads or more
    assert severity_for("large_qk_scores", 12, 12) == "warning"  # an early warning, never an error


def metrics(n_layers=2, n_heads=4, **overrides):
    """Per-head metrics of ordinary sparse heads, with some heads overridden: name -> {(l, h): value}."""
    base = {"entropy": 0.6, "uniform_gap": 1.2, "confidence": 0.4, "sink_score": 0.2, "best_offset_mass": 0.2,
            "word_sink_score": 0.0}
    out = {name: torch.full((n_layers, n_heads), value) for name, value in base.items()}
    out["best_offset"] = torch.zeros(n_layers, n_heads, dtype=torch.long)
    for name, cells in overrides.items():
        for (layer, head), value in cells.items():
            out[name][layer, head] = value
    return out


def codes(findings):
    return {f.code: f for f in findings}


def test_most_of_one_layer_uniform_is_a_warning_however_few_heads_it_is_of_the_whole():
    """One re-initialised layer of SmolLM2 (loss 3.17 -> 12.15) was 9 of its 270 heads: information."""
    broken = attention_findings(metrics(8, 4, uniform_gap={(5, h): 0.0 for h in range(3)}))  # 3 of 4, 3 of 32
    assert broken[0].severity == "warning" and broken[0].details["layers"] == [5]
    assert "75% or more of the heads of layer 5 are among them." in broken[0].message
    spread = attention_findings(metrics(8, 4, uniform_gap={(layer, 0): 0.0 for layer in range(3)}))  # 1 per layer
    assert spread[0].severity == "info" and "layers" not in spread[0].details
    halves = attention_findings(metrics(8, 4, uniform_gap={(5, 0): 0.0, (5, 1): 0.0}))  # healthy demo-bert has such
    assert halves[0].severity == "info"
    many = {(layer, 0): 0.0 for layer in range(8)} | {(2, h): 0.0 for h in range(4)}  # 11 of 32: a warning by share
    found = attention_findings(metrics(8, 4, uniform_gap=many))[0]
    assert found.severity == "warning" and found.details["layers"] == [2]  # named whatever made it a warning


def test_a_layer_breaks_by_its_q_k_only_when_it_stands_out_from_the_model_s_other_layers():
    """Healthy SmolLM2 has 75% of layer 0's heads at a Q/K scale of 7.0 against the line at 10: layer 0's Q/K x 1.5
    warned while its LM loss moved by 0.05. Twice the line then missed MiniLM's one-layer Q/K x 4, which collapses
    the layer. And the layer sentence followed a list that held another layer's head, as if it were that layer's."""
    from diagnostics.findings import layer_level, outlying_layers

    assert layer_level(torch.tensor([1.0, 9.0, 12.0, 11.0]), small=False) == 9.0  # 3 of the 4 heads reach 9
    assert layer_level(torch.tensor([0.001, 0.5, 0.002, 0.003]), small=True) == pytest.approx(0.003)
    typical = {layer: 4.5 for layer in range(8)}
    assert outlying_layers({**typical, 0: 10.5}, 10.0) == []  # past the line, 2.3x the typical layer
    assert outlying_layers({**typical, 0: 14.0, 5: 30.0}, 10.0) == [0, 5]
    assert outlying_layers({layer: 30.0 for layer in range(8)}, 10.0) == []  # all alike: the share rule's to say
    assert outlying_layers({**typical, 3: float("nan")}, 10.0) == []
    assert outlying_layers({**typical, 2: 0.001}, 0.01, small=True) == [2]
    values = {"L0H3": 10.3, "L1H0": 21.0, "L1H1": 30.0, "L1H2": 20.5}
    far = make_finding("qk_scale_large", [[0, 3], [1, 0], [1, 1], [1, 2]], 32, details={"threshold": 10.0,
                       "values": values}, layer_heads=4, layers=[1], threshold=10.0)
    assert far.severity == "warning" and far.details["layers"] == [1]
    assert far.message.endswith(" 75% or more of the heads of layer 1 are among them, at 3 times the model's "
                                "typical layer or more.")
    near = make_finding("qk_scale_large", [[0, 3], [1, 0], [1, 1], [1, 2]], 32, details={"threshold": 10.0,
                        "values": values}, layer_heads=4, threshold=10.0)
    assert near.severity == "info" and "layers" not in near.details  # the caller found no layer standing out

def test_a_collapse_after_the_first_layer_points_at_what_comes_before():
    from diagnostics.findings import explain_diffuse, make_finding

    def suggestion(flagged, scale):
        finding = make_finding("diffuse_heads", flagged, 12, threshold=0.1)
        numbers = {("self", layer, head): {"qk_scale": scale(layer)} for layer in range(3) for head in range(4)}
        return explain_diffuse(finding, numbers).suggestion

    later = [[layer, h] for layer in (1, 2) for h in range(4)]  # layers 1-2 uniform, layer 0 healthy
    upstream = suggestion(later, lambda _: 1.5)
    assert "not Q/K: look at the normalisation that feeds layer 1" in upstream
    assert "the output norm of layer 0 in a post-LN one" in upstream and "pruned" not in upstream  # no Q/K advice
    shrunk = suggestion(later, lambda layer: 0.2 if layer else 1.5)  # their Q/K shrank: a layer re-initialised
    assert "what reaches them" not in shrunk and "prune them" not in shrunk and "restore them" in shrunk
    assert "7.50× smaller than the model's other heads' (RMS·√d_in 0.2–0.2 against a median of 1.5)" in shrunk


def test_uniform_heads_whose_q_k_grew_everywhere_are_told_that_training_diverged():
    """MiniLM fine-tuned at learning rate 0.1: 48 heads near uniform with Q/K at RMS·√d_in 11-12, as large as the
    others' because every head's grew (qk_scale_large: an error on 72 of 72), was told "not Q/K: look at the
    normalisation that feeds layer 2", a norm that was sound."""
    from diagnostics.findings import explain_diffuse, make_finding

    later = [[layer, h] for layer in (1, 2) for h in range(4)]
    numbers = {("self", layer, head): {"qk_scale": 10.3 + layer} for layer in range(3) for head in range(4)}
    grown = {(layer, head) for layer in range(3) for head in range(4)}  # qk_scale_large, an error on every head
    text = explain_diffuse(make_finding("diffuse_heads", later, 12, threshold=0.1), numbers, grown=grown).suggestion
    assert "what reaches them" in text and "not Q/K" not in text and "normalisation" not in text
    assert "Training diverged" in text and "lower the learning rate" in text and "11–12" in text
    assert "not Q/K" in explain_diffuse(make_finding("diffuse_heads", later, 12, threshold=0.1), numbers).suggestion
    # layers 0-1 grew, layer 2 shrank (a review: MiniLM's layers 0-3 Q/K x 8, 4-5 x 0.02): not "grew", but "smaller"
    numbers.update({("self", 2, head): {"qk_scale": 0.03} for head in range(4)})
    shrunk = [[2, h] for h in range(4)]
    text = explain_diffuse(make_finding("diffuse_heads", shrunk, 12, threshold=0.1), numbers,
                           grown={(layer, head) for layer in range(2) for head in range(4)}).suggestion
    assert "grew" not in text and "smaller than the model's other heads'" in text


def test_when_every_head_is_uniform_the_suggestion_says_it_cannot_tell_q_k_from_what_reaches_them():
    """Compared with themselves, every head's Q/K passed as "as large as the model's other heads'": Q/K x 0.1
    everywhere, and an untrained model, were told "not Q/K: look at the embeddings and their LayerNorm"."""
    from diagnostics.findings import explain_diffuse, make_finding

    every = [[layer, h] for layer in range(2) for h in range(4)]
    finding = make_finding("diffuse_heads", every, 8, threshold=0.1)
    numbers = {("self", layer, head): {"qk_scale": 0.15} for layer, head in every}
    text = explain_diffuse(finding, numbers).suggestion
    assert "what reaches them" not in text and "An untrained (randomly initialised) model looks like this" in text
    assert "compare its Q/K weights with an earlier checkpoint's" in text and "or the embeddings' norm" in text
    numbers[("self", 2, 0)] = numbers[("self", 2, 1)] = {"qk_scale": 0.2}  # 2 of 10 left, shrunk alike
    text = explain_diffuse(make_finding("diffuse_heads", every, 10, threshold=0.1), numbers).suggestion
    assert text.count("An untrained") == 1 and "2 of the 10 heads are not near uniform, too few" in text


def test_zeroed_q_k_and_random_ids_get_their_own_suggestions():
    """Q/K x 0 had the generic "check the Q/K initialisation ... can be pruned"; on random ids (no tokenizer)
    healthy demo-bert was told to restore a norm that was sound."""
    from diagnostics.findings import explain_diffuse, make_finding

    later = [[1, h] for h in range(4)]
    numbers = {("self", layer, head): {"qk_scale": 0.0 if layer == 1 else 1.5} for layer in range(3)
               for head in range(4)}
    zeroed = explain_diffuse(make_finding("diffuse_heads", later, 12, threshold=0.1), numbers).suggestion
    assert zeroed.startswith("Half or more of them have Q/K weights of zero") and "restore them" in zeroed
    assert "prune" not in zeroed.replace("no heads to prune", "")
    numbers = {key: {"qk_scale": 1.5} for key in numbers}
    on_ids = explain_diffuse(make_finding("diffuse_heads", later, 12, threshold=0.1), numbers, "random_ids")
    assert on_ids.suggestion.startswith("The probes were random token ids (there was no tokenizer)")
    assert "diagnose it on text before restoring anything" in on_ids.suggestion
    # a tokenizer whose vocabulary the default probes do not fit: no "there was no tokenizer"
    replaced = explain_diffuse(make_finding("diffuse_heads", later, 12, threshold=0.1), numbers, "replaced_ids")
    assert replaced.suggestion.startswith("Default probes that did not fit the vocabulary were replaced")
    assert "no tokenizer" not in replaced.suggestion


def test_copies_of_one_near_uniform_head_are_not_blamed_on_a_norm():
    """Every SmolLM2 head a copy of its layer's head 0: where that head was near uniform, the whole layer was,
    and the suggestion sent the user to the norm that feeds it."""
    from diagnostics.findings import explain_diffuse, make_finding

    layer = [[1, h] for h in range(4)]
    numbers = {("self", l, h): {"qk_scale": 1.5} for l in range(3) for h in range(4)}
    copied = explain_diffuse(make_finding("diffuse_heads", layer, 12, threshold=0.1), numbers,
                             copies={(1, h) for h in range(4)}).suggestion
    assert "copies of one near-uniform head" in copied and "normalisation" not in copied
    one_pair = explain_diffuse(make_finding("diffuse_heads", layer, 12, threshold=0.1), numbers,
                               copies={(1, 0), (0, 1)}).suggestion  # one of four: the layer is not copies
    assert "normalisation that feeds layer 1" in one_pair


def test_heads_alike_in_maps_but_not_in_weights_are_not_called_converged():
    """MiniLM's layer 3 Q/K biases x 30: 11 heads near copies, told they had converged in training, to prune."""
    from diagnostics.findings import explain_redundant, make_finding

    layer = [[3, h] for h in range(4)]
    found = make_finding("redundant_heads", layer, 16, layer_heads=4, threshold=0.1, n_pairs=6, pairs="…")
    generic = found.suggestion
    assert found.severity == "warning" and "converged" in generic
    copied = explain_redundant(make_finding("redundant_heads", layer, 16, layer_heads=4, threshold=0.1, n_pairs=6,
                                            pairs="…"), copies={(3, h) for h in range(4)})
    assert copied.suggestion == generic  # copied weights: the copying bug the text names
    shared = explain_redundant(found, copies={(3, 0)}).suggestion
    assert "something the heads share may outweigh what each computes" in shared and "before pruning" in shared
    few = make_finding("redundant_heads", [[0, 0], [0, 1]], 16, layer_heads=4, threshold=0.1, n_pairs=1, pairs="…")
    assert explain_redundant(few).suggestion == generic  # one pair, information: heads that converged
    unread = make_finding("redundant_heads", layer, 16, layer_heads=4, threshold=0.1, n_pairs=6, pairs="…")
    assert explain_redundant(unread, weights_read=False).suggestion == generic  # no copy could have been found


def test_sinks_and_positional_heads_in_a_layer_named_broken_are_not_called_benign():
    """MiniLM's layer 2 Q/K x 8 made L2H5-L2H7 sinks and L2H8, L2H11 positional, and the report called them
    "usually benign" / "fine for a few heads" beside a warning naming layer 2."""
    from diagnostics.findings import make_finding, qualify_benign

    large = make_finding("qk_scale_large", [[2, h] for h in range(4)], 16, layer_heads=4, layers=[2],
                         details={"values": {}}, threshold=10.0)
    sinks = make_finding("sink_heads", [[1, 1], [2, 1], [2, 3]], 16, threshold=0.5)
    positional = make_finding("positional_heads", [[0, 2]], 16, threshold=0.5)
    other_part = make_finding("sink_heads", [[2, 0]], 16, part="decoder", threshold=0.5)
    benign = sinks.suggestion
    qualify_benign([large, sinks, positional, other_part])
    assert sinks.suggestion == benign + (' Not so for L2H1, L2H3: they are in layer 2, which "Q/K weights too large" '
                                         "names, where the damage can make heads sink; judge them once that layer "
                                         "is restored.")
    assert "Not so" not in positional.suggestion and "Not so" not in other_part.suggestion
    large.severity = "info"  # a layer named at info (none is) or by a describing finding names nothing broken
    fresh = make_finding("sink_heads", [[2, 1]], 16, threshold=0.5)
    assert "Not so" not in qualify_benign([large, fresh])[1].suggestion


def test_ordinary_heads_give_no_findings():
    assert attention_findings(metrics()) == []


def test_diffuse_saturated_sink_and_positional_thresholds():
    m = metrics(
        entropy={(0, 0): 0.99, (0, 1): 0.02, (1, 3): 0.5},
        uniform_gap={(0, 0): 0.03},
        confidence={(0, 1): 0.97},
        sink_score={(1, 2): 0.8},
        best_offset_mass={(1, 3): 0.9},
        best_offset={(1, 3): -1},
    )
    found = codes(attention_findings(m, sink_tokens=[["a"] * 4, ["b", "b", "[CLS]", "b"]]))
    assert found["diffuse_heads"].heads == [[0, 0]] and found["diffuse_heads"].severity == "info"
    assert found["saturated_heads"].heads == [[0, 1]]
    assert found["sink_heads"].heads == [[1, 2]]
    assert found["sink_heads"].details["sink_tokens"] == {"L1H2": "[CLS]"}
    assert found["positional_heads"].details["offsets"] == {"L1H3": -1}
    assert found["diffuse_heads"].suggestion == FINDING_TEXTS["diffuse_heads"].suggestion


def test_heads_parked_on_an_ordinary_word_are_not_benign_sinks():
    """A damaged query bias sends every query of each head of its layer to one word of the text: sink scores that
    used to be called benign attention sinks. Most of a layer on ordinary words is a warning of its own."""
    word = {(1, h): 0.7 for h in range(3)}  # 3 of layer 1's 4 heads
    words = [[None] * 4, ["dog", "and", "tail", None]] * 2  # each head's word; ["."] below: its sink elsewhere
    found = codes(attention_findings(metrics(4, 4, sink_score=dict(word), word_sink_score=dict(word)),
                                     sink_tokens=[["[CLS]"] * 4, ["."] * 4] * 2, word_tokens=words))
    assert "sink_heads" not in found
    assert found["word_sink_heads"].heads == [[1, 0], [1, 1], [1, 2]]
    assert found["word_sink_heads"].severity == "warning" and found["word_sink_heads"].details["layers"] == [1]
    assert "50% or more of the heads of layer 1 are among them." in found["word_sink_heads"].message
    assert found["word_sink_heads"].details["sink_tokens"] == {"L1H0": "dog", "L1H1": "and", "L1H2": "tail"}
    # a head on a word is a trained model's (healthy SmolLM2 reaches 0.496 on a chat transcript, demo-gpt2 0.495)
    few = {(1, 0): 0.7, (1, 1): 0.4, (2, 1): 0.9}
    spread = codes(attention_findings(metrics(4, 4, sink_score=few, word_sink_score={(1, 0): 0.7, (1, 1): 0.4})))
    assert "word_sink_heads" not in spread and spread["sink_heads"].heads == [[1, 0], [2, 1]]
    below = codes(attention_findings(metrics(4, 4, sink_score=dict(word), word_sink_score={**word, (1, 1): 0.49,
                                                                                           (1, 2): 0.49})))
    assert "word_sink_heads" not in below


def test_half_a_layer_parked_on_words_is_a_broken_layer():
    """A random query bias x 20 in MiniLM's layer 5 (mean-pooled output cosine 0.28-0.56 to the healthy one) parked
    7-8 of its 12 heads on words, under 75%: only ``sink_heads`` info. No healthy model's head reaches 0.5."""
    word = {(5, h): 0.6 for h in range(6)}  # half of layer 5's 12 heads
    found = codes(attention_findings(metrics(6, 12, sink_score=dict(word), word_sink_score=dict(word))))
    assert found["word_sink_heads"].severity == "warning" and found["word_sink_heads"].details["layers"] == [5]
    fewer = {(5, h): 0.6 for h in range(5)}
    assert "word_sink_heads" not in codes(attention_findings(metrics(6, 12, sink_score=dict(fewer),
                                                                     word_sink_score=dict(fewer))))


def test_near_copies_that_are_most_of_one_layer_are_a_warning():
    """Q/K biases x 30 made 11 of MiniLM layer 3's 12 heads near copies: 11 of 72 heads, information."""
    from diagnostics.measure.redundancy import pairs_finding

    pairs = [(3, a, a + 1, 0.01) for a in range(10)]  # heads 0-10 of layer 3
    found = pairs_finding("redundant_heads", pairs, 72, "self", 0.1, layer_heads=12)
    assert found.severity == "warning" and found.details["layers"] == [3]
    assert pairs_finding("redundant_heads", pairs[:4], 72, "self", 0.1, layer_heads=12).severity == "info"


def test_sharp_heads_with_a_role_are_not_saturated():
    """A previous-token head (MiniLM L0H2), a dormant sink and an induction head are sharp by design."""
    m = metrics(n_heads=6, entropy={(0, 0): 0.01, (0, 1): 0.02, (0, 2): 0.03, (1, 0): 0.01},
                confidence={(0, 0): 0.99, (0, 1): 0.98, (0, 2): 0.97, (1, 0): 0.99},
                best_offset_mass={(0, 0): 0.99}, best_offset={(0, 0): -1}, sink_score={(0, 1): 0.85})
    copying = torch.zeros(2, 6, dtype=torch.bool)
    copying[0, 2] = True
    found = codes(attention_findings(m, copying=copying))
    assert found["saturated_heads"].heads == [[1, 0]] and found["saturated_heads"].severity == "info"
    assert found["positional_heads"].heads == [[0, 0]] and found["sink_heads"].heads == [[0, 1]]
    assert codes(attention_findings(m))["saturated_heads"].heads == [[0, 2], [1, 0]]  # no repeated probe


def test_most_heads_one_hot_is_collapse_whatever_their_roles():
    cells = {(l, h): 0.01 for l in range(2) for h in range(4)}
    m = metrics(entropy=cells, confidence={c: 0.99 for c in cells}, sink_score={c: 0.9 for c in list(cells)[:5]})
    found = codes(attention_findings(m))
    assert len(found["saturated_heads"].heads) == 8 and found["saturated_heads"].severity == "error"


def test_cap_severity_for_unfit_probes():
    m = metrics(uniform_gap={(l, h): 0.0 for l in range(2) for h in range(4)})
    capped = cap_severity(attention_findings(m))
    assert [(f.code, f.severity) for f in capped] == [("diffuse_heads", "warning")]


def test_most_heads_uniform_is_an_error_and_sorted_first():
    m = metrics(uniform_gap={(l, h): 0.0 for l in range(2) for h in range(4) if (l, h) != (1, 3)},
                sink_score={(1, 3): 0.9})
    found = sort_findings(attention_findings(m))
    assert [f.code for f in found] == ["diffuse_heads", "sink_heads"]
    assert found[0].severity == "error" and "7 of 8 heads (88%)" in found[0].message
    assert f"{DIFFUSE_GAP} nats" in found[0].message


def test_near_uniform_is_judged_by_the_gap_to_uniform_at_any_length():
    # logits with the same spread over 16 and over 1024 keys: normalised entropy rises with length,
    # the KL gap to uniform stays (~sigma^2 / 2 = 0.045 nats here, below DIFFUSE_GAP, at both lengths)
    from diagnostics.measure.metrics import head_metrics

    g = torch.Generator().manual_seed(0)
    short, long = ((torch.randn(n, n, generator=g) * 0.3).softmax(-1) for n in (16, 1024))  # (n, n)
    gaps = [float(head_metrics(a).uniform_gap) for a in (short, long)]
    entropies = [float(head_metrics(a).entropy) for a in (short, long)]
    assert entropies[1] > entropies[0] and abs(gaps[1] - gaps[0]) < 0.02 and max(gaps) < DIFFUSE_GAP
    sharper = (torch.randn(1024, 1024, generator=g) * 1.0).softmax(-1)  # sigma^2 / 2 = 0.5 nats
    assert float(head_metrics(sharper).uniform_gap) > 4 * DIFFUSE_GAP


def test_finding_wording_and_part_names():
    f = make_finding("saturated_heads", [[1, 0], [0, 2]], 8, part="decoder", threshold=0.1, confidence=0.9)
    assert isinstance(f, Finding) and f.heads == [[0, 2], [1, 0]] and f.part == "decoder"
    assert "decoder L0H2, decoder L1H0" in f.message
    assert f.to_dict()["code"] == "saturated_heads"
    assert head_names([[0, i] for i in range(15)], limit=12).endswith("… and 3 more")


def test_every_finding_text_formats():
    for code, text in FINDING_TEXTS.items():
        assert text.title and text.meaning and text.suggestion, code
    for code in ("diffuse_heads", "sink_heads", "dead_heads", "qk_scale_small"):
        assert make_finding(code, [[0, 0]], 12, threshold=0.5, layer_threshold=0.02).severity in ("info", "warning")


def causal_rows(q, peak):
    """A causal [q, q] map putting `peak` of each row on the previous token, rest uniform over visible keys."""
    a = torch.zeros(q, q)
    for i in range(q):
        a[i, : i + 1] = (1 - peak) / (i + 1)
        a[i, max(i - 1, 0)] += peak
    return a


def test_js_distance_identical_zero_distinct_large():
    q = 10
    uniform = torch.tril(torch.ones(q, q)) / torch.arange(1, q + 1).unsqueeze(1)
    heads = torch.stack([causal_rows(q, 0.9), causal_rows(q, 0.9), uniform, torch.eye(q)]).unsqueeze(0)  # (1, 4, q, q)
    d = js_distance(heads, causal=True)[0]  # (4, 4)
    assert d[0, 1] == pytest.approx(0.0, abs=1e-4)
    assert d[0, 2] > 0.4 and d[0, 3] > 0.5
    assert torch.allclose(d, d.T, atol=1e-6)
    assert redundant_pairs(d.unsqueeze(0)) == [(0, 0, 1, pytest.approx(0.0, abs=1e-4))]
    exclude = torch.tensor([[True, False, False, False]])
    assert redundant_pairs(d.unsqueeze(0), exclude=exclude) == []


def test_js_distance_ignores_row_zero_of_causal_maps():
    a = causal_rows(6, 0.9)
    b = a.clone()
    c = a.clone()
    c[1:] = causal_rows(6, 0.2)[1:]  # differs everywhere but row 0, which is forced anyway
    d = js_distance(torch.stack([a, b, c]).unsqueeze(0), causal=True)[0]
    assert d[0, 1] < 1e-4 and d[0, 2] > 0.2


def test_js_on_a_row_subsample_is_the_same_streamed_or_whole():
    """Rows are picked by absolute position, so chunks that do not divide the map measure the same rows."""
    torch.manual_seed(0)
    q = 40
    maps = (torch.randn(1, 3, q, q) * 3).masked_fill(~torch.ones(q, q, dtype=torch.bool).tril(), float("-inf"))
    maps = maps.softmax(-1)  # (1, 3, q, q) causal
    whole = js_distance(maps, causal=True, max_rows=8)[0]  # every 5th row
    js = PairwiseJS(q, True, max_rows=8)
    for start in range(0, q, 7):
        js.update(maps[0, :, start:start + 7], start)
    torch.testing.assert_close(js.finalize(), whole, atol=1e-6, rtol=0)
    exact = js_distance(maps, causal=True)[0]
    assert (whole - exact).abs().max() < 0.1 and not torch.equal(whole, exact)


def test_js_on_a_row_subsample_does_not_alias_with_a_periodic_text():
    """Every stride-th row read a text repeating with that period at the same place of each repeat: two heads that
    differ on 7 rows of every 8 and agree on the eighth came out identical (SmolLM2 on a repeated line: a
    redundant_heads finding that every row did not support)."""
    q, period = 1024, 8  # 1024 rows, 128 measured: one of every 8
    causal = torch.ones(q, q, dtype=torch.bool).tril()  # (q, q)
    uniform = causal.float() / causal.sum(-1, keepdim=True)  # (q, q)
    previous = torch.eye(q).roll(-1, dims=1).tril() + torch.eye(q) * (torch.arange(q) == 0).float()  # (q, q)
    other = torch.where((torch.arange(q) % period == 0).unsqueeze(1), uniform, previous)  # (q, q)
    maps = torch.stack([uniform, other]).unsqueeze(0)  # (1, 2, q, q)
    exact = js_distance(maps, causal=True, max_rows=q)[0, 0, 1]
    sampled = js_distance(maps, causal=True)[0, 0, 1]
    assert exact > 0.8 and abs(sampled - exact) < 0.1  # every 8th row alone: 0


def test_a_share_under_half_a_percent_reads_under_one_percent_not_zero():
    from diagnostics.findings import make_finding, percent

    assert [percent(0, 270), percent(1, 270), percent(2, 270), percent(7, 8)] == ["0%", "<1%", "1%", "88%"]
    assert "1 of 270 heads (<1%)" in make_finding("qk_scale_large", [[0, 3]], 270, threshold=10.0).message


def test_weight_findings_give_each_heads_number_and_advice_for_a_broken_checkpoint():
    """Healthy SmolLM2's L0H3 was told to re-initialise its Q/K without its 10.3 against the line of 10 shown; a
    saturated checkpoint was only told how to train, and copied heads to prune one of each pair."""
    from diagnostics.findings import make_finding

    large = make_finding("qk_scale_large", [[0, 3]], 270, details={"values": {"L0H3": 10.2634}}, threshold=10.0)
    assert large.message.endswith("> 10.0: L0H3 (10.26).") and "needs nothing" in large.suggestion
    scores = make_finding("large_qk_scores", [[0, 3], [1, 0]], 270, details={"values": {"L0H3": 128.4, "L1H0": 4463.2}},
                          threshold=128.0)
    assert scores.message.endswith(": L0H3 (128.4), L1H0 (4,463.2).")  # not 128 (the threshold) or 4.46e+03
    small = make_finding("qk_scale_small", [[0, 0]], 4, details={"values": {"L0H0": 0.0099}}, threshold=0.01)
    assert small.message.endswith(": L0H0 (0.0099).")
    assert "1/√d_k" in make_finding("saturated_heads", [[0, 0]], 4, threshold=0.1, confidence=0.9).suggestion
    copies = make_finding("redundant_heads", [[0, 0], [0, 1]], 4, threshold=0.1, n_pairs=1, pairs="L0H0–L0H1")
    assert "restore the heads from the source checkpoint" in copies.suggestion
    diffuse = make_finding("diffuse_heads", [[0, 0]], 4, details={"values": {"L0H0": 0.01}}, threshold=0.1)
    assert diffuse.message.endswith(": L0H0.")  # attention findings keep their numbers in details
