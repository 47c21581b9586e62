"""The app under Streamlit's ``AppTest`` (no browser), started the same way by every page test."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"
TIMEOUT = 120  # the first run imports torch and transformers and loads the default model


def started_app(timeout: float = TIMEOUT) -> AppTest:
    """The app after its first run (Inspect, on the default model)."""
    at = AppTest.from_file(str(APP), default_timeout=timeout)
    at.run()
    return at
