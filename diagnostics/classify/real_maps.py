"""Attention maps of the demo models for the hand-labelled heads in ``data/real_labels.json``.

Loads each demo model once with the eager attention kernel (the fused ones never
materialise the weights) and returns the ``[q, k]`` map of every listed head.
"""

from functools import lru_cache

import torch

CAUSAL_MODELS = {"demo-gpt2": True, "demo-bert": False}


def load_head_maps(entries, models_dir):
    """``[(weights [q, k], causal), ...]`` for ``entries``, or None when a demo model is missing."""
    if any(not (models_dir / e["model"]).exists() for e in entries):
        return None
    maps = []
    for e in entries:
        attn = _attentions(str(models_dir / e["model"]), e["text"])  # (L, H, q, k)
        maps.append((attn[e["layer"], e["head"]], CAUSAL_MODELS[e["model"]]))
    return maps


@lru_cache(maxsize=16)
def _attentions(path, text):
    from transformers import AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(path), _model(path)
    inputs = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).float()  # (L, H, q, k)


@lru_cache(maxsize=4)
def _model(path):
    from transformers import AutoModel

    return AutoModel.from_pretrained(path, attn_implementation="eager").eval()
