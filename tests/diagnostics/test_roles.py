"""Head roles and sink-factored patterns on hand-built maps, the repeated probe, and the report."""

import pytest
import torch

from core.result import AttentionResult
from diagnostics import ROLE_TEXTS, ROLES, diagnose
from diagnostics.classify.patterns import DIFFUSE_MIN, classify_head, classify_heads
from diagnostics.classify.roles import BROAD_MIN, LOCAL_DISTANCE, SINK_MIN, head_roles, repeated_scores, role_scores
from diagnostics.measure.metrics import SINK_REFERENCE_KEYS, MetricAccumulator, head_metrics, sink_level
from diagnostics.probes import RepeatedProbe
from tiny import tiny_gpt2, wordpiece_tokenizer

N = 24


def causal_rows(n, targets, sink):
    """Causal map: ``sink`` on key 0 and the rest on ``targets(i)`` (a key index <= i)."""
    m = torch.zeros(n, n)
    for i in range(n):
        m[i, 0] += sink if i > 0 else 1.0
        if i > 0:
            m[i, targets(i)] += 1 - sink
    return m


def names(roles):
    return [r.role for r in roles]


def test_previous_token_head_with_a_sink_is_diagonal_with_both_roles():
    head = classify_head(causal_rows(N, lambda i: i - 1 if i > 1 else 1, sink=0.5), causal=True)
    assert head.label == "diagonal" and head.offset == -1  # Kovaleva et al.'s vertical + diagonal
    assert {"previous_token", "sink"} <= set(names(head.roles))
    scores = {r.role: r.score for r in head.roles}
    assert scores["previous_token"] > 0.9 and scores["sink"] == pytest.approx(0.5, abs=0.05)


def test_pure_sink_stays_vertical_with_only_the_sink_role():
    head = classify_head(causal_rows(N, lambda i: i, sink=0.95), causal=True)
    assert head.label == "vertical" and "sink" in names(head.roles)  # its last 5% on itself is its rest
    assert "previous_token" not in names(head.roles)


def test_a_head_with_almost_nothing_off_its_sink_has_no_role_of_that_rest():
    """A head with all its mass on the first token was also "local" (its rest, none, within 0 tokens of the
    query); the ground truth gives a head with < 5 % off the sinks no role but the sink (custom-model audit)."""
    for sink in (1.0, 0.99):  # none left, or 1 % on the previous token
        head = classify_head(causal_rows(N, lambda i: i - 1 if i > 1 else 1, sink=sink), causal=True)
        assert names(head.roles) == ["sink"], head.roles
    head = classify_head(causal_rows(N, lambda i: i - 1 if i > 1 else 1, sink=0.9), causal=True)
    assert "previous_token" in names(head.roles)  # 10 % off the sink: its rest has a role


def test_a_sink_beside_an_unstructured_rest_is_the_pattern_of_the_rest():
    # 0.7 on the first token, the rest uniform: Kovaleva et al. would call it vertical; with the sink
    # factored out it is diffuse with the sink role (only an almost pure sink stays vertical)
    m = torch.full((N, N), 0.3 / (N - 1))
    m[:, 0] = 0.7
    head = classify_head(m, causal=False)
    assert head.label == "diffuse" and {"sink", "broad"} <= set(names(head.roles))


def test_sink_level_carries_the_sink_mass_to_twenty_tokens():
    mass = torch.tensor([0.0, 0.1, 0.3, 0.6, 1.0])
    torch.testing.assert_close(sink_level(mass, SINK_REFERENCE_KEYS), mass, atol=1e-6, rtol=0)
    longer, shorter = sink_level(mass, 4 * SINK_REFERENCE_KEYS), sink_level(mass, SINK_REFERENCE_KEYS // 2)
    assert (longer[1:4] > mass[1:4]).all() and (shorter[1:4] < mass[1:4]).all()
    assert (longer.diff() > 0).all() and longer[0] < 1e-5 and longer[-1] > 1 - 1e-5  # monotone, 0 and 1 stay


def test_the_same_sink_share_is_a_sink_on_a_long_text_only():
    # a head that leaves 0.8 of every row to the text, spread over the previous tokens: on 20 tokens 0.2 on
    # the first token is a small share; on 160 tokens, where every other key gets ~0.005, it is a sink
    def head(n):
        m = torch.zeros(n, n)
        for i in range(1, n):
            m[i, 0], m[i, 1:i + 1] = 0.2, 0.8 / i
        m[0, 0] = 1.0
        return classify_head(m, causal=True)

    assert "sink" not in names(head(SINK_REFERENCE_KEYS).roles)
    assert "sink" in names(head(8 * SINK_REFERENCE_KEYS).roles)
    assert {r.role: r.score for r in head(8 * SINK_REFERENCE_KEYS).roles}["sink"] >= SINK_MIN


def test_padding_does_not_change_the_sink_level():
    n, pad = 30, 10
    logits = torch.randn(2, n + pad, n + pad, generator=torch.Generator().manual_seed(0))
    logits[..., 0] += 2
    padding = torch.tensor([False] * n + [True] * pad)
    padded = logits.masked_fill(padding, float("-inf")).softmax(-1)  # (H, q + pad, k + pad): no key is padding
    unpadded = padded[:, :n, :n]  # (H, q, k)
    torch.testing.assert_close(head_metrics(padded, padding=padding).sink_level, head_metrics(unpadded).sink_level)


def test_broad_role_and_diffuse_pattern_share_one_threshold():
    assert BROAD_MIN == DIFFUSE_MIN


def test_next_token_head_of_a_bidirectional_model():
    n = N
    m = torch.zeros(n, n)
    m[torch.arange(n), (torch.arange(n) + 1).clamp(max=n - 1)] = 1.0
    head = classify_head(m, causal=False)
    assert head.label == "diagonal" and head.offset == 1 and "next_token" in names(head.roles)


def test_long_local_window_is_local_not_block():
    n = 512
    d = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (q, k) query - key
    logits = torch.where(d >= 0, -d.float() / 2.0, float("-inf"))  # self 0.39, mean distance ~1.5
    head = classify_head(logits.softmax(-1), causal=True)
    assert head.label != "block" and "local" in names(head.roles)


@pytest.mark.parametrize("n, causal", [(8, False), (512, True)])
def test_the_local_score_is_the_distance_its_threshold_reads(n, causal):
    """It was the sum of seven per-offset means, each over its own rows: 1.18 on MiniLM's short texts, 1.67 on a
    4-token map, though documented as a share of the mass."""
    d = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (q, k) query - key
    near = (d >= 0) & (d <= 4) if causal else d.abs() <= 2  # (q, k) a flat window around the query
    weights = torch.where(near, 0.0, float("-inf")).softmax(-1)  # (q, k)
    [role] = [r for r in classify_head(weights, causal=causal).roles if r.role == "local"]
    assert role.score == pytest.approx(float(head_metrics(weights, causal=causal).rest_mean_distance), abs=1e-4)
    assert role.score <= LOCAL_DISTANCE


def test_uniform_segments_are_block():
    n = 64
    seg = torch.arange(n) // 16
    m = (seg[:, None] == seg[None, :]).float()
    head = classify_head(m / m.sum(-1, keepdim=True), causal=False)
    assert head.label == "block"


def test_sink_metrics_accumulate_chunk_by_chunk():
    g = torch.Generator().manual_seed(3)
    n = 37
    logits = torch.randn(2, 3, n, n, generator=g) * 3
    logits[..., 0] += 2  # a sink on the first token
    logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    attn = logits.softmax(-1)  # (L, H, q, k)
    special = torch.zeros(n, dtype=torch.bool)
    special[5] = True
    full = head_metrics(attn, causal=True, special=special)
    acc = MetricAccumulator(n, True, special=special)
    for start, stop in ((20, 33), (0, 7), (7, 20), (33, n)):
        acc.update(attn[..., start:stop, :], start)
    chunked = acc.finalize()
    for name in ("sink_mass", "sink_level", "block_score", "rest_entropy", "rest_diag_mass", "rest_best_offset_mass",
                 "rest_sink_score", "rest_sink2_score", "rest_mean_distance"):
        torch.testing.assert_close(getattr(chunked, name), getattr(full, name), atol=1e-5, rtol=0)


def repeated_result(causal):
    """A fake repeated probe: 2 heads on [first, 8 tokens, the same 8]; head 0 induction, head 1 duplicate."""
    half, prefix = 8, 1
    n = prefix + 2 * half
    attn = torch.zeros(1, 2, n, n)
    for i in range(n):
        second = i >= prefix + half
        for h, shift in ((0, 1 - half), (1, -half)):
            target = i + shift if second else 0
            attn[0, h, i, 0] += 0.6 if second else 1.0
            attn[0, h, i, target] += 0.4 if second else 0.0
    tokens = ["<s>"] + [f"t{i}" for i in range(half)] * 2
    result = AttentionResult(tokens, attn, causal, [True] + [False] * (n - 1), [False] * n)
    return RepeatedProbe(result, prefix, half)


def test_repeated_probe_scores_induction_and_duplicate_heads():
    scores = repeated_scores(repeated_result(True))
    assert scores["induction"][0, 0] == pytest.approx(1.0) and scores["induction"][0, 1] < 0.1
    assert scores["duplicate_token"][0, 1] == pytest.approx(1.0) and scores["duplicate_token"][0, 0] < 0.1
    m = head_metrics(repeated_result(True).result.attentions, causal=True)
    causal_roles = head_roles(role_scores(m, scores), causal=True)
    assert "induction" in names(causal_roles[0][0]) and "duplicate_token" in names(causal_roles[0][1])
    bidirectional = head_roles(role_scores(m, scores), causal=False)
    assert "induction" not in names(bidirectional[0][0])  # a bidirectional head sees the answer


def test_every_role_has_a_text():
    assert set(ROLE_TEXTS) == set(ROLES)


def test_the_texts_state_the_rules_the_labels_follow():
    """The Guide called every vertical head a sink and every diffuse head an attention failure ("check Q/K init"),
    while the labels set the sink aside: 64 of SmolLM2's 68 sink heads were labelled sparse, and 12 of healthy
    demo-bert's 16 heads diffuse. It also said "most" for a 0.4 share, and named offsets -1..+1 of -3..+3."""
    from diagnostics.classify.patterns import PURE_SINK
    from diagnostics.classify.roles import OFFSET_MIN
    from diagnostics.texts import FINDING_TEXTS, PATTERN_TEXTS

    stripe = torch.zeros(N, N)
    for i in range(N):  # 0.7 on token 0, the rest spread evenly over the other keys the query sees
        stripe[i, 1:i + 1] = 0.3 / i if i else 0
        stripe[i, 0] = 0.7 if i else 1.0
    head = classify_head(stripe, causal=True)
    assert head.label == "diffuse" and "sink" in names(head.roles)  # a smaller sink: labelled by the rest
    assert f"At least {PURE_SINK} of the mass on the sink" in PATTERN_TEXTS["vertical"].looks_like
    assert "labelled by what it does with the rest" in PATTERN_TEXTS["vertical"].looks_like
    assert f"≥ {DIFFUSE_MIN}" in PATTERN_TEXTS["diffuse"].looks_like
    assert "Nothing to do unless" in PATTERN_TEXTS["diffuse"].action
    two_back = classify_head(causal_rows(N, lambda i: max(i - 2, 1), sink=0.0), causal=True)
    assert (two_back.label, two_back.offset) == ("diagonal", -2)
    assert "up to 3" in PATTERN_TEXTS["diagonal"].looks_like and "up to 3" in FINDING_TEXTS[
        "positional_heads"].meaning
    for role in ("previous_token", "next_token", "self"):
        assert ROLE_TEXTS[role].meaning.startswith(f"Puts at least {OFFSET_MIN} of its non-sink attention")
    assert f"at least {SINK_MIN} of its attention" in ROLE_TEXTS["sink"].meaning
    assert f"{SINK_REFERENCE_KEYS}-token" in ROLE_TEXTS["sink"].meaning
    assert "beyond an even share" in FINDING_TEXTS["sink_heads"].message


def test_report_heads_carry_roles_from_the_vocabulary():
    report = diagnose((tiny_gpt2(), wordpiece_tokenizer()), texts=["The cat sat on the mat.", "A dog barked."])
    assert all(isinstance(h.roles, list) for h in report.heads)
    assert all(r.role in ROLES and 0 <= r.score <= 1.0001 for h in report.heads for r in h.roles)
    assert report.to_dict()["heads"][0]["roles"] == [r.to_dict() for r in report.heads[0].roles]


def test_classify_heads_gives_roles_for_batches():
    attn = torch.stack([causal_rows(N, lambda i: i - 1 if i > 1 else 1, 0.5), causal_rows(N, lambda i: i, 0.95)])
    heads = classify_heads(attn, causal=True)
    assert "previous_token" in names(heads[0].roles) and "sink" in names(heads[1].roles)
