"""Server time of a head or view switch: AppTest reruns of Inspect, 512 tokens, random-init BERT-base (12 × 12).

    python scripts/measure_switches.py

The browser test (tests/browser/test_latency.py) measures what a user waits for;
this measures the server's share alone (a full script rerun, so an upper bound
on the fragment rerun a switch triggers in the browser).
"""

import argparse
import copy
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def _model_folder(folder: Path) -> Path:
    import torch
    from transformers import BertConfig, BertModel

    from tiny import wordpiece_tokenizer

    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=1000, max_position_embeddings=512), add_pooling_layer=False).save_pretrained(folder)
    tokenizer = copy.deepcopy(wordpiece_tokenizer())
    tokenizer.model_max_length = 512
    tokenizer.save_pretrained(folder)
    return folder


def _timed(label: str, run) -> None:
    start = time.perf_counter()
    run()
    print(f"{label:28s} {time.perf_counter() - start:6.3f} s")


def main() -> None:
    from streamlit.testing.v1 import AppTest

    from tiny import CORPUS

    with tempfile.TemporaryDirectory() as tmp:
        folder = _model_folder(Path(tmp) / "bert-base-random")
        # the app reads models only under its allowed roots
        os.environ["ATTNSCOPE_ALLOWED_ROOTS"] = os.pathsep.join([str(ROOT), str(Path.home()), tmp])
        at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=600)
        at.run()
        at.radio(key="model_kind").set_value("Local folder").run()
        at.text_input(key="model_path").set_value(str(folder))
        at.text_area(key="text").set_value(" ".join(CORPUS * 8)[:4900])
        _timed("first run (load, extract, label)", lambda: at.button(key="run").click().run())
        if at.error:
            raise SystemExit(f"the app refused the model: {at.error[0].value}")
        _timed("rerun, nothing changed", at.run)
        for head in (1, 2, 3):
            _timed(f"head switch to {head}", lambda h=head: at.selectbox(key="head").set_value(h).run())
        for mode in ("average", "rollout", "head"):
            _timed(f"view switch to {mode}", lambda m=mode: at.radio(key="inspect_mode").set_value(m).run())
    with open("/proc/loadavg") as f:
        print("load average:", " ".join(f.read().split()[:3]))


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
