"""Probes fit the model: coverage of the vocabulary, in-vocabulary probes when the default texts do not fit, and
no verdict from probes too short to judge."""

import copy
import logging

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import AddedToken, AutoTokenizer, BertTokenizerFast, PreTrainedTokenizerFast

from broken_checkpoints import ALPHA
from pathologies import scaled_qk
from diagnostics import diagnose
from diagnostics.monitor import AttentionMonitor
from core import load_model
from core.checkpoints.registry import resolve_source
from core.errors import ExtractionError
from core.extraction.encode import PAIR_JOINED
from diagnostics.probe_texts import (
    CAUSAL_PROBES, DECODER_OPENER, DEFAULT_PROBES, MAX_DOMINANT, MAX_REPEATED, MIN_COVERAGE, MIN_DISTINCT_TOKENS,
    MIN_JUDGED_TOKENS, PROBE_MAX_TOKENS, Probe,
)
from diagnostics.probes import (
    RANDOM_LENGTH, REPEAT_HALF, Variety, default_probes, dominant_share, fitting_probes, probe_coverage,
    probe_tokens, probe_variety, repeated_probe, repeated_share, verdict_cap, vocabulary_probe,
)
from tiny import bpe_tokenizer, long_bpe_tokenizer, tiny_bart, tiny_bert, tiny_gpt2, wordpiece_tokenizer

# A word-level vocabulary without a single word of the English default probes.
WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon "
         "phi chi psi omega red orange yellow green blue indigo violet north south east west up down left right "
         "zero one two three four five six seven eight nine ten").split()


def word_tokenizer(words=WORDS) -> BertTokenizerFast:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {w: i for i, w in enumerate(specials + list(words))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                             sep_token="[SEP]", mask_token="[MASK]", model_max_length=64)


@torch.no_grad()
def healthy_word_model():
    """A tiny BERT whose heads look at content: W_Q = W_K = ALPHA·I (as broken_checkpoints) and no position
    embeddings, so its maps are peaked on its own words and uniform on a run of identical [UNK]s."""
    model = tiny_bert()
    model.embeddings.position_embeddings.weight.zero_()
    for layer in model.encoder.layer:
        for proj in (layer.attention.self.query, layer.attention.self.key):
            proj.weight.copy_(ALPHA * torch.eye(proj.weight.shape[0]))
            proj.bias.zero_()
    return model


def test_coverage_counts_unknown_tokens():
    words = word_tokenizer()
    assert probe_coverage(words, Probe("alpha beta gamma")) == 1.0
    assert probe_coverage(words, Probe("alpha cat gamma dog")) == 0.5
    assert max(probe_coverage(words, p) for p in DEFAULT_PROBES) < 0.2
    assert all(probe_coverage(bpe_tokenizer(), p) == 1.0 for p in DEFAULT_PROBES)  # byte-level BPE spells any text
    assert probe_coverage(bpe_tokenizer(), Probe("naïve café")) < 1.0  # but holds "ï" and "é" only as raw bytes
    assert min(probe_coverage(wordpiece_tokenizer(), p) for p in DEFAULT_PROBES) >= MIN_COVERAGE


def test_coverage_counts_characters_a_tokenizer_without_an_unknown_token_drops():
    """A BPE model with no unk_token drops every character it cannot spell, and no token says so: coverage of the
    default probes was 1.0 while the model read one character in three of them."""
    from tiny import dropping_tokenizer

    dropping = copy.deepcopy(dropping_tokenizer())
    dropping.model_max_length = 512
    assert probe_coverage(dropping, Probe("the cat sat on the mat")) == 1.0
    assert probe_coverage(dropping, Probe("the cat", "sat on the mat")) == 1.0  # each sentence of a pair
    assert probe_coverage(dropping, Probe("the dog")) == 4 / 6  # "d", "g" dropped; "o" spelt
    assert probe_coverage(dropping, Probe("the cat", "the dog")) == 10 / 12
    assert max(probe_coverage(dropping, p) for p in DEFAULT_PROBES) < MIN_COVERAGE
    assert probe_coverage(dropping, Probe("the cat dog"), limit=2) == 1.0  # what the model does not read is not counted
    probes, _, notes = fitting_probes(dropping, None)
    assert notes and not probes


def test_characters_a_tokenizer_means_to_leave_out_are_not_counted_as_dropped():
    """What the normalizer strips (accents of NFD text, soft hyphens) and what the pre-tokenizer splits off
    (markup_tokenizer's "|") are no characters the tokenizer failed to spell; nor is the part of a text cut off on
    the left. A first version counted them: NFD French 0.82 on MiniLM, "|"-joined vocabulary 0.78, a left-cut text
    0.33."""
    import unicodedata

    from tiny import MARKUP_TOKENS, markup_tokenizer

    words = wordpiece_tokenizer()
    text = DEFAULT_PROBES[0].text
    assert probe_coverage(words, Probe(unicodedata.normalize("NFD", "café déjà élève"))) == probe_coverage(
        words, Probe("cafe deja eleve"))
    assert probe_coverage(words, Probe("super\u00adcat")) == probe_coverage(words, Probe("supercat"))
    assert probe_coverage(markup_tokenizer(), Probe("|".join(MARKUP_TOKENS))) == 1.0
    left = copy.deepcopy(words)
    left.truncation_side = "left"
    long_text = " ".join([text] * 3)
    assert probe_coverage(left, Probe(long_text), limit=64) >= probe_coverage(words, Probe(text)) - 0.05
    assert probe_coverage(words, Probe("the cat is [MASK] and the dog is [MASK]")) == probe_coverage(
        words, Probe("the cat is and the dog is"))  # special tokens the text names are spelt


def test_a_normalizer_that_makes_spaces_visible_is_counted_on_both_sides():
    """Gemma's tokenizer writes each space as "▁" before the model reads it (normalizer Replace(" ", "▁")) and
    decodes it back to a space: every space had counted as a character not spelt, and each default probe (0.80)
    was replaced by random tokens."""
    from tokenizers import decoders, normalizers, trainers

    backend = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    backend.normalizer = normalizers.Replace(" ", "\u2581")
    backend.train_from_iterator([p.text for p in DEFAULT_PROBES], trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<pad>", "<unk>"]))
    backend.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    gemma_like = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>")
    assert gemma_like.decode(gemma_like(DEFAULT_PROBES[0].text)["input_ids"]) == DEFAULT_PROBES[0].text
    assert [probe_coverage(gemma_like, Probe(p.text)) for p in DEFAULT_PROBES] == [1.0] * len(DEFAULT_PROBES)


def test_default_probes_stay_within_the_length_minilm_was_trained_on():
    """all-MiniLM-L6-v2 saw at most 128 tokens in training; past that its previous-token head drifts
    (L0H2: 0.99 of its mass on the previous token at 128 tokens, 0.78 at 256; probe_texts.PROBE_MAX_TOKENS)."""
    minilm = AutoTokenizer.from_pretrained(resolve_source("minilm"))
    lengths = [len(minilm(p.text, p.text_pair)["input_ids"]) for p in DEFAULT_PROBES]  # [CLS] and [SEP]s included
    assert PROBE_MAX_TOKENS == 128 and max(lengths) <= PROBE_MAX_TOKENS and min(lengths) >= 100, lengths


def test_decoders_read_each_default_probe_twice_as_long():
    """A decoder-only LM is pretrained on whole context windows, so it gets ``CAUSAL_PROBES``: the same paragraphs,
    each going on with one more, where SmolLM2's labels are steadier (their lengths with SmolLM2's tokenizer:
    test_real_model_findings). A decoder has no sentence pairs: it reads a pair as one text, not glued together
    ("them.Before")."""
    for default, causal in zip(DEFAULT_PROBES, CAUSAL_PROBES):
        texts = " ".join(filter(None, default.to_dict().values()))
        assert causal.text_pair is None and causal.text.startswith(f"{DECODER_OPENER} {texts}")
        assert len(causal.text) > 1.6 * len(default.text + (default.text_pair or ""))
        assert probe_coverage(bpe_tokenizer(), causal) == 1.0
    assert default_probes(tiny_gpt2(1024), long_bpe_tokenizer()) is CAUSAL_PROBES
    short = default_probes(tiny_gpt2(64), bpe_tokenizer())  # cannot read them whole: cut as before, pairs joined
    assert short == default_probes(tiny_gpt2(512), long_bpe_tokenizer())  # 708-899 tiny-BPE tokens
    pair = DEFAULT_PROBES[5]
    assert short[0] == Probe(f"{DECODER_OPENER} {DEFAULT_PROBES[0].text}")
    assert short[5] == Probe(f"{DECODER_OPENER} {pair.text} {pair.text_pair}")
    assert default_probes(tiny_bert(512), wordpiece_tokenizer()) is DEFAULT_PROBES  # encoders: <= 128 tokens
    report = diagnose((tiny_gpt2(1024), long_bpe_tokenizer()))
    assert report.probes == [p.to_dict() for p in CAUSAL_PROBES] and not report.model["streamed"]
    assert [r.attentions.shape[-1] for r in report.samples] == [probe_tokens(long_bpe_tokenizer(), p)
                                                                for p in CAUSAL_PROBES]
    assert not [w for r in report.samples for w in r.warnings if PAIR_JOINED in w]  # no text glued to another


def test_a_decoder_reads_every_default_probe_after_the_same_tokens():
    """A decoder without a BOS token sinks on its first token, and how much depends on the word: every default probe
    of a decoder opens with ``DECODER_OPENER``, so its first tokens (its sink) are the same in each, long or short."""
    tokenizer = long_bpe_tokenizer()
    opener = tokenizer(DECODER_OPENER)["input_ids"]
    for model in (tiny_gpt2(1024), tiny_gpt2(512)):
        probes = default_probes(model, tokenizer)
        assert len(probes) == len(DEFAULT_PROBES)
        assert all(tokenizer(p.text)["input_ids"][:len(opener)] == opener for p in probes)
    assert not any(p.text.startswith(DECODER_OPENER) for p in DEFAULT_PROBES)  # encoders: [CLS] comes first anyway


def test_unfit_default_probes_are_replaced_by_in_vocabulary_ones():
    model, words = healthy_word_model(), word_tokenizer()
    report = diagnose((model, words))
    assert [f.severity for f in report.findings if f.severity == "error"] == []
    fit = report.finding("probes_unfit")
    assert fit.severity == "info" and "replaced by 4 sequences" in fit.message
    assert len(report.samples) == 4 and all(t in WORDS for t in report.samples[0].tokens[1:-1])
    words_seen = report.samples[0].tokens[1:-1]  # all 50 ordinary words, once each: fewer than RANDOM_LENGTH
    assert len(words_seen) == len(set(words_seen)) == len(WORDS) < RANDOM_LENGTH
    assert report.probes[0]["token_ids"] == report.samples[0].token_ids


def test_what_the_unfit_probes_would_have_said():
    """On the default texts this healthy model is all [UNK]s and looks uniform; kept texts give no error."""
    model, words = healthy_word_model(), word_tokenizer()
    texts = [p.text for p in DEFAULT_PROBES if p.text_pair is None]  # 104-114 words: not too short to judge
    report = diagnose((model, words), texts=texts)
    assert report.finding("diffuse_heads").severity == "info"  # an error but for the caps
    assert "they were kept; no finding from the maps goes above info" in report.finding("probes_unfit").message
    assert max(report.finding("probes_repetitive").details["distinct"]) <= 4  # [UNK] and a few words
    assert verdict_cap([100], None, [0.5], [50])[:2] == ("warning", None)  # unfit but varied: at most a warning
    assert verdict_cap([100], None, [0.5], [4])[0] == "info"  # a run of [UNK]s: at most information
    assert verdict_cap([16] * 7, 16, None, [11] * 7) == ("error", None, [])  # a model that reads 16 tokens: 4 suffice
    words_seen = report.samples[0].tokens[1:-1]
    assert words_seen.count("[UNK]") >= 0.9 * len(words_seen)  # "two" is one of its words


def test_the_training_monitor_warns_once_that_its_probes_do_not_fit(caplog):
    monitor = AttentionMonitor(tokenizer=word_tokenizer(), probes=[p.text for p in DEFAULT_PROBES[:2]], every=1)
    with caplog.at_level(logging.WARNING, logger="attnscope.monitor"):
        for step in range(3):
            monitor.on_step(healthy_word_model(), step)
    unfit = [r.getMessage() for r in caplog.records if "Probes do not fit the vocabulary" in r.getMessage()]
    assert len(unfit) == 1 and "step 0" in unfit[0]


def _alarms(report):
    return [(f.code, f.severity) for f in report.findings if f.severity != "info"]


def test_a_probe_too_short_to_judge_raises_no_alarm_on_a_healthy_model():
    """One word read as uniform: demo-gpt2 got ``diffuse_heads: error`` from it before the cap."""
    report = diagnose("demo-gpt2", texts=["Hello"])
    assert _alarms(report) == []
    assert report.finding("diffuse_heads") is not None  # still shown, as information
    short = report.finding("probes_short")
    read = len(report.samples[0].tokens)  # "Hello" and the tokenizer's special tokens
    assert short.details["threshold"] == MIN_JUDGED_TOKENS and short.details["tokens"] == [read] and read <= 3
    assert f"1 of 1 probes have fewer than {MIN_JUDGED_TOKENS} tokens (shortest {read})" in short.message


@pytest.mark.parametrize("text", ["the " * 150, "hello world " * 60])
def test_a_probe_of_one_word_repeated_raises_no_alarm_on_a_healthy_model(text):
    """Every key the same word: near-uniform rows are right, and healthy demo-bert got diffuse_heads: error."""
    report = diagnose("demo-bert", texts=[text])
    assert _alarms(report) == []
    note = report.finding("probes_repetitive")
    assert note.details["threshold"] == MIN_DISTINCT_TOKENS and note.details["distinct"][0] < MIN_DISTINCT_TOKENS
    assert report.findings[0] is note  # the probe notes come first: they qualify every finding


SENTENCE_25 = ("The old lighthouse keeper walked slowly along the rocky shore every morning, counting gulls and "
               "writing their numbers in a small blue notebook.")


def test_a_sentence_repeated_raises_no_alarm_on_a_healthy_model():
    """A 25-word sentence repeated has its 16 distinct tokens, so it passed as varied, and healthy demo-bert got a
    diffuse_heads warning at 256-512 tokens: every key has many copies. Prose of the same length stays judged."""
    report = diagnose("demo-bert", texts=[" ".join([SENTENCE_25] * 12)])  # cut to its 512 tokens
    assert _alarms(report) == []
    note = report.finding("probes_repetitive")
    assert note.details["distinct"][0] >= MIN_DISTINCT_TOKENS and note.details["repeated"][0] > MAX_REPEATED
    assert note.details["repeated_threshold"] == MAX_REPEATED
    assert "1 of 1 probes repeat themselves (80% or more of their runs of 8 tokens came earlier in them" in note.message
    prose = " ".join(p.text for p in DEFAULT_PROBES[:3] if p.text_pair is None)
    assert diagnose("demo-bert", texts=[prose]).finding("probes_repetitive") is None


def test_a_text_read_as_mostly_one_unknown_token_raises_no_alarm_on_a_healthy_model():
    """Chinese between ASCII words, read by demo-bert as 0.8-0.9 [UNK]s of 23-33 distinct tokens: unfit but
    varied, it was judged up to a warning, and got a diffuse_heads one."""
    chinese = "，".join(["我们今天在公园里散步看见很多花" + f" item {i} ok" for i in range(40)])
    report = diagnose("demo-bert", texts=[chinese])
    assert _alarms(report) == []
    note = report.finding("probes_repetitive")
    assert note.details["dominant"][0] >= MAX_DOMINANT and note.details["distinct"][0] >= MIN_DISTINCT_TOKENS
    assert "are one token for 50% or more of their length" in note.message


def test_structured_text_that_recurs_around_varied_content_is_still_judged():
    """Logs, JSON and lyrics repeat their frame, not themselves: with half their 8-token runs seen before counted as
    too repetitive, demo-gpt2 with Q/K x 8 lost its saturated_heads error on a stack-trace log (exit 0)."""
    lines = []
    for k in range(12):
        lines.append(f"2024-05-14 10:{k:02d}:{(7 * k) % 60:02d},{(37 * k) % 1000:03d} ERROR worker-{k % 8 + 1} job "
                     f"{1000 + 97 * k} failed")
        lines.append('Traceback (most recent call last):\n  File "/srv/app/jobs/runner.py", line 88, in run\n'
                     '    result = job.execute()\n  File "/srv/app/db/client.py", line 57, in fetch_rows\n'
                     f"psycopg2.OperationalError: could not connect to server (attempt {k % 5 + 1})")
    log = "\n".join(lines)
    model, tokenizer = load_model("demo-gpt2")
    (variety,) = probe_variety(tokenizer, [Probe(log)], 512)
    assert 0.3 < variety.repeated < MAX_REPEATED and variety.dominant < MAX_DOMINANT
    with scaled_qk(model, 8):
        report = diagnose((model, tokenizer), texts=[log])
    assert report.finding("probes_repetitive") is None
    assert report.finding("saturated_heads").severity == "error"


def test_repeated_and_dominant_shares():
    assert repeated_share(list(range(100))) == 0.0 and repeated_share([1, 2, 3]) == 0.0  # shorter than one run
    assert repeated_share(list(range(10)) * 10) == pytest.approx(83 / 93)  # 93 runs, 10 of them different
    assert dominant_share([5, 5, 5, 1]) == 0.75 and dominant_share([]) == 0.0
    assert verdict_cap([200], None, None, [Variety(100, MAX_REPEATED)])[0] == "info"  # mostly a copy of itself
    assert verdict_cap([200], None, None, [Variety(100, 0.79, 0.49)])[0] == "error"
    assert verdict_cap([200], None, None, [Variety(100, 0.0, MAX_DOMINANT)])[0] == "info"
    assert "(most 57%)" in verdict_cap([200], None, None, [Variety(100, 0.0, 0.57)])[2][0].message  # not 56%
    worst, judged, notes = verdict_cap([200, 30], None, None, [Variety(12, 0.85, 0.6), Variety(20, 0.9)])
    assert (worst, judged) == ("info", None)  # the second is short: only the first is too repetitive
    assert notes[-1].message.startswith(
        "Probes too repetitive to judge: 1 of 2 probes hold fewer than 16 distinct tokens (fewest 12) or repeat "
        "themselves (80% or more of their runs of 8 tokens came earlier in them; most 85%) or are one token for "
        "50% or more of their length (most 60%)")


def test_short_probes_show_what_they_measured_and_long_ones_judge_it():
    model = tiny_gpt2()
    with torch.no_grad():
        for block in model.h:
            block.attn.c_attn.weight[:, :64] *= 100.0  # Q/K x 100: near one-hot rows
    sentence = "The quick brown fox jumps over the lazy dog."  # 32 tokens
    paragraph = sentence + " Attention is all you need, said the paper. The dog slept in the sun."  # 70 tokens
    short = diagnose((model, bpe_tokenizer()), texts=[sentence])
    assert short.finding("saturated_heads").severity == "info" and short.finding("probes_short")
    judged = diagnose((model, bpe_tokenizer()), texts=[paragraph])
    assert judged.finding("saturated_heads").severity == "error" and judged.finding("probes_short") is None
    both = diagnose((model, bpe_tokenizer()), texts=[sentence, paragraph])  # the sentence hid the error, exit 0
    assert both.finding("saturated_heads").severity == "error"
    assert both.finding("saturated_heads").heads == judged.finding("saturated_heads").heads  # the paragraph's
    assert "1 of 2 probes" in both.finding("probes_short").message
    assert both.finding("probes_short").message.endswith("the findings come from probe 2 alone.")
    assert {sum(h.metrics["votes"].values()) for h in both.heads} == {2}  # both probes label the heads


def test_an_unfit_probe_s_coverage_reads_below_the_threshold_and_the_advice_fits_what_was_done():
    """89.74 % read "fewer than 90% ... (lowest 90%)", and a caller's kept probes were told of "the in-vocabulary
    probes used instead", which no probe was (browser audit, stop 59)."""
    note = verdict_cap([110, 120], None, [1.0, 0.8974], [80, 60])[2][0]
    assert "fewer than 90% of their tokens in the vocabulary (lowest 89.7%); they were kept" in note.message
    assert "Where default probes were replaced" in note.suggestion
    assert "(lowest 0.0%)" in verdict_cap([110, 120], None, [1.0, 0.0], [80, 60])[2][0].message


def test_verdict_is_judged_on_the_probes_that_can_be():
    """One short, repetitive or unfit probe beside a paragraph no longer caps what the paragraph shows."""
    assert verdict_cap([110, 16], None, None, [80, 10])[:2] == ("error", [True, False])
    assert verdict_cap([110, 150], None, None, [80, 1])[:2] == ("error", [True, False])  # "the" x 150
    worst, judged, notes = verdict_cap([110, 120], None, [1.0, 0.5], [80, 60])
    assert (worst, judged) == ("error", [True, False]) and notes[0].code == "probes_unfit"
    assert notes[0].message.endswith("they were kept; the findings come from probe 1 alone.")
    worst, judged, notes = verdict_cap([100, 20], None, [0.5, 1.0], [50, 10])  # long one unfit, fit one short
    assert (worst, judged) == ("warning", [True, False])
    assert [n.code for n in notes] == ["probes_unfit", "probes_short"]
    assert notes[1].message.endswith("probe 1 alone, at most warning.")
    worst, judged, notes = verdict_cap([20, 30], None, None, [10, 10])
    assert (worst, judged) == ("info", None)
    assert notes[0].message.endswith("no finding from the maps goes above info (the weight checks are not capped).")
    assert verdict_cap([], None, None, []) == ("error", None, [])  # random ids, no tokenizer: nothing to doubt


def test_a_probe_as_long_as_the_model_reads_is_judged():
    """A model of 16 positions can read no more: a probe that fills them is not too short."""
    model = tiny_gpt2(max_positions=16)
    tokenizer = copy.deepcopy(bpe_tokenizer())  # the cached one is shared by every test
    tokenizer.model_max_length = 16
    report = diagnose((model, tokenizer), texts=["The quick brown fox jumps over the lazy dog."])
    assert report.finding("probes_short") is None and report.finding("probe_truncated")
    report = diagnose((model, tokenizer), texts=["The fox."])
    assert report.finding("probes_short").details["threshold"] == 16


def test_coverage_is_of_the_tokens_the_model_reads():
    """A long caller text whose first 64 tokens the vocabulary misses is unfit, whatever its unread tail holds:
    the tail had hidden it (coverage 0.93 on the whole text), and a healthy model got diffuse_heads: error."""
    text = " ".join(["cat"] * 60 + ["alpha"] * 800)
    words = word_tokenizer()
    assert probe_coverage(words, Probe(text)) > 0.9 and probe_coverage(words, Probe(text), limit=64) < 0.1
    probes, coverage, notes = fitting_probes(words, [text], limit=64)
    assert coverage[0] < 0.1 and not notes  # kept: the diagnosis's verdict_cap notes it
    report = diagnose((healthy_word_model(), words), texts=[text])
    assert report.finding("probes_unfit") and report.finding("probe_truncated")
    assert "error" not in {f.severity for f in report.findings}


def test_an_unknown_token_that_is_also_the_end_token_still_counts_as_unknown():
    """unk = eos = <|endoftext|> on a word-level vocabulary (GPT-2's convention, not byte-level): every word it
    misses becomes that token, which is not a control token there. Coverage had been 1.0 on unknown text, and the
    default probes were refused as giving "no tokens besides the tokenizer's own"."""
    vocab = {w: i for i, w in enumerate(["<|endoftext|>"] + list(WORDS))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    words = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<|endoftext|>", eos_token="<|endoftext|>",
                                    bos_token="<|endoftext|>", model_max_length=64)
    assert probe_coverage(words, Probe("alpha cat gamma dog")) == 0.5
    model = tiny_gpt2()
    report = diagnose((model, words))
    assert "replaced by 4 sequences" in report.finding("probes_unfit").message


def test_an_encoder_decoder_whose_vocabulary_misses_the_probes_gets_one_note():
    """A protein T5 or a word-level BART: the in-vocabulary probes cover one stack of layers, so they cannot
    replace the default texts, and the report says so once (it raised AttributeError from BART's forward)."""
    report = diagnose((tiny_bart(), word_tokenizer()))
    notes = [f for f in report.findings if f.code == "probes_unfit"]
    assert len(notes) == 1 and "no in-vocabulary probe could replace them" in notes[0].message, notes
    assert "encoder-decoders" in notes[0].message and report.heads == []
    with pytest.raises(ExtractionError, match="encoder-decoders"):
        vocabulary_probe(tiny_bart(), word_tokenizer(), seed=1)


def test_random_probes_draw_no_special_token():
    """Added tokens marked special but not listed among the special tokens (Llama 3's 256 untrained
    <|reserved_special_token_N|>, SmolLM2's <file_sep>) are not ordinary: every seed drew some."""
    tokenizer = copy.deepcopy(bpe_tokenizer())  # the cached one is shared by every test
    reserved = [AddedToken(f"<|reserved_special_token_{i}|>", special=True) for i in range(60)]
    tokenizer.add_tokens(reserved)
    model = tiny_gpt2()
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    drawn = {t for seed in (0, 10, 11) for t in repeated_probe(model, tokenizer, seed=seed).result.tokens}
    drawn |= {t for seed in (1, 2, 3, 4) for t in vocabulary_probe(model, tokenizer, seed).tokens}
    assert not {t.content for t in reserved} & drawn and len(drawn) > 150


def test_a_small_vocabulary_gets_shorter_copies_and_none_says_why():
    """A protein model has ~25 ordinary tokens: its copies are as long as its vocabulary (they were skipped
    silently, and with them the induction and duplicate-token roles); below 4 a note says the probe was skipped."""
    probe = repeated_probe(tiny_bert(), word_tokenizer(WORDS[:28]))
    assert probe.half == 28 < REPEAT_HALF and len(set(probe.result.token_ids[1:29])) == 28
    report = diagnose((healthy_word_model(), word_tokenizer(WORDS[:3])), texts=[" ".join(WORDS[:3] * 30)])
    skipped = report.finding("repeated_probe_skipped")
    assert skipped.severity == "info" and "only 3 ordinary tokens" in skipped.message
    assert diagnose((healthy_word_model(), word_tokenizer())).finding("repeated_probe_skipped") is None


def test_nan_maps_of_a_probe_too_short_to_judge_are_still_an_error():
    """NaN maps are broken on any probe: beside a paragraph, a short probe's NaN had dropped out of the findings."""
    model = tiny_gpt2()
    tokenizer = bpe_tokenizer()
    paragraph = ("The quick brown fox jumps over the lazy dog. Attention is all you need, said the paper. "
                 "The dog slept in the sun.")
    broken = tokenizer("z")["input_ids"][0]
    assert broken not in tokenizer(paragraph)["input_ids"]
    with torch.no_grad():
        model.wte.weight[broken] = 3e38 * (torch.arange(model.wte.weight.shape[1]) % 2 * 2 - 1)  # inf once scaled
    report = diagnose((model, tokenizer), texts=[paragraph, "zq the fox"])
    assert report.finding("probes_short") and report.finding("non_finite_attention").severity == "error"
    assert diagnose((model, tokenizer), texts=[paragraph]).finding("non_finite_attention") is None
