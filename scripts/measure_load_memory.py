"""Peak memory of ``core.load_untrusted`` on an uploaded BERT-base-sized checkpoint, as a multiple of the model.

    python scripts/measure_load_memory.py [--layers 12]

Saves a randomly initialised BERT (hidden 768, 12 heads, ``--layers`` layers, safetensors) to a temporary
folder under the current one, then in a fresh process loads it as uploaded files (open binary files, as the
Diagnose page passes them) and prints one JSON line: model bytes (float32), peak RSS above the baseline
(VmHWM), and the ratio.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, {root!r})
import core
import transformers.models.bert.modeling_bert  # in the baseline: import core no longer loads torch or transformers
def kb(key): return int(Path("/proc/self/status").read_text().split(key + ":")[1].split()[0]) * 1024
base = kb("VmRSS")
folder = Path({folder!r})
files = [(p.name, p.open("rb")) for p in sorted(folder.iterdir())]
loaded = core.load_untrusted(files)
model_bytes = sum(p.numel() * 4 for p in loaded.model.parameters())
print(json.dumps({{"model_gb": round(model_bytes / 1e9, 3),
                  "peak_above_baseline_gb": round((kb("VmHWM") - base) / 1e9, 3),
                  "held_after_gb": round((kb("VmRSS") - base) / 1e9, 3),
                  "peak_ratio": round((kb("VmHWM") - base) / model_bytes, 2)}}))
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args()
    from transformers import BertConfig, BertModel

    folder = Path(tempfile.mkdtemp(dir=os.getcwd()))
    try:
        config = BertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                            num_hidden_layers=args.layers)
        BertModel(config).save_pretrained(folder)
        out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), folder=str(folder))],
                             capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        print(json.dumps({**json.loads(out), "load_average": os.getloadavg()[0]}))
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
