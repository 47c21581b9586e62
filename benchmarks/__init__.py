"""Benchmarks, run on their own (``python -m benchmarks.<name>``), never by the default test run."""
