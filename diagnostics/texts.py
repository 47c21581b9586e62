"""Every text a user reads about patterns and findings: the one place to change wording.

The CLI, the Markdown/HTML reports and the app's Guide page all render from
``PATTERN_TEXTS``, ``ROLE_TEXTS`` and ``FINDING_TEXTS``; nothing else writes prose about what a
pattern means or what to do about a finding.

Sources behind the readings and suggestions:
- Clark et al. 2019, "What Does BERT Look At? An Analysis of BERT's Attention":
  positional (previous/next token) heads, heads on [CLS]/[SEP]/punctuation.
- Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT": the diagonal,
  vertical, block and heterogeneous patterns.
- Michel et al. 2019, "Are Sixteen Heads Really Better than One?" and Voita et
  al. 2019, "Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy
  Lifting, the Rest Can Be Pruned": many heads are redundant and can be pruned.
- Zhai et al. 2023, "Stabilizing Transformer Training by Preventing Attention
  Entropy Collapse": σReparam (spectral reparametrisation of Q/K), entropy collapse.
- Gu et al. 2024, "When Attention Sink Emerges in Language Models": sinks on the
  first token are near universal and mostly benign; Xiao et al. 2023, "Efficient
  Streaming Language Models with Attention Sinks".
- Olsson et al. 2022, "In-context Learning and Induction Heads": induction heads.
"""

from dataclasses import dataclass

from diagnostics.classify.patterns import DIFFUSE_MIN, PURE_SINK
from diagnostics.classify.roles import BROAD_MIN, OFFSET_MIN, REST_MIN, SINK_MIN
from diagnostics.measure.metrics import SINK_REFERENCE_KEYS
from diagnostics.measure.row_stats import OFFSETS


@dataclass(frozen=True)
class PatternText:
    title: str  # short name shown in legends
    looks_like: str  # what the map looks like
    reading: str  # the usual interpretation
    action: str  # what to do about it
    color: str  # colour of the pattern in maps and reports (hex)


@dataclass(frozen=True)
class FindingText:
    title: str  # one-line headline
    meaning: str  # what the finding says about the model
    suggestion: str  # a concrete next step
    message: str  # str.format template; fields: count, total, percent, heads, plus per-code extras
    upstream: str = ""  # diffuse_heads only: the suggestion when their Q/K weights are of ordinary scale
    everywhere: str = ""  # diffuse_heads only: the suggestion added when (nearly) every head is near uniform
    shrunk: str = ""  # diffuse_heads only: the suggestion when their Q/K weights are far smaller than the others'
    zeroed: str = ""  # diffuse_heads only: the suggestion when half or more of their Q/K weights are zero
    random_ids: str = ""  # diffuse_heads only: said first when the probes were random token ids (no tokenizer)
    replaced_ids: str = ""  # diffuse_heads only: said first when unfit default probes were replaced by random ids
    copies: str = ""  # diffuse_heads only: the suggestion when most of them have near-identical Q·Kᵀ weights
    grown: str = ""  # diffuse_heads only: the suggestion when every head's Q/K grew too large (qk_scale_large error)
    shared: str = ""  # redundant_heads only: the suggestion when most of them have Q·Kᵀ weights unlike each other's
    in_broken: str = ""  # sink_heads, positional_heads: added for their heads in a layer another finding names broken
    variants: str = ""  # for the Guide: when a report's suggestion differs from ``suggestion``
    roles: str = ""  # sink_heads, positional_heads: the sentence counting the heads with the matching roles


PATTERN_TEXTS = {
    "diagonal": PatternText(
        "Diagonal (fixed offset)",  # not "positional": the positional_heads finding measures the whole map
        "Besides its sink, mass on one diagonal offset: each token looks at a token a fixed distance away "
        f"(up to {max(OFFSETS)} either side), most often itself, the previous or the next token.",
        "A positional head (Clark et al. 2019). If it dominates many heads the model may lean too much on "
        "position.",
        "Fine for a few heads; if many heads are diagonal, check that position information is not "
        "overwhelming content.",
        "#4C78A8",
    ),
    "block": PatternText(
        "Block (segment)",
        "Mass inside contiguous segments: phrases, or sentence A and sentence B.",
        "The head tracks phrase or segment structure (Kovaleva et al. 2019).",
        "Check that the blocks match the input's real segments.",
        "#F58518",
    ),
    "diffuse": PatternText(
        "Diffuse (broad)",
        "Besides its sink, every token spreads its attention almost evenly (normalised entropy of the rest "
        f"≥ {DIFFUSE_MIN}).",
        "A broad head that averages its input (Clark et al. 2019); common in trained models. Only rows near "
        "uniform over every key (the diffuse_heads finding) point at an attention failure.",
        "Nothing to do unless the diagnosis names the head among its near-uniform heads; then follow that "
        "finding's suggestion, which tells from the heads' Q/K weights where to look.",
        "#BAB0AC",
    ),
    "sparse": PatternText(
        "Sparse (focused)",
        "A few strong, content-dependent peaks per row.",
        "Normal focused behaviour: the head picks out related tokens.",
        "Nothing to do.",
        "#54A24B",
    ),
    "vertical": PatternText(
        "Vertical (key stripes)",  # not "sink": the sink role and the sink_heads finding count other heads
        f"At least {PURE_SINK} of the mass on the sink ([CLS], [SEP] or the first token), or, besides it, most queries "
        "on the same one or two other keys (punctuation, a repeated word). A head with a smaller sink is "
        "labelled by what it does with the rest, and has the sink role.",
        "An attention sink or \"no-op\" head, or one that gathers at a few keys (Clark et al. 2019; "
        "Gu et al. 2024).",
        "Usually benign. A classifier once failed because a layer-6 head over-attended to [CLS]; it was "
        "fixed by constraining that attention.",
        "#B279A2",
    ),
}

@dataclass(frozen=True)
class RoleText:
    title: str  # short name shown next to a head
    short: str  # two or three letters for thumbnails and tables
    meaning: str  # what the head does, and the score behind the role


# The role vocabulary of ``diagnostics.classify.roles.ROLES``, in that order.
ROLE_TEXTS = {
    "previous_token": RoleText(
        "Previous token", "prev",
        f"Puts at least {OFFSET_MIN} of its non-sink attention on the token just before the query (score: that share; "
        "Clark et al. 2019). Builds bigram features; induction heads rely on one."),
    "next_token": RoleText(
        "Next token", "next",
        f"Puts at least {OFFSET_MIN} of its non-sink attention on the token just after the query (bidirectional "
        "models)."),
    "self": RoleText(
        "Self", "self",
        f"Puts at least {OFFSET_MIN} of its non-sink attention on the query token itself."),
    "induction": RoleText(
        "Induction", "ind",
        "On a random sequence repeated twice, attends from a token to the token after its previous "
        "occurrence: it copies continuations of patterns seen earlier (Olsson et al. 2022). Causal models only."),
    "duplicate_token": RoleText(
        "Duplicate token", "dup",
        "On a random sequence repeated twice, attends from a token to its previous occurrence."),
    "sink": RoleText(
        "Sink", "sink",
        f"Parks at least {SINK_MIN} of its attention on the first token or [CLS]/[SEP], as measured on a "
        f"{SINK_REFERENCE_KEYS}-token "
        "text (score: that mass; a head parks less on a longer text, and the score corrects for it). Normal "
        "in trained models, a way to do nothing (Xiao et al. 2023; Gu et al. 2024); the pattern describes "
        f"what the head does with the rest. A head with less than {REST_MIN:.0%} of its attention off the sinks has "
        "no role of that rest (previous or next token, self, local, broad)."),
    "local": RoleText(
        "Local", "loc",
        "Keeps its non-sink attention within about 2.5 tokens of the query on average, without one "
        "position dominating (score: that mean distance, in tokens)."),
    "broad": RoleText(
        "Broad", "brd",
        f"Spreads its non-sink attention almost evenly over the input (normalised entropy ≥ {BROAD_MIN}; Clark "
        "et al. 2019's broad heads): a bag-of-words average."),
}


def role_label(roles, short=False) -> str:
    """The roles of a head (``Role`` objects or ``{"role", "score"}`` dicts) as one comma-separated line."""
    names = [r["role"] if isinstance(r, dict) else r.role for r in roles]
    return ", ".join(ROLE_TEXTS[n].short if short else ROLE_TEXTS[n].title.lower() for n in names if n in ROLE_TEXTS)


_BORDERLINE_READING = ("The pattern shown is the one most texts give; the roles come from the scores averaged "
                       "over all texts.")
BORDERLINE_MARK = "?"  # after a borderline head's pattern in the pattern maps: "sparse?"
BORDERLINE_TEXT = ("The probe texts disagree on these heads' pattern or roles: each sits near a threshold. "
                   + _BORDERLINE_READING)


def vote_label(metrics: dict) -> str:
    """A head's votes over the probe texts (``HeadReport.metrics``: ``votes``, ``role_votes``), e.g.
    "sparse 4/7, vertical 3/7; roles: sink 4/7" (only the roles some texts lack)."""
    votes = metrics.get("votes", {})
    total = sum(votes.values())
    label = ", ".join(f"{pattern} {n}/{total}" for pattern, n in votes.items())
    roles = [f"{ROLE_TEXTS[role].title.lower()} {n}/{total}" for role, n in metrics.get("role_votes", {}).items()
             if n < total and role in ROLE_TEXTS]
    return label + (f"; roles: {', '.join(roles)}" if roles else "")


def borderline_note(metrics: dict) -> str:
    """``BORDERLINE_TEXT`` for one head, with its votes."""
    return (f"Borderline ({vote_label(metrics)} probe texts): the texts disagree on this head's pattern or roles, "
            f"so it sits near a threshold. {_BORDERLINE_READING}")


FINDING_TEXTS = {
    "non_finite_attention": FindingText(
        "NaN or infinite attention",
        "These heads' attention weights are NaN or infinite: a weight or an activation overflowed, as in a "
        "diverged training run. Every layer they feed is NaN too, so the other findings and the patterns of "
        "these heads mean nothing.",
        "Find the non-finite tensors (torch.isfinite on each weight) and go back to the last checkpoint without "
        "them; then lower the learning rate, clip gradients, or train in bf16/fp32 instead of fp16.",
        "{count} of {total} heads ({percent}) give NaN or infinite attention weights: {heads}.",
    ),
    "non_finite_weights": FindingText(
        "NaN or infinite weights",
        "Some of the model's parameters are NaN or infinite: a training step diverged, or the checkpoint was "
        "damaged. Wherever they sit (a value or output projection, an MLP) the model's output is NaN, even where "
        "the attention maps still look sound.",
        "Go back to the last checkpoint whose weights are all finite (torch.isfinite on each); then lower the "
        "learning rate, clip gradients, or train in bf16/fp32 instead of fp16.",
        "{n_tensors} weight tensor(s) hold NaN or infinite values ({tensors}); {count} of {total} heads have them in "
        "their own Q, K, V or O weights{heads_list}.",
    ),
    "diffuse_heads": FindingText(
        "Near-uniform heads",
        "These heads spread attention almost evenly over the input, so they pass on an average of it and "
        "select nothing (attention failure).",
        "Check the Q/K initialisation (std ≈ 1/√d_in, fan-in) and that the attention weights receive non-zero "
        "gradients; a learnable softmax temperature can help. In a trained model a few uniform heads are common "
        "and can be pruned (Michel et al. 2019); many of them, or a whole layer, are a broken model: compare it "
        "with an earlier checkpoint (python -m diagnostics compare OLD NEW).",
        "{count} of {total} heads ({percent}) are near uniform (their rows differ from uniform by at most "
        "{threshold} nats of KL divergence): {heads}.",
        "Their Q/K weights are as large as the model's other heads' (RMS·√d_in {low:.2g}–{high:.2g}), so it is "
        "what reaches them that has no structure left, not Q/K: look at the normalisation that feeds layer "
        "{layer}, its own input norm in a pre-LN model (GPT-2's ln_1, Llama's input_layernorm) or {before} in a "
        "post-LN one (BERT), and restore it from a good checkpoint: a zeroed or diverged norm flattens what "
        "follows it, and so does an earlier layer whose output grew until it is alike for every token (a "
        "fine-tune at a learning rate too high); compare with an earlier checkpoint (python -m diagnostics "
        "compare OLD NEW) to see which.",
        "{left} of the {total} heads are not near uniform, too few to compare their Q/K weights with (RMS·√d_in "
        "{low:.2g}–{high:.2g}): a Q/K shrunk everywhere shrinks those too. An untrained (randomly initialised) "
        "model looks like this. If this one was trained, compare its Q/K weights with an earlier checkpoint's: "
        "smaller ones point at Q/K, as above; ones of the same size at the normalisation that feeds layer "
        "{layer} (its input norm, or {before}), or at an earlier layer whose output grew until it is alike for "
        "every token (training that diverged: a learning rate too high).",
        "Their Q/K weights are {ratio}× smaller than the model's other heads' (RMS·√d_in {low:.2g}–{high:.2g} "
        "against a median of {median:.2g}): in a trained model, W_Q/W_K of these heads were re-initialised or "
        "damaged, so restore them from a good checkpoint (these are no heads to prune); while training, check "
        "their initialisation (std ≈ 1/√d_in, fan-in) and that gradients reach them.",
        zeroed="Half or more of them have Q/K weights of zero, so every score is 0 and every row exactly uniform: "
        "in a trained model, W_Q/W_K of these heads were zeroed or damaged, so restore them from a good checkpoint "
        "(these are no heads to prune); while training, check their initialisation (std ≈ 1/√d_in, fan-in) and "
        "that gradients reach them.",
        grown="Their Q/K weights grew far past the usual scale, as most of the model's did (see Q/K weights too "
        "large; RMS·√d_in {low:.2g}–{high:.2g} here), and still their rows are near uniform: what reaches them is "
        "alike for every token, so no Q/K can tell the tokens apart. Training diverged (a learning rate too high, no "
        "warm-up): restore a checkpoint from before it (python -m diagnostics compare OLD NEW shows which heads "
        "changed), and lower the learning rate or add warm-up.",
        variants="A report's suggestion depends on the heads' Q/K weights: as large as the other heads', it "
        "points at the normalisation that feeds their layer, or an earlier layer grown too large; far smaller, or "
        "zero, it says to restore W_Q/W_K of those heads from a good checkpoint; far larger, as most heads', it "
        "says that training diverged; with (nearly) every head uniform, it names the causes it cannot tell "
        "apart, an untrained model first; copies of one head are told to be restored. On random token ids (no "
        "tokenizer) it says to diagnose the model on text first.",
        copies="Half or more of them have near-identical Q·Kᵀ weights (see Near-identical head weights), so they are "
        "copies of one near-uniform head: heads copied over each other, which nobody does on purpose, are a "
        "copying or conversion bug; restore them from the source checkpoint.",
        random_ids="The probes were random token ids (there was no tokenizer), on which heads that read content "
        "have nothing to read and spread out, so a healthy model can look like this: save its tokenizer next to "
        "it and diagnose it on text before restoring anything.",
        replaced_ids="Default probes that did not fit the vocabulary were replaced by random in-vocabulary tokens, "
        "on which heads that read content have nothing to read and spread out, so a healthy model can look like "
        "this: diagnose it on texts in its own language before restoring anything.",
    ),
    "saturated_heads": FindingText(
        "Saturated heads (entropy collapse)",
        "These heads put nearly all their mass on a single key on almost every row, whatever the input: "
        "the softmax is saturated, a sign of attention entropy collapse.",
        "In a checkpoint that was sound before, look for what scaled the scores up: W_Q/W_K rescaled or converted "
        "wrongly, or a missing 1/√d_k (GPT-2's scale_attn_weights, a custom attention); compare it with the "
        "earlier checkpoint (python -m diagnostics compare OLD NEW). While training, constrain the Q/K scale: "
        "σReparam or spectral normalisation of W_Q/W_K (Zhai et al. 2023), clamp the scaled scores (e.g. to ±5), "
        "lower the learning rate and add warm-up.",
        "{count} of {total} heads ({percent}) are near one-hot (mean normalised entropy ≤ {threshold}, "
        "mean row max ≥ {confidence}): {heads}.",
    ),
    "redundant_heads": FindingText(
        "Redundant heads",
        "Pairs of heads in the same layer produce nearly the same attention maps on the probe texts, so "
        "one of each pair adds little.",
        "Heads trained apart that converged: prune one head of each pair (Michel et al. 2019; Voita et al. 2019), "
        "or add an orthogonality penalty on the per-head Q/K/V projections while training. Many exact copies "
        "(distance ≈ 0) are a copying or conversion bug: restore the heads from the source checkpoint, or "
        "re-initialise them and train with that penalty.",
        "{count} of {total} heads ({percent}) form {n_pairs} near-identical pair(s) (Jensen–Shannon distance "
        "< {threshold}): {pairs}.",
        shared="Most of them attend alike with Q·Kᵀ weights unlike each other's (they are not among the "
        "near-identical head weights), so something the heads share may outweigh what each computes, such as "
        "the layer's query and key biases or the norm that feeds it: a damaged layer looks like this. Compare "
        "the model with an earlier checkpoint (python -m diagnostics compare OLD NEW) before pruning any: if the "
        "layer changed, restore it.",
        variants="When most of the heads are alike in their maps but not in their Q·Kᵀ weights, a report's "
        "suggestion says that something they share (biases, a norm) may make them so, and to compare with an "
        "earlier checkpoint before pruning.",
    ),
    "sink_heads": FindingText(
        "Attention-sink heads",
        "Most queries of these heads put their mass on one key such as [CLS], [SEP] or the first token: an "
        "attention sink, often a \"no-op\" head.",
        "Usually benign (Gu et al. 2024). If a downstream task misbehaves, look at these heads first: a "
        "classifier once failed because a head over-attended to [CLS], fixed by constraining that attention.",
        "{count} of {total} heads ({percent}) are attention sinks (one key receives ≥ {threshold} of the "
        "attention of the queries that see it, beyond an even share): {heads}.",
        in_broken="Not so for {heads}: they are in layer{s} {layers}, which {titles} names, where the damage "
        "can make heads sink; judge them once {that} restored.",
        variants="Heads of a layer that a warning or error names broken get a sentence of their own: damage there "
        "can make heads sink.",
        roles="{count} of {total} heads have the sink role, by its own bar: "
        f"≥ {SINK_MIN} of the mass on the first or a special token, carried to a 20-token text.",
    ),
    "word_sink_heads": FindingText(
        "Layers parked on ordinary words",
        "Half or more of the heads of these layers put the mass of most queries on one ordinary word of the text, "
        "not on the first token, a special token or punctuation, where trained models park attention they do not "
        "use, and each head on a word of its own. A query bias that outweighs what each query says does this: "
        "every query of a head then prefers the same word, a different one in each text, and the layer passes "
        "those words to every position. (A word that heads of several layers park on together is a sink the "
        "model made of it, such as healthy SmolLM2-135M's early \"the\": those heads are named as sinks.)",
        "Compare the model with an earlier checkpoint (python -m diagnostics compare OLD NEW) and restore these "
        "layers' query weights and biases, and the norm that feeds them, from one that is sound.",
        "{count} of {total} heads ({percent}) put ≥ {threshold} of the attention of the queries that see it on "
        "one ordinary word (not the first token, a special token or punctuation): {heads}.",
    ),
    "positional_heads": FindingText(
        "Positional heads",
        f"These heads attend to a fixed offset (up to {max(OFFSETS)} tokens either side: most often themselves, "
        "the previous or the next token) whatever the content (Clark et al. 2019).",
        "Fine for a few heads. If most heads are positional, check that position information is not "
        "overwhelming content; for quality drops on inputs longer than the training ones, a model with absolute "
        "positions can move to relative ones (RoPE, ALiBi).",
        "{count} of {total} heads ({percent}) are positional (≥ {threshold} of their mass on one offset): "
        "{heads}.",
        in_broken="Not so for {heads}: they are in layer{s} {layers}, which {titles} names, where the damage "
        "can fix heads on one offset; judge them once {that} restored.",
        variants="Heads of a layer that a warning or error names broken get a sentence of their own: damage there "
        "can fix heads on one offset.",
        roles="{count} of {total} heads have the previous-token, next-token or self role, by their own bar: "
        f"≥ {OFFSET_MIN} of the mass besides the sink on that offset.",
    ),
    "dead_heads": FindingText(
        "Dead heads",
        "The value/output projection of these heads is tiny next to the other heads of their layer, or "
        "their whole layer's is next to the other layers', so "
        "whatever they attend to barely reaches the residual stream.",
        "Check whether the heads were pruned or zeroed on purpose; otherwise check weight decay and the "
        "gradients of W_V/W_O. Dead heads can be removed (Michel et al. 2019).",
        "{count} of {total} heads ({percent}) contribute < {threshold} of their layer's strongest head's "
        "‖W_V·W_O‖, or < {layer_threshold} of what the strongest head of a typical layer does: {heads}.",
    ),
    "qk_scale_small": FindingText(
        "Q/K weights too small",
        "The query/key weights are far below the usual initialisation scale, so all attention scores are "
        "near zero and every head is near uniform.",
        "In a trained model, restore W_Q/W_K of these heads from a good checkpoint (python -m diagnostics compare "
        "OLD NEW shows what changed): re-initialising them would throw away their training. While training from "
        "scratch, initialise W_Q/W_K with std ≈ 1/√d (fan-in) and check that they receive gradients; a learnable "
        "softmax temperature can help.",
        "{count} of {total} heads ({percent}) have Q/K weights with RMS·√d_in < {threshold}: {heads}.",
    ),
    "qk_scale_large": FindingText(
        "Q/K weights too large",
        "The query/key weights are far above the usual scale, which can make attention scores huge and saturate "
        "the softmax (entropy collapse).",
        "Where these heads are saturated too, or the message names a whole layer, rescale or re-initialise "
        "W_Q/W_K (std ≈ 1/√d_in), use σReparam/spectral normalisation (Zhai et al. 2023), clamp the scaled scores "
        "(e.g. to ±5), lower the learning rate. A head or two just over the line with a sound map needs nothing "
        "(healthy SmolLM2's L0H3 is 10.3).",
        "{count} of {total} heads ({percent}) have Q/K weights with RMS·√d_in > {threshold}: {heads}.",
    ),
    "large_qk_scores": FindingText(
        "Very large reachable attention scores",
        "The queries and keys these heads produce on the probes are long enough that a query aligned with a key "
        "would score far beyond what a softmax can spread (exp(−104) is already 0 in fp32): an early warning "
        "of attention entropy collapse (Zhai et al. 2023).",
        "Where these heads are saturated already, see that finding and check the scale the model puts on its "
        "scores (1/√d_k); otherwise watch their entropy while training: σReparam/spectral normalisation of Q/K, "
        "QK-LayerNorm, a lower learning rate and warm-up keep the scores in check. In a model that normalises its "
        "queries and keys (q_norm/k_norm), those norms' gains set the scores' scale: check them first. A layer "
        "the message names stands out from the model's other layers: compare it with the checkpoint it came from "
        "(python -m diagnostics compare).",
        "{count} of {total} heads ({percent}) can reach attention scores above {threshold} (scale · max‖q‖ · "
        "max‖k‖ on the probes): {heads}.",
    ),
    "similar_head_weights": FindingText(
        "Near-identical head weights",
        "Pairs of heads in one layer have nearly the same Q·Kᵀ weight product, so they attend alike on any "
        "input.",
        "Heads trained apart that converged: prune one head of each pair (Michel et al. 2019; Voita et al. "
        "2019), or add an orthogonality penalty on the per-head projections. Exact copies (cosine ≈ 1) that "
        "nobody made on purpose are a copying or conversion bug: restore the heads from the source checkpoint, "
        "or re-initialise them.",
        "{count} of {total} heads ({percent}) form {n_pairs} pair(s) whose Q·Kᵀ weights have cosine "
        "similarity > {threshold}: {pairs}.",
    ),
    "shared_kv_heads": FindingText(
        "Grouped key/value heads",
        "The model uses grouped-query attention: several query heads share one key/value head. Every head is "
        "reported per query head; heads of one group read the same keys and values.",
        "Nothing to fix. Heads of one group differ only by their queries, so similar maps within a group are "
        "expected more often than across groups.",
        "{query_heads} query heads share {kv_heads} key/value heads per layer: {groups}.",
    ),
    "weights_unavailable": FindingText(
        "Weight checks skipped",
        "AttnScope does not know where this architecture keeps its per-head Q/K/V/O weights.",
        "Nothing to fix in the model; the attention-map findings still apply.",
        "Weight checks skipped: {reason}.",
    ),
    "probe_truncated": FindingText(
        "Probe text truncated",
        "A probe text was longer than the model accepts, so only its first tokens were measured.",
        "Use shorter probe texts, or a model with more positions, to measure a whole text.",
        "Probe text truncated: {detail}.",
    ),
    "probes_unfit": FindingText(
        "Probes do not fit the vocabulary",
        "Some probe texts are mostly made of tokens the model's vocabulary does not hold ([UNK], byte fallback), "
        "so on them the model sees runs of one placeholder token, not text.",
        "Diagnose with texts in the model's language and vocabulary (--text). Where default probes were replaced, "
        "the in-vocabulary probes in their place say how the heads treat tokens they know, not how they read text.",
        "Probes do not fit the vocabulary: {detail}.",
    ),
    "probes_short": FindingText(
        "Probes too short to judge",
        "On a probe of a sentence or less, healthy heads cross the thresholds that mark sinks, positional or "
        "diffuse heads (a probe of a word or two reads as uniform), so the findings come from the other probes, "
        "or, where none is long enough, are shown as information only.",
        "Give probe texts of a short paragraph each, or leave them out to use AttnScope's seven default "
        "paragraphs.",
        "Probes too short to judge: {detail}.",
    ),
    "probes_repetitive": FindingText(
        "Probes too repetitive to judge",
        "On a probe that repeats a word or two, every key is the same token, and on one that repeats itself, "
        "every key has many copies, so even-handed rows are what a healthy head gives; the findings come from the "
        "other probes, or, where none is varied enough, are shown as information only.",
        "Give probe texts of varied wording, or leave them out to use AttnScope's seven default paragraphs.",
        "Probes too repetitive to judge: {detail}.",
    ),
    "repeated_probe_skipped": FindingText(
        "Repeated-sequence probe skipped",
        "The probe of random tokens repeated twice could not run on this model, so the induction and "
        "duplicate-token roles were not measured, and sharp or alike heads were judged on the texts alone (a "
        "copying head is neither saturated nor redundant when it does its job on the repeated sequence).",
        "Give the model more positions or a vocabulary of more tokens if it can take them; otherwise read the "
        "saturated and redundant findings with this in mind.",
        "Repeated-sequence probe skipped: {detail}.",
    ),
    "no_tokenizer": FindingText(
        "No tokenizer",
        "The model came without a tokenizer, so it was probed with random token ids (or, with no vocabulary size "
        "to draw them from or a forward that refused them, only its weights were checked: the note says which) "
        "and text views are unavailable. Heads that read content have none to read in random ids and spread out "
        "(demo-bert: near-uniform heads), so take a near-uniform finding from them with care.",
        "Save the tokenizer next to the model (tokenizer.save_pretrained(folder)) to diagnose it on real text.",
        "No tokenizer: {detail}.",
    ),
}

SEVERITY_TITLES = {"error": "Error", "warning": "Warning", "info": "Info"}


# What the training monitor (``diagnostics.monitor``) logs; fields in braces.
MONITOR_TEXTS = {
    "error_appeared": "attention monitor, step {step}: {message} {suggestion}",
    "uniform_again": ("attention monitor, step {step}: {message} At step {learned} they were not: heads that had "
                      "learned where to look lost it, as a learning rate too high does. {suggestion}"),
    "still_uniform": "attention monitor, step {step}: {heads} still near uniform ({message}) – {suggestion}",
    "measure_failed": "attention monitor, step {step}: the measurement failed and was skipped ({error}){where}; "
                      "training goes on",
    "no_tensorboard": "attention monitor: tensorboard is not installed, so no TensorBoard scalars are written "
                      "(pip install tensorboard to get them)",
}
