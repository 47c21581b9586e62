import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # import core/diagnostics/app from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/tiny.py
