"""``attention_weights`` reads each architecture's heads as the model itself uses them.

Three checks per architecture, none of which reuses the reader's own layout rules:
- the rows it gives head h's queries, found by value in the model's parameters and zeroed there, change
  that head's map and no other head's of the layer (its keys: the heads that share its key/value head);
- the model's maps equal softmax(scale · (X W_Q,h)(X W_K,h)ᵀ) on the layer's input X, with every
  position id 0 so that rotary embeddings rotate nothing (not for ALiBi or relative-position models);
- the output projection's output equals Σ_h A_h X W_V,hᵀ W_O,hᵀ.
Biases are zeroed and weights drawn with std 0.3, so that maps are far from uniform.
"""

import copy

import pytest
import torch
import transformers as tf

from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from core.extraction.head_weights import Source, attention_weights
from diagnostics.weights.qk_norms import record_qk_norms
from diagnostics.weights.weight_checks import weight_findings

SIZE = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64, vocab_size=99)
FALCON = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, vocab_size=99)
BIGCODE = dict(n_embd=32, n_head=4, n_layer=2, vocab_size=99)
MODERNBERT = dict(SIZE, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)
ARCHITECTURES = {  # name: (model class, config, score parity with position ids 0)
    "bert": (tf.BertModel, tf.BertConfig(**SIZE), True),
    "gpt2": (tf.GPT2Model, tf.GPT2Config(n_embd=32, n_head=4, n_layer=2, vocab_size=99), True),
    "gpt2-unscaled-by-layer": (tf.GPT2Model, tf.GPT2Config(n_embd=32, n_head=4, n_layer=2, vocab_size=99,  # 1/(i+1)
                                                           scale_attn_weights=False,
                                                           scale_attn_by_inverse_layer_idx=True), True),
    "llama-gqa": (tf.LlamaModel, tf.LlamaConfig(**SIZE, num_key_value_heads=2), True),
    "gpt-neo": (tf.GPTNeoModel, tf.GPTNeoConfig(hidden_size=32, num_heads=4, num_layers=2, vocab_size=99,
                                                attention_types=[[["global"], 2]]), True),
    "gpt-neox": (tf.GPTNeoXModel, tf.GPTNeoXConfig(**SIZE), True),
    "bloom": (tf.BloomModel, tf.BloomConfig(hidden_size=32, n_head=4, n_layer=2, vocab_size=99), False),  # ALiBi
    "falcon-multi-query": (tf.FalconModel, tf.FalconConfig(**FALCON), True),
    "falcon-per-head": (tf.FalconModel, tf.FalconConfig(**FALCON, multi_query=False), True),
    "falcon-grouped": (tf.FalconModel, tf.FalconConfig(**FALCON, new_decoder_architecture=True, num_kv_heads=2),
                       True),
    "gpt-bigcode-multi-query": (tf.GPTBigCodeModel, tf.GPTBigCodeConfig(**BIGCODE), True),
    "gpt-bigcode": (tf.GPTBigCodeModel, tf.GPTBigCodeConfig(**BIGCODE, multi_query=False), True),
    "phi": (tf.PhiModel, tf.PhiConfig(**SIZE), True),
    "phi-qk-layernorm": (tf.PhiModel, tf.PhiConfig(**SIZE, qk_layernorm=True), False),  # scores of normed q, k
    "persimmon": (tf.PersimmonModel, tf.PersimmonConfig(**SIZE), False),  # fused, then q/k LayerNorm per head
    "phi3-gqa": (tf.Phi3Model, tf.Phi3Config(**SIZE, num_key_value_heads=2, pad_token_id=0), True),
    "distilbert": (tf.DistilBertModel, tf.DistilBertConfig(dim=32, n_heads=4, n_layers=2, hidden_dim=64,
                                                           vocab_size=99), True),
    "mpnet": (tf.MPNetModel, tf.MPNetConfig(**SIZE), False),  # relative position bias
    "modernbert": (tf.ModernBertModel, tf.ModernBertConfig(**MODERNBERT), False),  # no position ids
}
IDS = torch.arange(3, 15).unsqueeze(0)  # (1, 12)


def build(name):
    model_class, config, _ = ARCHITECTURES[name]
    torch.manual_seed(0)
    config = copy.deepcopy(config)
    config._attn_implementation = "eager"  # maps as the model computes them
    model = model_class(config).eval()
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param_name.endswith("bias"):
                param.zero_()
            elif param.dim() == 2:
                param.normal_(std=0.3)
    return model


@torch.no_grad()
def maps(model, **kwargs):
    return torch.stack(model(IDS, output_attentions=True, **kwargs).attentions)[:, 0]  # (L, H, T, T)


def scale_rows(model, rows, factor=0.0):
    """Multiply the rows ``[n, d_in]`` wherever a parameter (or a Conv1D's transpose) holds them; how many."""
    found = 0
    for param in model.parameters():
        for matrix in ((param.data, param.data.T) if param.dim() == 2 else ()):
            if matrix.shape[1] == rows.shape[1]:
                hit = (matrix[:, None] == rows[None]).all(-1).any(1)  # (rows of matrix,)
                matrix[hit] *= factor
                found += int(hit.sum())
    return found


def changed_heads(model, layer, rows):
    before = maps(model)[layer]  # (H, T, T)
    copy_ = copy.deepcopy(model)
    assert scale_rows(copy_, rows) == len(rows)
    after = maps(copy_)[layer]
    return [h for h in range(len(before)) if not torch.allclose(before[h], after[h], atol=1e-6)]


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_each_head_s_query_and_key_rows_are_that_head_s(name):
    model = build(name)
    layers = attention_weights(model)
    assert [lw.layer for lw in layers] == [0, 1] and all(lw.n_heads == 4 for lw in layers)
    lw = layers[1]
    d = lw.d_head
    for h in range(lw.n_heads):
        assert changed_heads(model, 1, lw.w_q[h * d:(h + 1) * d]) == [h]
        group = [g for g in range(lw.n_heads) if lw.kv_head(g) == lw.kv_head(h)]
        assert changed_heads(model, 1, lw.w_k[h * d:(h + 1) * d]) == group


def layer_io(model, layers):
    """Each layer's input X (what its query projection reads) and its output projection's output."""
    inputs, outputs, hooks = {}, {}, []
    for lw in layers:
        out_proj = next(m for m in model.modules() if isinstance(getattr(m, "weight", None), torch.Tensor)
                        and m.weight.dim() == 2 and any(w.shape == lw.w_o.shape and torch.equal(w, lw.w_o)
                                for w in (m.weight.data, m.weight.data.T)))
        projection = (lw.q_source.feed or lw.q_source).module  # before a q/k norm: the projection it reads
        hooks += [projection.register_forward_pre_hook(
                      lambda m, args, i=lw.layer: inputs.__setitem__(i, args[0][0])),
                  out_proj.register_forward_hook(lambda m, args, out, i=lw.layer: outputs.__setitem__(i, out[0]))]
    return inputs, outputs, hooks


@pytest.mark.parametrize("name", ARCHITECTURES)
@torch.no_grad()
def test_scores_and_outputs_recomputed_from_the_weights_match_the_model(name):
    model = build(name)
    layers = attention_weights(model)
    assert len(layers) == 2
    rotary = any("Rotary" in type(m).__name__ for m in model.modules())  # position 0 everywhere: no rotation
    still = {"position_ids": torch.zeros_like(IDS)} if rotary else {}  # (BERT, transformers 5.25: each token its own
    # sequence, as if packed, and maps of the identity)
    inputs, outputs, hooks = layer_io(model, layers)
    expected = maps(model, **still)  # (L, H, T, T)
    for hook in hooks:
        hook.remove()
    causal = bool((expected.triu(1) == 0).all())
    for lw in layers:
        x = inputs[lw.layer]  # (T, d_in)
        q, k, v = (torch.einsum("hdi,ti->htd", lw.heads(w), x) for w in (lw.w_q, lw.w_k, lw.w_v))  # (H, T, d) each
        scores = lw.scale * q @ k.transpose(1, 2)  # (H, T, T)
        if causal:
            scores = scores.masked_fill(torch.ones(12, 12, dtype=torch.bool).triu(1), float("-inf"))
        if ARCHITECTURES[name][2]:
            assert torch.allclose(scores.softmax(-1), expected[lw.layer], atol=1e-5)
        written = torch.einsum("hqk,hkd,hod->qo", expected[lw.layer], v, lw.out_heads())  # (T, d_out)
        assert torch.allclose(written, outputs[lw.layer], atol=1e-4)


@pytest.mark.parametrize("name", ["gpt-neox", "falcon-grouped", "phi3-gqa", "gpt-bigcode-multi-query", "modernbert"])
@torch.no_grad()
def test_fused_layouts_record_each_head_s_query_and_key_norms(name):
    model = build(name)
    layers = attention_weights(model)
    inputs, _, hooks = layer_io(model, layers)
    with record_qk_norms(layers) as norms:
        model(IDS)
    for hook in hooks:
        hook.remove()
    for lw in layers:
        q = torch.einsum("hdi,ti->htd", lw.heads(lw.w_q), inputs[lw.layer])  # (H, T, d)
        assert torch.allclose(norms.q[lw.name], q.norm(dim=-1).amax(-1), rtol=1e-5)
        assert len(norms.k[lw.name]) == lw.kv_heads and norms.bound(lw) is not None


def test_gpt_neo_scores_are_not_scaled():
    assert [lw.scale for lw in attention_weights(build("gpt-neo"))] == [1.0, 1.0]


FUSED = ["gpt-neox", "bloom", "falcon-grouped", "phi3-gqa", "gpt-bigcode-multi-query", "modernbert"]


@pytest.mark.parametrize("name", FUSED)
@torch.no_grad()
def test_fused_layouts_get_the_weight_checks(name):
    model_class, config, _ = ARCHITECTURES[name]
    torch.manual_seed(0)
    model = model_class(copy.deepcopy(config)).eval()  # the architecture's own initialisation
    assert {f.code for f in weight_findings(model)} <= {"shared_kv_heads"}
    lw = attention_weights(model)[1]
    d = lw.d_head
    for weights in (lw.w_q, lw.w_k):
        assert scale_rows(model, weights[2 * d:3 * d], 1000.0) == d  # head 2's queries and keys x 1000
    found = {f.code: f for f in weight_findings(model)}
    assert [1, 2] in found["qk_scale_large"].heads and [0, 2] not in found["qk_scale_large"].heads


def test_a_fused_projection_that_does_not_split_into_heads_is_left_out():
    model = build("gpt-neox")
    model.layers[1].attention.query_key_value = torch.nn.Linear(32, 95)  # not 3 x 4 heads x 8
    assert [lw.layer for lw in attention_weights(model)] == [0]
    assert {f.code for f in weight_findings(model)} <= {"shared_kv_heads"}  # the other layer is still checked


SPIED = {}  # attention module -> (largest ‖q‖ per query head, largest ‖k‖ per key/value head, scaling) it was given


def spy_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """SDPA, after noting the queries and keys ``[b, heads, T, d]`` the model scores: after every norm it applies."""
    q, k = (x.float().norm(dim=-1).amax(dim=(0, 2)) for x in (query, key))  # (H,), (kv,)
    if module in SPIED:
        q, k = torch.maximum(q, SPIED[module][0]), torch.maximum(k, SPIED[module][1])
    SPIED[module] = (q, k, query.shape[-1] ** -0.5 if scaling is None else scaling)
    kwargs.pop("sliding_window", None)
    return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, scaling=scaling, **kwargs)


AttentionInterface.register("attnscope_spy", spy_attention)
QK_NORMED = {  # q/k normalised per head: on [batch, heads, tokens, d] (Gemma 3, Phi) or [batch, tokens, heads, d]
    "gemma3": (tf.Gemma3TextModel, tf.Gemma3TextConfig(**SIZE, num_key_value_heads=2, head_dim=8, sliding_window=64)),
    "phi-qk-layernorm": ARCHITECTURES["phi-qk-layernorm"][:2],
    "persimmon": ARCHITECTURES["persimmon"][:2],
    "qwen3": (tf.Qwen3Model, tf.Qwen3Config(**SIZE, num_key_value_heads=2, head_dim=8)),
}


@pytest.mark.parametrize("tokens", [12, 4, 2])  # 4: as many as the query heads; 2: as many as the key/value heads
@pytest.mark.parametrize("name", QK_NORMED)
@torch.no_grad()
def test_recorded_norms_are_those_of_the_queries_and_keys_the_model_scores(name, tokens):
    """Gemma 3 normalises after the transpose to [batch, heads, tokens, d]: that output was cut as [.., heads, d],
    each "head" taking rows of every head; Persimmon's were read before its LayerNorm (~30x the real norms)."""
    model_class, config = QK_NORMED[name]
    torch.manual_seed(0)
    model = model_class(copy.deepcopy(config)).eval()
    model.set_attn_implementation("attnscope_spy")
    for param_name, param in model.named_parameters():
        if param.dim() == 2:
            param.normal_(std=0.3)
        elif "norm" in param_name and param_name.endswith("weight"):
            param.uniform_(0.2, 3.0)  # a gain that differs from one dimension to the next
    layers = attention_weights(model)
    SPIED.clear()
    with record_qk_norms(layers) as norms:
        model(torch.arange(3, 3 + tokens).unsqueeze(0))
    attention = dict(model.named_modules())
    for lw in layers:
        q, k, scaling = SPIED[attention[lw.name]]
        torch.testing.assert_close(norms.q[lw.name], q)
        torch.testing.assert_close(norms.k[lw.name], k)
        assert lw.scale == pytest.approx(scaling)
        torch.testing.assert_close(norms.bound(lw), scaling * q * k.repeat_interleave(lw.n_heads // len(k)))


def test_a_per_head_norm_s_layout_is_told_by_its_input_when_tokens_equal_heads():
    """[1, 4, 4, 8] with 4 heads: the sizes cannot say which dimension holds the heads; the norm's input can."""
    projection = torch.nn.Linear(8, 32)
    fed = torch.randn(1, 4, 32)  # (b, T, H*d)
    per_head = fed.unflatten(-1, (4, 8))  # (b, T, H, d)
    source = Source(torch.nn.LayerNorm(8), 4, feed=Source(projection, 4))
    assert source.heads_first(per_head, 8, per_head, fed) is False
    assert source.heads_first(per_head.transpose(1, 2), 8, per_head.transpose(1, 2), fed) is True
    assert source.heads_first(per_head, 8, per_head + 1, fed) is None  # not what the projection gave: not recorded
    assert Source(torch.nn.LayerNorm(8), 4).heads_first(per_head, 8) is None
    assert source.heads_first(torch.zeros(1, 4, 7, 8), 8) is True and source.heads_first(fed, 8) is False
