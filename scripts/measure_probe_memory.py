"""Peak RSS and time of one ``diagnose`` on several probes of about 1,000 tokens each.

    python scripts/measure_probe_memory.py [--model smollm2] [--probes 4] [--chars 4500]

The probes are slices of AttnScope's default paragraphs, ``--chars`` characters each (4,500 are ~980
SmolLM2 tokens, under ``diagnose.STREAM_ABOVE_TOKENS``). Their whole maps together are what
``diagnose.WHOLE_MAPS_MAX_BYTES`` bounds: before it, SmolLM2 on 4 such probes held 6.35 GB at peak.
Prints one line: tokens per probe, whether the probes were streamed, seconds, and peak RSS before and after.
"""

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import core  # noqa: E402
import diagnostics  # noqa: E402
from diagnostics.probe_texts import DEFAULT_PROBES  # noqa: E402


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--probes", type=int, default=4)
    parser.add_argument("--chars", type=int, default=4500)
    args = parser.parse_args()
    text = " ".join(probe.text for probe in DEFAULT_PROBES) * 3
    texts = [text[i * 97:i * 97 + args.chars] for i in range(args.probes)]
    model, tokenizer = core.load_model(args.model)
    before, start = peak_gb(), time.perf_counter()
    report = diagnostics.diagnose((model, tokenizer), texts=texts)
    tokens = [len(tokenizer(t)["input_ids"]) for t in texts]
    print(f"{args.model}: {args.probes} probes of {min(tokens)}-{max(tokens)} tokens, "
          f"streamed={report.model['streamed']}, {time.perf_counter() - start:.1f} s, "
          f"peak RSS {before:.2f} -> {peak_gb():.2f} GB")


if __name__ == "__main__":
    main()
