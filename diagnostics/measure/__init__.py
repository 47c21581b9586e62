"""Attention maps → numbers: row statistics, per-head metrics (accumulated chunk by chunk), head distances."""
