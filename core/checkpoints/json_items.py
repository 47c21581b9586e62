"""JSON from an upload is parsed only when its structure is small enough to hold.

Python builds an object per key and value, so the bytes a file takes do not bound what parsing it costs: a
config.json of 16 MB of empty objects ("{},{},…", 96 kB zipped) took 1.9 GB to parse and build the model with,
and 0.9 GB stayed with the model. Every key and value but the first follows one of ``{ [ , :``, so counting those
bytes bounds them before anything is parsed.
"""

from __future__ import annotations

from ..errors import CheckpointError

# A model's config.json holds a few hundred (MiniLM's 42); one with 65,536 labels (build.MAX_LABELS) ~270,000
MAX_CONFIG_ITEMS = 2**19
# Tokenizer files, safetensors headers (~12 a tensor) and shard indexes (2 a tensor): MiniLM's tokenizer.json holds
# 62,295, demo-gpt2's 19,893; a 262,144-token BPE vocabulary with its merges ~2 M
MAX_DATA_ITEMS = 2**22
TOO_MANY = ("{name} holds up to {n:,} JSON keys and values, more than the {limit:,} AttnScope parses (a real one "
            "holds {typical}); give the file written by save_pretrained")


def json_items(raw: bytes) -> int:
    """An upper bound on the keys and values in the JSON text ``raw`` (the count of ``{ [ , :`` bytes, plus one)."""
    return len(raw) - len(raw.translate(None, b"{[,:")) + 1


def check_json_items(raw: bytes, name: str, limit: int = MAX_CONFIG_ITEMS) -> None:
    """CheckpointError (``TOO_MANY``) for JSON text ``raw`` that could hold more than ``limit`` keys and values."""
    n = json_items(raw)
    if n > limit:
        typical = "a few hundred" if limit <= MAX_CONFIG_ITEMS else "up to a few million"
        raise CheckpointError(TOO_MANY.format(name=name, n=n, limit=limit, typical=typical))
