"""Sinks on ordinary words (``measure.word_sinks``): which keys are words, and what a probe's heads score on them."""

import torch

from core.result import AttentionResult
from diagnostics.diagnose import measure
from diagnostics.measure.word_sinks import ordinary_keys, word_sink_scores


def test_words_are_keys_with_a_letter_or_digit_but_not_the_first_special_or_padding():
    tokens = ["[CLS]", "the", ",", "▁dog", "1998", "⏎", "—", "##ing", "[SEP]"]
    special = [True] + [False] * 7 + [True]
    assert ordinary_keys(tokens, special).tolist() == [False, True, False, True, True, False, False, True, False]
    # SmolLM2 has no BOS: its first word is where it parks, not an ordinary word; left padding comes before it
    assert ordinary_keys(["The", "▁cat"]).tolist() == [False, True]
    assert ordinary_keys(["<pad>", "The", "▁cat"], padding=[True, False, False]).tolist() == [False, False, True]


def test_a_head_scores_only_where_its_sink_key_is_a_word():
    sink_score = torch.tensor([[0.9, 0.7, 0.6]])  # (L=1, H=3)
    sink_key = torch.tensor([[0, 1, 2]])  # the first token, "dog", "."
    ordinary = ordinary_keys(["The", "dog", "."])
    assert word_sink_scores(sink_score, sink_key, ordinary).tolist() == [[0.0, 0.699999988079071, 0.0]]


def _parked(tokens, key):
    """One layer, two heads over ``tokens``: head 0 sends every query to ``key``, head 1 to the first token."""
    n = len(tokens)
    attn = torch.full((1, 2, n, n), 0.02 / (n - 1))  # (L, H, q, k)
    attn[0, 0, :, key] = 0.98
    attn[0, 1, :, 0] = 0.98
    attn[0, 1, :, key] = 0.02 / (n - 1)
    return AttentionResult(tokens, attn, False, [False] * n, [False] * n)


def test_a_probe_scores_the_head_parked_on_a_word_and_not_the_one_on_the_first_token():
    tokens = ["The", "dog", "ran", "to", "the", "park", "and", "back", "."]
    words = measure(_parked(tokens, 5)).word_sinks  # (1, 2)
    assert words[0, 0] > 0.8 and words[0, 1] == 0
    assert measure(_parked(tokens, 8)).word_sinks.max() == 0  # "." is punctuation
    # random ids ("#123", a model without its tokenizer): their words are unknown
    assert measure(_parked(tokens, 5), named=False).word_sinks.max() == 0


def test_escaped_characters_and_bytes_are_not_words():
    """A display string escapes a carriage return (``\\x0d``), a no-break space (``\\u00a0``), a variation selector
    and the bytes of an emoji (``<0xE2>``): their letters and digits are the escape's."""
    tokens = ["Hi", "\\x0d", "\\u00a0", "\\ufe0f", "▁<0xE2>", "<0x9D>", "\\U000e0001", "▁ok", "a\\x0db"]
    assert ordinary_keys(tokens).tolist() == [False, False, False, False, False, False, False, True, True]


def test_a_word_that_heads_of_several_layers_park_on_is_the_models_own_sink():
    """Healthy SmolLM2 parks 31 heads of layers 3-10 on one early "the"; a damaged query bias parks the heads of
    its one layer on words of their own (at most 2 on one word)."""
    ordinary = ordinary_keys(["The", "▁day", "▁the", "▁beach", "▁dog"])
    sink_key = torch.tensor([[2, 2, 0], [2, 3, 0], [4, 4, 1]])  # (L=3, H=3)
    sink_score = torch.tensor([[0.7, 0.6, 0.9], [0.55, 0.8, 0.9], [0.9, 0.7, 0.4]])
    words = word_sink_scores(sink_score, sink_key, ordinary)
    assert words[0, :2].tolist() == [0, 0] and words[1, 0] == 0  # "the": layers 0 and 1 park on it
    assert torch.allclose(words[1, 1:], torch.tensor([0.8, 0.0])) and torch.allclose(words[2], sink_score[2])
    weak = sink_score.clone()
    weak[1, 0] = 0.3  # a head of layer 1 that leans to "the" without parking there: "the" is layer 0's alone
    assert word_sink_scores(weak, sink_key, ordinary)[0, :2].tolist() == [0.699999988079071, 0.6000000238418579]
