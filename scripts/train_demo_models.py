"""Train the two demo models shipped in ``core/demo_models/``, offline and reproducibly.

Data: the docstrings of the Python standard library (every importable public
module and subpackage named by ``sys.stdlib_module_names``, plus the public
classes, functions and methods they define) and the help topics of
``pydoc_data.topics`` (the language reference text behind ``help()``). Nothing is
downloaded and no corpus text is written to disk; the same Python version gives
the same corpus.

Tokenizers (Hugging Face ``tokenizers``):
- demo-bert: lowercasing WordPiece (BertNormalizer + BertPreTokenizer), 4,096
  entries with [PAD] [UNK] [CLS] [SEP] [MASK]; unknown characters become [UNK].
- demo-gpt2: byte-level BPE, 4,096 entries, ``<|endoftext|>`` as bos/eos/unk/pad;
  any string is encodable since all 256 bytes are in the vocabulary.

Models: hidden 128, 4 layers, 4 heads, FFN 512, 512 positions (~1.4 M parameters,
~6 MB each). BERT trains on masked-LM (15% of tokens: 80% [MASK], 10% random,
10% kept), GPT-2 on next-token prediction; AdamW, linear warm-up then cosine
decay (peak 1e-3 BERT, 2e-3 GPT-2), 1,024 tokens per step, 3,000 steps each, no dropout (the
models see each token only a few times, so they underfit rather than overfit). Each step draws one
window length (16-128 tokens, every 20th step 512 so all positions are trained) and samples windows from the
concatenated token stream, where documents are joined by [SEP] / <|endoftext|>.

After training the script prints a per-head structure table measured on
ordinary English sentences (see ``head_structure``); docs/demo_models.md records
the numbers of the shipped run.

Usage: python scripts/train_demo_models.py --out core/demo_models [--steps N]
"""

import argparse
import contextlib
import importlib
import inspect
import io
import math
import pkgutil
import sys
import time
import warnings
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast, GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

SEED = 0
VOCAB_SIZE = 4096
TOKENS_PER_STEP = 1024
SHORT_LENGTHS = (16, 32, 64, 128)
LONG_LENGTH = 512  # the models' maximum positions
DEFAULT_STEPS = {"bert": 3000, "gpt2": 3000}
# Post-LayerNorm BERT diverged towards uniform heads at 4e-3; pre-LayerNorm GPT-2 tolerates more.
PEAK_LR = {"bert": 1e-3, "gpt2": 2e-3}
ARCH = dict(hidden=128, layers=4, heads=4, ffn=512)

# Modules that open windows or browsers, print on import, or are test suites.
SKIP_MODULES = {"antigravity", "this", "idlelib", "turtledemo", "turtle", "tkinter",
                "test", "ensurepip", "lib2to3", "pydoc_data", "__phello__"}

# Ordinary English, deliberately unlike docstrings, for the structure check.
EVAL_SENTENCES = [
    "The cat sat on the mat and looked out of the window.",
    "My sister bought a new bicycle because her old one was stolen last week.",
    "After the rain stopped, the children ran outside to play in the park.",
    "He said that the meeting would start at nine, but nobody arrived on time.",
    "We walked along the river until the sun went down behind the hills.",
    "The little shop on the corner sells fresh bread, cheese and flowers.",
    "She reads a book every evening before she goes to sleep.",
    "If you want to learn a language, you should practise a little every day.",
]


# ---------------------------------------------------------------- corpus

def _public(name):
    parts = name.split(".")
    return parts[0] not in SKIP_MODULES and not any(
        p.startswith(("_", "test")) or p == "tests" for p in parts)


def _quiet_import(name):
    """Import a module, hiding its prints and warnings; None if it fails."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except BaseException:  # noqa: BLE001 - some stdlib modules raise SystemExit or odd errors
        return None


def stdlib_module_names():
    names = set()
    for top in sorted(n for n in sys.stdlib_module_names if _public(n)):
        module = _quiet_import(top)
        if module is None:
            continue
        names.add(top)
        for info in pkgutil.walk_packages(getattr(module, "__path__", []), top + ".", onerror=lambda _: None):
            if _public(info.name):
                names.add(info.name)
    return sorted(names)


def _documented_objects(module):
    objs = [module]
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj):
            objs.append(obj)
            objs += [m for n, m in sorted(vars(obj).items()) if not n.startswith("_") and inspect.isroutine(m)]
        elif inspect.isroutine(obj):
            objs.append(obj)
    return objs


def gather_corpus():
    """Deduplicated, sorted docstrings of the stdlib plus pydoc help topics."""
    docs = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in stdlib_module_names():
            module = _quiet_import(name)
            for obj in _documented_objects(module) if module else []:
                doc = getattr(obj, "__doc__", None)
                if isinstance(doc, str) and len(doc.strip()) >= 20:
                    docs.add(inspect.cleandoc(doc))
        from pydoc_data.topics import topics
        for text in topics.values():
            docs.update(p.strip() for p in text.split("\n\n") if len(p.strip()) >= 20)
    return sorted(docs)


# ---------------------------------------------------------------- tokenizers

def train_bert_tokenizer(docs):
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    ascii_chars = [chr(c) for c in range(33, 127)]  # every printable ASCII character has a piece
    trainer = trainers.WordPieceTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials, initial_alphabet=ascii_chars)
    tok.train_from_iterator(docs, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
                             cls_token="[CLS]", mask_token="[MASK]", model_max_length=LONG_LENGTH)


def train_gpt2_tokenizer(docs):
    eos = "<|endoftext|>"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[eos],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer)
    return GPT2TokenizerFast(tokenizer_object=tok, bos_token=eos, eos_token=eos, unk_token=eos, pad_token=eos,
                             model_max_length=LONG_LENGTH)


def token_stream(tokenizer, docs, separator_id):
    """All documents' ids in one LongTensor, each followed by the separator."""
    ids = []
    for enc in tokenizer.backend_tokenizer.encode_batch(docs, add_special_tokens=False):
        ids += enc.ids + [separator_id]
    return torch.tensor(ids, dtype=torch.long)


# ---------------------------------------------------------------- models

def build_bert(tokenizer):
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=ARCH["hidden"], num_hidden_layers=ARCH["layers"],
                        num_attention_heads=ARCH["heads"], intermediate_size=ARCH["ffn"],
                        max_position_embeddings=LONG_LENGTH, pad_token_id=tokenizer.pad_token_id,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertForMaskedLM(config)


def build_gpt2(tokenizer):
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=ARCH["hidden"], n_layer=ARCH["layers"],
                        n_head=ARCH["heads"], n_inner=ARCH["ffn"], n_positions=LONG_LENGTH,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.eos_token_id)
    return GPT2LMHeadModel(config)


# ---------------------------------------------------------------- batches

def window_length(step):
    return LONG_LENGTH if step % 20 == 19 else SHORT_LENGTHS[step % len(SHORT_LENGTHS)]


def sample_windows(stream, length, gen):
    """(B, length) windows at random offsets of the stream, B = TOKENS_PER_STEP // length."""
    batch = max(1, TOKENS_PER_STEP // length)
    starts = torch.randint(0, len(stream) - length, (batch, 1), generator=gen)
    return stream[starts + torch.arange(length)]  # (B, length)


def bert_batch(stream, length, tokenizer, gen):
    """[CLS] window [SEP] with 15% of the window masked BERT-style; labels -100 elsewhere."""
    inner = sample_windows(stream, length - 2, gen)  # (B, L-2)
    col = lambda tid: torch.full((inner.shape[0], 1), tid)  # noqa: E731
    ids = torch.cat([col(tokenizer.cls_token_id), inner, col(tokenizer.sep_token_id)], dim=1)  # (B, L)
    labels = ids.clone()
    chosen = torch.rand(ids.shape, generator=gen) < 0.15
    chosen[:, [0, -1]] = False
    labels[~chosen] = -100
    roll = torch.rand(ids.shape, generator=gen)
    ids[chosen & (roll < 0.8)] = tokenizer.mask_token_id
    swap = chosen & (roll >= 0.8) & (roll < 0.9)
    ids[swap] = torch.randint(len(tokenizer.all_special_ids), len(tokenizer), (int(swap.sum()),), generator=gen)
    return dict(input_ids=ids, labels=labels)


def gpt2_batch(stream, length, tokenizer, gen):
    ids = sample_windows(stream, length, gen)  # (B, L); the model shifts labels itself
    return dict(input_ids=ids, labels=ids)


# ---------------------------------------------------------------- training

def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * 0.5 * (1 + math.cos(math.pi * progress))


def train(model, make_batch, steps, peak_lr):
    """AdamW with warm-up and cosine decay; returns the mean loss of the last 100 steps and the wall time."""
    gen = torch.Generator().manual_seed(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, steps // 10)
    model.train()
    losses, start = [], time.time()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, peak_lr, warmup)
        loss = model(**make_batch(window_length(step), gen)).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0 or step == steps - 1:
            print(f"  step {step:5d}  loss {loss.item():.3f}  {time.time() - start:6.0f}s", flush=True)
    model.eval()
    tail = losses[-100:]
    return sum(tail) / len(tail), time.time() - start


# ---------------------------------------------------------------- structure check

@torch.no_grad()
def head_structure(model, tokenizer, sentences, causal):
    """Per-head means over sentences: normalised entropy, mass on offset -1 / +1, first and last token.

    Entropy of row i is divided by log(number of keys row i may see), so 1 means
    uniform. Causal rows see i + 1 keys; row 0 (a single key) is skipped there.
    Returns a float tensor (layers, heads, 5).
    """
    sums = None
    for text in sentences:
        enc = tokenizer(text, return_tensors="pt")
        att = torch.cat(model(**enc, output_attentions=True).attentions)  # (layers, heads, T, T)
        sums = _row_metrics(att, causal) if sums is None else sums + _row_metrics(att, causal)
    return sums / len(sentences)


def _row_metrics(att, causal):
    T = att.shape[-1]
    rows = torch.arange(1 if causal else 0, T)
    visible = (rows + 1) if causal else torch.full_like(rows, T)
    p = att[:, :, rows]  # (layers, heads, R, T)
    entropy = -(p * p.clamp_min(1e-12).log()).sum(-1) / visible.float().log()  # (layers, heads, R)
    prev = att.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)
    nxt = att.diagonal(offset=1, dim1=-2, dim2=-1).mean(-1)
    first = p[..., 0].mean(-1)
    last = p[..., T - 1].mean(-1)
    return torch.stack([entropy.mean(-1), prev, nxt, first, last], dim=-1)  # (layers, heads, 5)


def print_structure(table, last_name):
    print(f"| head | entropy | prev (-1) | next (+1) | first | {last_name} |")
    print("|---|---|---|---|---|---|")
    for layer in range(table.shape[0]):
        for head in range(table.shape[1]):
            cells = " | ".join(f"{v:.2f}" for v in table[layer, head].tolist())
            print(f"| L{layer}H{head} | {cells} |")


# ---------------------------------------------------------------- main

def train_one(kind, docs, out_dir, steps):
    torch.manual_seed(SEED)
    if kind == "bert":
        tokenizer = train_bert_tokenizer(docs)
        stream = token_stream(tokenizer, docs, tokenizer.sep_token_id)
        model, make = build_bert(tokenizer), bert_batch
    else:
        tokenizer = train_gpt2_tokenizer(docs)
        stream = token_stream(tokenizer, docs, tokenizer.eos_token_id)
        model, make = build_gpt2(tokenizer), gpt2_batch
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{kind}: {len(stream):,} tokens in the stream, {n_params:,} parameters, {steps} steps", flush=True)
    loss, seconds = train(model, lambda length, gen: make(stream, length, tokenizer, gen), steps, PEAK_LR[kind])
    print(f"{kind}: final loss (mean of last 100 steps) {loss:.3f}, {seconds:.0f}s", flush=True)
    folder = out_dir / f"demo-{kind}"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    model.set_attn_implementation("eager")  # fused kernels return no weights
    print_structure(head_structure(model, tokenizer, EVAL_SENTENCES, causal=kind == "gpt2"),
                    "[SEP]" if kind == "bert" else "last")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("core/demo_models"))
    parser.add_argument("--steps", type=int, help=f"optimizer steps per model (default {DEFAULT_STEPS})")
    parser.add_argument("--only", choices=["bert", "gpt2"], help="train just one of the two models")
    args = parser.parse_args()
    torch.set_num_threads(1)  # on a shared 2-core machine a second OpenMP thread made steps 3x slower
    docs = gather_corpus()
    print(f"corpus: {len(docs):,} documents, {sum(map(len, docs)):,} characters", flush=True)
    for kind in [args.only] if args.only else ["bert", "gpt2"]:
        train_one(kind, docs, args.out, args.steps or DEFAULT_STEPS[kind])


if __name__ == "__main__":
    main()
