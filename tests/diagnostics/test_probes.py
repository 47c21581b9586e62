"""The repeated-sequence probe: random ordinary tokens, the same again, wrapped in the tokenizer's specials."""

import pytest
import torch

from diagnostics.probes import repeated_probe
from tiny import bpe_tokenizer, tiny_bert, tiny_gpt2, tiny_t5, wordpiece_tokenizer


def test_second_copy_repeats_the_first_and_specials_wrap_it():
    tokenizer = wordpiece_tokenizer()
    probe = repeated_probe(tiny_bert(), tokenizer, half=12, seed=3)
    ids = probe.result.token_ids
    first = ids[probe.prefix:probe.prefix + 12]
    assert ids[probe.second_copy.start:probe.second_copy.stop] == first
    assert len(set(first)) == 12  # no repeats inside a copy
    assert not set(first) & set(tokenizer.all_special_ids)
    assert probe.prefix == 1 and probe.result.special[0] and probe.result.special[-1]  # [CLS] … [SEP]
    assert probe.result.attentions.shape[-1] == len(ids) == 2 * 12 + 2


def test_decoder_probe_is_causal_rows_sum_to_one_and_model_mode_is_restored():
    model = tiny_gpt2().train()
    probe = repeated_probe(model, bpe_tokenizer(), half=10, seed=0)
    attn = probe.result.attentions  # (L, H, T, T)
    assert probe.result.causal and model.training
    assert torch.allclose(attn.sum(-1), torch.ones(attn.shape[:-1]), atol=1e-5)
    assert torch.all(attn.triu(1) == 0)
    assert repeated_probe(model, bpe_tokenizer(), half=10, seed=0).result.token_ids == probe.result.token_ids


def test_one_string_is_one_probe_and_an_empty_list_means_the_defaults():
    from diagnostics import diagnose
    from diagnostics.probe_texts import DEFAULT_PROBES
    from diagnostics.probes import as_probes, user_texts

    assert user_texts("The cat sat.") == ["The cat sat."] and user_texts([]) is None and user_texts(None) is None
    assert as_probes([]) == as_probes(None) == list(DEFAULT_PROBES)
    report = diagnose((tiny_bert(), wordpiece_tokenizer()), texts="The cat sat on the mat.")
    assert [p["text"] for p in report.probes] == ["The cat sat on the mat."]  # a probe per character, before
    defaults = diagnose((tiny_bert(), wordpiece_tokenizer()), texts=[])
    assert "probes_short" not in {f.code for f in defaults.findings}  # judged as the defaults, not capped
    assert len(defaults.probes) == len(DEFAULT_PROBES)


def test_a_plain_pytorch_model_is_diagnosed():
    """Its repeated-sequence probe read model.config: a raw AttributeError for any module without one."""
    from torch import nn

    from diagnostics.diagnose import diagnose

    class EncoderLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(200, 32)
            layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

        def forward(self, input_ids):
            return self.encoder(self.embed(input_ids))

    torch.manual_seed(0)
    report = diagnose((EncoderLM().eval(), wordpiece_tokenizer()), ["the quick brown fox jumps over the lazy dog"])
    assert len(report.heads) == 8 and report.model["name"] == "EncoderLM"


def test_a_causal_plain_pytorch_model_reads_the_decoder_probes():
    """A model of no config was read as an encoder before it ran: a causal one got the encoder probes, each
    sentence pair glued into one text ("walk?It is") with a warning per pair (custom-model audit, stop 57)."""
    from torch import nn

    from diagnostics.diagnose import diagnose
    from diagnostics.probe_texts import DEFAULT_PROBES, decoder_probe
    from diagnostics.probes import default_probes, reads_as_decoder

    class CausalLM(nn.Module):
        def __init__(self, causal):
            super().__init__()
            self.embed, self.causal = nn.Embedding(300, 32), causal
            layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

        def forward(self, input_ids):
            mask = nn.Transformer.generate_square_subsequent_mask(input_ids.shape[1]) if self.causal else None
            return self.encoder(self.embed(input_ids), mask=mask, is_causal=self.causal)

    torch.manual_seed(0)
    tokenizer = bpe_tokenizer()
    assert reads_as_decoder(CausalLM(True).eval(), tokenizer) and not reads_as_decoder(CausalLM(False), tokenizer)
    model = CausalLM(True).train()  # as the monitor finds it: its short run draws no dropout (review, stop 57)
    rng = torch.get_rng_state()
    assert default_probes(model, tokenizer) == tuple(decoder_probe(p) for p in DEFAULT_PROBES)  # no known limit:
    assert torch.equal(torch.get_rng_state(), rng) and model.training  # not CAUSAL_PROBES, twice as long
    report = diagnose((model.eval(), tokenizer))
    assert report.model["causal"] and not [n for n in report.findings if "sentence-pair" in n.message], [
        n.message for n in report.findings]


def test_a_plain_pytorch_model_s_weights_are_numbered_as_it_calls_its_layers():
    """Weights were numbered in registration order over every nn.MultiheadAttention: a spare one the model never
    calls was checked as "L2" of a 2-layer model ("4 of 12 heads", custom-model audit, stop 57), and layers defined
    in another order than called got each other's weight findings."""
    from torch import nn

    from diagnostics.diagnose import diagnose

    class Reversed(nn.Module):  # defines second, first, spare; calls first, second
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(300, 32)
            self.second, self.first, self.spare = (nn.MultiheadAttention(32, 4, batch_first=True) for _ in range(3))
            with torch.no_grad():
                self.spare.in_proj_weight[:64].zero_()  # its Q/K zero: qk_scale_small if it were checked
                self.first.in_proj_weight[:64].mul_(1e-4)  # layer 0 as called: its Q/K tiny

        def forward(self, input_ids):
            x = self.embed(input_ids)
            x = x + self.first(x, x, x)[0]
            return x + self.second(x, x, x)[0]

    torch.manual_seed(0)
    report = diagnose((Reversed().eval(), bpe_tokenizer()), ["the quick brown fox jumps over the lazy dog " * 8])
    assert len(report.heads) == 8
    small = next(f for f in report.findings if f.code == "qk_scale_small")
    assert small.heads == [[0, 0], [0, 1], [0, 2], [0, 3]] and "of 8 heads" in small.message, small.message


def test_a_plain_pytorch_model_whose_forward_rejects_the_repeated_probe_still_gets_its_report():
    """The repeated probe draws from the whole vocabulary, up to the tokenizer's limit; a module with 40 positions
    ran the text probes but ended the whole diagnosis with torch's bare IndexError on that probe."""
    from torch import nn

    from diagnostics.diagnose import diagnose

    class ShortPositions(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.position = nn.Embedding(200, 32), nn.Embedding(40, 32)
            layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

        def forward(self, input_ids):
            return self.encoder(self.embed(input_ids) + self.position(torch.arange(input_ids.shape[1])))

    torch.manual_seed(0)
    report = diagnose((ShortPositions().eval(), wordpiece_tokenizer()), ["the cat sat on the mat"])
    assert len(report.heads) == 8
    assert "ShortPositions(input_ids) failed (IndexError" in report.finding("repeated_probe_skipped").message


def test_a_plain_pytorch_model_that_fails_is_run_once_before_its_probes():
    """Its short run (is it causal?) failed, and choosing the default probes ran it again: a failing module ran
    three times before its error was shown (stop 58's re-read)."""
    from torch import nn

    from core import ExtractionError
    from diagnostics.diagnose import diagnose

    class Failing(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.attn, self.calls = nn.Embedding(200, 32), nn.MultiheadAttention(32, 4), 0

        def forward(self, input_ids):
            self.calls += 1
            self.attn(*[self.embed(input_ids)] * 3)
            raise RuntimeError("boom")

    model = Failing().eval()
    with pytest.raises(ExtractionError, match=r"Failing\(input_ids\) failed \(RuntimeError: boom\)"):
        diagnose((model, wordpiece_tokenizer()), ["the cat sat on the mat"])
    assert model.calls == 2  # the short run, then the probe's own run, which says why


def test_a_model_whose_attention_cannot_be_read_at_all_is_refused():
    """No tokenizer, no token ids it can be probed with, no known weight layout: it got an empty report with no
    finding, as if healthy, and a note saying its weights were checked (they were not)."""
    from torch import nn

    from core import ExtractionError
    from diagnostics.diagnose import diagnose

    with pytest.raises(ExtractionError, match="has no vocab_size.*nothing of it can be diagnosed"):
        diagnose(nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 8)))
    t5 = diagnose(tiny_t5())  # weights it can read: checked, and the report says why no probe ran
    note = t5.finding("no_tokenizer").message
    assert "only the weights were checked (encoder-decoder models need a tokenizer" in note


def test_a_probe_that_is_not_utf8_is_named():
    """A shell's --text "$(cat latin1.txt)" holds surrogates: the tokenizer's TypeError was exit 3."""
    import os

    import pytest

    from core.errors import InputError
    from diagnostics import diagnose

    text = os.fsdecode(b"The caf\xe9 on the corner raised its prices again.")
    with pytest.raises(InputError, match="^probe 2 of 2: its text is not UTF-8"):
        diagnose((tiny_bert(), wordpiece_tokenizer()), ["the cat sat on the mat", text])


def test_probes_that_are_not_texts_are_named():
    """A (text, 5) pair was an AttributeError, a 3-tuple or 42 a TypeError."""
    import pytest

    from core.errors import InputError
    from diagnostics import diagnose

    source = (tiny_bert(), wordpiece_tokenizer())
    for texts, why in (([("the dog", 5)], "probe 1 of 1: ('the dog', 5) is not a text"),
                       (["the cat", ("a", "b", "c")], "probe 2 of 2: ('a', 'b', 'c') is not a text"),
                       (42, "probe texts must be a list")):
        with pytest.raises(InputError, match=f"^{why}".replace("(", r"\(").replace(")", r"\)")):
            diagnose(source, texts)
    assert len(diagnose(source, [("the dog barks", None), ["the dog", "a cat"]]).probes) == 2


def test_a_device_for_a_model_already_loaded_is_refused_not_ignored():
    """diagnose((model, tokenizer), device="cuda") ran on the CPU without a word."""
    from core.errors import InputError
    from diagnostics import compare, diagnose

    pair = (tiny_bert(), wordpiece_tokenizer())
    with pytest.raises(InputError, match=r"device='cuda' places a model AttnScope loads by name; yours is loaded "
                                          r"already: move it first \(model.to\(device\)\)"):
        diagnose(pair, device="cuda")
    with pytest.raises(InputError, match="device='cpu' places a model"):
        compare(pair, pair, device="cpu")


def test_head_metrics_of_a_whole_result_says_what_it_takes():
    """head_metrics(result) was a raw RuntimeError (Could not infer dtype of AttentionResult)."""
    from core import extract_attention
    from core.errors import InputError
    from diagnostics import head_metrics

    result = extract_attention(tiny_bert(), wordpiece_tokenizer(), "the cat sat")
    with pytest.raises(InputError, match=r"head_metrics takes the maps, not the result: head_metrics\(r.attentions"):
        head_metrics(result)


def test_probes_over_this_machine_s_maps_budget_are_streamed_and_a_device_is_for_the_named_model(monkeypatch):
    """Below 4 GiB of memory (or with ATTNSCOPE_MAX_MAPS_BYTES low) diagnose sent a probe it could stream to
    extract_attention, which refused it; compare(loaded, "name", device=...) was refused though B is loaded here."""
    from diagnostics import compare, diagnose

    model, tokenizer = tiny_gpt2(), bpe_tokenizer()
    text = "the cat sat on the mat and the dog ran to the park " * 3
    monkeypatch.setenv("ATTNSCOPE_MAX_MAPS_BYTES", "20000")
    report = diagnose((model, tokenizer), [text])
    assert report.model["streamed"] and len(report.heads) == 8
    monkeypatch.delenv("ATTNSCOPE_MAX_MAPS_BYTES")
    import core

    loaded = core.load_model("demo-gpt2")
    assert compare(loaded, "demo-gpt2", [text], device="cpu").heads  # the device is B's, loaded by name


def test_an_encoder_decoder_s_maps_count_its_target(monkeypatch):
    """Only the text's length was counted (three maps of it): a short text with a long target passed the budget,
    a long text with a short target was refused."""
    from core import extract_attention
    from core.errors import InputError

    model, tokenizer = tiny_t5(), wordpiece_tokenizer()
    short, long = "the cat", " ".join(["the cat sat on the mat"] * 10)
    whole = extract_attention(model, tokenizer, long, target=short)
    s, t = len(whole.encoder.tokens), len(whole.decoder.tokens)  # encoder S², decoder T², cross T·S
    held = 4 * model.config.num_layers * model.config.num_heads * (s * s + t * t + s * t)
    monkeypatch.setenv("ATTNSCOPE_MAX_MAPS_BYTES", str(held + 1000))  # below 3·S² of the old count
    assert extract_attention(model, tokenizer, long, target=short).decoder is not None
    monkeypatch.setenv("ATTNSCOPE_MAX_MAPS_BYTES", str(held - 1000))  # above 3·(a short text's)² of the old count
    with pytest.raises(InputError, match="whose whole attention maps would take"):
        extract_attention(model, tokenizer, short, target=long)
