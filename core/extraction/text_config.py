"""The config of a model's text layers.

A vision-language model (Gemma 3 4B-27B, Llava, …) keeps its language model's settings (layers, heads, positions,
vocabulary, sliding windows) under ``config.text_config``; read at its top level they were missing, so its local
layers were measured as global and its maps escaped the size budget. The maps are its language model's.
"""

from __future__ import annotations

from transformers import PretrainedConfig


def text_config(model):
    """``model.config``'s text part (``get_text_config()``), or ``model.config`` itself: for most models, for an
    encoder-decoder (whose encoder and decoder are parts of their own) and for a config that is not transformers'."""
    config = getattr(model, "config", None)
    if not isinstance(config, PretrainedConfig) or getattr(config, "is_encoder_decoder", False):
        return config
    try:
        inner = config.get_text_config()
    except ValueError:  # several text configs: none is the text part
        return config
    # transformers keeps unknown keys of a config.json as attributes, and returns one named like a text config
    # ("decoder": 1 in a BERT upload) as it is: read as the text part, it had switched off the maps' size budget
    return inner if isinstance(inner, PretrainedConfig) else config


def is_encoder_decoder(model) -> bool:
    """Whether ``model``'s config says it is an encoder-decoder (BART, T5, Whisper): a model with no config is not."""
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))


def config_size(model, *names: str) -> int | None:
    """The first of ``names`` (Hugging Face's, then AttnScope's) that ``model``'s text config holds as a whole
    number, e.g. ``config_size(model, "num_hidden_layers", "n_layers")``; None when it holds none."""
    config = text_config(model)
    return next((getattr(config, n) for n in names if isinstance(getattr(config, n, None), int)), None)


def vocab_size(model) -> int | None:
    """The model's vocabulary size as its (text) config gives it, or None when it gives none."""
    return config_size(model, "vocab_size")


def text_model(model):
    """``(name, module)`` of a vision-language model's language model, the module that holds its text config (its
    vision tower's attention layers are no layers of its maps); ``("", model)`` for any other model."""
    inner = text_config(model)
    if inner is getattr(model, "config", None):
        return "", model
    return next(((name, module) for name, module in model.named_modules() if getattr(module, "config", None) is inner),
                ("", model))
