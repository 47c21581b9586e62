"""Fuzzing the checkpoint loader: random and mutated bytes of every format it reads.

Every example must end in a ``CheckpointError`` or a loaded model — never another
exception, never a hang (a hard per-example alarm), never a file left in the
temporary root or written into the working folder.
"""

from __future__ import annotations

import io
import json
import os
import signal
import tarfile
import tempfile
import zipfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save

from core import CheckpointError, load_checkpoint
from tiny import tiny_bert, wordpiece_tokenizer
from tiny_gguf import write_llama_gguf

EXAMPLE_SECONDS = 20  # hard limit per example: a hang fails the test instead of stalling CI
FUZZ = settings(max_examples=100, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@lru_cache(maxsize=None)
def seeds() -> dict[str, bytes]:
    """Valid files of each format, built once, for the mutations to start from."""
    model = tiny_bert()
    weights = save({k: v.contiguous() for k, v in model.state_dict().items()})
    config = model.config.to_json_string().encode()
    vocab = "\n".join(wordpiece_tokenizer().get_vocab()).encode()
    files = {"config.json": config, "model.safetensors": weights, "vocab.txt": vocab}
    zipped, tarred = io.BytesIO(), io.BytesIO()
    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(f"model/{name}", data)
    with tarfile.open(fileobj=tarred, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(f"model/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    pt = io.BytesIO()
    torch.save(model.state_dict(), pt)
    with tempfile.TemporaryDirectory() as folder:
        gguf = write_llama_gguf(Path(folder) / "model.gguf").read_bytes()
    return {"model.zip": zipped.getvalue(), "model.tar.gz": tarred.getvalue(), "model.safetensors": weights,
            "model.pt": pt.getvalue(), "config.json": config, "model.gguf": gguf}


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    """``seed`` with a few bytes flipped, a stretch cut out, random bytes inserted, or a truncation."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        op = draw(st.sampled_from(["flip", "cut", "insert", "truncate"]))
        if op == "flip" and data:
            data[pos] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del data[pos:pos + draw(st.integers(1, 64))]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=32))
        else:
            del data[pos:]
    return bytes(data)


def inputs(name: str):
    """Random bytes or a mutation of the seed of ``name``."""
    return st.one_of(st.binary(max_size=4096), st.deferred(lambda: mutated(seeds()[name])))


@contextmanager
def alarm(seconds: int):
    def hang(signum, frame):
        raise TimeoutError(f"the loader ran longer than {seconds} s on one input")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A private temporary root and working folder for the whole module, restored afterwards."""
    root, work = tmp_path_factory.mktemp("fuzz-tmp"), tmp_path_factory.mktemp("fuzz-cwd")
    saved_tempdir, saved_cwd = tempfile.tempdir, os.getcwd()
    tempfile.tempdir = str(root)
    os.chdir(work)
    yield root, work
    tempfile.tempdir = saved_tempdir
    os.chdir(saved_cwd)


def check(sandbox, uploads) -> None:
    root, work = sandbox
    try:
        with alarm(EXAMPLE_SECONDS):
            load_checkpoint(uploads, n_heads=4)
    except CheckpointError as err:
        assert str(err) and "\n" not in str(err)
    assert list(root.iterdir()) == [], "files left in the temporary root"
    assert list(work.iterdir()) == [], "files written into the working folder"


@FUZZ
@given(data=inputs("model.zip"))
def test_fuzz_zip(sandbox, data):
    check(sandbox, [("model.zip", data)])


@FUZZ
@given(data=inputs("model.tar.gz"))
def test_fuzz_tar_gz(sandbox, data):
    check(sandbox, [("model.tar.gz", data)])


@FUZZ
@given(data=inputs("model.safetensors"))
def test_fuzz_safetensors(sandbox, data):
    check(sandbox, [("model.safetensors", data)])


@FUZZ
@given(data=inputs("model.pt"))
def test_fuzz_pt(sandbox, data):
    check(sandbox, [("model.pt", data)])


@FUZZ
@given(data=st.one_of(inputs("config.json"), st.builds(lambda d: json.dumps(d).encode(), st.dictionaries(
    st.sampled_from(["model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"]),
    st.one_of(st.integers(-3, 10**12), st.text(max_size=8), st.none(), st.booleans())))))
def test_fuzz_config_json(sandbox, data):
    check(sandbox, [("config.json", data), ("model.safetensors", seeds()["model.safetensors"])])


@settings(FUZZ, max_examples=60)
@given(data=inputs("model.gguf"))
def test_fuzz_gguf(sandbox, data):
    check(sandbox, [("model.gguf", data)])
