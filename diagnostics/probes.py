"""The texts a diagnosis runs through the model, and random-id probes for models without a tokenizer.

Default probes are ordinary English of different shapes: short and long,
punctuation-heavy, a question, a list, and two sentence pairs (BERT's sentence
A/B) so segment (block) and [SEP] behaviour show up. Per-head metrics are
averaged over all of them, so one odd sentence cannot decide a finding.
"""

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from core.custom_model import AttnScopeTransformer
from core.device import model_device
from core.errors import ExtractionError
from core.extraction.hf_extract import eager_attention, is_causal_config, stack_layers
from core.extraction.module_extract import attention_modules, run_with_hooks
from core.result import AttentionResult


@dataclass(frozen=True)
class Probe:
    text: str
    text_pair: str | None = None

    def to_dict(self):
        return {"text": self.text, "text_pair": self.text_pair}


DEFAULT_PROBES = (
    Probe("The cat sat on the mat and looked out of the window."),
    Probe("My sister bought a new bicycle because her old one was stolen last week."),
    Probe("After the rain stopped, the children ran outside to play in the park."),
    Probe("Did you remember to buy milk, eggs, bread and coffee on your way home?"),
    Probe("The committee, which met on Tuesday, decided that the new library would open in the spring "
          "of next year, provided that the funding arrived on time."),
    Probe("She reads a book every evening.", "Before she goes to sleep, she turns off the light."),
    Probe("Where is the nearest train station?", "It is two streets away, next to the old bank."),
)
RANDOM_PROBES = 4  # probes of random token ids when there is no tokenizer
RANDOM_LENGTH = 24


def as_probes(texts):
    """User texts (strings or ``(text, pair)`` tuples) as ``Probe``s; None gives the defaults."""
    if texts is None:
        return list(DEFAULT_PROBES)
    probes = [Probe(*t) if isinstance(t, (tuple, list)) else Probe(t) for t in texts]
    return probes or list(DEFAULT_PROBES)


def random_probe(model, seed, length=RANDOM_LENGTH):
    """Attention of ``model`` on random token ids: an ``AttentionResult`` with tokens ``#id``.

    For models that came without a tokenizer. Works for Hugging Face models
    (not encoder-decoders), AttnScope models and ``nn.MultiheadAttention``
    modules that take token ids.
    """
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 2:
        raise ExtractionError(f"{type(model).__name__} has no vocab_size, so it cannot be probed with token ids")
    if getattr(config, "is_encoder_decoder", False):
        raise ExtractionError("encoder-decoder models need a tokenizer to be probed")
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (1, length), generator=generator).to(model_device(model))  # (1, T)
    was_training = model.training
    model.eval()
    try:
        attentions, causal = _run(model, ids)  # (L, H, T, T)
    finally:
        model.train(was_training)
    tokens = [f"#{i}" for i in ids[0].tolist()]
    flags = [False] * length
    return AttentionResult(tokens, attentions, causal, flags, list(flags), token_ids=ids[0].tolist(),
                           model_name=type(model).__name__)


def _run(model, ids):
    if isinstance(model, PreTrainedModel):
        with eager_attention(model), torch.inference_mode():
            out = model(input_ids=ids, output_attentions=True, return_dict=True)
        return stack_layers(out.attentions, "self", model), is_causal_config(model.config)
    if isinstance(model, AttnScopeTransformer):
        with torch.inference_mode():
            out = model(ids, output_attentions=True)
        return torch.stack([a[0].float().cpu() for a in out["attentions"]]), bool(model.config.causal)
    if attention_modules(model):
        return run_with_hooks(model, ids)
    raise ExtractionError(f"{type(model).__name__} cannot be probed: AttnScope cannot read its attention")

