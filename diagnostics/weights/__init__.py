"""Checks that read the weights alone: per-head Q/K/V matrices, Q/K scale, spectral norm, copies, dead heads."""
