"""Round trips of every supported checkpoint format, and the bad-input table of docs/checkpoints.md."""

from __future__ import annotations

import copy
from contextlib import contextmanager
import json
import os
import re
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import BertModel, RobertaConfig, RobertaModel

import core
from core import CheckpointError, Limits, extract_attention, load_checkpoint, load_model
from core.checkpoints import build as checkpoint_build, tokenizer as checkpoint_tokenizer
from core.checkpoints.checkpoint import resolve_roots
from core.checkpoints.json_items import MAX_DATA_ITEMS, json_items
from hostile_inputs import BAD_INPUTS, MARKER, table_rows
from loader_sandbox import loader_sandbox
from tiny import bpe_tokenizer, tiny_bert, tiny_gpt2, wordpiece_tokenizer
from tiny_checkpoints import save_splitting_bert
from tiny_gguf import write_llama_gguf

TEXT = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(autouse=True)
def private_temp(tmp_path, monkeypatch):
    """Local paths allowed under tmp_path; temp folders under tmp_path/tmp (checked empty after); no demo tokenizers."""
    yield from loader_sandbox(tmp_path, monkeypatch)


load = load_checkpoint  # local paths are allowed under tmp_path by the fixture


def assert_same_attention(original, tokenizer, loaded_model):
    expected = extract_attention(original, tokenizer, TEXT).attentions  # (L, H, q, k)
    got = extract_attention(loaded_model, tokenizer, TEXT).attentions
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)


def hf_folder(tmp_path, model, tokenizer, name="model", **save_kwargs) -> Path:
    folder = tmp_path / name
    model.save_pretrained(folder, **save_kwargs)
    tokenizer.save_pretrained(folder)
    return folder


def zip_folder(folder: Path, path: Path, top: str = "") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(folder.iterdir()):
            archive.write(file, f"{top}{file.name}")
    return path


def state(model) -> dict:
    return {k: v.contiguous() for k, v in model.state_dict().items()}


# ---------------------------------------------------------------- round trips

def test_hf_folder_round_trip(tmp_path):
    model, tok = tiny_bert(), wordpiece_tokenizer()
    loaded = load(hf_folder(tmp_path, model, tok))
    assert loaded.architecture == "bert" and loaded.tokenizer is not None and loaded.notes == []
    assert_same_attention(model, loaded.tokenizer, loaded.model)


def test_zip_with_top_folder_round_trip(tmp_path):
    model, tok = tiny_gpt2(), bpe_tokenizer()
    archive = zip_folder(hf_folder(tmp_path, model, tok), tmp_path / "gpt2.zip", top="my-gpt2/")
    loaded = load(archive)
    assert loaded.architecture == "gpt2" and len(loaded.tokenizer) == len(tok)
    assert_same_attention(model, tok, loaded.model)


def test_tar_gz_round_trip(tmp_path):
    model, tok = tiny_bert(), wordpiece_tokenizer()
    folder = hf_folder(tmp_path, model, tok)
    with tarfile.open(tmp_path / "bert.tar.gz", "w:gz") as archive:
        archive.add(folder, arcname="bert")
    assert_same_attention(model, tok, load(tmp_path / "bert.tar.gz").model)


def test_loose_uploaded_files_round_trip(tmp_path):
    model, tok = tiny_gpt2(), bpe_tokenizer()
    folder = hf_folder(tmp_path, model, tok)
    uploads = [(p.name, p.read_bytes()) for p in folder.iterdir()]
    loaded = load_checkpoint(uploads)
    assert_same_attention(model, tok, loaded.model)
    assert load_checkpoint(sorted(folder.iterdir()), allowed_roots=[tmp_path]).architecture == "gpt2"


def test_uploaded_zip_bytes_round_trip(tmp_path):
    model, tok = tiny_bert(), wordpiece_tokenizer()
    archive = zip_folder(hf_folder(tmp_path, model, tok), tmp_path / "m.zip")
    assert_same_attention(model, tok, load_checkpoint([("m.zip", archive.read_bytes())]).model)


@pytest.mark.parametrize("zipped", [False, True])
def test_sharded_safetensors_round_trip(tmp_path, zipped):
    model, tok = tiny_bert(), wordpiece_tokenizer()
    folder = hf_folder(tmp_path, model, tok, max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").is_file()
    source = zip_folder(folder, tmp_path / "sharded.zip") if zipped else folder
    assert_same_attention(model, tok, load(source).model)


def test_pytorch_model_bin_and_sharded_bin_index(tmp_path):
    model, tok = tiny_gpt2(), bpe_tokenizer()
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "config.json").write_text(model.config.to_json_string())
    weights = state(model)
    keys = sorted(weights)
    halves = {"a.bin": keys[: len(keys) // 2], "b.bin": keys[len(keys) // 2:]}
    for name, part in halves.items():
        torch.save({k: weights[k] for k in part}, folder / name)
    index = {"weight_map": {k: name for name, part in halves.items() for k in part}}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    assert_same_attention(model, tok, load(folder).model)
    for name in halves:
        (folder / name).unlink()
    (folder / "pytorch_model.bin.index.json").unlink()
    torch.save(weights, folder / "pytorch_model.bin")
    assert_same_attention(model, tok, load(folder).model)


@pytest.mark.parametrize("suffix", [".safetensors", ".bin", ".pt", ".pth"])
def test_bare_bert_state_dict_needs_heads(tmp_path, suffix):
    model = tiny_bert()
    path = tmp_path / f"bert{suffix}"
    save_file(state(model), path) if suffix == ".safetensors" else torch.save(model.state_dict(), path)
    with pytest.raises(CheckpointError, match=r"pass n_heads \(--heads N / the Heads per layer field\)$"):
        load(path)
    with pytest.raises(CheckpointError, match="n_heads=5 does not divide d_model 32"):
        load(path, n_heads=5)
    loaded = load(path, n_heads=4)
    assert loaded.architecture == "bert" and loaded.tokenizer is None
    assert "4 heads (as given)" in loaded.notes[0] and "text-level views are unavailable" in loaded.notes[-1]
    assert_same_attention(model, wordpiece_tokenizer(), loaded.model)


def test_bare_gpt2_lm_head_state_dict_with_prefix_and_tied_weights(tmp_path):
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    lm = GPT2LMHeadModel(tiny_gpt2().config).eval()
    torch.save(lm.state_dict(), tmp_path / "gpt2_lm.pt")  # transformer.* keys, lm_head tied to wte
    loaded = load(tmp_path / "gpt2_lm.pt", n_heads=4)
    assert loaded.architecture == "gpt2"
    assert_same_attention(lm.transformer, bpe_tokenizer(), loaded.model)


@pytest.mark.parametrize("build, lacking", [
    (tiny_bert, "encoder.layer.1.attention.self.query.weight"), (tiny_gpt2, "h.1.attn.c_attn.weight"),
    (tiny_bert, "encoder.layer.0.output.dense.bias"), (tiny_gpt2, "h.0.ln_1.weight")])
def test_a_bare_state_dict_missing_one_layer_tensor_names_it(tmp_path, build, lacking):
    """The layers were counted by their query weights: without the last one's, the model read was a layer shorter
    and the only note blamed a config.json there was none of."""
    weights = {k: v for k, v in state(build()).items() if k != lacking}
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=rf"^the (BERT|GPT-2) weights are incomplete: {re.escape(lacking)} is "
                                              "missing; give the full state dict$"):
        load(tmp_path / "model.safetensors", n_heads=4)


def test_a_bare_gpt2_with_mask_buffers_in_some_layers_only_loads(tmp_path):
    """The constant masks transformers 4 saved (attn.bias, attn.masked_bias) are rebuilt, not read: one layer with
    them and one without is no incomplete model."""
    model = tiny_gpt2()
    weights = {**state(model), "h.0.attn.bias": torch.tril(torch.ones(1, 1, 8, 8)), "h.0.attn.masked_bias":
               torch.tensor(-1e4)}
    save_file(weights, tmp_path / "gpt2.safetensors")
    assert_same_attention(model, bpe_tokenizer(), load(tmp_path / "gpt2.safetensors", n_heads=4).model)


def test_a_zip_s_load_tells_each_step_and_stops_between_them(tmp_path):
    """Unpacking, reading and building a 400 MB zip took 3-8 s with no progress call, so nothing could stop it."""
    from core.cancel import stoppable

    model, tok = tiny_bert(), wordpiece_tokenizer()
    folder = hf_folder(tmp_path, model, tok)
    archive = tmp_path / "bert.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in folder.iterdir():
            zipped.write(path, f"bert/{path.name}")
    seen = []
    load_checkpoint(archive, allowed_roots=[tmp_path], progress=lambda f, m: seen.append((f, m)))
    assert [m for _, m in seen] == ["unpacking the checkpoint", "reading the weights", "building the model",
                                    "reading the tokenizer", "loaded"]
    assert [f for f, _ in seen] == sorted(f for f, _ in seen)
    asked = iter([False, True])
    with pytest.raises(core.Cancelled):
        load_checkpoint(archive, allowed_roots=[tmp_path], progress=stoppable(lambda f, m: None, lambda: next(asked)))


def test_a_lora_adapter_is_named_as_one_with_its_base_model(tmp_path):
    """A PEFT adapter folder was "cannot tell the architecture from the weight names (…lora_A.weight…)", or, with
    its embeddings saved too, "the BERT weights are incomplete"; its base model was never named."""
    name = "base_model.model.encoder.layer.0.attention.self.query.lora_{}.weight"
    adapter = {name.format("A"): torch.zeros(2, 32), name.format("B"): torch.zeros(32, 2),
               "base_model.model.embeddings.word_embeddings.weight": torch.zeros(200, 32)}
    folder = tmp_path / "my-adapter"
    folder.mkdir()
    save_file(adapter, folder / "adapter_model.safetensors")
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": "org/b"}))
    adapter_for = r"^my-adapter is a LoRA/PEFT adapter for 'org/b': .*merge_and_unload\(\)"
    with pytest.raises(CheckpointError, match=adapter_for):
        load(folder, n_heads=4)
    with pytest.raises(CheckpointError, match=r"^the checkpoint is a LoRA/PEFT adapter: "):
        load(folder / "adapter_model.safetensors", n_heads=4)
    long_base = "org/" + "b" * 500 + "\n"  # quoted as every name from a file is: one line, cut short
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": long_base}))
    with pytest.raises(CheckpointError, match=r"^my-adapter is a LoRA/PEFT adapter for 'org/b{76}…'") as err:
        load(folder, n_heads=4)
    assert "\n" not in str(err.value)


def test_bare_prefixed_roberta_state_dict(tmp_path):
    torch.manual_seed(0)
    config = RobertaConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=37, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1)
    model = RobertaModel(config, add_pooling_layer=False).eval()
    save_file({f"roberta.{k}": v for k, v in state(model).items()}, tmp_path / "roberta.safetensors")
    loaded = load(tmp_path / "roberta.safetensors", n_heads=4)
    assert loaded.architecture == "roberta" and "RoBERTa" in loaded.notes[0]
    assert_same_attention(model, wordpiece_tokenizer(), loaded.model)


def test_custom_model_folder_zip_and_bare_state_dict(tmp_path):
    torch.manual_seed(0)
    model = core.AttnScopeTransformer(core.TINY_PRESETS["attnscope-nano-encoder"]).eval()
    folder = core.save_custom_model(model, tmp_path / "custom")
    tok = wordpiece_tokenizer(99)
    tok.save_pretrained(folder)
    loaded = load(zip_folder(folder, tmp_path / "custom.zip"))
    assert loaded.architecture == "attnscope" and loaded.tokenizer is not None
    assert_same_attention(model, tok, loaded.model)
    with pytest.raises(CheckpointError, match="number of attention heads cannot be read"):
        load(folder / "model.safetensors")
    bare = load(folder / "model.safetensors", n_heads=4)
    assert any("loaded as an encoder" in note for note in bare.notes)
    assert_same_attention(model, tok, bare.model)


def test_demo_tokenizer_is_borrowed_when_vocabulary_matches(tmp_path, monkeypatch):
    tok = wordpiece_tokenizer()
    tok.save_pretrained(tmp_path / "demo-bert")
    monkeypatch.setattr(checkpoint_tokenizer, "DEMO_MODELS", {"demo-bert": tmp_path / "demo-bert"})
    config = tiny_bert().config
    config.vocab_size = len(tok)  # a demo model's embedding has exactly its tokenizer's size
    save_file(state(BertModel(config, add_pooling_layer=False)), tmp_path / "bert.safetensors")
    loaded = load(tmp_path / "bert.safetensors", n_heads=4)
    assert loaded.tokenizer is not None and len(loaded.tokenizer) == len(tok)
    assert f"using demo-bert's tokenizer because the vocabulary sizes match ({len(tok)})" in loaded.notes[-1]
    assert loaded.tokenizer.model_max_length > 10**6  # the model's position table is the limit


def test_a_borrowed_tokenizer_s_limit_is_not_the_model_s(tmp_path, monkeypatch):
    """A bare GPT-2 of 1,024 positions borrowed demo-gpt2's tokenizer and its 512-token limit: inputs were cut at
    512 'to the model's limit'. The demo tokenizer itself, cached and shared, keeps its limit."""
    from transformers import GPT2Config, GPT2Model

    tok = copy.deepcopy(bpe_tokenizer())  # the cached one is shared by every test
    tok.model_max_length = 16
    tok.save_pretrained(tmp_path / "demo-gpt2")
    monkeypatch.setattr(checkpoint_tokenizer, "DEMO_MODELS", {"demo-gpt2": tmp_path / "demo-gpt2"})
    config = GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=64)
    save_file(state(GPT2Model(config)), tmp_path / "gpt2.safetensors")
    (tmp_path / "gpt2.json").write_text(config.to_json_string())
    loaded = load(tmp_path / "gpt2.safetensors", n_heads=2)
    result = extract_attention(loaded.model, loaded.tokenizer, "the fox " * 6)
    assert 16 < len(result.tokens) < 64 and not result.warnings
    assert checkpoint_tokenizer._demo_tokenizer(str(tmp_path / "demo-gpt2")).model_max_length == 16


def _splitting_on(tmp_path, pattern: str, name: str) -> Path:
    """A tiny BERT folder whose tokenizer.json splits text on ``pattern`` first."""
    return save_splitting_bert(tmp_path / name, pattern)


def test_a_tokenizer_splitting_on_a_backtracking_regex_is_not_used(tmp_path):
    """A pre-tokenizer splitting on (\\D|\\D\\D)+\\d panicked past Oniguruma's retry limit (an exception no handler
    catches) and, bounded ({1,22}), took 12 s on 180 characters holding the GIL: the server froze for everyone."""
    loaded = load(_splitting_on(tmp_path, r"(\D\D?){1,22}\d", "slow"))  # times out in the child process
    assert loaded.tokenizer is None
    assert loaded.notes[0].startswith("the checkpoint's tokenizer splits or rewrites text with the regex "
                                      "(\\D\\D?){1,22}\\d,")
    assert load(_splitting_on(tmp_path, r"(\D?\D?)+\d", "panics")).tokenizer is None  # crashes the child


CHAINS = [r"[\s\S]*[\s\S]*[\s\S]*[\s\S]*\d", r"\w*\w*\w*\w*\w*\W", r"[^\n]*[^\n]*\d", r"q*q*q*q*q*\W",
          r"cat[\s\S]*[\s\S]*[\s\S]*[\s\S]*\d", r"(?#[)(a|aa)+b(?#])", r"(?x)(a|aa) +b", r"\D{1,3}+\d",
          r"(?~\x00)(?~\x00)\d", r"(?<r>(?:a|aa)\g<r>|b)", r"(\w*)\1\d", r"\X*\d"]


@pytest.mark.parametrize("pattern", CHAINS)
def test_a_tokenizer_splitting_on_an_unknown_regex_is_not_used(tmp_path, pattern):
    """None of these repeats a group in plain sight, and each took minutes or panicked in the server:
    \\w*\\w*\\w*\\w*\\w*\\W 14 s on 100 letters, the first one panicked on the first default probe (an exception
    no handler caught: the Diagnose page stayed "running" with no message). Timing them on sample runs in a child
    process let q*q*q*q*q*\\W through (0.1 s there, 49 s on 1,000 characters of q), and judging their shape the rest
    (a comment, extended mode, {1,3}+, the absent operator, recursion, a backreference)."""
    loaded = load(_splitting_on(tmp_path, pattern, "chain"))
    assert loaded.tokenizer is None
    assert loaded.notes[0].startswith(f"the checkpoint's tokenizer splits or rewrites text with the regex "
                                      f"{pattern[:60]}, which is not one of the released tokenizers' regexes")


def test_only_known_regexes_run_at_most_four_wherever_they_are(tmp_path):
    from core.checkpoints.regex_risk import MAX_REGEXES, unknown_regex

    def unknown_in_file(path):
        return unknown_regex(json.loads(path.read_text()))

    decoder = {"decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"Regex": r"(\w|\w)*\W"},
                                                             "content": ""}]}}
    (tmp_path / "tokenizer.json").write_text(json.dumps(decoder))  # a decoder's regex runs on every token decoded
    assert unknown_in_file(tmp_path / "tokenizer.json") == r"(\w|\w)*\W"
    many = {"pre_tokenizer": [{"pattern": {"Regex": r"\p{N}{1,3}"}}] * (MAX_REGEXES + 1)}  # known, but each a pass
    (tmp_path / "tokenizer.json").write_text(json.dumps(many))
    assert unknown_in_file(tmp_path / "tokenizer.json") == r"\p{N}{1,3}"
    (tmp_path / "tokenizer.json").write_text(json.dumps({"pre_tokenizer": many["pre_tokenizer"][1:]}))
    assert unknown_in_file(tmp_path / "tokenizer.json") is None


def test_a_tokenizer_step_that_lengthens_the_text_is_not_used(tmp_path):
    """20 Replace steps of "a" by "aa" (no regex at all) made 100 characters 4 GB in 18 s; 1,000 aborted the server
    process with a Rust allocation failure."""
    folder = _splitting_on(tmp_path, r"\p{N}{1,3}", "grows")
    tree = json.loads((folder / "tokenizer.json").read_text())
    tree["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"String": "a"},
                                                               "content": "aa"}] * 20}
    (folder / "tokenizer.json").write_text(json.dumps(tree))
    loaded = load(folder)
    assert loaded.tokenizer is None
    grows = 'the checkpoint\'s tokenizer has a step that lengthens the text or makes it slow to read (Replace {"String"'
    assert loaded.notes[0].startswith(grows + ': "a"} by "aa")')
    tree["normalizer"] = {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}  # T5's, XLM-R's
    (folder / "tokenizer.json").write_text(json.dumps(tree))
    assert load(folder).tokenizer is not None
    tree["model"]["max_input_chars_per_word"] = 10**9  # WordPiece's search is cubic in a word: 8 s on 8,000 letters
    (folder / "tokenizer.json").write_text(json.dumps(tree))
    assert "(WordPiece words of up to 1000000000 characters)" in load(folder).notes[0]


def test_a_character_map_of_long_replacements_is_refused():
    """A SentencePiece character map may put any string it holds in place of one character: one of 1 MB would make
    a 50,000-character probe 50 GB. nmt_nfkc's longest replacement is 33 bytes."""
    import base64
    import struct

    from core.checkpoints.regex_risk import growing

    def charsmap(*replacements: bytes) -> dict:
        data = struct.pack("<I", 4) + bytes(4) + b"\0".join(replacements) + b"\0"  # a trie of 4 bytes, then them
        return {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(data).decode()}

    nfkc = charsmap(b"a" * 33, "\u2581".encode())
    assert growing({"normalizer": {"type": "Sequence", "normalizers": [nfkc]}}) is None
    assert growing({"normalizer": charsmap(b"x" * 1_000_000)}) == "a character map of replacements up to 1000000 " \
                                                                  "bytes long"
    assert growing({"normalizer": [nfkc, nfkc]}) == "a character map after another"  # each pass grows it again
    assert growing({"normalizer": {"type": "Precompiled", "precompiled_charsmap": "not base64!"}}) is not None
    assert growing({"normalizer": {"type": "Precompiled", "precompiled_charsmap": None}}) is None


def test_the_tokenizer_as_built_is_checked_not_only_its_file(tmp_path, monkeypatch):
    """transformers builds a SentencePiece model's tokenizer itself, its user-defined pieces joined into one regex
    that no tokenizer.json shows (190 pieces of 10,000 characters: 29 s on 50,000 characters)."""
    from tokenizers import Regex, pre_tokenizers
    from transformers import AutoTokenizer

    built = AutoTokenizer.from_pretrained
    def converted(*args, **kwargs):  # as the SentencePiece converter builds it
        tokenizer = built(*args, **kwargs)
        tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("aaaa+b0|aaaa+b1"), "isolated")
        return tokenizer

    monkeypatch.setattr(checkpoint_tokenizer.AutoTokenizer, "from_pretrained", converted)
    loaded = load(_splitting_on(tmp_path, r"\p{N}{1,3}", "built"))
    assert loaded.tokenizer is None and "with the regex aaaa+b0|aaaa+b1, which is not one" in loaded.notes[0]


def test_a_sentencepiece_model_s_user_defined_pieces_are_checked(tmp_path):
    pb = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")
    folder = _splitting_on(tmp_path, r"\p{N}{1,3}", "spm")
    for name in ("tokenizer.json", "vocab.txt", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
    proto = pb.ModelProto()
    proto.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    piece = proto.pieces.add()
    piece.piece, piece.score, piece.type = "<unk>", 0, pb.ModelProto.SentencePiece.UNKNOWN
    for i in range(3):
        piece = proto.pieces.add()
        piece.piece, piece.score, piece.type = "a" * 50 + f"b{i}", 0, pb.ModelProto.SentencePiece.USER_DEFINED
    (folder / "tokenizer.model").write_bytes(proto.SerializeToString())
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TokenizersBackend"}))
    loaded = load(folder)
    assert loaded.tokenizer is None and "splits or rewrites text with the regex" in loaded.notes[0]


_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
           r"\s+(?!\S)|\s+")
RELEASED_PATTERNS = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": _LLAMA3,  # and GPT-4's cl100k
    "qwen2": _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}"),
    "o200k": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|"
             r"'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|"
             r"'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "bloom": r" ?[^(\s|[.,!?…。，、।۔،])]+",
    "tekken": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
              r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|"
              r"\s+(?!\S)|\s+",  # Mistral's
    "deepseek_v3": r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?"""
                   r"""[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}
RUNS = ["a", "A", "1", " ", "!", "é", "É", "ж", "Ж", "中", "\n", "\r", " \n", "!\n", "a1", "a ", "aé", "Aa", "ǅ", "ʰ",
        "\u0301", "a\u0301", "'", "'s", "/", "!/"]


@pytest.mark.benchmark
def test_the_known_regexes_take_milliseconds_on_long_runs():
    """python -m pytest -m benchmark -k known_regexes: each known regex on 50,000 characters of each run."""
    import time

    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    from core.checkpoints.regex_risk import KNOWN_PATTERNS

    for pattern in KNOWN_PATTERNS:
        tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
        for run in RUNS:
            start = time.perf_counter()
            tokenizer.encode(run * (50_000 // len(run)))
            took = time.perf_counter() - start
            assert took < 0.3, (pattern, run, took)


@pytest.mark.parametrize("name", RELEASED_PATTERNS)
def test_regexes_of_released_tokenizers_are_used(tmp_path, name):
    loaded = load(_splitting_on(tmp_path, RELEASED_PATTERNS[name], name))
    assert loaded.tokenizer is not None and not loaded.notes


def test_a_checkpoint_saved_after_pruning_heads_is_told_so(tmp_path):
    """Its config.json lists pruned_heads, which transformers 5 ignores: the refusal said "give the config.json saved
    with these weights", and that was the one given."""
    from tiny import pruned_bert

    folder = hf_folder(tmp_path, pruned_bert(), wordpiece_tokenizer())
    told = r"^the weights do not match config.json: .* which lists heads pruned from layer\(s\) 1 \(pruned_heads\)"
    with pytest.raises(CheckpointError, match=told + r".* from before pruning$"):
        load(folder)  # an upload's path
    with pytest.raises(core.ModelLoadError, match=told):
        load_model(str(folder))  # a local folder's: transformers' own loading


def test_tokenizer_files_without_a_vocabulary_are_no_tokenizer(tmp_path):
    """tokenizer_config.json alone gave a tokenizer of 5 special tokens: every word [UNK], every probe unfit, and
    a report of 0 heads (load_model already refused it)."""
    folder = hf_folder(tmp_path, tiny_bert(), wordpiece_tokenizer())
    for name in ("vocab.txt", "tokenizer.json", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
    loaded = load(zip_folder(folder, tmp_path / "no_vocab.zip"))
    assert loaded.tokenizer is None
    assert loaded.notes[-1].startswith("the checkpoint's tokenizer files hold no vocabulary, only its 5 special")


@pytest.mark.parametrize("limit", ["abc", None, [512], True])
def test_a_token_limit_that_is_no_number_is_ignored_with_a_note(tmp_path, limit, caplog):
    """model_max_length "abc" in tokenizer_config.json: every call of the tokenizer compared it with the text's length,
    so the app said "Something went wrong (TypeError …)", the command line "internal error", exit 3."""
    folder = hf_folder(tmp_path, tiny_bert(), wordpiece_tokenizer())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": limit}))
    loaded = load(zip_folder(folder, tmp_path / "limit.zip"))
    note = f"the checkpoint's tokenizer gives model_max_length {limit!r}, not a number of tokens; it is ignored"
    assert any(n.startswith(note) for n in loaded.notes) == (limit is not None)  # None: transformers' "no limit"
    assert extract_attention(loaded.model, loaded.tokenizer, "the cat sat " * 30).attentions.shape[-1] == 64
    model, tokenizer = load_model(str(folder))  # the folder as the command line reads it: the note is logged
    assert extract_attention(model, tokenizer, "the cat sat " * 30).attentions.shape[-1] == 64
    assert any(r.getMessage().startswith(note) for r in caplog.records) == (limit is not None)


def test_what_an_upload_s_config_says_reaches_no_log_of_transformers(tmp_path):
    """The tokenizer re-read the uploaded config.json outside ``quiet_transformers``: transformers logged its
    rope_scaling "type" as it was, so newlines and escape sequences forged server log lines and cleared the
    command line's terminal (and 5 MB of it wrote 5 MB to stderr on every load)."""
    import logging

    folder = hf_folder(tmp_path, tiny_bert(), wordpiece_tokenizer())
    config = json.loads((folder / "config.json").read_text())
    forged = "x\n2026-12-07 Uvicorn server started\n\x1b[2J FORGED"
    (folder / "config.json").write_text(json.dumps({**config, "rope_scaling": {"type": forged}}))
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("transformers").addHandler(handler)
    try:
        assert load(zip_folder(folder, tmp_path / "rope.zip")).tokenizer is not None
        assert load_model(str(folder))[1] is not None
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    assert not [r.getMessage() for r in records if "FORGED" in r.getMessage()]


def test_overlapping_loads_keep_transformers_quiet_until_the_last_ends():
    """The first load to end set transformers' logging back while another was still reading its config."""
    import threading

    from transformers.utils import logging as hf_logging

    from core.checkpoints.quiet import quiet_transformers

    before = hf_logging.get_verbosity()
    entered, first_done, levels = threading.Event(), threading.Event(), []

    def second():
        with quiet_transformers():
            entered.set()
            first_done.wait(10)
            levels.append(hf_logging.get_verbosity())

    worker = threading.Thread(target=second)
    with quiet_transformers():
        worker.start()
        entered.wait(10)
    first_done.set()
    worker.join(10)
    assert levels == [hf_logging.ERROR] and hf_logging.get_verbosity() == before


@pytest.mark.parametrize("named", ["BertModel", "BertConfig"])
@pytest.mark.parametrize("where", ["tokenizer_config.json", "config.json"])
def test_a_tokenizer_class_that_names_no_tokenizer_is_not_used(tmp_path, named, where):
    """transformers looks tokenizer_class up on its top-level module: "BertModel" built a second model from the
    upload's weights as the tokenizer, and the load ended in a bare TypeError (the app: "Something went wrong")."""
    folder = hf_folder(tmp_path, tiny_bert(), wordpiece_tokenizer())
    config = json.loads((folder / where).read_text())
    (folder / where).write_text(json.dumps({**config, "tokenizer_class": named}))
    loaded = load(zip_folder(folder, tmp_path / "named.zip"))
    assert loaded.tokenizer is None and loaded.model is not None
    assert loaded.notes[-1].startswith(
        f"the checkpoint's {where} names '{named}' as its tokenizer_class, which is no tokenizer, so it was not used")
    typed, tokenizer = load_model(str(folder))
    assert tokenizer is None


def test_a_tokenizer_whose_package_is_missing_is_named_by_transformers(tmp_path):
    """transformers stands a placeholder in for a tokenizer class whose package is not installed; its own error
    says which package (mistral_common), where "names no tokenizer" was wrong."""
    assert checkpoint_tokenizer._is_tokenizer_class("MistralCommonBackend")
    assert not checkpoint_tokenizer._is_tokenizer_class("BertModel")
    assert not checkpoint_tokenizer._is_tokenizer_class("Llama4ImageProcessor")  # a placeholder here too
    assert not checkpoint_tokenizer._is_tokenizer_class("TorchvisionBackend")  # an image processor's backend


def test_a_tokenizer_file_over_the_cap_is_not_parsed(tmp_path, monkeypatch):
    """tokenizer.json is parsed whole at ~25 times its size: a 216 MB one padded to 12 M entries took 5.3 GB and 105 s
    before its length was compared with the model's 200 embeddings."""
    folder = hf_folder(tmp_path, tiny_bert(), wordpiece_tokenizer())
    size = (folder / "tokenizer.json").stat().st_size
    monkeypatch.setattr(checkpoint_tokenizer, "MAX_TOKENIZER_FILE_BYTES", size - 1)
    parsed = []
    monkeypatch.setattr(checkpoint_tokenizer, "_risky", lambda tree: parsed.append(tree) or "")
    loaded = load(zip_folder(folder, tmp_path / "big.zip"))
    assert loaded.tokenizer is None and not parsed
    assert any(n.startswith(f"the checkpoint's tokenizer.json is {size:,} bytes, more than the {size - 1:,}")
               for n in loaded.notes)



def test_a_tokenizer_file_of_too_many_json_values_is_not_parsed(tmp_path):
    """A tokenizer_config.json of 3 MB of empty objects was parsed twice by Python (~70 bytes each), its junk kept
    on the tokenizer: the file's size, within MAX_TOKENIZER_FILE_BYTES, did not bound what parsing it cost."""
    folder = hf_folder(tmp_path, tiny_bert(), wordpiece_tokenizer())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    junk = json.dumps({**config, "junk": [{}] * (MAX_DATA_ITEMS // 2 + 1)})
    (folder / "tokenizer_config.json").write_text(junk)
    loaded = load(zip_folder(folder, tmp_path / "junk.zip"))
    assert loaded.tokenizer is None and loaded.model is not None
    n = json_items(junk.encode())
    assert loaded.notes[-1].startswith(f"the checkpoint's tokenizer_config.json holds up to {n:,} JSON keys and "
                                       f"values, more than the {MAX_DATA_ITEMS:,} a tokenizer file takes")


@pytest.mark.parametrize("text", ['{"a": [1, 2, {"b": "x,y:{["}], "c": {}}', "[]", "7", '"a,b"', '{"k": [[], [[]]]}',
                                  '[{"id2label": {"0": "tench, Tinca tinca"}}, null, true, -1.5e3]'])
def test_json_items_bounds_the_keys_and_values_parsing_builds(text):
    def count(value) -> int:
        if isinstance(value, dict):
            return 1 + sum(1 + count(v) for v in value.values())
        return 1 + sum(count(v) for v in value) if isinstance(value, list) else 1

    assert count(json.loads(text)) <= json_items(text.encode())
    assert json_items(b"[" + b"{}," * 999 + b"{}]") == 2001  # 1,001 values: within 2x on what costs most to build


def test_torch_load_never_reads_a_file_that_is_not_a_zip(tmp_path):
    """torch.load reads every file that is not a zip as the legacy format, sizing its storages by what the pickle
    declares: one whose magic number comes after 80 bytes of repeated PROTO opcodes passed a check of the file's
    opening, and one followed by an empty zip's 22 bytes passed zipfile.is_zipfile (torch.load looks at the first
    four bytes). A zip cut short is named as one."""
    import io

    legacy = io.BytesIO()
    torch.save({"w": torch.zeros(3)}, legacy, _use_new_zipfile_serialization=False)
    (tmp_path / "padded.bin").write_bytes(b"\x80\x02" * 40 + legacy.getvalue())
    assert torch.load(tmp_path / "padded.bin", weights_only=True)["w"].shape == (3,)  # what torch.load would do
    with pytest.raises(CheckpointError, match=r"^padded.bin is not a PyTorch weights file \(not torch.save's zip "):
        load(tmp_path / "padded.bin", n_heads=4)
    empty_zip = io.BytesIO()
    zipfile.ZipFile(empty_zip, "w").close()  # 22 bytes: the directory's end, which is all is_zipfile looks for
    (tmp_path / "tailed.bin").write_bytes(legacy.getvalue() + empty_zip.getvalue())
    assert zipfile.is_zipfile(tmp_path / "tailed.bin") and torch.load(tmp_path / "tailed.bin", weights_only=True)
    with pytest.raises(CheckpointError, match=r"^tailed.bin is in PyTorch's legacy file format"):
        load(tmp_path / "tailed.bin", n_heads=4)
    whole = io.BytesIO()
    torch.save(state(tiny_bert()), whole)
    (tmp_path / "cut.bin").write_bytes(whole.getvalue()[: len(whole.getvalue()) // 2])
    with pytest.raises(CheckpointError, match=r"^cut.bin is not a PyTorch weights file \(a zip cut short, without "):
        load(tmp_path / "cut.bin", n_heads=4)

# ---------------------------------------------------------------- safety and routing

def test_from_pretrained_is_called_eager_local_and_without_remote_code(tmp_path, monkeypatch):
    calls = []
    real = checkpoint_build.AutoModel.from_pretrained

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoint_build.AutoModel, "from_pretrained", spy)
    load(hf_folder(tmp_path, tiny_bert(), wordpiece_tokenizer()))
    assert calls and all(c["attn_implementation"] == "eager" and c["trust_remote_code"] is False
                         and c["local_files_only"] is True for c in calls)


def test_python_files_and_auto_map_are_ignored(tmp_path):
    folder = hf_folder(tmp_path, tiny_bert(), wordpiece_tokenizer())
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "modeling_x.X"}}))
    (folder / "modeling_x.py").write_text(f"open({str(tmp_path / MARKER)!r}, 'w')")
    loaded = load(zip_folder(folder, tmp_path / "code.zip"))
    assert any("ignored 1 Python file(s)" in n for n in loaded.notes)
    assert any("auto_map" in n for n in loaded.notes)
    assert not (tmp_path / MARKER).exists()


@contextmanager
def caplog_of(name):
    """The records logged on ``name`` inside the block (pytest's caplog sees only what reaches the root)."""
    import logging

    records, handler = [], logging.Handler()
    handler.emit = records.append
    logging.getLogger(name).addHandler(handler)
    try:
        yield records
    finally:
        logging.getLogger(name).removeHandler(handler)


def test_a_root_that_is_a_symlink_loop_is_skipped_not_fatal(tmp_path, monkeypatch):
    """One ATTNSCOPE_ALLOWED_ROOTS entry in a loop made every local path "Something went wrong (RuntimeError: Symlink
    loop from '<the root>')", under the good roots too, and named the server's root folder."""
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    (tmp_path / "models").mkdir()
    save_file(state(tiny_bert()), tmp_path / "models" / "bert.safetensors")
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", f"{tmp_path / 'models'}{os.pathsep}{tmp_path / 'loop_a'}")
    with caplog_of("attnscope.load") as records:
        assert resolve_roots() == [tmp_path / "models"]
        assert load_checkpoint(tmp_path / "models" / "bert.safetensors", n_heads=4).model is not None
    # logged once: the roots are read again for every load (an operator's log had a line per visitor's load)
    assert [r.getMessage() for r in records if "is skipped" in r.getMessage()] == [
        f"ATTNSCOPE_ALLOWED_ROOTS: {tmp_path / 'loop_a'} is skipped, its links cannot be followed "
        f"(Symlink loop from '{tmp_path / 'loop_a'}')"]


def test_local_paths_outside_allowed_roots_are_refused(tmp_path, monkeypatch):
    save_file(state(tiny_bert()), tmp_path / "bert.safetensors")
    with pytest.raises(CheckpointError, match="is outside the folders AttnScope may read"):
        load_checkpoint(tmp_path / "bert.safetensors", allowed_roots=[tmp_path / "elsewhere"], n_heads=4)
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path / "elsewhere"))
    with pytest.raises(CheckpointError, match="ATTNSCOPE_ALLOWED_ROOTS"):
        load_checkpoint(tmp_path / "bert.safetensors", n_heads=4)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "link.safetensors").symlink_to(tmp_path / "bert.safetensors")
    with pytest.raises(CheckpointError, match="outside the folders"):
        load_checkpoint(tmp_path / "elsewhere" / "link.safetensors", n_heads=4)


@pytest.mark.parametrize("kind", ["gguf", "safetensors", "zip"])
def test_a_file_linked_to_a_hub_cache_blob_is_read_by_the_name_given(tmp_path, kind):
    """The Hugging Face cache links snapshots/<rev>/model.gguf to ../../blobs/<sha256>, a name with no suffix."""
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "abc123"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    blob = blobs / "9f86d081884c7d659a2feaa0c55ad015"
    if kind == "gguf":
        write_llama_gguf(blobs / "written.gguf").rename(blob)
    elif kind == "safetensors":
        save_file(state(tiny_bert()), blob)
    else:
        zip_folder(hf_folder(tmp_path, tiny_bert(), wordpiece_tokenizer()), blob)
    link = snapshot / f"model.{kind}"
    link.symlink_to(Path("..", "..", "blobs", blob.name))
    loaded = load(link, n_heads=4)
    assert loaded.architecture == ("llama" if kind == "gguf" else "bert")
    if kind == "gguf":
        assert loaded.model.config.name_or_path == "model.gguf"  # not the blob's hash


def test_a_linked_file_whose_target_has_no_type_is_named_by_the_link(tmp_path):
    (tmp_path / "blob").write_bytes(b"not a model")
    (tmp_path / "notes").symlink_to(tmp_path / "blob")
    with pytest.raises(CheckpointError, match=r"^notes holds no model"):
        load(tmp_path / "notes")


def test_the_file_system_root_is_named_in_full():
    with pytest.raises(CheckpointError, match=r"^/ holds more than 5 files"):
        load_checkpoint("/", allowed_roots=["/"], limits=Limits(max_entries=5))


@pytest.mark.parametrize("name", ["demo-bert\x00", "x\x00/y", "~\x00"])
def test_a_path_with_a_nul_byte_is_a_one_line_checkpoint_error(name):
    with pytest.raises(CheckpointError, match=r"^the path '.*\\x00.*' holds a NUL byte, .* give the path without it$"):
        core.load_untrusted(name)


def test_limits_from_arguments_and_environment(tmp_path, monkeypatch):
    archive = zip_folder(hf_folder(tmp_path, tiny_bert(), wordpiece_tokenizer()), tmp_path / "m.zip")
    with pytest.raises(CheckpointError, match="more than the 1,000-byte upload limit"):
        load(archive, limits=Limits(max_upload_bytes=1000))
    with pytest.raises(CheckpointError, match="would unpack to more than 10,000 bytes"):
        load(archive, limits=Limits(max_total_bytes=10_000))
    monkeypatch.setenv("ATTNSCOPE_MAX_ENTRIES", "3")
    with pytest.raises(CheckpointError, match="more than 3 entries"):
        load(archive)
    monkeypatch.setenv("ATTNSCOPE_MAX_UPLOAD_BYTES", "lots")
    with pytest.raises(CheckpointError, match="is not a size"):
        Limits()
    monkeypatch.setenv("ATTNSCOPE_MAX_UPLOAD_BYTES", "1.5GB")
    assert Limits().max_upload_bytes == 1_500_000_000
    for raw, why in (("inf", "is not a size"), ("1e400", "is not a size"), ("-inf", "is not a size"),
                     ("0", "at least 1 byte"), ("0.5", "at least 1 byte")):  # inf: an OverflowError, "internal error"
        monkeypatch.setenv("ATTNSCOPE_MAX_UPLOAD_BYTES", raw)
        with pytest.raises(CheckpointError, match=why):
            Limits()


@pytest.mark.parametrize("raw", ["1.5KB", "5k", "0", "-3", "many", "²", "١٢",
                                 pytest.param("9" * 5000, id="5000-digits")])
def test_the_entry_limit_is_a_count_not_a_size(monkeypatch, raw):
    """ATTNSCOPE_MAX_ENTRIES was read as bytes: "1.5KB" gave 1,500 entries, and "5k" was refused as "not a size;
    use bytes or e.g. 500MB"."""
    monkeypatch.setenv("ATTNSCOPE_MAX_ENTRIES", raw)
    with pytest.raises(CheckpointError, match=f"^ATTNSCOPE_MAX_ENTRIES={re.escape(repr(raw))} must be a whole number "
                                              "of entries, 1 or more$"):
        Limits()
    monkeypatch.setenv("ATTNSCOPE_MAX_ENTRIES", " 2500 ")
    assert Limits().max_entries == 2500


def test_a_model_s_own_weights_tied_several_ways_load(tmp_path):
    """A torch.save'd Marian holds its embedding under four names, one storage: counted four times against twice
    what the file stores, the views cap refused it (opus-mt-en-de's embedding is 40 % of its parameters)."""
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(0)
    config = MarianConfig(vocab_size=2100, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                          decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256,
                          max_position_embeddings=64, pad_token_id=2099, decoder_start_token_id=2099)
    weights = MarianMTModel(config).state_dict()  # model.shared, encoder/decoder embed_tokens, lm_head: one storage
    folder = tmp_path / "marian"
    folder.mkdir()
    torch.save(weights, folder / "pytorch_model.bin")
    config.save_pretrained(folder)
    assert load(folder).architecture == "marian"


def test_load_model_routes_archives_and_weights_files(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    model, tok = tiny_gpt2(), bpe_tokenizer()
    archive = zip_folder(hf_folder(tmp_path, model, tok), tmp_path / "gpt2.zip")
    loaded_model, loaded_tok = load_model(str(archive))
    assert_same_attention(model, tok, loaded_model)
    torch.save(model.state_dict(), tmp_path / "gpt2.bin")
    with pytest.raises(CheckpointError, match="pass n_heads"):
        load_model(tmp_path / "gpt2.bin")
    assert_same_attention(model, tok, load_model(tmp_path / "gpt2.bin", n_heads=4)[0])


# ---------------------------------------------------------------- the docs table

ROWS = table_rows()


def test_docs_table_covers_every_builder():
    assert sorted(row for row, _ in ROWS) == sorted(BAD_INPUTS)


@pytest.mark.parametrize("row, message", ROWS, ids=[row for row, _ in ROWS])
def test_bad_input_message(tmp_path, row, message):
    bad = tmp_path / "bad"
    bad.mkdir()
    path = BAD_INPUTS[row](bad)
    before = sorted(p.name for p in bad.iterdir())
    with pytest.raises(CheckpointError) as caught:
        load(path)
    assert str(caught.value) == message
    assert "\n" not in message
    assert sorted(p.name for p in bad.iterdir()) == before  # nothing written next to the input (no marker)


def test_a_config_json_alone_says_so(tmp_path):
    """A path to a folder's config.json, or an upload of it alone, said "config.json has a config.json"."""
    folder = hf_folder(tmp_path, tiny_bert(), wordpiece_tokenizer())
    alone = "config.json alone holds no weights; give the folder that holds it and the weights"
    with pytest.raises(CheckpointError, match=f"^{alone}"):
        load_checkpoint(folder / "config.json")
    with pytest.raises(CheckpointError, match=f"^{alone}"):
        load_checkpoint([("config.json", (folder / "config.json").read_bytes())])


def test_a_marian_checkpoint_saved_without_its_position_tables_loads(tmp_path):
    """MarianMTModel.save_pretrained leaves out its sinusoidal position tables (_keys_to_ignore_on_save: computed
    when the model is built): the app's loader refused a fine-tuned opus-mt folder as "missing" them."""
    import transformers as tf

    torch.manual_seed(0)
    config = tf.MarianConfig(vocab_size=200, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                             decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37,
                             max_position_embeddings=64, pad_token_id=0, eos_token_id=3, decoder_start_token_id=0)
    saved, folder = tf.MarianMTModel(config).eval(), tmp_path / "opus-mt"
    saved.save_pretrained(folder)
    assert not any("embed_positions" in key for key in safe_open_keys(folder / "model.safetensors"))
    tokenizer = wordpiece_tokenizer()
    loaded = load_checkpoint(folder, allowed_roots=[tmp_path])
    expected = extract_attention(saved.model, tokenizer, TEXT, target=TEXT)
    got = extract_attention(loaded.model, tokenizer, TEXT, target=TEXT)
    for part in ("encoder", "decoder", "cross"):
        assert torch.equal(getattr(got, part).attentions, getattr(expected, part).attentions)


def _without_positions(model, folder, **config_changes):
    """``model`` saved to ``folder`` without its position tables, its config.json changed by ``config_changes``."""
    model.save_pretrained(folder)
    state = {k: v for k, v in load_file(folder / "model.safetensors").items() if "embed_positions" not in k}
    save_file(state, folder / "model.safetensors")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **config_changes}))
    return folder


def test_only_a_marian_config_may_leave_out_marian_s_position_tables(tmp_path):
    """A BART upload without its learned position tables, naming MarianMTModel in "architectures" (whose unsaved
    tables share BART's names), was built with random position tables and shown as the checkpoint."""
    import transformers as tf

    torch.manual_seed(0)
    bart = tf.BartModel(tf.BartConfig(vocab_size=200, d_model=32, encoder_layers=1, decoder_layers=1,
                                      encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37,
                                      decoder_ffn_dim=37, max_position_embeddings=64))
    folder = _without_positions(bart, tmp_path / "bart", architectures=["MarianMTModel"])
    with pytest.raises(CheckpointError, match="tensors are missing from the weights .*embed_positions"):
        load_checkpoint(folder, allowed_roots=[tmp_path])


def test_position_tables_computed_at_build_time_are_bounded_by_the_upload(tmp_path):
    """A 20 kB Marian upload asking for 500,000 positions (tables left out, computed in Python when the model is
    built) took 20 s and +0.5 GB; 100,000 positions of width 512, 112 s and +2.8 GB."""
    import transformers as tf

    config = tf.MarianConfig(vocab_size=200, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                             decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16,
                             max_position_embeddings=64, pad_token_id=0, eos_token_id=3, decoder_start_token_id=0)
    folder = _without_positions(tf.MarianMTModel(config), tmp_path / "marian", max_position_embeddings=500_000)
    with pytest.raises(CheckpointError, match="asks for 16,000,000 numbers of position tables the weights leave out"):
        load_checkpoint(folder, allowed_roots=[tmp_path])


def test_tables_left_out_are_those_of_the_config_s_model_type_whatever_architectures_says(tmp_path):
    """Without "architectures", the tables counted as weights the upload must hold: a junk uint8 tensor of as many
    numbers passed that count, and the 16 M numbers were computed in Python (22-38 s) before the check after loading
    refused it. "architectures": 5 or true was a TypeError. The model type's own classes say what is left out."""
    import time

    import transformers as tf

    config = tf.MarianConfig(vocab_size=200, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                             decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16,
                             max_position_embeddings=64, pad_token_id=0, eos_token_id=3, decoder_start_token_id=0)
    torch.manual_seed(0)
    saved = tf.MarianMTModel(config).eval()
    folder = _without_positions(saved, tmp_path / "marian", max_position_embeddings=500_000, architectures=None)
    state = load_file(folder / "model.safetensors")
    save_file({**state, "junk": torch.zeros(2 * 500_000 * 16, dtype=torch.uint8)}, folder / "model.safetensors")
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match="asks for 16,000,000 numbers of position tables the weights leave out"):
        load_checkpoint(folder, allowed_roots=[tmp_path])
    assert time.perf_counter() - start < 5
    expected = extract_attention(saved.model, wordpiece_tokenizer(), TEXT).attentions
    for architectures in (None, 5, True, "MarianMTModel", ["BertModel"]):
        _without_positions(saved, folder, architectures=architectures)
        loaded = load_checkpoint(folder, allowed_roots=[tmp_path])
        assert torch.equal(extract_attention(loaded.model, wordpiece_tokenizer(), TEXT).attentions, expected)


def test_wide_checkpoints_whose_names_transformers_converts_on_loading_load(tmp_path):
    """A Llava saved by save_pretrained (language_model.model.* on disk, language_model.* in the model) and a T5
    holding its embeddings under encoder/decoder names (tied to shared.weight) have millions of numbers "missing"
    by name; a refusal by missing names (a first fix of the junk-padding attack) refused them."""
    import transformers as tf

    torch.manual_seed(0)
    text = dict(model_type="llama", vocab_size=40_000, hidden_size=128, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=4, num_key_value_heads=2)
    vision = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14, projection_dim=32)
    llava = tf.LlavaForConditionalGeneration(tf.LlavaConfig(text_config=text, vision_config=vision,
                                                            image_token_index=39_999)).eval()
    llava.save_pretrained(tmp_path / "llava")
    t5 = tf.T5Model(tf.T5Config(vocab_size=40_000, d_model=128, d_kv=16, d_ff=16, num_layers=1, num_heads=2)).eval()
    t5.save_pretrained(tmp_path / "t5")
    state = load_file(tmp_path / "t5" / "model.safetensors")
    shared = state.pop("shared.weight")
    state.update({"encoder.embed_tokens.weight": shared, "decoder.embed_tokens.weight": shared.clone()})
    save_file(state, tmp_path / "t5" / "model.safetensors")
    for saved, folder in ((llava.model, "llava"), (t5, "t5")):
        loaded = load_checkpoint(tmp_path / folder, allowed_roots=[tmp_path]).model
        assert torch.equal(loaded.get_input_embeddings().weight, saved.get_input_embeddings().weight)


def test_parts_a_class_excuses_from_loading_must_still_be_in_the_upload(tmp_path):
    """SeamlessM4T tells transformers not to report its text encoder and decoder missing
    (_keys_to_ignore_on_load_missing): an upload without them, a junk tensor paying for their numbers, was built with
    random ones and shown as the checkpoint."""
    import transformers as tf

    small = dict(vocab_size=100, t2u_vocab_size=50, hidden_size=32, encoder_layers=1, decoder_layers=1,
                 encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=37,
                 speech_encoder_layers=1, speech_encoder_attention_heads=2, speech_encoder_intermediate_size=37,
                 t2u_encoder_layers=1, t2u_decoder_layers=1, t2u_encoder_attention_heads=2,
                 t2u_decoder_attention_heads=2, t2u_encoder_ffn_dim=37, t2u_decoder_ffn_dim=37,
                 t2u_max_position_embeddings=64, max_position_embeddings=64, unit_hifi_gan_vocab_size=20,
                 unit_embed_dim=16, upsample_initial_channel=16, lang_embed_dim=4, spkr_embed_dim=4,
                 vocoder_num_langs=2, vocoder_num_spkrs=2, variance_predictor_kernel_size=3, upsample_rates=[2, 2],
                 upsample_kernel_sizes=[4, 4], resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 3]],
                 feature_projection_input_dim=16, adaptor_kernel_size=2, adaptor_stride=2, num_adapter_layers=1)
    torch.manual_seed(0)
    saved = tf.SeamlessM4TModel(tf.SeamlessM4TConfig(**small)).eval()
    saved.save_pretrained(tmp_path / "full")
    key = "text_encoder.layers.0.self_attn.q_proj.weight"
    loaded = load_checkpoint(tmp_path / "full", allowed_roots=[tmp_path]).model
    assert torch.equal(dict(loaded.named_parameters())[key], dict(saved.named_parameters())[key])
    state = load_file(tmp_path / "full" / "model.safetensors")
    gone = [k for k in state if k.startswith(("text_encoder.", "text_decoder.")) and "embed_tokens" not in k]
    junk = torch.zeros(sum(state[k].numel() for k in gone), dtype=torch.uint8)
    kept = {k: v for k, v in state.items() if k not in gone}
    save_file({**kept, "junk": junk}, tmp_path / "full" / "model.safetensors")
    with pytest.raises(CheckpointError, match=f"{len(gone)} of the model's .* tensors are missing"):
        load_checkpoint(tmp_path / "full", allowed_roots=[tmp_path])


def safe_open_keys(path):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as weights:
        return list(weights.keys())


def test_integer_codes_are_refused_as_weights_on_every_path(tmp_path):
    """int8 codes of a quantized model had been cast to weights of up to ±127 on every upload path."""
    from hostile_inputs import int8_codes_state

    bare = tmp_path / "int8.bin"
    torch.save(int8_codes_state(), bare)
    with pytest.raises(CheckpointError, match=r"key\.weight holds int8 numbers where the bert model has real-valued"):
        load(bare, n_heads=4)
    folder = core.save_custom_model(core.AttnScopeTransformer(core.TINY_PRESETS["attnscope-nano-encoder"]),
                                    tmp_path / "custom")
    state = load_file(folder / "model.safetensors")
    key = next(k for k in sorted(state) if state[k].dim() == 2)
    save_file({**state, key: state[key].bool()}, folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=rf"^{key} holds bool numbers where the attnscope model has real"):
        load(folder)
