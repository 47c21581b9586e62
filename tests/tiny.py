"""Tiny random models and tokenizers built in-process, as transformers' own tests do.

Nothing is downloaded: tokenizers are trained on a few sentences and models are
built from configs (hidden 32, 2 layers, 4 heads). Shared by every test package.
"""

from __future__ import annotations

import copy
from functools import lru_cache

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    BartConfig, BartModel, BertConfig, BertModel, BertTokenizerFast, GPT2Config, GPT2Model,
    GPT2TokenizerFast, PreTrainedTokenizerFast, T5Config, T5Model,
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Attention is all you need, said the paper in 2017.",
    "A head that looks at the previous token is a positional head.",
    "Some heads attend to the separator token; others spread their attention widely.",
] * 4
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@lru_cache(maxsize=None)
def wordpiece_tokenizer(vocab_size: int = 200) -> BertTokenizerFast:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok.decoder = decoders.WordPiece()
    return BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                             sep_token="[SEP]", mask_token="[MASK]", model_max_length=64)


@lru_cache(maxsize=None)
def bpe_tokenizer(vocab_size: int = 300) -> GPT2TokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return GPT2TokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                             unk_token="<|endoftext|>", pad_token="<|endoftext|>", model_max_length=64)


def long_bpe_tokenizer(limit: int = 1024) -> GPT2TokenizerFast:
    """``bpe_tokenizer()`` with a limit of ``limit`` tokens: a copy, the cached one stays at 64."""
    tokenizer = copy.deepcopy(bpe_tokenizer())
    tokenizer.model_max_length = limit
    return tokenizer


@lru_cache(maxsize=None)
def dropping_tokenizer() -> PreTrainedTokenizerFast:
    """A BPE with no unknown token, trained on "the cat sat on the mat": it drops every other letter ("the dog" is
    read as "the o")."""
    tok = Tokenizer(models.BPE())  # no unk_token
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["the cat sat on the mat"] * 50, trainers.BpeTrainer(vocab_size=60))
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=64)


# Tokens that are markup: each must show as these characters, never as a link, a comment or bold text.
MARKUP_TOKENS = ['<a href="http://127.0.0.1:9/phish">', "<!--", "</script>", "**bold**", "&amp;", ":red[x]",
                 "<img src=x onerror=alert(1)>"]


@lru_cache(maxsize=None)
def markup_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer whose pieces are ``MARKUP_TOKENS``; texts join them with ``|``."""
    vocab = {t: i for i, t in enumerate(SPECIALS + MARKUP_TOKENS + ["the", "cat"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("|", behavior="removed")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=64)


def _seeded(build):
    torch.manual_seed(0)
    return build().eval()


def tiny_bert(max_positions: int = 64) -> BertModel:
    config = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=max_positions)
    return _seeded(lambda: BertModel(config, add_pooling_layer=False))


def pruned_bert(layer: int = 1, heads: tuple = (0, 1)) -> BertModel:
    """``tiny_bert`` with ``heads`` of ``layer`` cut out, as transformers' ``prune_heads`` did before version 5:
    their Q/K/V rows and output columns sliced away, and ``config.pruned_heads`` saying so."""
    model = tiny_bert()
    attention, size = model.encoder.layer[layer].attention, model.config.hidden_size // 4
    keep = torch.cat([torch.arange(h * size, (h + 1) * size) for h in range(4) if h not in heads])  # (kept dims,)
    with torch.no_grad():
        for name in ("query", "key", "value"):
            old = getattr(attention.self, name)
            new = torch.nn.Linear(old.in_features, len(keep))
            new.weight.copy_(old.weight[keep])  # (kept dims, hidden)
            new.bias.copy_(old.bias[keep])
            setattr(attention.self, name, new)
        old = attention.output.dense
        attention.output.dense = torch.nn.Linear(len(keep), old.out_features)
        attention.output.dense.weight.copy_(old.weight[:, keep])  # (hidden, kept dims)
        attention.output.dense.bias.copy_(old.bias)
    attention.self.num_attention_heads, attention.self.all_head_size = 4 - len(heads), len(keep)
    model.config.pruned_heads = {str(layer): list(heads)}
    return model.eval()


def tiny_gpt2(max_positions: int = 64) -> GPT2Model:
    config = GPT2Config(vocab_size=300, n_embd=32, n_layer=2, n_head=4, n_positions=max_positions,
                        bos_token_id=0, eos_token_id=0)
    return _seeded(lambda: GPT2Model(config))


def tiny_bart() -> BartModel:
    config = BartConfig(vocab_size=200, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64,
                        pad_token_id=0, bos_token_id=2, eos_token_id=3, decoder_start_token_id=3)
    return _seeded(lambda: BartModel(config))


def tiny_t5() -> T5Model:
    config = T5Config(vocab_size=200, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_decoder_layers=2, num_heads=4,
                      pad_token_id=0, eos_token_id=3, decoder_start_token_id=0)
    return _seeded(lambda: T5Model(config))


def tiny_gemma3_pair():
    """``(vision-language Gemma3Model, Gemma3TextModel)`` with the same language weights: Gemma 3 4B-27B keep their
    text settings (layers, heads, vocabulary, sliding windows) under ``config.text_config``."""
    import transformers as tf

    text = dict(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=256, sliding_window=16,
                layer_types=["sliding_attention", "sliding_attention", "full_attention"], pad_token_id=0)
    vision = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2, image_size=28,
                  patch_size=14)
    both = _seeded(lambda: tf.Gemma3Model(tf.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                                          image_token_index=310, boi_token_index=311,
                                                          eoi_token_index=312)))
    alone = tf.Gemma3TextModel(tf.Gemma3TextConfig(**text)).eval()
    alone.load_state_dict(both.language_model.state_dict())
    return both, alone
