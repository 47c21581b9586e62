"""extract_attention equals the eager model's output_attentions, for every adapter."""

import copy
import logging
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

import tiny
from core import (
    AttnScopeTransformer, ExtractionError, InputError, TINY_PRESETS, extract_attention, extract_module_attention,
)

from core.errors import AttnScopeError, OutOfMemory
from core.extraction.encode import DROPPED, PAIR_JOINED, TRUNCATED
from core.extraction.extract import model_is_causal
from core.extraction.module_extract import capture_mha_weights
from core.extraction.tokens import byte_level_token, display_tokens, prettify_token

TEXT = "The quick brown fox jumps over the lazy dog."


def _reference(model, **inputs):
    with torch.no_grad():
        return model(**inputs, output_attentions=True, return_dict=True)


def _stacked(attentions):
    return torch.stack([a[0] for a in attentions])  # (L, H, q, k)


@pytest.mark.parametrize("build,tokenizer,causal", [
    (tiny.tiny_bert, tiny.wordpiece_tokenizer, False),
    (tiny.tiny_gpt2, tiny.bpe_tokenizer, True),
])
def test_equals_eager_output_attentions(build, tokenizer, causal):
    model, tok = build(), tokenizer()
    result = extract_attention(model, tok, TEXT)
    ids = tok(TEXT, return_tensors="pt")["input_ids"]
    model.set_attn_implementation("eager")
    expected = _stacked(_reference(model, input_ids=ids).attentions)
    assert torch.equal(result.attentions, expected)
    assert result.attentions.dtype == torch.float32 and result.attentions.device.type == "cpu"
    assert len(result.tokens) == ids.shape[1] == result.attentions.shape[-1]
    assert result.token_ids == ids[0].tolist()
    assert result.causal is causal
    torch.testing.assert_close(result.attentions.sum(-1), torch.ones(result.attentions.shape[:-1]))
    if causal:
        assert torch.all(result.attentions.triu(diagonal=1) == 0)


def test_special_tokens_flagged_and_pair_text():
    result = extract_attention(tiny.tiny_bert(), tiny.wordpiece_tokenizer(), "the fox", text_pair="the dog")
    assert result.tokens[0] == "[CLS]" and result.special[0]
    sep = [i for i, t in enumerate(result.tokens) if t == "[SEP]"]
    assert len(sep) == 2 and all(result.special[i] for i in sep)
    assert sum(result.special) == 3 and not any(result.padding)


def test_a_pair_is_run_with_its_segment_ids():
    """Sentence B is embedded as segment 1, as the tokenizer encodes it; before, every token was segment 0."""
    model, tok = tiny.tiny_bert(), tiny.wordpiece_tokenizer()
    result = extract_attention(model, tok, TEXT, text_pair="A second sentence.")
    inputs = tok(TEXT, "A second sentence.", return_tensors="pt")
    assert result.token_type_ids == inputs["token_type_ids"][0].tolist() and 1 in result.token_type_ids
    model.set_attn_implementation("eager")
    assert torch.equal(result.attentions, _stacked(_reference(model, **inputs).attentions))
    alone = _stacked(_reference(model, input_ids=inputs["input_ids"]).attentions)
    assert (result.attentions - alone).abs().max() > 1e-4
    assert extract_attention(model, tok, TEXT).token_type_ids is None  # one sentence: all 0, nothing to pass


def test_segment_ids_are_asked_for_and_given_only_where_the_model_has_rows_for_them():
    """A tokenizer that does not list token_type_ids among its inputs (ALBERT's in transformers 5) still gives a
    pair's; a RoBERTa-type model (one segment row) with a BERT tokenizer (klue/roberta) gets none, not an IndexError."""
    from transformers import RobertaConfig, RobertaModel

    tok = copy.deepcopy(tiny.wordpiece_tokenizer())
    tok.model_input_names = ["input_ids", "attention_mask"]
    assert extract_attention(tiny.tiny_bert(), tok, TEXT, "A second sentence.").token_type_ids is not None
    torch.manual_seed(0)
    roberta = RobertaModel(RobertaConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=37, type_vocab_size=1), add_pooling_layer=False).eval()
    result = extract_attention(roberta, tiny.wordpiece_tokenizer(), TEXT, "A second sentence.")
    assert result.token_type_ids is None and result.attentions.shape[0] == 2


@pytest.mark.parametrize("family", ["Data2VecText", "MPNet", "IBert", "XLMRobertaXL", "RobertaPreLayerNorm"])
def test_position_tables_that_start_past_padding_are_not_overrun(family):
    """Only four model types were known to number positions from padding_idx + 1: the others, with a tokenizer
    of no limit of its own, ended in "index 66 is out of bounds" on 65 tokens. The model's own table now says."""
    import transformers

    config = getattr(transformers, f"{family}Config")(vocab_size=200, hidden_size=16, num_hidden_layers=1,
                                                      num_attention_heads=2, intermediate_size=32,
                                                      max_position_embeddings=66, pad_token_id=1)
    torch.manual_seed(0)
    model = getattr(transformers, f"{family}Model")(config).eval()
    tok = copy.deepcopy(tiny.wordpiece_tokenizer())
    tok.model_max_length = int(1e30)  # no limit of its own: the model's is the only one
    result = extract_attention(model, tok, "the " * 70)
    assert result.attentions.shape[-2:] == (64, 64) and "limit of 64" in result.warnings[0]
    assert torch.allclose(result.attentions.sum(-1), torch.ones(1, 2, 64), atol=1e-5)


def test_byte_level_markers_prettified():
    result = extract_attention(tiny.tiny_gpt2(), tiny.bpe_tokenizer(), "the fox the dog")
    assert not any("Ġ" in t for t in result.tokens)
    assert "▁the" in result.tokens  # a word after a space shows where it starts


def test_pair_on_a_decoder_only_model_says_how_it_was_joined():
    gpt2 = extract_attention(tiny.tiny_gpt2(), tiny.bpe_tokenizer(), "the fox", text_pair="the dog")
    assert any(PAIR_JOINED in w for w in gpt2.warnings)
    bert = extract_attention(tiny.tiny_bert(), tiny.wordpiece_tokenizer(), "the fox", text_pair="the dog")
    assert not any(PAIR_JOINED in w for w in bert.warnings)  # [SEP] marks the boundary


def test_characters_the_tokenizer_drops_are_warned_of():
    """A BPE with no unknown token read "the dog" as "the o" in Inspect, and nothing said so."""
    model = tiny.tiny_gpt2()
    result = extract_attention(model, tiny.dropping_tokenizer(), "the dog")
    assert result.tokens == ["the", "o"]
    assert result.warnings == [f"{DROPPED}: 2 of the 6 characters read (spaces aside) have no token and no unknown "
                               "token stands in for them, so the model reads the text without them"]
    assert not extract_attention(model, tiny.dropping_tokenizer(), "the cat sat").warnings
    pair = extract_attention(model, tiny.dropping_tokenizer(), "the cat", text_pair="the dog").warnings
    assert any(w.startswith(f"{DROPPED}: 2 of the 12 characters") for w in pair)
    for text in ["naïve café 日本語 🎉👍🏽 🇫🇷 مرحبا", "tab\there\x00ctl\u200bzw\u00adsoft e\u0301", "∑∫√ ≠ [UNK] <s>"]:
        assert not extract_attention(tiny.tiny_bert(), tiny.wordpiece_tokenizer(), text).warnings  # [UNK] stands in
        assert not extract_attention(model, tiny.bpe_tokenizer(), text).warnings  # byte-level: spells every text


def test_a_text_cut_inside_a_word_spelt_in_pieces_is_not_said_to_drop_characters():
    """A tokenizer with an unknown token cannot drop characters, but a text cut after a lone "▁" piece (ALBERT's,
    T5's: "brown" spelt "▁" "b" "r" …) counted the "b" as read and not spelt, and warned of it."""
    from transformers import AlbertTokenizer

    vocab = [("<pad>", 0.0), ("<unk>", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), ("[MASK]", 0.0), ("▁", -1.0)] + [
        (c, -2.0) for c in "abcdefghijklmnopqrstuvwxyz."] + [("▁the", -1.0), ("▁quick", -1.0), ("▁fox", -1.0)]
    text = "The quick brown fox. " * 3
    result = extract_attention(tiny.tiny_bert(max_positions=15), AlbertTokenizer(vocab=vocab), text)
    assert result.tokens[-3:] == ["▁quick", "␣", "[SEP]"]
    assert not any(DROPPED in w for w in result.warnings) and any(TRUNCATED in w for w in result.warnings)


def test_a_target_only_an_encoder_decoder_reads_is_said_to_be_unused():
    """A target text given with BERT was dropped without a word (a second sentence on GPT-2 gets one)."""
    bert = extract_attention(tiny.tiny_bert(), tiny.wordpiece_tokenizer(), "the fox", target="the dog")
    assert bert.warnings == ["the target text was not used: BertModel is not an encoder-decoder, so only the text "
                             "was read"]
    assert not extract_attention(tiny.tiny_bert(), tiny.wordpiece_tokenizer(), "the fox", target=" ").warnings
    bart = extract_attention(tiny.tiny_bart(), tiny.wordpiece_tokenizer(), "the fox", target="the dog")
    assert not bart.warnings and bart.decoder is not None


@pytest.mark.parametrize(("raw", "shown"), [("▁cat", "▁cat"), ("cat", "cat"), ("##at", "##at"), ("▁", "␣"),
                                            ("\n", "⏎"), ("", "∅"), ("<a href=x>", "<a href=x>"),
                                            ("a\x1bb", "a\\x1bb"), ("\x00", "\\x00"), ("\x7f", "\\x7f"),
                                            ("\x85", "\\x85")])
def test_prettify_token_marks_word_starts(raw, shown):
    assert prettify_token(raw) == shown


ENGLAND = "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"


@pytest.mark.parametrize(("raw", "shown"), [
    ("Ġgantija", "Ġgantija"), ("Ċirkewwa", "Ċirkewwa"), ("ĉiam", "ĉiam"), ("Ġ", "Ġ"),  # Maltese, Esperanto letters
    ("<0x0A>", "⏎"), ("<0x09>", "⇥"), ("<0x20>", "␣"), ("<0xE2>", "<0xE2>"), ("<0x41>", "<0x41>"),  # byte fallback
    ("    ", "␣␣␣␣"), (" ", "␣"), ("\u200b", "\\u200b"), ("\ufeff", "\\ufeff"), ("\u3000", "\\u3000"),
    ("\xa0", "\\u00a0"), ("\u202eabc", "\\u202eabc"), ("a\u200db", "a\u200db"), ("می\u200cخواهم", "می\u200cخواهم"),
    (ENGLAND, ENGLAND),  # a flag's tag characters: format characters that draw
    ("\u06dd\u0661", "\u06dd\u0661"), ("\u0600", "\u0600"),  # Arabic end of ayah and number sign
])
def test_tokens_of_tokenizers_that_are_not_byte_level_show_what_they_are(raw, shown):
    """Ġ, Ċ, ĉ were shown as a word start, a newline and a tab on every tokenizer (Maltese "Ġgantija" as
    "▁gantija", "Ġ" as a space); <0x0A> stayed as typed; spaces and invisible characters showed blank, and a
    right-to-left override turned a label around."""
    assert prettify_token(raw) == shown


@pytest.mark.parametrize(("piece", "shown"), [
    ("ĠcafÃ©", "▁café"), ("Ã©", "é"), ("æĿ", "<0xE6><0x9D>"), ("Ġæ", "▁<0xE6>"), ("č", "\\x0d"), ("ě", "\\x1b"),
    ("Ā", "\\x00"), ("ġ", "\\x7f"), ("Ġ", "␣"), ("ĊĊ", "⏎⏎"), ("ĉ", "⇥"), ("Ġĉ", "▁⇥"),
    ("<|im_start|>", "<|im_start|>"),
])
def test_byte_level_pieces_show_the_text_their_bytes_encode(piece, shown):
    """SmolLM2 showed "café" as c af Ã©, and \\r, ESC, NUL, DEL as the letters č ě Ā ġ."""
    assert byte_level_token(piece) == shown


def _byte_alphabet(text: str) -> str:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = bytes_to_unicode()
    return "".join(alphabet[b] for b in text.encode("utf-8"))


@pytest.mark.parametrize(("text", "shown"), [
    ("\ufe0f", "\\ufe0f"), ("\U000e0100", "\\U000e0100"),  # variation selectors: "❤️" splits after the heart
    ("\u064e", "◌\u064e"), ("\u0652\u064e", "◌\u0652\u064e"), ("\u093e", "◌\u093e"),  # Arabic, Devanagari signs
    ("\u20dd", "◌\u20dd"),  # an enclosing mark
    ("\u0645\u064e", "\u0645\u064e"), ("e\u0301", "e\u0301"), ("\u2764\ufe0f", "\u2764\ufe0f"),  # marks on a base
    ("\u200d", "\\u200d"), ("\u200c", "\\u200c"), ("\u3164", "\\u3164"), ("\u2800", "\\u2800"),  # blank alone
    ("\u200d\u200c", "\\u200d\\u200c"), ("\U0001d173", "\\U0001d173"), ("a\U0001d173", "a\\U0001d173"),
    ("\u0644\u200c", "\u0644\u200c"), ("\U0001f469\u200d\U0001f4bb", "\U0001f469\u200d\U0001f4bb"),  # joining
])
def test_a_token_of_marks_alone_is_drawn_where_a_label_shows_it(text, shown):
    """SmolLM2 splits "I ❤️ you" after the heart and Arabic before its vowel marks: the token U+FE0F gave the label
    "4 " and a fatha sat on the label's space, "1 َ", blank-looking labels on the maps (stop-51 text audit). A token
    of joiners or Hangul fillers alone had a blank label; a musical format control (U+1D173) was not escaped."""
    assert prettify_token(text) == shown
    assert byte_level_token(_byte_alphabet(text)) == shown


def test_byte_level_tokens_stay_distinct_and_only_byte_level_tokenizers_are_decoded():
    tok = tiny.bpe_tokenizer()
    ids = list(range(len(tok)))
    assert len(set(display_tokens(tok, ids))) == len(ids)
    assert display_tokens(tiny.wordpiece_tokenizer(), [0]) == [prettify_token(tiny.wordpiece_tokenizer()
                                                                              .convert_ids_to_tokens(0))]


def test_added_tokens_of_a_byte_level_tokenizer_show_as_typed():
    """Added tokens are stored as typed, and é, ö, ß are in the byte alphabet: 'café' showed as 'caf<0xE9>'."""
    tok = copy.deepcopy(tiny.bpe_tokenizer())  # the cached one is shared by every test
    tok.add_tokens(["café", "Größe"])
    ids = tok.convert_tokens_to_ids(["café", "Größe"])
    assert display_tokens(tok, ids) == ["café", "Größe"]


def test_a_byte_level_decoder_inside_a_sequence_is_read_as_byte_level():
    """Only a ByteLevel decoder alone was recognised: in a Sequence, "it’s a café" showed as "âĢĻ", "cafÃ©"."""
    from tokenizers import decoders

    tok = copy.deepcopy(tiny.bpe_tokenizer())
    tok.backend_tokenizer.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Fuse()])
    shown = display_tokens(tok, tok("the café")["input_ids"])  # é is two pieces of this tiny vocabulary
    assert "".join(shown) == "the␣caf<0xC3><0xA9>"  # not "theĠcafÃ©"
    tok.backend_tokenizer.decoder = None  # no decoder: its ByteLevel pre-tokenizer says so
    assert "".join(display_tokens(tok, tok("the café")["input_ids"])) == "the␣caf<0xC3><0xA9>"


def test_typed_control_tokens_are_special_and_a_typed_unknown_token_is_a_word_on_both_sides():
    """SmolLM2's <file_sep>, an added token marked special (its decode drops it), was a word when typed; an
    encoder-decoder's decoder flagged a typed [UNK] special, its encoder not."""
    from tokenizers import AddedToken

    tok = copy.deepcopy(tiny.bpe_tokenizer())
    tok.add_tokens([AddedToken("<file_sep>", special=True)])
    model = tiny.tiny_gpt2()
    model.resize_token_embeddings(len(tok))
    result = extract_attention(model, tok, "the fox <file_sep> the dog")
    assert [t for t, s in zip(result.tokens, result.special) if s] == ["<file_sep>"]
    bart = extract_attention(tiny.tiny_bart(), tiny.wordpiece_tokenizer(), "the [UNK] fox", target="the [UNK] fox")
    flagged = [[t for t, s in zip(r.tokens, r.special) if s] for r in (bart.encoder, bart.decoder)]
    assert "[UNK]" in bart.encoder.tokens and "[UNK]" in bart.decoder.tokens
    assert "[UNK]" not in flagged[0] and "[UNK]" not in flagged[1]


def test_a_byte_level_tokenizer_s_unknown_token_typed_is_a_control_token():
    """GPT-2's and SmolLM2's <|endoftext|> is their unknown token, which no text needs (every byte is in the
    vocabulary): typed, it is the document separator and special."""
    result = extract_attention(tiny.tiny_gpt2(), tiny.bpe_tokenizer(), "the fox <|endoftext|> the dog")
    assert [t for t, s in zip(result.tokens, result.special) if s] == ["<|endoftext|>"]


def test_out_of_memory_is_not_called_a_model_attnscope_cannot_read(monkeypatch):
    model = tiny.tiny_bert()

    def forward(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(model, "forward", forward)
    with pytest.raises(OutOfMemory, match=r"ran out of memory on this text \(OutOfMemoryError: CUDA out of memory\)"):
        extract_attention(model, tiny.wordpiece_tokenizer(), TEXT)


def test_out_of_memory_on_a_custom_model_or_a_stream_is_told_too(monkeypatch):
    """Only the Hugging Face forward told it: a custom model's, and a streamed one's (a long text on a GPU the
    model barely fits), were "internal error ... please report it", exit 3."""
    from diagnostics import stream_statistics

    def forward(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    custom = AttnScopeTransformer(replace(TINY_PRESETS["attnscope-nano-decoder"], vocab_size=300)).eval()
    monkeypatch.setattr(custom, "forward", forward)
    with pytest.raises(OutOfMemory, match="AttnScopeTransformer ran out of memory .* diagnostics.stream_statistics"):
        extract_attention(custom, tiny.bpe_tokenizer(), TEXT)
    gpt2 = tiny.tiny_gpt2()
    monkeypatch.setattr(gpt2, "forward", forward)
    with pytest.raises(OutOfMemory, match="GPT2Model ran out of memory .*the stream holds one chunk of the maps"):
        stream_statistics(gpt2, tiny.bpe_tokenizer(), TEXT)

    class Encoder(nn.Module):  # nn.MultiheadAttention's layers, fed token ids: the third adapter
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(200, 16)
            self.layers = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2)

        def forward(self, ids):
            return self.layers(self.embed(ids))

    module = Encoder().eval()
    monkeypatch.setattr(module.layers, "forward", forward)  # it said "for a module that takes embeddings, call ..."
    with pytest.raises(OutOfMemory, match="Encoder ran out of memory on this text .*more memory$"):
        extract_attention(module, tiny.wordpiece_tokenizer(200), TEXT)


def test_out_of_memory_while_the_maps_are_copied_out_is_told_too():
    """The forward passed and the copy the maps go into failed (SmolLM2, 3 probes of ~800 tokens, under a memory
    cap): "internal error (RuntimeError: ... can't allocate memory ...); please report it", exit 3."""
    from core.extraction.hf_extract import stack_layers

    huge = [torch.zeros(1, 1, 1, 1).expand(1, 64, 2**18, 2**18)] * 2  # 2 layers of 16 TB, as views of one float
    with pytest.raises(OutOfMemory, match="GPT2Model ran out of memory on this text .*can't allocate memory"):
        stack_layers(huge, "self", tiny.tiny_gpt2())


def test_out_of_memory_advice_streams_only_a_model_that_can_stream(monkeypatch):
    """GPT-Neo cannot stream: "use diagnostics.stream_statistics" led to "ran no attention layer through the
    streaming function"."""
    from transformers import GPTNeoConfig, GPTNeoModel

    def forward(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    model = GPTNeoModel(GPTNeoConfig(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4,
                                     attention_types=[[["global"], 2]], max_position_embeddings=64)).eval()
    monkeypatch.setattr(model, "forward", forward)
    with pytest.raises(OutOfMemory) as raised:
        extract_attention(model, tiny.bpe_tokenizer(), TEXT)
    assert "stream_statistics" not in str(raised.value) and str(raised.value).endswith("where there is more memory")


def test_maps_over_the_budget_advise_streaming_only_to_a_model_that_can_stream(monkeypatch):
    """The refusal before the forward always ended "or use diagnostics.stream_statistics": GPT-Neo (and Bloom,
    DeBERTa, T5) then got "ran no attention layer through the streaming function"."""
    from transformers import GPTNeoConfig, GPTNeoModel

    monkeypatch.setenv("ATTNSCOPE_MAX_MAPS_BYTES", "2000")
    neo = GPTNeoModel(GPTNeoConfig(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4,
                                   attention_types=[[["global"], 2]], max_position_embeddings=64)).eval()
    with pytest.raises(InputError, match=r"shorten it to about \d+ tokens$"):
        extract_attention(neo, tiny.bpe_tokenizer(), TEXT)
    with pytest.raises(InputError, match="shorten it to about .*, or use diagnostics.stream_statistics"):
        extract_attention(tiny.tiny_gpt2(), tiny.bpe_tokenizer(), TEXT)


def test_special_tokens_typed_in_the_text_are_flagged_special():
    """'A [SEP] B' gives the real [SEP]: it was flagged not special (no sink key, not hidden), while the decoder
    side of an encoder-decoder flagged the same id special."""
    result = extract_attention(tiny.tiny_bert(), tiny.wordpiece_tokenizer(), "the fox [SEP] the dog")
    assert [t for t, s in zip(result.tokens, result.special) if s] == ["[CLS]", "[SEP]", "[SEP]"]
    with pytest.raises(InputError, match="gives no tokens besides the tokenizer's own"):
        extract_attention(tiny.tiny_bert(), tiny.wordpiece_tokenizer(), "[SEP] [CLS]")


def test_a_limit_below_the_tokenizer_s_own_tokens_is_one_clear_error():
    """The tokenizer could not cut, returned 9 tokens, and the warning said they were cut to 2."""
    from core.extraction.encode import encode

    with pytest.raises(InputError, match="^the model reads at most 2 tokens, fewer than this tokenizer adds around"):
        encode(tiny.wordpiece_tokenizer(), "the fox", "the dog", limit=2)


@pytest.mark.parametrize("build", [tiny.tiny_bart, tiny.tiny_t5])
def test_encoder_decoder_parts_equal_eager(build):
    model, tok = build(), tiny.wordpiece_tokenizer()
    result = extract_attention(model, tok, TEXT, target="A dog sleeps.")
    enc_ids = tok(TEXT, return_tensors="pt")["input_ids"]
    dec_ids = torch.tensor([result.decoder.token_ids])
    model.set_attn_implementation("eager")
    ref = _reference(model, input_ids=enc_ids, decoder_input_ids=dec_ids)
    assert torch.equal(result.encoder.attentions, _stacked(ref.encoder_attentions))
    assert torch.equal(result.decoder.attentions, _stacked(ref.decoder_attentions))
    assert torch.equal(result.cross.attentions, _stacked(ref.cross_attentions))
    assert result.decoder.causal and not result.encoder.causal
    assert result.cross.attentions.shape[-2:] == (len(result.decoder.tokens), len(result.encoder.tokens))
    assert result.cross.keys == result.encoder.tokens
    assert result.decoder.token_ids[0] == model.config.decoder_start_token_id


@pytest.mark.parametrize("build,causal", [
    (tiny.tiny_bert, False), (tiny.tiny_gpt2, True), (tiny.tiny_bart, False), (tiny.tiny_t5, False),
    (lambda: AttnScopeTransformer(replace(TINY_PRESETS["attnscope-nano-decoder"], vocab_size=200)), True),
    (lambda: AttnScopeTransformer(replace(TINY_PRESETS["attnscope-nano-encoder"], vocab_size=200)), False),
])
def test_model_is_causal_says_before_a_run_what_extraction_reports(build, causal):
    model = build()
    result = extract_attention(model, tiny.wordpiece_tokenizer(), TEXT, target="A dog sleeps.")
    reported = (result.encoder or result).causal  # an encoder-decoder: its encoder
    assert model_is_causal(model) is causal and reported is causal


def test_a_module_without_a_config_is_read_as_not_causal():
    assert not model_is_causal(nn.TransformerEncoderLayer(8, 2, batch_first=True))


def test_a_target_over_the_limit_says_so():
    """The target's truncation warning was dropped: the decoder was cut to the model's limit without a word."""
    long = "The quick brown fox jumps over the lazy dog. " * 20
    result = extract_attention(tiny.tiny_bart(), tiny.wordpiece_tokenizer(), "A short text.", target=long)
    assert [w for w in result.warnings if w.startswith("target: ") and "truncated" in w], result.warnings
    assert len(result.decoder.tokens) <= tiny.tiny_bart().config.max_position_embeddings


def test_sdpa_model_gives_weights_and_is_restored():
    model = tiny.tiny_bert()
    model.set_attn_implementation("sdpa")
    result = extract_attention(model, tiny.wordpiece_tokenizer(), TEXT)
    assert result.attentions.shape[:2] == (2, 4)
    assert model.config._attn_implementation == "sdpa"


def test_long_input_truncated_with_warning():
    model, tokenizer = tiny.tiny_bert(max_positions=16), copy.deepcopy(tiny.wordpiece_tokenizer())  # cached: copy
    tokenizer.model_max_length = 16
    heard = _Heard()  # transformers' own loggers do not propagate to pytest's caplog
    logging.getLogger("transformers.tokenization_utils_base").addHandler(heard)
    try:
        result = extract_attention(model, tokenizer, " ".join(["fox"] * 100))
    finally:
        logging.getLogger("transformers.tokenization_utils_base").removeHandler(heard)
    assert result.attentions.shape[-1] == 16
    assert result.warnings and "truncated" in result.warnings[0]
    assert not any("indexing errors" in m for m in heard.messages)  # the text is cut, and says so; never misread


class _Heard(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("text", ["\u200b", "\x07"])
def test_text_of_only_special_tokens_is_an_input_error(text):
    """Characters the tokenizer drops leave [CLS] [SEP]: nothing of the user's to show, and hiding specials breaks."""
    with pytest.raises(InputError, match=r"^the text gives no tokens besides the tokenizer's own \(\d special"):
        extract_attention(tiny.tiny_bert(), tiny.wordpiece_tokenizer(), text)


def test_a_target_of_no_tokens_is_named_as_the_target():
    """A target of a zero-width space alone was refused as "the text gives no tokens": the Text box, which was
    fine, not the Target box (stop-51 text audit)."""
    with pytest.raises(InputError, match=r"^the target text gives no tokens besides the tokenizer's own"):
        extract_attention(tiny.tiny_bart(), tiny.wordpiece_tokenizer(), "the fox", target="\u200b")


@pytest.mark.parametrize("where", ["text", "text_pair", "target"])
def test_a_lone_surrogate_is_an_input_error_naming_the_input(where):
    """json.loads of a broken "\\ud800" escape, or argv read with surrogateescape, gave the tokenizer's TypeError
    ("TextEncodeInput must be Union[...]") from the Python API."""
    texts = {"text": "the fox", where: "the fox \udce9"}
    model = tiny.tiny_bart() if where == "target" else tiny.tiny_bert()
    name = "target text" if where == "target" else where
    with pytest.raises(InputError, match=f"^{name} is not UTF-8: it holds a lone surrogate"):
        extract_attention(model, tiny.wordpiece_tokenizer(), **texts)


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text_is_value_error(text):
    with pytest.raises(ValueError, match="empty"):
        extract_attention(tiny.tiny_bert(), tiny.wordpiece_tokenizer(), text)
    with pytest.raises(InputError):
        extract_attention(tiny.tiny_bert(), tiny.wordpiece_tokenizer(), text)


def test_training_model_is_evaluated_and_restored():
    model = tiny.tiny_bert().train()
    model.config.attention_probs_dropout_prob = 0.5
    result = extract_attention(model, tiny.wordpiece_tokenizer(), TEXT)
    torch.testing.assert_close(result.attentions.sum(-1), torch.ones(result.attentions.shape[:-1]))
    assert model.training


def test_a_frozen_block_s_eval_mode_is_restored_too():
    model = tiny.tiny_gpt2().train()
    model.h[0].eval()  # a frozen block inside a training model
    extract_attention(model, tiny.bpe_tokenizer(), TEXT)
    assert model.training and model.h[1].training
    assert not any(m.training for m in model.h[0].modules())  # all 13 were back in train mode, dropout on


def test_custom_model_matches_its_output_attentions():
    torch.manual_seed(0)
    model = AttnScopeTransformer(replace(TINY_PRESETS["attnscope-nano-decoder"], vocab_size=200)).eval()
    tok = tiny.wordpiece_tokenizer()
    result = extract_attention(model, tok, TEXT)
    ids = tok(TEXT, return_tensors="pt")["input_ids"]
    expected = _stacked(model(ids, output_attentions=True)["attentions"])
    assert torch.equal(result.attentions, expected)
    assert result.causal and torch.all(result.attentions.triu(diagonal=1) == 0)


class EncoderLM(nn.Module):
    """A plain PyTorch model: embeddings + nn.TransformerEncoder."""

    def __init__(self, vocab=200, d_model=32, heads=4, layers=3, causal=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.causal = causal

    def forward(self, input_ids):
        length = input_ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(length) if self.causal else None
        return self.encoder(self.embed(input_ids), mask=mask, is_causal=self.causal)


def test_a_module_s_whole_maps_are_held_to_the_budget_too(monkeypatch):
    """nn.MultiheadAttention modules were never checked: with the budget at 1 MiB, 8 layers x 8 heads on 482 tokens
    returned 57 MiB of maps (extract_attention) and held 55 MiB in a report (diagnose counted their size as 0)."""
    from core.extraction.maps_budget import whole_maps_bytes
    from diagnostics import diagnose

    model, tokenizer = EncoderLM().eval(), tiny.wordpiece_tokenizer()
    assert whole_maps_bytes(model, [10, 20]) == 4 * 3 * 4 * (10 * 10 + 20 * 20)  # 3 layers x 4 heads
    monkeypatch.setenv("ATTNSCOPE_MAX_MAPS_BYTES", "2000")
    with pytest.raises(InputError, match=r"this text is \d+ tokens for EncoderLM, whose whole attention maps would"):
        extract_attention(model, tokenizer, TEXT)
    with pytest.raises(InputError, match=r"EncoderLM computes attention in its own code.* over the 1.95 KiB limit"):
        diagnose((model, tokenizer), [TEXT])
    with pytest.raises(InputError, match=r"this text is 40 tokens for TransformerEncoder"):  # embeddings (1, T, E)
        extract_module_attention(model.encoder, torch.zeros(1, 40, 32))
    monkeypatch.delenv("ATTNSCOPE_MAX_MAPS_BYTES")
    assert extract_attention(model, tokenizer, TEXT).attentions.shape[:2] == (3, 4)
    assert extract_module_attention(model.encoder, torch.zeros(1, 40, 32)).attentions.shape == (3, 4, 40, 40)


class PositionedLM(EncoderLM):
    """Token ids plus learned positions from a table of 8 rows."""

    def __init__(self):
        super().__init__()
        self.positions = nn.Embedding(8, 32)

    def forward(self, input_ids):
        return self.encoder(self.embed(input_ids) + self.positions(torch.arange(input_ids.shape[1])))


def test_a_text_longer_than_a_module_s_positions_is_said_as_such():
    """It was sent to core.extract_module_attention "for a module that takes embeddings": this one takes ids."""
    with pytest.raises(ExtractionError, match=r"^PositionedLM\(input_ids\) failed \(IndexError: index out of range in "
                                              r"self\); the input is probably longer than the module's position table"):
        extract_attention(PositionedLM().eval(), tiny.wordpiece_tokenizer(), TEXT + " " + TEXT)
    from diagnostics import diagnose  # the repeated probe, which AttnScope drew itself, keeps its own words

    note = diagnose((PositionedLM().eval(), tiny.wordpiece_tokenizer()), ["a b c"]).finding("repeated_probe_skipped")
    assert note.message.endswith("the probe's 64 token ids, drawn from the tokenizer's vocabulary, may be more than "
                                 "the module has positions or embedding rows for.")


class TakesEmbeddings(EncoderLM):
    def forward(self, embeddings):  # (1, T, E): ids (1, T) have no third dimension
        return self.encoder(embeddings.transpose(1, 2).transpose(1, 2))


def test_an_index_error_of_a_module_that_takes_embeddings_keeps_its_hint():
    with pytest.raises(ExtractionError, match=r"\(IndexError: Dimension out of range .*; for a module that takes "
                                              r"embeddings, call core.extract_module_attention"):
        extract_attention(TakesEmbeddings().eval(), tiny.wordpiece_tokenizer(), TEXT)


def _manual_layer_weights(model, input_ids):
    """Per-head weights recomputed by calling each layer's self_attn directly."""
    x, maps = model.embed(input_ids), []
    for layer in model.encoder.layers:
        _, w = layer.self_attn(x, x, x, need_weights=True, average_attn_weights=False)
        maps.append(w[0])
        x = layer(x)
    return torch.stack(maps)


def test_torch_transformer_encoder_per_head():
    torch.manual_seed(0)
    model = EncoderLM().eval()
    tok = tiny.wordpiece_tokenizer()
    result = extract_attention(model, tok, TEXT)
    ids = tok(TEXT, return_tensors="pt")["input_ids"]
    assert result.attentions.shape == (3, 4, ids.shape[1], ids.shape[1])
    with torch.no_grad():
        torch.testing.assert_close(result.attentions, _manual_layer_weights(model, ids), atol=1e-5, rtol=0)
    assert not result.causal
    assert not model.encoder.layers[0].self_attn._forward_hooks  # hooks removed


def test_torch_causal_encoder_detected_and_bare_module():
    torch.manual_seed(0)
    model = EncoderLM(causal=True).eval()
    result = extract_attention(model, tiny.wordpiece_tokenizer(), TEXT)
    assert result.causal and torch.all(result.attentions.triu(diagonal=1) == 0)
    bare = extract_module_attention(model.encoder, torch.randn(1, 5, 32))
    assert bare.attentions.shape == (3, 4, 5, 5) and bare.tokens == ["0", "1", "2", "3", "4"]


def test_a_module_with_cross_attention_is_refused_not_stacked():
    """nn.Transformer's encoder self-, decoder self- and cross-attention came back as three 'layers'."""
    model = nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32,
                           dropout=0.0, batch_first=True).eval()
    x = torch.randn(1, 5, 16)
    with pytest.raises(ExtractionError, match="has cross-attention"):
        extract_module_attention(model, x, x)
    assert extract_module_attention(model.encoder, x).attentions.shape == (1, 4, 5, 5)


class OneLayer(nn.Module):
    """One nn.MultiheadAttention called as a user's model calls it."""

    def __init__(self, **options):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True, **options)

    def forward(self, x, mask=None):
        out, pooled = self.attn(x, x.clone(), x, attn_mask=mask)  # (B, q, E), (B, q, k): averaged, as PyTorch's default
        return out + torch.einsum("bqk,bkd->bqd", pooled, x)  # attention pooling reads the averaged weights


@pytest.mark.parametrize("mask", [
    nn.Transformer.generate_square_subsequent_mask(5),
    torch.full((5, 5), torch.finfo(torch.float32).min).triu(1),
    torch.full((5, 5), -1e9).triu(1),
    torch.ones(4, 5, 5, dtype=torch.bool).triu(1),  # per head (B·H, q, k)
], ids=["-inf", "finfo.min", "-1e9", "bool 3-D"])
def test_a_causal_mask_is_causal_whatever_its_blocked_value_or_shape(mask):
    """Only a 2-D mask of -inf counted before: the others gave causal=False, and every metric read each row as
    seeing every key."""
    torch.manual_seed(0)
    model, x = OneLayer().eval(), torch.randn(1, 5, 16)
    result = extract_module_attention(model, x, mask=mask)
    assert result.causal and torch.all(result.attentions.triu(diagonal=1) == 0)
    assert not extract_module_attention(model, x, mask=torch.zeros(5, 5)).causal


def test_the_module_returns_what_its_caller_asked_for():
    """The hooks asked for per-head weights and handed them to the model: its einsum over averaged weights
    failed (RuntimeError), and the key (a clone of the query) was taken for cross-attention."""
    torch.manual_seed(0)
    model, x = OneLayer().eval(), torch.randn(1, 5, 16)
    with torch.no_grad():
        expected = model(x)
    result = extract_module_attention(model, x)
    assert result.attentions.shape == (1, 4, 5, 5)
    with torch.no_grad():
        _, per_head = model.attn(x, x, x, average_attn_weights=False)
    torch.testing.assert_close(result.attentions[0], per_head[0])
    with capture_mha_weights(model), torch.no_grad():
        torch.testing.assert_close(model(x), expected)


class PositionalCall(nn.Module):
    """Asks for per-head weights by position, the 7th argument (average_attn_weights=False), and reads them so."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        out, per_head = self.attn(x, x, x, None, True, None, False)  # (B, q, E), (B, H, q, k)
        batch, heads, q, k = per_head.shape  # averaged weights (B, q, k) failed here: the 7th argument was dropped
        return out


def test_arguments_given_by_position_are_honoured():
    model, x = PositionalCall().eval(), torch.randn(1, 5, 16)
    assert extract_module_attention(model, x).attentions.shape == (1, 4, 5, 5)


class LazyInput(nn.Module):
    """A lazy layer whose weights are made by the model's first forward."""

    def __init__(self):
        super().__init__()
        self.inp, self.attn = nn.LazyLinear(16), nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        h = self.inp(x)  # (B, T, 16)
        return self.attn(h, h, h)[0]


def test_a_model_first_run_by_an_extraction_still_trains():
    """Under inference_mode the extraction's forward made the lazy layer's weights inference tensors, which never
    get a gradient: a monitored model read at step 0 would never train that layer."""
    torch.manual_seed(0)
    model, x = LazyInput(), torch.randn(1, 5, 7)
    extract_module_attention(model, x)
    model(x).sum().backward()
    assert model.inp.weight.grad is not None


def test_module_inputs_it_rejects_and_extra_key_columns_are_one_clear_error():
    torch.manual_seed(0)
    with pytest.raises(ExtractionError, match=r"OneLayer\(inputs\) failed \(AssertionError: .*embedding dim"):
        extract_module_attention(OneLayer().eval(), torch.randn(1, 5, 8))
    for options in ({"add_bias_kv": True}, {"add_zero_attn": True}):
        with pytest.raises(ExtractionError, match="add_bias_kv or add_zero_attn"):
            extract_module_attention(OneLayer(**options).eval(), torch.randn(1, 5, 16))
    x = torch.randn(5, 16)  # unbatched, as nn.MultiheadAttention takes it: "returned no per-head weights" before
    unbatched = extract_module_attention(OneLayer().attn.eval(), x, x, x)
    assert unbatched.attentions.shape == (1, 4, 5, 5)
    assert extract_module_attention(OneLayer().to(torch.bfloat16).eval(),
                                    torch.randn(1, 5, 16, dtype=torch.bfloat16)).dtype == "bfloat16"


def test_a_batch_is_refused_and_padded_keys_are_marked():
    """Items after the first were dropped with no word, and the keys a key_padding_mask blocks came back as
    tokens, with padding all False."""
    torch.manual_seed(0)
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2,
                                  enable_nested_tensor=False).eval()
    with pytest.raises(InputError, match="one sequence at a time; TransformerEncoder's attention was called on a "
                                         r"batch of 3 .* batch_first=False\): give them inputs of shape \(T, 1, E\)"):
        extract_module_attention(model, torch.randn(3, 5, 16))
    padded = torch.tensor([[False, False, False, True, True]])
    result = extract_module_attention(model, torch.randn(1, 5, 16), src_key_padding_mask=padded)
    assert result.padding == [False, False, False, True, True]
    assert torch.all(result.attentions[..., 3:] == 0)
    additive = extract_module_attention(model, torch.randn(1, 5, 16), src_key_padding_mask=padded * -1e9)
    assert additive.padding == result.padding


def test_sequence_first_layers_fed_batch_first_ids_are_one_clear_error():
    """nn.TransformerEncoderLayer's default batch_first=False read (1, T) ids as T sequences of one token:
    'attention is 1×1 but there are 12 query and 12 key tokens'."""
    model = EncoderLM().eval()
    model.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64), 2, enable_nested_tensor=False)
    with pytest.raises(ExtractionError, match="batch_first=False"):
        extract_attention(model, tiny.wordpiece_tokenizer(), TEXT)


def test_captures_overlapping_in_threads_keep_their_own_calls_and_the_fast_path_flag():
    """A capture took the calls of other threads to a shared module as its own layers, and two captures that did
    not end in reverse order left PyTorch's MHA fast path off for good."""
    import threading

    model, x = OneLayer().eval(), torch.randn(1, 5, 16)
    before = torch.backends.mha.get_fastpath_enabled()
    first, second = capture_mha_weights(model), capture_mha_weights(model)
    captured = first.__enter__()
    second.__enter__()
    other = threading.Thread(target=lambda: model(x))
    other.start()
    other.join()
    assert captured == []  # the other thread's call is not this capture's
    first.__exit__(None, None, None)
    assert torch.backends.mha.get_fastpath_enabled() is False  # the second capture still runs
    second.__exit__(None, None, None)
    assert torch.backends.mha.get_fastpath_enabled() is before


def test_tokenizer_larger_than_vocabulary_is_clear_error():
    model = AttnScopeTransformer(TINY_PRESETS["attnscope-nano-encoder"])  # vocabulary of 99
    with pytest.raises(InputError, match="vocabulary has 99"):
        extract_attention(model, tiny.wordpiece_tokenizer(), TEXT)


def test_module_without_attention_is_clear_error():
    """Each refusal says what to do: a nanoGPT block on SDPA was told "AttnScope cannot read its attention" alone
    (custom-model audit, stop 57)."""
    with pytest.raises(ExtractionError, match="MultiheadAttention.*build its attention layers from "
                                              "nn.MultiheadAttention itself.*core.custom_model"):
        extract_attention(nn.Linear(3, 3), tiny.wordpiece_tokenizer(), TEXT)
    with pytest.raises(ExtractionError, match="contains no torch.nn.MultiheadAttention layer; build its attention"):
        extract_module_attention(nn.Linear(32, 32), torch.zeros(1, 4, 32))
    with pytest.raises(ExtractionError, match="BertModel contains no torch.nn.MultiheadAttention layer; read it with "
                                              "core.extract_attention"):  # not "build it from nn.MultiheadAttention"
        extract_module_attention(tiny.tiny_bert(), torch.zeros(1, 4, dtype=torch.long))


def test_a_tokenizer_that_is_no_hugging_face_tokenizer_is_one_line_on_every_path():
    """A nanoGPT-style encode/decode object was told to "pass the model first" (it was second) and failed diagnose
    with a raw TypeError; a function returning ids failed with a TypeError or an IndexError (custom-model audit)."""
    from diagnostics import diagnose
    from diagnostics.monitor import AttentionMonitor

    class CharTokenizer:
        def encode(self, text):
            return [ord(c) % 200 for c in text]

        def decode(self, ids):
            return "".join(chr(i) for i in ids)

    model = EncoderLM().eval()
    for tokenizer in (CharTokenizer(), lambda text: [ord(c) % 200 for c in text],
                      lambda text: torch.tensor([[ord(c) % 200 for c in text]])):
        name = type(tokenizer).__name__
        for run in (lambda: extract_attention(model, tokenizer, TEXT), lambda: diagnose((model, tokenizer), [TEXT]),
                    lambda: AttentionMonitor(tokenizer=tokenizer)):
            with pytest.raises(InputError, match=f"tokenizer must be a Hugging Face tokenizer, not a {name}: .*"
                                                 "PreTrainedTokenizerFast"):
                run()
    with pytest.raises(InputError, match="model must be a loaded torch model, not BertTokenizer"):  # swapped
        extract_attention(tiny.wordpiece_tokenizer(), model, TEXT)


def test_a_subclass_of_multihead_attention_with_its_own_forward_is_refused_in_one_line():
    """A fused-QKV layer subclassing nn.MultiheadAttention with its own forward(x) failed deep in the hooks, with a
    TypeError (its arguments renamed to nn.MultiheadAttention's) or an IndexError (one output, not two), and a hint
    to call extract_module_attention, which failed alike (custom-model audit, stop 57)."""
    class FusedSelfAttention(nn.MultiheadAttention):
        def forward(self, x):  # (B, T, E)
            return super().forward(x, x, x, need_weights=False)[0]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.attn = nn.Embedding(200, 32), FusedSelfAttention(32, 4, batch_first=True)

        def forward(self, ids):
            x = self.embed(ids)
            return self.attn(x) if isinstance(self.attn, FusedSelfAttention) else self.attn(x, x, x)[0]

    message = "Net has FusedSelfAttention, a subclass of nn.MultiheadAttention whose forward takes other arguments"
    with pytest.raises(ExtractionError, match=message):
        extract_attention(Net().eval(), tiny.wordpiece_tokenizer(), TEXT)
    with pytest.raises(ExtractionError, match="Net has FusedSelfAttention"):
        extract_module_attention(Net().eval(), torch.zeros(1, 4, dtype=torch.long))

    class OutputAlone(nn.MultiheadAttention):  # its arguments, but the output alone
        def forward(self, query, key, value, **kwargs):
            return super().forward(query, key, value, **kwargs)[0]

    class Logged(nn.MultiheadAttention):  # passes everything through: read as nn.MultiheadAttention
        def forward(self, *args, **kwargs):
            return super().forward(*args, **kwargs)

    import torch.ao.nn.quantizable as quantizable  # torch's own subclass, as eager quantization swaps in

    model = EncoderLM().eval()
    model.encoder.layers[0].self_attn.__class__ = OutputAlone
    with pytest.raises(ExtractionError, match="OutputAlone returned no \\(output, weights\\) pair"):
        extract_attention(model, tiny.wordpiece_tokenizer(), TEXT)
    model.encoder.layers[0].self_attn.__class__ = Logged
    assert extract_attention(model, tiny.wordpiece_tokenizer(), TEXT).attentions.shape[:2] == (3, 4)
    net = Net().eval()
    net.attn = quantizable.MultiheadAttention(32, 4, batch_first=True)  # its forward of its own, the same arguments
    assert extract_attention(net, tiny.wordpiece_tokenizer(), TEXT).attentions.shape[:2] == (1, 4)


def test_a_module_mixing_multihead_attention_with_fused_attention_is_refused_not_cut_short():
    """Two blocks on F.scaled_dot_product_attention and one nn.MultiheadAttention gave maps of 1 layer, with no
    warning, diagnosed as a 1-layer model."""
    import torch.nn.functional as F

    class FusedBlock(nn.Module):
        def __init__(self, sink_key=False):
            super().__init__()
            self.qkv, self.sink_key = nn.Linear(32, 96), sink_key

        def forward(self, x):  # (B, T, 32)
            q, k, v = self.qkv(x).view(*x.shape[:2], 3, 4, 8).permute(2, 0, 3, 1, 4)  # each (B, 4, T, 8)
            if self.sink_key:  # one more key and value, as a learned sink: keys T + 1
                k, v = (torch.cat([torch.zeros_like(t[..., :1, :]), t], -2) for t in (k, v))  # (B, 4, T + 1, 8)
            return x + F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)  # (B, T, 32)

    class Mixed(nn.Module):
        def __init__(self, sink_key=False):
            super().__init__()
            self.embed, self.fused = nn.Embedding(200, 32), nn.Sequential(FusedBlock(sink_key), FusedBlock(sink_key))
            self.mha = nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, ids):
            x = self.fused(self.embed(ids))
            return self.mha(x, x, x, need_weights=False)[0]

    torch.manual_seed(0)
    for sink_key in (False, True):  # a layer of T queries over more keys (a sink key, a prefix) is one too
        with pytest.raises(ExtractionError, match=r"Mixed also computes attention with F.scaled_dot_product_attention "
                                                  r"\(2 call\(s\) besides its 1 nn.MultiheadAttention"):
            extract_attention(Mixed(sink_key).eval(), tiny.wordpiece_tokenizer(), TEXT)
    model = Mixed().eval()
    model.fused = nn.Identity()  # its attention all in nn.MultiheadAttention: read, and PyTorch's own weights
    result = extract_attention(model, tiny.wordpiece_tokenizer(), TEXT)
    ids = torch.tensor([result.token_ids])
    x = model.embed(ids)
    expected = model.mha(x, x, x, average_attn_weights=False)[1]  # (1, 4, q, k)
    torch.testing.assert_close(result.attentions[0], expected[0])

    class Pooled(Mixed):  # one learned query over the tokens (attention pooling) is no layer of self-attention
        def forward(self, ids):
            x = super().forward(ids)  # (1, T, 32)
            return F.scaled_dot_product_attention(torch.ones(1, 1, 32), x, x)  # (1, 1, 32)

    pooled = Pooled().eval()
    pooled.fused = nn.Identity()
    pooled.load_state_dict(model.state_dict())
    torch.testing.assert_close(extract_attention(pooled, tiny.wordpiece_tokenizer(), TEXT).attentions,
                               result.attentions)


def test_blank_target_falls_back_to_the_text_like_a_blank_pair():
    model, tok = tiny.tiny_bart(), tiny.wordpiece_tokenizer()
    blank = extract_attention(model, tok, TEXT, target="   ")
    assert blank.decoder.token_ids == extract_attention(model, tok, TEXT).decoder.token_ids


def test_a_model_without_its_weights_or_a_second_text_that_is_no_text_is_one_line():
    """A model built on the meta device failed in torch ('Cannot copy out of meta tensor'); text_pair=5 in str.strip."""
    from transformers import BertConfig, BertModel

    from core.errors import ExtractionError, InputError
    from diagnostics import diagnose

    with torch.device("meta"):
        empty = BertModel(BertConfig(vocab_size=200, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32))
    for run in (lambda: extract_attention(empty, tiny.wordpiece_tokenizer(), TEXT),
                lambda: diagnose((empty, tiny.wordpiece_tokenizer()))):
        with pytest.raises(ExtractionError, match="^the model's weights are not loaded .* on the meta device"):
            run()
    with pytest.raises(InputError, match="^text_pair must be text"):
        extract_attention(tiny.tiny_bert(), tiny.wordpiece_tokenizer(), TEXT, text_pair=5)
    with pytest.raises(InputError, match="^target must be text"):
        extract_attention(tiny.tiny_bart(), tiny.wordpiece_tokenizer(), TEXT, target=5)


def test_the_length_a_refusal_names_fits():
    """Probes of 1,400 and 600 tokens over the budget were told they "would fit cut to 1,296 tokens at most": every
    probe had been scaled alike, while cutting the long one to 1,296 leaves the short one whole, still over."""
    from core.extraction.maps_budget import maps_over_budget, whole_maps_bytes

    model, lengths = tiny.tiny_gpt2(), [1400, 600]
    budget = whole_maps_bytes(model, lengths) * 9 // 10
    needed, fits = maps_over_budget(model, lengths, budget)
    assert needed == whole_maps_bytes(model, lengths)
    assert whole_maps_bytes(model, [min(n, fits) for n in lengths]) <= budget
    assert whole_maps_bytes(model, [min(n, fits + 1) for n in lengths]) > budget
    assert maps_over_budget(model, [fits], budget) is None  # one probe: the length itself


ROOT = Path(__file__).resolve().parents[2]
PEAK_SCRIPT = """
import torch
from transformers import GPT2Config, GPT2Model
from core import extract_attention
from tiny import long_bpe_tokenizer

torch.manual_seed(0)
model = GPT2Model(GPT2Config(vocab_size=300, n_embd=32, n_layer=12, n_head=8, n_positions=1100)).eval()
text = "the cat sat on the mat " * 400  # cut to the model's 1,100 tokens
tokenizer = long_bpe_tokenizer(1100)
extract_attention(model, tokenizer, "warm up")
def status(key):
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key))
before = status("VmRSS:")
open("/proc/self/clear_refs", "w").write("5")  # VmHWM restarts from here
maps = extract_attention(model, tokenizer, text).attentions.numel() * 4
print((status("VmHWM:") - before) / maps)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="reads Linux's peak resident memory")
def test_extraction_holds_the_maps_about_once():
    """Stacking the tuple of maps the model's output held kept them twice: SmolLM2 at 1,100 tokens, 1.22 GiB of
    maps, peaked +2.64 GiB (now +1.42). Here 12 layers of 8 heads at 1,100 tokens: 39 MB a layer, 465 MB in all."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, "-c", PEAK_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) < 1.5  # before: 2.0


def test_maps_are_float32_on_the_cpu_whatever_torch_s_defaults():
    """stack_layers' empty result took torch's default dtype: float64 maps (twice the memory) under a float64
    default."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        result = extract_attention(tiny.tiny_gpt2().float(), tiny.bpe_tokenizer(), "the quick brown fox")
    finally:
        torch.set_default_dtype(previous)
    assert result.attentions.dtype == torch.float32 and result.attentions.device.type == "cpu"


def test_a_text_whose_whole_maps_would_not_fit_is_refused_before_the_forward_pass(monkeypatch):
    """extract_attention had no memory check: SmolLM2 on a long text asked for 72 GB of maps and the system killed
    the process (a notebook's kernel with it), or PyTorch's allocator failed with a RuntimeError blamed on the
    model type."""
    model, tokenizer = tiny.tiny_gpt2(), tiny.bpe_tokenizer()
    ran = []
    model.register_forward_pre_hook(lambda *args: ran.append(1))
    monkeypatch.setenv("ATTNSCOPE_MAX_MAPS_BYTES", "2000")
    with pytest.raises(InputError, match=r"whose whole attention maps would take .* over the 2 kB they may take "
                                         r"here \(ATTNSCOPE_MAX_MAPS_BYTES.*shorten it to about \d+ tokens?, or use "
                                         "diagnostics.stream_statistics"):
        extract_attention(model, tokenizer, TEXT)
    assert not ran
    monkeypatch.delenv("ATTNSCOPE_MAX_MAPS_BYTES")
    assert extract_attention(model, tokenizer, TEXT).attentions.shape[0] == model.config.n_layer

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 26843545600 bytes.")

    def gpu_out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 18.00 GiB.")

    for forward in (out_of_memory, gpu_out_of_memory):
        monkeypatch.setattr(model, "forward", forward)
        with pytest.raises(OutOfMemory, match="ran out of memory on this text .* or use diagnostics.stream_statistics"):
            extract_attention(model, tokenizer, TEXT)
    assert issubclass(OutOfMemory, MemoryError) and issubclass(OutOfMemory, AttnScopeError)


def test_a_list_ids_or_swapped_arguments_are_named_not_called_empty():
    """A list of texts or a tensor of ids was "text is empty"; a model name, or the tokenizer in the model's place,
    a raw AttributeError (also from diagnostics.stream_statistics)."""
    from diagnostics import stream_statistics

    model, tokenizer = tiny.tiny_bert(), tiny.wordpiece_tokenizer()
    for run in (extract_attention, stream_statistics):
        with pytest.raises(InputError, match=r"text must be one text \(a str\), not \['a', 'b'\] \(list\)"):
            run(model, tokenizer, ["a", "b"])
        with pytest.raises(InputError, match=r"not tensor.*\(Tensor\).*stream_token_statistics"):
            run(model, tokenizer, torch.tensor([[1, 2]]))
        with pytest.raises(InputError, match=r"model must be a loaded torch model, not 'demo-bert' \(str\); load "
                                             r"one with core.load_model\(name\)"):
            run("demo-bert", tokenizer, TEXT)
        with pytest.raises(InputError, match="model must be a loaded torch model, not BertTokenizer"):
            run(tokenizer, model, TEXT)
