"""load_model: local folders, custom models, devices and clear errors offline."""

import json
import logging
import logging.handlers
import re
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
import transformers

import tiny
from core import (
    AttnScopeTransformer, InputError, ModelLoadError, TINY_PRESETS, extract_attention, load_checkpoint, load_model,
    pick_device, save_custom_model,
)
from tiny_gguf import tiny_llama, write_llama_gguf

TEXT = "the quick brown fox"


def test_hf_folder_round_trip(tmp_path):
    model, tok = tiny.tiny_bert(), tiny.wordpiece_tokenizer()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, loaded_tok = load_model(str(tmp_path), device="cpu")
    assert not loaded.training
    expected = extract_attention(model, tok, TEXT).attentions
    assert torch.equal(extract_attention(loaded, loaded_tok, TEXT).attentions, expected)


@pytest.mark.parametrize("build", [tiny.tiny_bert, tiny.tiny_gpt2])
def test_a_folder_without_tokenizer_files_has_no_tokenizer(tmp_path, build):
    """transformers builds an empty tokenizer from config.json alone (BERT: 5 special tokens): every probe was then
    [CLS] [SEP], a diagnosis of 0 heads (BERT) or "the text produced no tokens" (GPT-2)."""
    from diagnostics import diagnose

    build().save_pretrained(tmp_path)
    model, tokenizer = load_model(str(tmp_path))
    assert tokenizer is None
    report = diagnose(str(tmp_path))
    assert len(report.heads) == 8 and "no_tokenizer" in {f.code for f in report.findings}


def test_broken_tokenizer_files_are_a_note_and_the_texts_not_read_are_named(tmp_path, caplog, monkeypatch):
    """A garbage tokenizer.json was taken silently for no tokenizer: no note, and the caller's texts dropped."""
    from diagnostics import diagnose

    tiny.tiny_bert().save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_text("garbage")
    load_log = logging.getLogger("attnscope.load")
    monkeypatch.setattr(load_log, "handlers", [caplog.handler])  # not a CLI test's handler, left on its stderr
    monkeypatch.setattr(load_log, "propagate", False)  # heard once, whether or not a CLI test ran before
    with caplog.at_level("WARNING", logger="attnscope.load"):
        model, tokenizer = load_model(str(tmp_path))
    assert tokenizer is None
    assert caplog.messages == ["the checkpoint's tokenizer files could not be loaded (JSONDecodeError: Expecting "
                               "value: line 1 column 1 (char 0)); the model is used without a tokenizer"]
    report = diagnose((model, None), ["the cat sat on the mat", "the dog ran"])
    assert report.finding("no_tokenizer").message.endswith(
        "; the 2 probe texts given were not used: reading them needs the tokenizer.")
    assert diagnose((model, None), ["the dog ran"]).finding("no_tokenizer").message.endswith(
        "; the probe text given was not used: reading it needs the tokenizer.")  # was "the 1 probe texts"


def test_a_custom_config_whose_causal_is_not_a_bool_is_refused(tmp_path):
    model = AttnScopeTransformer(TINY_PRESETS["attnscope-nano-encoder"])
    save_custom_model(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "causal": "false"}))  # bool("false") is True
    with pytest.raises(ModelLoadError, match="causal must be true or false, not 'false'"):
        load_model(str(tmp_path))


@pytest.mark.parametrize("load", [load_model, load_checkpoint])
@pytest.mark.parametrize("left_out", [["n_heads"], ["causal"], ["n_heads", "causal"]])
def test_a_custom_config_without_its_head_count_or_causality_is_refused(tmp_path, monkeypatch, load, left_out):
    """No weight's shape tells either: an 8-head decoder whose config.json lacked them loaded as a 4-head encoder,
    and was diagnosed as one without a word."""
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    preset = TINY_PRESETS["attnscope-nano-decoder"]
    save_custom_model(AttnScopeTransformer(replace(preset, n_heads=8)), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k not in left_out}))
    with pytest.raises(ModelLoadError, match=f"it has no {' and no '.join(left_out)}, which the weights do not tell"):
        load(str(tmp_path))


@pytest.mark.parametrize("load", [load_model, load_checkpoint])
def test_custom_weights_of_integers_are_refused_on_every_path(tmp_path, monkeypatch, load):
    """Uploads refused a quantized model's int8 codes; load_model (the CLI's path) cast them to weights of ±127."""
    from safetensors.torch import load_file, save_file

    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    save_custom_model(AttnScopeTransformer(TINY_PRESETS["attnscope-nano-encoder"]), tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    save_file({k: (v * 10).to(torch.int8) for k, v in state.items()}, tmp_path / "model.safetensors")
    with pytest.raises(ModelLoadError, match=r"holds int8 numbers where the attnscope model has real-valued weights"):
        load(str(tmp_path))


def test_a_custom_folder_without_a_readable_config_is_one_error(tmp_path):
    """load_custom_model raised FileNotFoundError and JSONDecodeError as they were."""
    from core import load_custom_model

    with pytest.raises(ModelLoadError, match="cannot read .*config.json .*FileNotFoundError"):
        load_custom_model(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="cannot read .*config.json .*JSONDecodeError"):
        load_custom_model(tmp_path)


def test_a_custom_config_larger_than_its_weights_is_refused_before_it_is_built(tmp_path, monkeypatch):
    """max_positions 20,000,000 beside 150 kB of weights built a 2.9 GB model before the weights were compared."""
    from core import custom_model

    save_custom_model(AttnScopeTransformer(TINY_PRESETS["attnscope-nano-encoder"]), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "max_positions": 20_000_000}))
    with pytest.raises(ModelLoadError, match="sets max_positions to 20000000; it must be a whole number from 1 to"):
        load_model(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({**config, "max_positions": 4_000_000}))  # within the cap
    built = []
    monkeypatch.setattr(custom_model, "AttnScopeTransformer", lambda cfg: built.append(cfg))
    with pytest.raises(ModelLoadError, match=r"describes a model of [0-9,]+ numbers, but model.safetensors holds "):
        load_model(str(tmp_path))
    assert not built


def test_custom_weights_of_the_wrong_shape_are_named_on_one_line(tmp_path):
    """The message held a list's repr with a tab: ['\\tsize mismatch for pos_emb.weight: …']."""
    save_custom_model(AttnScopeTransformer(TINY_PRESETS["attnscope-nano-encoder"]), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "max_positions": config["max_positions"] - 1}))
    with pytest.raises(ModelLoadError) as caught:
        load_model(str(tmp_path))
    assert str(caught.value).startswith("custom model weights do not match its config: size mismatch for pos_emb")
    assert "\t" not in str(caught.value) and "[" not in str(caught.value).split(":")[1]


def test_weights_of_another_shape_than_the_config_are_named(tmp_path):
    """The CLI said "RuntimeError: You set `ignore_mismatched_sizes` to `False` … look at the above report!", a
    report it had silenced; uploads of the same folder named the tensor."""
    tiny.tiny_bert().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 16}))
    with pytest.raises(ModelLoadError, match=r"^the weights do not match config.json: embeddings.position_embeddings"
                                             r".weight is \[64, 32\] in the weights but \[16, 32\] in a bert model"):
        load_model(str(tmp_path))


def test_weights_the_configured_model_drops_are_named_and_a_task_head_is_not(tmp_path, caplog, monkeypatch):
    """A BERT saved with relative position embeddings loaded without them (transformers 5's BERT has none) and no
    word: another model than the one trained was diagnosed."""
    from safetensors.torch import load_file, save_file
    from transformers import BertForMaskedLM

    from core import load_untrusted

    model = BertForMaskedLM(tiny.tiny_bert().config)
    model.save_pretrained(tmp_path / "mlm")  # its cls.* head is beside the model, not a part of it
    state = load_file(tmp_path / "mlm" / "model.safetensors")
    state["bert.encoder.layer.0.attention.self.distance_embedding.weight"] = torch.zeros(127, 32)
    (tmp_path / "rel").mkdir()
    save_file(state, tmp_path / "rel" / "model.safetensors")
    (tmp_path / "rel" / "config.json").write_text((tmp_path / "mlm" / "config.json").read_text())
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    note = re.compile(r"the bert model built from config.json does not use 1 of the weights' tensors \(e.g. "
                      r"(bert\.)?encoder.layer.0.attention.self.distance_embedding.weight\); they were dropped")
    assert note.match(load_untrusted(str(tmp_path / "rel")).notes[0])
    assert not [n for n in load_untrusted(str(tmp_path / "mlm")).notes if "does not use" in n]
    load_log = logging.getLogger("attnscope.load")
    monkeypatch.setattr(load_log, "handlers", [caplog.handler])
    monkeypatch.setattr(load_log, "propagate", False)
    with caplog.at_level("WARNING", logger="attnscope.load"):
        load_model(str(tmp_path / "rel"))
        load_model(str(tmp_path / "mlm"))
    dropped = [m for m in caplog.messages if "does not use" in m]
    assert dropped == [caplog.messages[0]] and note.match(dropped[0])  # the folder with the relative weights only


def test_mask_buffers_that_transformers_4_saved_are_no_dropped_weights(tmp_path, monkeypatch):
    """GPT-2's attn.masked_bias, a constant transformers 4 saved beside the weights, was named as a dropped weight."""
    from safetensors.torch import load_file, save_file

    from core import load_untrusted

    tiny.tiny_gpt2().save_pretrained(tmp_path / "old")
    state = load_file(tmp_path / "old" / "model.safetensors")
    save_file({**state, "h.0.attn.masked_bias": torch.tensor(-1e4)}, tmp_path / "old" / "model.safetensors")
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    assert not [n for n in load_untrusted(str(tmp_path / "old")).notes if "does not use" in n]


def test_custom_folder_round_trip(tmp_path):
    torch.manual_seed(0)
    model = AttnScopeTransformer(replace(TINY_PRESETS["attnscope-nano-encoder"], vocab_size=200)).eval()
    save_custom_model(model, tmp_path)
    tiny.wordpiece_tokenizer().save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "attnscope"
    heard = logging.handlers.BufferingHandler(100)
    logging.getLogger("transformers").addHandler(heard)  # its own handler writes to stderr; it does not propagate
    try:
        loaded, tok = load_model(tmp_path, device="cpu")
    finally:
        logging.getLogger("transformers").removeHandler(heard)
    assert not [r.getMessage() for r in heard.buffer]  # was: "a model of type `attnscope` … not supported"
    assert isinstance(loaded, AttnScopeTransformer) and tok is not None
    assert torch.equal(extract_attention(loaded, tok, TEXT).attentions, extract_attention(model, tok, TEXT).attentions)


@pytest.mark.parametrize("trusted", [False, True])
def test_trust_remote_code_is_off_by_default_and_reaches_the_tokenizer_when_asked(tmp_path, monkeypatch, trusted):
    """A trusted folder's own tokenizer code was left out: its tokenizer was loaded without the flag, silently
    another class than transformers gives it."""
    tiny.tiny_bert().save_pretrained(tmp_path)
    tiny.wordpiece_tokenizer().save_pretrained(tmp_path)
    seen = {}
    def spy(auto):
        original = auto.from_pretrained
        def read(*args, **kwargs):
            seen.setdefault(auto.__name__, set()).add(kwargs.get("trust_remote_code"))
            return original(*args, **kwargs)
        return read

    for auto in (transformers.AutoConfig, transformers.AutoTokenizer):
        monkeypatch.setattr(auto, "from_pretrained", spy(auto))
    load_model(str(tmp_path), device="cpu", **({"trust_remote_code": True} if trusted else {}))
    assert seen["AutoTokenizer"] == {trusted} and trusted in seen["AutoConfig"]
    assert seen["AutoConfig"] <= {trusted, None}  # the tokenizer's own read of the config says nothing


def test_unknown_hub_id_offline_fails_fast_with_pointer(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    start = time.perf_counter()
    with pytest.raises(ModelLoadError, match="demo-bert"):
        load_model("someone/surely-not-a-model")
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("source,message", [
    ("not a model id!!", "valid Hugging Face model id"),
    ("/no/such/folder", "does not exist"),
    ("", "no model given"),
])
def test_bad_sources_are_clear_errors(source, message):
    with pytest.raises(ModelLoadError, match=message):
        load_model(source)


def test_a_long_or_odd_source_is_named_cut_and_on_one_line(tmp_path):
    """A path was put in the message whole: a newline in a folder's name split it in two, and a long path ran it
    to 800 characters, in the CLI and in the app's error box alike."""
    deep = tmp_path / ("m\n" + "d" * 200) / ("e" * 200)
    deep.mkdir(parents=True)
    (deep / "notes\n.txt").write_text("hi")
    bad = deep.parent / ("f" * 200) / "bad"
    bad.mkdir(parents=True)
    (bad / "config.json").write_text("{not json")
    for source, named in ((deep, "eeee' is not a model folder"), (deep / "notes\n.txt", "notes\\n.txt' is a file"),
                          (bad, "bad/config.json' is not valid JSON"), (deep / "missing", "eeee/missing' does"),
                          (deep / "missing.safetensors", "missing.safetensors'; check the path")):
        with pytest.raises(ModelLoadError) as caught:
            load_model(str(source))
        message = str(caught.value)  # cut in the middle: the end names the file and its suffix
        assert "\n" not in message and len(message) < 500 and named in message, message


def test_folder_without_config(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(tmp_path))


def test_a_file_of_another_kind_is_named_as_a_file(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ModelLoadError, match=r"notes.txt is a file AttnScope does not read: .*\.safetensors.*\.gguf"):
        load_model(str(tmp_path / "notes.txt"))


def test_pick_device():
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device().type in ("cpu", "cuda", "mps")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no CUDA"):
            pick_device("cuda")
    with pytest.raises(InputError, match="unknown device"):
        pick_device("quantum")


@pytest.mark.parametrize("device, message", [("quantum", "unknown device 'quantum'; use 'cpu'"),
                                             ("vulkan", "'vulkan' is not one AttnScope computes on; use 'cpu'"),
                                             ("meta", "'meta' is not one AttnScope computes on"),
                                             ("mps", "Apple MPS is not available here; use 'cpu'"),
                                             ("cuda", "no CUDA GPU is available; use 'cpu'")])
def test_devices_this_machine_cannot_compute_on_are_input_errors(monkeypatch, device, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(InputError, match=message):
        pick_device(device)


def test_available_accelerators_are_accepted_and_a_missing_gpu_index_refused(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert pick_device("mps") == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert pick_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(InputError, match="'cuda:1' was requested but this machine has 1 CUDA GPU"):
        pick_device("cuda:1")


def test_device_map_is_honoured_where_it_can_be_and_refused_where_not(tmp_path):
    """device_map and max_memory were dropped without a word for the installed MiniLM, a weights file or a custom
    model, and device was ignored beside device_map (device='cpu', device_map='auto' went to the GPU)."""
    with pytest.raises(InputError, match="give device or device_map, not both"):
        load_model("demo-bert", device="cpu", device_map="auto")
    with pytest.raises(InputError, match="max_memory only applies with device_map"):
        load_model("demo-bert", max_memory={"cpu": "1GB"})
    split, tokenizer = load_model("minilm", device_map="auto", max_memory={"cpu": 70_000_000})
    assert len(set(split.hf_device_map.values())) > 1 and any(p.is_meta for p in split.parameters())
    whole, _ = load_model("minilm")
    torch.testing.assert_close(extract_attention(split, tokenizer, "the cat sat on the mat").attentions,
                               extract_attention(whole, tokenizer, "the cat sat on the mat").attentions)
    model = tiny.tiny_gpt2()
    weights = tmp_path / "model.safetensors"
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, weights)
    save_custom_model(AttnScopeTransformer(TINY_PRESETS["attnscope-nano-decoder"]), tmp_path / "custom")
    for source in ("smollm2", weights, tmp_path / "custom"):
        with pytest.raises(InputError, match="device_map spreads a Hugging Face model folder or Hub id"):
            load_model(str(source), device_map="auto")


def test_a_folder_of_config_json_and_a_gguf_loads_as_the_app_loads_it(tmp_path):
    """Hub GGUF repositories keep the original config.json beside the .gguf: the .gguf is the model."""
    write_llama_gguf(tmp_path / "tiny.Q8_0.gguf")
    tiny_llama().config.to_json_file(tmp_path / "config.json")
    model, tokenizer = load_model(tmp_path, device="cpu")
    app = load_checkpoint(tmp_path, allowed_roots=[tmp_path], device="cpu")
    assert model.config.name_or_path == app.model.config.name_or_path == "tiny.Q8_0.gguf"
    assert torch.equal(extract_attention(model, tokenizer, TEXT).attentions,
                       extract_attention(app.model, app.tokenizer, TEXT).attentions)


@pytest.mark.parametrize("damage", ["missing weights", "corrupt weights", "bad config field"])
def test_broken_custom_folder_is_a_clear_error(tmp_path, damage):
    save_custom_model(AttnScopeTransformer(TINY_PRESETS["attnscope-nano-encoder"]), tmp_path)
    weights, config = tmp_path / "model.safetensors", tmp_path / "config.json"
    if damage == "missing weights":
        weights.unlink()
    elif damage == "corrupt weights":
        weights.write_bytes(b"not a safetensors file at all")
    else:
        config.write_text(json.dumps({**json.loads(config.read_text()), "n_heads": "four"}))
    with pytest.raises(ModelLoadError):
        load_model(tmp_path, device="cpu")


def test_checkpoints_named_in_latin1_load_and_are_named_with_a_replacement_character(tmp_path):
    """b'b\\xe9.safetensors' and a model folder b'f\\xe9' (a Latin-1 shell's names) were refused: the Rust readers
    (safetensors, tokenizers) take UTF-8 paths, and the file was called "not a safetensors file"."""
    from safetensors.torch import save_file

    def latin1(name: bytes):
        return tmp_path / name.decode("utf-8", "surrogateescape")

    model, tok = tiny.tiny_bert(), tiny.wordpiece_tokenizer()
    expected = extract_attention(model, tok, TEXT).attentions
    model.save_pretrained(tmp_path / "f")
    tok.save_pretrained(tmp_path / "f")  # the tokenizers library cannot write there either
    folder = (tmp_path / "f").rename(latin1(b"f\xe9"))
    save_file(model.state_dict(), tmp_path / "b.safetensors")
    (tmp_path / "b.safetensors").rename(latin1(b"b\xe9.safetensors"))
    loaded, loaded_tok = load_model(str(folder), device="cpu")  # the command line's path: any folder
    assert loaded_tok is not None and loaded.config.name_or_path == f"{tmp_path}/f\ufffd"
    assert torch.equal(extract_attention(loaded, loaded_tok, TEXT).attentions, expected)
    loaded, _ = load_model(str(latin1(b"b\xe9.safetensors")), n_heads=4, device="cpu")
    assert torch.equal(extract_attention(loaded, tok, TEXT).attentions, expected)
    checkpoint = load_checkpoint(folder, allowed_roots=[tmp_path])  # the app's path: read in place
    assert torch.equal(extract_attention(checkpoint.model, checkpoint.tokenizer, TEXT).attentions, expected)
    # 100 such bytes are 100 bytes on disk and 300 as U+FFFD, past a file name's 255: an OSError ("File name too
    # long") in the app and the command line alike
    long_name = (tmp_path / "b.safetensors")
    save_file(model.state_dict(), long_name)
    long_name = long_name.rename(latin1(b"\xe9" * 100 + b".safetensors"))
    for load in (lambda path: load_model(path, n_heads=4, device="cpu")[0],
                 lambda path: load_checkpoint(path, n_heads=4, allowed_roots=[tmp_path]).model):
        assert torch.equal(extract_attention(load(str(long_name)), tok, TEXT).attentions, expected)


def test_a_folder_without_a_tokenizer_borrows_the_one_its_upload_would(tmp_path, monkeypatch, caplog):
    """The app and an archive of the folder borrowed demo-bert's tokenizer (the vocabulary sizes match); the command
    line probed the same folder with random ids, and gave it other findings."""
    from core.checkpoints import tokenizer as checkpoint_tokenizer

    words = tiny.wordpiece_tokenizer()
    words.save_pretrained(tmp_path / "demo-bert")
    monkeypatch.setattr(checkpoint_tokenizer, "DEMO_MODELS", {"demo-bert": tmp_path / "demo-bert"})
    config = tiny.tiny_bert().config
    config.vocab_size = len(words)
    transformers.BertModel(config).save_pretrained(tmp_path / "model")  # config.json and weights, no tokenizer
    load_log = logging.getLogger("attnscope.load")
    monkeypatch.setattr(load_log, "handlers", [caplog.handler])  # not a CLI test's handler, left on its stderr
    monkeypatch.setattr(load_log, "propagate", False)  # heard once, whether or not a CLI test ran before
    with caplog.at_level(logging.WARNING, logger="attnscope.load"):
        model, tokenizer = load_model(str(tmp_path / "model"))
    assert tokenizer is not None and len(tokenizer) == len(words)
    assert any("using demo-bert's tokenizer because the vocabulary sizes match" in r.getMessage()
               for r in caplog.records)
    config.vocab_size = len(words) + 1  # no demo tokenizer of its size: none, as before
    transformers.BertModel(config).save_pretrained(tmp_path / "other")
    assert load_model(str(tmp_path / "other"))[1] is None


def test_a_folder_of_broken_or_no_tokenizer_files_says_it_once_and_borrows_as_its_upload(tmp_path, monkeypatch,
                                                                                         caplog):
    """A T5 folder without tokenizer files got a tokenizer of 103 special tokens and "▁" built from its
    model_type (every word <unk>, 0 heads measured) where its archive borrowed demo-bert's; broken files gave two
    warnings, "used without a tokenizer" then "using demo-bert's tokenizer"; a Llama was read as an encoder."""
    from core.checkpoints import tokenizer as checkpoint_tokenizer

    words = tiny.wordpiece_tokenizer()
    words.save_pretrained(tmp_path / "demo-bert")
    bpe = tiny.bpe_tokenizer()
    bpe.save_pretrained(tmp_path / "demo-gpt2")
    monkeypatch.setattr(checkpoint_tokenizer, "DEMO_MODELS", {"demo-bert": tmp_path / "demo-bert",
                                                              "demo-gpt2": tmp_path / "demo-gpt2"})
    t5 = transformers.T5Config(vocab_size=len(words), d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4)
    transformers.T5Model(t5).save_pretrained(tmp_path / "t5")
    assert len(load_model(str(tmp_path / "t5"))[1]) == len(words)  # demo-bert's, as the archive's
    config = tiny.tiny_bert().config
    config.vocab_size = len(words)
    transformers.BertModel(config).save_pretrained(tmp_path / "broken")
    (tmp_path / "broken" / "tokenizer.json").write_text("{not json")
    load_log = logging.getLogger("attnscope.load")
    monkeypatch.setattr(load_log, "handlers", [caplog.handler])  # not a CLI test's handler, left on its stderr
    monkeypatch.setattr(load_log, "propagate", False)  # heard once, whether or not a CLI test ran before
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnscope.load"):
        assert load_model(str(tmp_path / "broken"))[1] is not None
    notes = [r.getMessage() for r in caplog.records if "tokenizer" in r.getMessage()]
    assert len(notes) == 1 and "could not be loaded" in notes[0] and "using demo-bert's tokenizer" in notes[0]
    llama = transformers.LlamaConfig(vocab_size=len(bpe), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=4)
    transformers.LlamaModel(llama).save_pretrained(tmp_path / "llama")
    assert len(load_model(str(tmp_path / "llama"))[1]) == len(bpe)  # a decoder: demo-gpt2's first
    from core.checkpoints.checkpoint import token_reading

    pegasus = transformers.PegasusConfig(vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1,
                                         encoder_attention_heads=4, decoder_attention_heads=4,
                                         encoder_ffn_dim=64, decoder_ffn_dim=64)
    assert token_reading(transformers.PegasusModel(pegasus)) == (64, False)  # an encoder-decoder reads its encoder


def test_a_small_real_vocabulary_is_a_vocabulary_and_a_lone_word_boundary_is_not():
    """T5 built from model_type alone (103 special tokens and "▁") reads every word as <unk>; a DNA tokenizer of
    A, C, G, T, N spells its texts, and a rule of "8 ordinary tokens" had thrown it away."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from core.checkpoints.tokenizer import has_vocabulary

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "A", "C", "G", "T", "N"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    dna = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]",
                                               cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    assert has_vocabulary(dna) and dna.tokenize("ACGT") == ["A", "C", "G", "T"]
    only = {t: i for i, t in enumerate(["<pad>", "</s>", "<unk>", "▁"])}
    boundary = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(only, "<unk>")),
                                                    unk_token="<unk>", pad_token="<pad>", eos_token="</s>")
    assert not has_vocabulary(boundary)


def _bert_folder(path, state, config):
    from safetensors.torch import save_file

    path.mkdir()
    config.save_pretrained(path)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path / "model.safetensors"))
    return path


@pytest.mark.parametrize("case", ["one tensor missing", "another family's weights"])
def test_a_folder_whose_weights_lack_tensors_is_refused_as_its_upload_is(tmp_path, case):
    """load_model (the command line) read such a folder with the missing tensors left random, and no word; a zip
    of it, or the app, refused it."""
    bert = tiny.tiny_bert()
    state = {k: v for k, v in bert.state_dict().items() if k != "encoder.layer.1.attention.self.query.weight"}
    if case == "another family's weights":
        state = tiny.tiny_gpt2().state_dict()
    folder = _bert_folder(tmp_path / "bert", state, bert.config)
    for load in (load_model, lambda path: load_checkpoint(path, allowed_roots=[tmp_path])):
        with pytest.raises(ModelLoadError, match=r"^the weights do not match config\.json: \d+ of the model's "):
            load(str(folder))


@pytest.mark.parametrize("prefix", ["module.", "model."])
def test_weights_saved_under_a_training_wrapper_s_prefix_are_read_without_it(tmp_path, prefix, caplog, monkeypatch):
    """DDP's module. and Lightning's model. were stripped from bare weights only: with config.json beside them a zip
    was refused as "37 of the model's 39 tensors are missing" (they were all there) and a folder read as random."""
    from tiny_checkpoints import zip_folder

    bert = tiny.tiny_bert()
    folder = _bert_folder(tmp_path / "bert", {prefix + k: v for k, v in bert.state_dict().items()}, bert.config)
    (tmp_path / "bert.zip").write_bytes(zip_folder(folder))
    _bert_folder(folder / "checkpoint-100", bert.state_dict(), bert.config)  # a training run's: no upload rule
    # (one model a folder) applies to the folder given; read with the same options as one without the prefix
    load_log = logging.getLogger("attnscope.load")
    monkeypatch.setattr(load_log, "handlers", [caplog.handler])
    monkeypatch.setattr(load_log, "propagate", False)
    with caplog.at_level(logging.WARNING, logger="attnscope.load"):
        from_folder = load_model(str(folder), device="cpu")[0]
    assert any(f"the weights' names start with '{prefix}'" in r.getMessage() for r in caplog.records)
    zipped = load_checkpoint(str(tmp_path / "bert.zip"), allowed_roots=[tmp_path])
    assert any(f"start with '{prefix}'" in note for note in zipped.notes)
    for model in (from_folder, zipped.model):
        loaded = model.state_dict()
        assert all(torch.equal(loaded[k], v) for k, v in bert.state_dict().items())


def test_a_folder_s_pickled_model_is_refused_in_one_line_without_torch_s_advice(tmp_path):
    """torch.save(model) as a folder's pytorch_model.bin gave torch's refusal: terminal escape codes and "you have two
    options" to load it anyway; its zip gets AttnScope's line."""
    bert = tiny.tiny_bert()
    bert.config.save_pretrained(tmp_path)
    torch.save(bert, tmp_path / "pytorch_model.bin")
    with pytest.raises(ModelLoadError) as refused:
        load_model(str(tmp_path))
    said = str(refused.value)
    assert "is a pickle that would run code (it calls transformers.models.bert.modeling_bert.BertModel)" in said
    assert "\x1b" not in said and "two options" not in said and "\n" not in said


def test_a_folder_of_config_json_and_weights_of_another_name_loads_as_its_upload_does(tmp_path):
    """config.json beside a model.pt was "no file named model.safetensors" (transformers' words), config.json alone
    transformers' error too; a zip of either folder was read, or refused in AttnScope's line."""
    bert = tiny.tiny_bert()
    bert.config.save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match=r"has a config\.json but no weights \(model\.safetensors, "):
        load_model(str(tmp_path))
    torch.save(bert.state_dict(), tmp_path / "model.pt")
    loaded = load_model(str(tmp_path), device="cpu")[0].state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in bert.state_dict().items())


def test_the_hub_is_tried_through_a_proxy(monkeypatch):
    """Where only a proxy (HTTPS_PROXY, ALL_PROXY) reaches the Hub, the direct connection check failed and the id was
    read from the local cache alone: "could not be fetched from the Hugging Face Hub (offline, or an unknown id?)".
    The proxy is what is tried: one that is down means offline (not minutes of retries)."""
    from core.checkpoints import loading

    monkeypatch.setattr(loading.huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(loading.huggingface_hub.constants, "ENDPOINT", "https://hub.invalid")
    tried, up = [], {("proxy.local", 3128)}

    def connect(address, timeout):
        tried.append(address)
        if address not in up:
            raise OSError("no route to host")
        return SimpleNamespace(close=lambda: None)
    monkeypatch.setattr(loading.socket, "create_connection", connect)
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    assert not loading._hub_reachable() and tried == [("hub.invalid", 443)]
    for variable in ("HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(variable, "http://proxy.local:3128")
        assert loading._hub_reachable() and tried[-1] == ("proxy.local", 3128)
        monkeypatch.delenv(variable)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.local:3129")  # a proxy that is down: offline, at once
    assert not loading._hub_reachable() and tried[-1] == ("proxy.local", 3129)
    monkeypatch.setenv("NO_PROXY", "hub.invalid")  # a host the proxy is not for: tried directly
    assert not loading._hub_reachable() and tried[-1] == ("hub.invalid", 443)
    monkeypatch.setattr(loading.huggingface_hub.constants, "ENDPOINT", "http://mirror.local")  # plain http: port 80
    assert not loading._hub_reachable() and tried[-1] == ("mirror.local", 80)
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.setenv("HTTPS_PROXY", "http://[::1")  # malformed: "internal error (ValueError: Invalid IPv6 URL)"
    assert not loading._hub_reachable()
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setattr(loading.huggingface_hub.constants, "ENDPOINT", "http://[::1")
    assert not loading._hub_reachable()
