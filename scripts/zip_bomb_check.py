"""The issue's zip bomb: a ~3.8 MB zip whose one entry expands to 3.9 GB of zeros, fed to ``core.load_untrusted``.

    python scripts/zip_bomb_check.py

Builds the zip in a temporary folder under the current one (an allowed root), times the refusal, prints
one line and removes the zip. Building it takes ~20 s (deflating 3.9 GB); the refusal comes before a byte
is unpacked.
"""

import argparse
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import core  # noqa: E402
from core.lazy import import_whole  # noqa: E402


def main() -> None:
    folder = Path(tempfile.mkdtemp(dir=os.getcwd()))
    bomb = folder / "bomb.zip"
    try:
        with (zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z,
              z.open("model.safetensors", "w", force_zip64=True) as f):
            chunk = bytes(1 << 24)
            for _ in range(3_900_000_000 // len(chunk)):
                f.write(chunk)
        import_whole(core)  # the refusal is timed, not the first import of torch and transformers
        start = time.perf_counter()
        try:
            core.load_untrusted(str(bomb))
        except core.CheckpointError as err:
            print(f"{bomb.stat().st_size / 1e6:.1f} MB zip refused in {time.perf_counter() - start:.2f} s: {err}")
    finally:
        bomb.unlink(missing_ok=True)
        folder.rmdir()


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
