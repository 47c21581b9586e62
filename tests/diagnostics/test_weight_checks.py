"""Weight access per architecture (parity with the models' own attention) and the weight-only checks."""

import pytest
import torch
from torch import nn

import core
from transformers import (
    Gemma2Config, Gemma2Model, GemmaConfig, GemmaModel, GPT2Config, GPT2Model, LlamaConfig, LlamaModel,
    PersimmonConfig, PersimmonModel, Qwen3Config, Qwen3Model,
)
from core.extraction.head_weights import attention_weights
from diagnostics.weights.qk_norms import record_qk_norms
from diagnostics.weights.weight_checks import (
    QK_SCALE_LARGE, QK_SCALE_SMALL, check_weights, layer_stats, weight_findings,
)
from tiny import tiny_bart, tiny_bert, tiny_gpt2, tiny_t5


def tiny_llama():
    """Llama with grouped-query attention: 4 query heads share 2 key/value heads."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaModel(config).eval()


def tiny_gemma():
    """Gemma with one key/value head for its 4 query heads (multi-query) and head_dim 8."""
    torch.manual_seed(0)
    config = GemmaConfig(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=64)
    return GemmaModel(config).eval()


def custom():
    torch.manual_seed(0)
    return core.AttnScopeTransformer(core.TINY_PRESETS["attnscope-nano-decoder"]).eval()


def mha_stack():
    torch.manual_seed(0)
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, dim_feedforward=37, batch_first=True), 2)


@pytest.mark.parametrize("build, parts", [
    (tiny_bert, {"self": 2}), (tiny_gpt2, {"self": 2}), (custom, {"self": 2}), (mha_stack, {"self": 2}),
    (tiny_llama, {"self": 2}), (tiny_gemma, {"self": 2}),
    (tiny_bart, {"encoder": 2, "decoder": 2, "cross": 2}), (tiny_t5, {"encoder": 2, "decoder": 2, "cross": 2}),
])
def test_every_known_layout_is_found(build, parts):
    layers = attention_weights(build())
    found = {}
    for lw in layers:
        found[lw.part] = found.get(lw.part, 0) + 1
        assert (lw.n_heads, lw.d_head) == (4, 8)
        assert lw.w_q.shape == lw.w_k.shape == (32, 32) and lw.w_o.shape == (32, 32)
    assert found == parts
    expected = 1.0 if build is tiny_t5 else 8 ** -0.5  # T5 does not scale its scores
    assert [lw.scale for lw in layers] == pytest.approx([expected] * len(layers))


def first_layer_maps(model, x):
    """Attention maps of layer 0 recomputed from ``attention_weights`` (biases zeroed in the model)."""
    lw = attention_weights(model)[0]
    q = torch.einsum("hdi,ti->htd", lw.heads(lw.w_q), x)  # (H, T, d)
    k = torch.einsum("hdi,ti->htd", lw.heads(lw.w_k), x)  # (H, T, d)
    scores = q @ k.transpose(1, 2) * lw.scale  # (H, T, T)
    return scores


@torch.no_grad()
def test_gpt2_fused_weights_parity():
    model = tiny_gpt2()
    model.set_attn_implementation("eager")  # SDPA returns no weights
    for block in model.h:
        block.attn.c_attn.bias.zero_()
    ids = torch.arange(10).unsqueeze(0)
    x = model.h[0].ln_1(model.wte(ids) + model.wpe(torch.arange(10)))[0]  # (T, C)
    scores = first_layer_maps(model, x).masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), float("-inf"))
    expected = model(ids, output_attentions=True).attentions[0][0]  # (H, T, T)
    assert torch.allclose(scores.softmax(-1), expected, atol=1e-5)


@torch.no_grad()
def test_bert_weights_parity():
    model = tiny_bert()
    model.set_attn_implementation("eager")
    for layer in model.encoder.layer:
        layer.attention.self.query.bias.zero_()
        layer.attention.self.key.bias.zero_()
    ids = torch.arange(10).unsqueeze(0)
    x = model.embeddings(ids)[0]  # (T, C)
    expected = model(ids, output_attentions=True).attentions[0][0]  # (H, T, T)
    assert torch.allclose(first_layer_maps(model, x).softmax(-1), expected, atol=1e-5)


def test_unknown_architecture_is_an_info_note():
    findings, per_head = check_weights(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    assert [(f.code, f.severity) for f in findings] == [("weights_unavailable", "info")] and per_head == {}


def test_a_layout_with_a_part_no_reader_knows_is_skipped_not_a_traceback():
    """A BERT whose queries are wrapped in nn.Sequential stopped the diagnosis with "'Sequential' object has no
    attribute 'weight'"; its layers are now simply not read."""
    from diagnostics import diagnose
    from tiny import wordpiece_tokenizer

    model = tiny_bert()
    for layer in model.encoder.layer:
        layer.attention.self.query = nn.Sequential(layer.attention.self.query)
    assert attention_weights(model) == []
    report = diagnose((model, wordpiece_tokenizer()))
    assert report.finding("weights_unavailable") is not None and report.heads


def test_random_init_has_no_weight_findings():
    for build in (tiny_bert, tiny_gpt2, custom, tiny_t5):
        assert weight_findings(build()) == [], build.__name__


def recorded_norms(model, ids):
    """The query/key norms ``model`` produces on ``ids`` (1, T)."""
    with record_qk_norms(attention_weights(model)) as norms, torch.no_grad():
        model(ids)
    return norms


@torch.no_grad()
def test_qk_scale_and_reachable_scores():
    model = custom()
    ids = torch.arange(12).unsqueeze(0)
    base = layer_stats(attention_weights(model)[0], recorded_norms(model, ids))
    for block in model.blocks:
        for proj in (block.attn.q_proj, block.attn.k_proj):
            proj.weight.mul_(30)
            if proj.bias is not None:
                proj.bias.mul_(30)
    norms = recorded_norms(model, ids)
    scaled = layer_stats(attention_weights(model)[0], norms)
    assert torch.allclose(scaled["qk_scale"], 30 * base["qk_scale"], rtol=1e-4)
    assert torch.allclose(scaled["max_score"], 900 * base["max_score"], rtol=1e-3)
    found = {f.code: f for f in weight_findings(model, norms)}
    assert found["qk_scale_large"].severity == "error" and found["large_qk_scores"].severity == "warning"
    assert min(found["qk_scale_large"].details["values"].values()) > QK_SCALE_LARGE
    assert "large_qk_scores" not in {f.code for f in weight_findings(model)}  # no probes run: no bound
    for block in model.blocks:
        block.attn.q_proj.weight.zero_()
    found = {f.code: f for f in weight_findings(model)}
    assert found["qk_scale_small"].severity == "error" and len(found["qk_scale_small"].heads) == 8
    assert max(found["qk_scale_small"].details["values"].values()) < QK_SCALE_SMALL


@pytest.mark.parametrize("build", [tiny_gpt2, tiny_bert, tiny_llama, tiny_gemma])
@torch.no_grad()
def test_reachable_score_bounds_the_realised_scores(build):
    """No row's realised score gap (log max/min weight) exceeds twice the bound, which is scale·max‖q‖·max‖k‖."""
    model = build()
    model.set_attn_implementation("eager")
    ids = torch.randint(3, 99, (1, 16), generator=torch.Generator().manual_seed(0))
    for lw in attention_weights(model):  # sharpen every head so the bound is tested on large scores
        lw.q_source.module.weight.mul_(4)
    norms = recorded_norms(model, ids)
    out = model(ids, output_attentions=True)
    causal = torch.ones(16, 16, dtype=torch.bool).tril() if build in (tiny_gpt2, tiny_llama, tiny_gemma) else None
    for lw, maps in zip(attention_weights(model), out.attentions):
        a = maps[0].double()  # (H, T, T)
        seen = causal if causal is not None else torch.ones(16, 16, dtype=torch.bool)
        gap = (a.masked_fill(~seen, 0).amax(-1) / a.masked_fill(~seen, 2).amin(-1)).log().amax(-1)  # (H,)
        bound = norms.bound(lw)
        assert bound is not None and (gap <= 2 * bound.double() + 1e-3).all()
        assert (gap > 0.2 * bound.double()).any()  # and it is not vacuous


@torch.no_grad()
def test_copied_heads_and_dead_heads():
    model = custom()
    attn = model.blocks[1].attn
    for proj in (attn.q_proj, attn.k_proj):
        proj.weight[16:24] = proj.weight[0:8]  # head 2 := head 0
    attn.out_proj.weight[:, 24:32] = 0  # head 3 writes nothing
    found = {f.code: f for f in weight_findings(model)}
    assert found["similar_head_weights"].details["pairs"] == [[[1, 0], [1, 2], pytest.approx(1.0, abs=1e-5)]]
    assert found["dead_heads"].heads == [[1, 3]] and found["dead_heads"].severity == "info"


@torch.no_grad()
def test_heads_pruned_to_near_zero_are_dead_even_when_they_are_half_the_layer():
    """Soft gates leave 1e-3, not 0: with half a layer at 1e-3 the layer median was near zero too, and the rule
    found nothing (42 of MiniLM's 72 heads at 1e-3: no finding; at 0: an error)."""
    model = custom()
    model.blocks[1].attn.out_proj.weight[:, 0:16] *= 1e-3  # heads 0 and 1 of 4
    found = {f.code: f for f in weight_findings(model)}
    assert found["dead_heads"].heads == [[1, 0], [1, 1]]
    assert "of their layer's strongest head's" in found["dead_heads"].message  # it said "median": not the rule


def gpt2_layers(n_layer):
    torch.manual_seed(0)
    return GPT2Model(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=n_layer, n_head=4)).eval()


@torch.no_grad()
def test_a_layer_pruned_to_near_zero_is_dead():
    """Every head of a layer scaled down alike: no head of that layer is weaker than its strongest."""
    model = gpt2_layers(3)
    model.h[0].attn.c_proj.weight.mul_(1e-3)
    found = {f.code: f for f in weight_findings(model)}
    assert found["dead_heads"].heads == [[0, h] for h in range(4)] and found["dead_heads"].details["layers"] == [0]
    assert found["dead_heads"].severity == "warning"  # a third of the heads, but a whole layer
    assert "dead_heads" not in {f.code for f in weight_findings(gpt2_layers(3))}
    # its values are norms and its thresholds ratios: the details give the norms they are ratios of, so a reader can
    # check each head ("1.85" against "threshold 0.05" read as alive; judgement audit, stop 57)
    details = found["dead_heads"].details
    assert set(details["strongest"]) == {"L0"} and details["reference"] > 0
    assert all(value < details["layer_threshold"] * details["reference"] for value in details["values"].values())

    model = custom()  # heads dead beside their own layer's strongest: below threshold × strongest
    model.blocks[1].attn.out_proj.weight[:, 0:16] *= 1e-3
    details = {f.code: f for f in weight_findings(model)}["dead_heads"].details
    assert all(value < details["threshold"] * details["strongest"]["L1"] for value in details["values"].values())


@torch.no_grad()
@pytest.mark.parametrize("n_layer, grown", [(2, [1]), (4, [2, 3])])
@pytest.mark.parametrize("factor", [100.0, 1e30])
def test_layers_that_grew_leave_the_others_alive(n_layer, grown, factor):
    """Half the layers' W_V grown (a diverging run) or overflowing: the upper median made every other layer dead."""
    model = gpt2_layers(n_layer)
    for layer in grown:
        model.h[layer].attn.c_attn.weight[:, 64:].mul_(factor)  # W_V: the last third of GPT-2's fused Q | K | V
    assert "dead_heads" not in {f.code for f in weight_findings(model)}


@pytest.mark.parametrize("build, kv_heads", [(tiny_llama, 2), (tiny_gemma, 1)])
def test_grouped_kv_heads_are_checked_per_query_head(build, kv_heads):
    model = build()
    attn = model.layers[0].self_attn
    lw = attention_weights(model)[0]
    group = 4 // kv_heads
    assert lw.kv_heads == kv_heads and [lw.kv_head(h) for h in range(4)] == [h // group for h in range(4)]
    k_rows = attn.k_proj.weight.reshape(kv_heads, 8, 32)  # (kv, d, d_in)
    for h in range(4):
        assert torch.equal(lw.heads(lw.w_k)[h], k_rows[h // group])
    findings, per_head = check_weights(model)
    shared = [f for f in findings if f.code == "shared_kv_heads"]
    assert len(shared) == 1 and shared[0].severity == "info"
    assert shared[0].details["kv_groups"] == [list(range(g * group, (g + 1) * group)) for g in range(kv_heads)]
    assert per_head[("self", 1, 3)]["kv_head"] == 3 // group
    assert {f.code for f in findings} == {"shared_kv_heads"}  # random init: nothing wrong


@torch.no_grad()
def test_grouped_heads_copied_are_similar():
    model = tiny_llama()
    attn = model.layers[1].self_attn
    attn.q_proj.weight[8:16] = attn.q_proj.weight[0:8]  # query head 1 := head 0; both read key/value head 0
    found = {f.code: f for f in weight_findings(model)}
    assert found["similar_head_weights"].details["pairs"] == [[[1, 0], [1, 1], pytest.approx(1.0, abs=1e-5)]]


@pytest.mark.parametrize("cap", [50.0, None])
@torch.no_grad()
def test_a_soft_capped_score_is_bounded_by_its_cap(cap):
    """Gemma 2 caps every score to ±50 (tanh): whatever q and k, no score reaches SCORE_LIMIT."""
    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8,
                          attn_logit_softcapping=cap)
    model = Gemma2Model(config).eval()
    for param in model.parameters():
        if param.dim() == 2:
            torch.nn.init.normal_(param, std=1.0)  # scores far beyond the cap
    norms = recorded_norms(model, torch.randint(3, 99, (1, 24), generator=torch.Generator().manual_seed(0)))
    layers = attention_weights(model)
    assert [lw.softcap for lw in layers] == [cap, cap]
    codes = {f.code for f in weight_findings(model, norms)}
    if cap is None:
        assert "large_qk_scores" in codes
    else:
        assert all((norms.bound(lw) <= cap).all() for lw in layers) and "large_qk_scores" not in codes


@torch.no_grad()
def test_norms_after_a_per_head_norm_are_each_head_s():
    """Qwen3 normalises q and k per head, on [batch, tokens, heads, d]: each head's norm is over its own d values
    (before, that output was cut into heads as if it were [batch, tokens, heads*d] / heads, mixing every head)."""
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    model = Qwen3Model(config).eval()
    for param in model.parameters():
        if param.dim() == 1:
            torch.nn.init.uniform_(param, 0.2, 3.0)  # norm weights that differ from one dimension to the next
    attn, out = model.layers[0].self_attn, {}
    hooks = [norm.register_forward_hook(lambda m, i, o, name=name: out.__setitem__(name, o[0]))
             for name, norm in (("q", attn.q_norm), ("k", attn.k_norm))]
    norms = recorded_norms(model, torch.randint(3, 99, (1, 12), generator=torch.Generator().manual_seed(0)))
    for hook in hooks:
        hook.remove()
    name = attention_weights(model)[0].name
    assert out["q"].shape == (12, 4, 8) and out["k"].shape == (12, 2, 8)  # (tokens, heads, d)
    torch.testing.assert_close(norms.q[name], out["q"].norm(dim=-1).amax(0))
    torch.testing.assert_close(norms.k[name], out["k"].norm(dim=-1).amax(0))


@torch.no_grad()
def test_q_and_k_scaled_before_a_layernorm_reach_no_larger_scores():
    """Persimmon normalises each head's q and k (LayerNorm) after its fused projection: Q/K × 100 leaves the scores
    as they were. Read before the LayerNorm, the bound was not the scores' (0.07 here) and grew 10⁴-fold with Q/K ×
    100, to a large_qk_scores warning."""
    torch.manual_seed(0)
    config = PersimmonConfig(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                             num_attention_heads=4)
    model = PersimmonModel(config).eval()
    ids = torch.randint(3, 99, (1, 24), generator=torch.Generator().manual_seed(0))
    before = check_weights(model, recorded_norms(model, ids))[1]
    for layer in model.layers:
        fused = layer.self_attn.query_key_value
        fused.weight.view(4, 3, 8, 32)[:, :2] *= 100  # every head's query and key rows (per head: q, k, v)
        fused.bias.view(4, 3, 8)[:, :2] *= 100
    norms = recorded_norms(model, ids)
    after = check_weights(model, norms)[1]
    for head, stats in before.items():
        assert stats["max_score"] == pytest.approx(8 ** 0.5, rel=0.02)  # unit-gain LayerNorm: ‖q‖ = ‖k‖ = √d; /√d
        assert after[head]["max_score"] == pytest.approx(stats["max_score"], rel=1e-2)
    assert not {"large_qk_scores", "qk_scale_large"} & {f.code for f in weight_findings(model, norms)}
    assert after[("self", 0, 0)]["qk_scale"] > QK_SCALE_LARGE  # still reported per head; no finding: the norm undoes it


@torch.no_grad()
def test_gpt2_scaled_by_the_inverse_layer_index_alone():
    """scale_attn_weights=False with scale_attn_by_inverse_layer_idx: layer i's scores are q·k/(i+1) (transformers'
    ``scaling``); the scale was taken as 1 in every layer, and layer 1's reachable scores as twice what they are."""
    torch.manual_seed(0)
    config = GPT2Config(n_embd=32, n_head=4, n_layer=3, vocab_size=99, scale_attn_weights=False,
                        scale_attn_by_inverse_layer_idx=True)
    model = GPT2Model(config).eval()
    layers = attention_weights(model)
    assert [lw.scale for lw in layers] == pytest.approx([1.0, 1 / 2, 1 / 3])
    norms = recorded_norms(model, torch.arange(3, 19).unsqueeze(0))
    per_head = check_weights(model, norms)[1]
    for lw in layers:
        attn = model.h[lw.layer].attn
        unscaled = norms.q[lw.name] * norms.k[lw.name]  # (H,)
        assert attn.scaling == pytest.approx(1 / (lw.layer + 1))
        assert [per_head[("self", lw.layer, h)]["max_score"] for h in range(4)] == \
            pytest.approx((unscaled / (lw.layer + 1)).tolist(), rel=1e-3)


def test_non_finite_weights_are_an_error_wherever_they_are():
    """NaN in the last layer's output projection (or an MLP) leaves every map finite: no finding at all, before,
    while the model's output was NaN."""
    from diagnostics import diagnose
    from tiny import bpe_tokenizer

    healthy = tiny_gpt2()
    assert not [f for f in weight_findings(healthy) if f.code == "non_finite_weights"]
    model = tiny_gpt2()
    with torch.no_grad():
        model.h[-1].attn.c_proj.weight[:8, 0] = float("nan")  # rows of head 0's value dimensions, one output
        model.h[-1].mlp.c_fc.weight[0, 0] = float("inf")  # after the last attention: every map stays finite
    report = diagnose((model, bpe_tokenizer()), ["the cat sat on the mat"])  # a short probe caps other findings
    found = report.finding("non_finite_weights")
    last = model.config.n_layer - 1
    assert found.severity == "error" and found.heads == [[last, 0]] and report.has_errors
    assert found.details["tensors"] == [f"h.{last}.attn.c_proj.weight", f"h.{last}.mlp.c_fc.weight"]
    assert found.message.startswith(f"2 weight tensor(s) hold NaN or infinite values (h.{last}.attn.c_proj.weight, ")
    assert torch.isfinite(report.samples[0].attentions).all()  # the maps alone would not tell
    with torch.no_grad():
        model.h[-1].attn.c_proj.weight[:8, 0] = 0.0
    only_mlp = [f for f in weight_findings(model) if f.code == "non_finite_weights"]
    assert len(only_mlp) == 1 and only_mlp[0].heads == [] and only_mlp[0].severity == "error"


@torch.no_grad()
def test_one_layer_out_of_scale_with_the_others_is_named():
    """One layer's Q/K x 200 is a broken layer (a warning naming it, 4 heads of 24); every layer's alike is no
    outlying layer, and an error by its share of the heads."""
    torch.manual_seed(0)
    model = LlamaModel(LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=37, num_hidden_layers=6,
                                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64))
    ids = torch.arange(20).unsqueeze(0)
    attention = [layer.self_attn for layer in model.layers]
    for proj in (attention[2].q_proj, attention[2].k_proj):
        proj.weight.mul_(200)
    found = {f.code: f for f in weight_findings(model, recorded_norms(model, ids))}
    for code in ("qk_scale_large", "large_qk_scores"):
        assert found[code].severity == "warning" and found[code].details["layers"] == [2], found[code].message
        assert "at 3 times the model's typical layer or more" in found[code].message
    for attn in attention[:2] + attention[3:]:
        for proj in (attn.q_proj, attn.k_proj):
            proj.weight.mul_(200)
    found = {f.code: f for f in weight_findings(model, recorded_norms(model, ids))}
    assert found["qk_scale_large"].severity == "error" and "layers" not in found["qk_scale_large"].details
