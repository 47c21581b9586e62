"""The shipped demo models load offline with the Auto classes and show learned attention structure.

Thresholds sit well inside what docs/demo_models.md records for the shipped weights.
"""

from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

from core import extract_attention
from diagnostics import classify_metrics, head_metrics

DEMO_DIR = Path(__file__).resolve().parents[2] / "core" / "demo_models"
BERT_DIR, GPT2_DIR = DEMO_DIR / "demo-bert", DEMO_DIR / "demo-gpt2"

SENTENCES = [
    "The cat sat on the mat and looked out of the window.",
    "My sister bought a new bicycle because her old one was stolen last week.",
    "After the rain stopped, the children ran outside to play in the park.",
    "We walked along the river until the sun went down behind the hills.",
]
ODD_TEXT = "Zyxquv flibbertigibbet, naïve café: Mr. O'Brien's 3.14% ROI — wow!! 😀"


@pytest.fixture(scope="module")
def bert():
    model = AutoModel.from_pretrained(BERT_DIR, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(BERT_DIR)


@pytest.fixture(scope="module")
def gpt2():
    model = AutoModel.from_pretrained(GPT2_DIR, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(GPT2_DIR)


def head_structure(model, tokenizer):
    """Per-head metrics averaged over SENTENCES, and the label each head gets on most of them."""
    metrics, labels = [], []
    for text in SENTENCES:
        result = extract_attention(model, tokenizer, text)
        m = head_metrics(result.attentions, causal=result.causal, special=torch.tensor(result.special))
        metrics.append(torch.stack([m.entropy, m.column_mass[..., 0], m.diag_mass[..., 2]], dim=-1))  # (L, H, 3)
        labels.append(classify_metrics(m))
    majority = [[Counter(run[l][h].label for run in labels).most_common(1)[0][0] for h in range(len(labels[0][0]))]
                for l in range(len(labels[0]))]
    return torch.stack(metrics).mean(0), majority


def test_weights_and_tokenizers_are_small():
    size = sum(f.stat().st_size for d in (BERT_DIR, GPT2_DIR) for f in d.iterdir())
    assert size <= 20 * 2**20, f"demo models take {size:,} bytes, over the 20 MiB budget"


def test_task_heads_load_with_auto_classes():
    assert type(AutoModelForMaskedLM.from_pretrained(BERT_DIR)).__name__ == "BertForMaskedLM"
    assert type(AutoModelForCausalLM.from_pretrained(GPT2_DIR)).__name__ == "GPT2LMHeadModel"


def test_bert_tokenizer_wraps_any_sentence_in_cls_sep(bert):
    _, tok = bert
    tokens = tok.convert_ids_to_tokens(tok(ODD_TEXT)["input_ids"])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert "[UNK]" in tokens  # the emoji has no piece: it falls back to [UNK] instead of failing
    plain = tok.convert_ids_to_tokens(tok("Zyxquv flibbertigibbet said hello")["input_ids"])
    assert "[UNK]" not in plain and any(t.startswith("##") for t in plain)
    assert tok.mask_token == "[MASK]" and tok.pad_token == "[PAD]"


def test_gpt2_tokenizer_round_trips_any_text(gpt2):
    _, tok = gpt2
    ids = tok(ODD_TEXT)["input_ids"]
    assert tok.decode(ids) == ODD_TEXT
    assert tok.pad_token == tok.eos_token == "<|endoftext|>"


def random_init(model):
    """The same architecture with fresh random weights: what training has to beat."""
    torch.manual_seed(0)
    return type(model)(model.config).eval()


def test_bert_heads_are_structured(bert):
    stats, labels = head_structure(*bert)
    entropy, cls_mass = stats[..., 0], stats[..., 1]
    # shipped: diffuse and sparse (with the sink factored out, its [CLS] head is a sparse head with the sink role)
    assert len({label for row in labels for label in row}) >= 2, labels
    assert cls_mass.max() > 0.5, cls_mass  # a [CLS] head (shipped: L1H3 at 0.60)
    assert entropy.min() < 0.55, entropy  # shipped: 0.45
    random_stats, random_labels = head_structure(random_init(bert[0]), bert[1])
    assert random_stats[..., 0].min() > 0.9 and random_stats[..., 1].max() < 0.3


def test_gpt2_heads_are_structured(gpt2):
    stats, labels = head_structure(*gpt2)
    entropy = stats[..., 0]
    kinds = {label for row in labels for label in row}
    assert len(kinds - {"diffuse"}) >= 2, labels  # shipped: sparse and vertical heads
    assert entropy.min() < 0.6, entropy  # shipped: 0.48
    random_stats, random_labels = head_structure(random_init(gpt2[0]), gpt2[1])
    assert random_stats[..., 0].min() > 0.9, random_stats[..., 0]
