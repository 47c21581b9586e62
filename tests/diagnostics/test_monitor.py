"""``AttentionMonitor``: saturation from the step Q/K are scaled and not before, modes restored, one line per
measurement, main process only, warnings, TensorBoard when present, and the Trainer callback."""

import importlib
import json
import logging
import sys
import types

import pytest
import torch
from transformers import BloomConfig, BloomForCausalLM

from core.errors import InputError
from diagnostics.monitor import AttentionMonitor
from diagnostics.timeline import parse_log
from tiny import bpe_tokenizer, tiny_gpt2

# Two probes of 99 and 96 tokens, cut to the tiny model's 64 positions: long enough to judge (MIN_JUDGED_TOKENS).
PROBES = ["The quick brown fox jumps over the lazy dog. Attention is all you need, said the paper. The dog slept "
          "in the sun while the fox ran off into the woods.",
          "A head that looks at the previous token is a positional head; the quick brown fox jumps over it. Some "
          "heads attend to the separator token; others spread their attention widely."]
monitor_module = importlib.import_module("diagnostics.monitor")


def scale_qk_(model, factor):
    with torch.no_grad():
        for block in model.h:
            width = block.attn.c_attn.weight.shape[-1] // 3
            block.attn.c_attn.weight[:, : 2 * width] *= factor


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def codes(record, severity="error"):
    return {f["code"] for f in record["findings"] if f["severity"] == severity}


def test_saturation_is_reported_from_the_step_qk_are_scaled_and_not_before(tmp_path):
    model, log_path = tiny_gpt2().train(), tmp_path / "attention.jsonl"
    monitor = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1, log_path=log_path)
    for step in range(5):
        if step == 2:
            scale_qk_(model, 100.0)  # init std 0.02 -> 2: scores of tens, near one-hot rows
        monitor.on_step(model, step)
    records = lines(log_path)
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    assert ["saturated_heads" in codes(r) for r in records] == [False, False, True, True, True]
    head = records[0]["heads"][0]
    assert {"layer", "head", "pattern", "confidence", "roles", "metrics"} <= set(head)
    assert {"entropy", "sink_score"} <= set(head["metrics"]) and "diag_mass" not in head["metrics"]
    assert all({"code", "severity", "heads", "message"} <= set(f) for f in records[2]["findings"])


def test_measures_every_n_steps_without_gradients_and_restores_modes(tmp_path):
    model = tiny_gpt2().train()
    model.h[1].eval()  # a frozen block stays in eval mode
    monitor = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=3, log_path=tmp_path / "log.jsonl")
    measured = [step for step in range(7) if monitor.on_step(model, step) is not None]
    assert measured == [0, 3, 6] and len(lines(tmp_path / "log.jsonl")) == 3
    assert model.training and model.h[0].training and not model.h[1].training
    assert all(p.grad is None for p in model.parameters())


def test_a_model_that_cannot_stream_is_monitored_on_whole_maps():
    """Bloom computes attention in its own code: before, the first step failed ('ran no attention layer ...')."""
    torch.manual_seed(0)
    model = BloomForCausalLM(BloomConfig(hidden_size=32, n_head=4, n_layer=2, vocab_size=300)).train()
    record = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1).on_step(model, 0)
    assert record["model"]["layers"] == 2 and len(record["heads"]) == 8


@pytest.mark.parametrize("wrap", [torch.nn.DataParallel, lambda m: torch.compile(m, backend="eager"),
                                  lambda m: torch.nn.DataParallel(torch.compile(m, backend="eager"))],
                         ids=["DataParallel", "torch.compile", "both"])
def test_a_wrapped_model_is_measured_as_the_model_inside(wrap):
    """Trainer(model=torch.compile(m)) and DataParallel: before, the first measurement raised ExtractionError."""
    monitor = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1)
    bare, wrapped = monitor.on_step(tiny_gpt2(), 0), monitor.on_step(wrap(tiny_gpt2()), 0)
    assert [h["metrics"]["entropy"] for h in wrapped["heads"]] == [h["metrics"]["entropy"] for h in bare["heads"]]
    callback = AttentionMonitor(probes=PROBES, every=1).callback()
    callback.on_step_end(None, types.SimpleNamespace(global_step=1), None, model=wrap(tiny_gpt2()),
                         processing_class=bpe_tokenizer())
    assert callback.monitor.seconds > 0


def test_the_callback_takes_a_processor_s_tokenizer_and_no_other_object():
    """Only a Hugging Face tokenizer reads the probes: an audio or image model's processor (its tokenizer inside,
    or none) stopped the run, the processor taken for a tokenizer."""
    tokenizer = bpe_tokenizer()
    for processing_class, taken in ((tokenizer, tokenizer), (types.SimpleNamespace(tokenizer=tokenizer), tokenizer),
                                    (types.SimpleNamespace(image_mean=[0.5]), None)):
        callback = AttentionMonitor(probes=PROBES, every=1).callback()
        callback._take_tokenizer(processing_class)
        assert callback.monitor.tokenizer is taken


def test_a_tensorboard_folder_may_exist_or_be_made(tmp_path):
    """Its check took the folder for a file: one holding an ``events`` sub-folder was refused."""
    (tmp_path / "tb" / "events").mkdir(parents=True)
    for folder in (tmp_path / "tb", tmp_path / "new" / "tb"):
        assert AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, tensorboard_dir=folder).tensorboard_dir


@pytest.mark.parametrize("arguments, message", [
    ({"every": 0}, "every must be a whole number of steps, at least 1"),
    ({"every": 1.5}, "every must be a whole number"),
    ({"uniform_after": None}, "uniform_after must be a whole number"),
    ({"probes": ["  "]}, "every monitor probe must be non-empty text"),
    ({"probes": [("a pair", "")]}, "every monitor probe must be non-empty text"),
    ({"log_path": "{tmp}"}, "it is a folder"),
    ({"log_path": "{tmp}/notes.txt/attention.jsonl"}, "notes.txt is a file, not a folder"),
    ({"tensorboard_dir": "{tmp}/notes.txt"}, "TensorBoard events in .*notes.txt is a file, not a folder"),
])
def test_bad_arguments_are_refused_before_training(tmp_path, arguments, message):
    """Before, each was accepted and failed at the first due step (a raw TypeError or OSError, mid-training)."""
    (tmp_path / "notes.txt").write_text("not a folder")
    arguments = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in arguments.items()}
    with pytest.raises(InputError, match=message):
        AttentionMonitor(tokenizer=bpe_tokenizer(), **{"probes": PROBES, **arguments})


def test_a_write_cut_short_does_not_swallow_the_next_record(tmp_path):
    """A run killed (or out of disk) mid-line, then resumed: the next record was appended to the cut line, and the
    whole log stopped reading ('line 2 of the log is not JSON')."""
    log = tmp_path / "attention.jsonl"
    monitor = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1, log_path=log)
    monitor.on_step(tiny_gpt2(), 0)
    log.write_text(log.read_text() + log.read_text()[:300])  # the step-0 record again, cut after 300 characters
    AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1, log_path=log).on_step(tiny_gpt2(), 1)
    timeline = parse_log(log.read_bytes())
    assert timeline.steps == [0, 1]
    assert timeline.notes == ["line 2 of the log is not JSON (a write cut short?): skipped"]


def test_only_the_main_process_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(monitor_module, "is_main_process", lambda: False)
    monitor = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1, log_path=tmp_path / "log.jsonl")
    assert monitor.on_step(tiny_gpt2(), 0)["step"] == 0
    assert not (tmp_path / "log.jsonl").exists()


def test_is_main_process_asks_torch_distributed(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    assert monitor_module.is_main_process() is False
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    assert monitor_module.is_main_process() is True


def test_warns_once_when_an_error_appears_and_when_heads_stay_uniform(caplog):
    model = tiny_gpt2().train()  # random init: every head near uniform
    monitor = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1, uniform_after=2)
    with caplog.at_level(logging.WARNING, logger="attnscope.monitor"):
        for step in range(5):
            if step == 3:
                scale_qk_(model, 100.0)
            monitor.on_step(model, step)
    warnings = [r.getMessage() for r in caplog.records]
    assert len([w for w in warnings if "still near uniform" in w]) == 1
    assert any("step 2" in w and "still near uniform" in w for w in warnings)
    saturated = [w for w in warnings if "near one-hot" in w]
    assert len(saturated) == 1 and "step 3" in saturated[0]


def test_warns_once_that_short_probes_cannot_give_an_error(caplog):
    model = tiny_gpt2().train()
    scale_qk_(model, 100.0)  # saturated, but a sentence is too short to call it an error
    monitor = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=["The quick brown fox."], every=1)
    with caplog.at_level(logging.WARNING, logger="attnscope.monitor"):
        records = [monitor.on_step(model, step) for step in range(3)]
    warnings = [r.getMessage() for r in caplog.records]
    short = [w for w in warnings if "Probes too short to judge" in w]
    assert len(short) == 1 and "step 0" in short[0]
    assert all("saturated_heads" in codes(r, "info") for r in records)
    assert all("qk_scale_large" in codes(r) for r in records)  # the weights are judged whatever the probes


def test_tensorboard_scalars_when_installed(monkeypatch, tmp_path, caplog):
    written = []

    class FakeWriter:
        def __init__(self, log_dir):
            self.log_dir = log_dir

        def add_scalar(self, tag, value, step):
            written.append((tag, value, step))

        def flush(self):
            pass

    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = FakeWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    monitor = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1, tensorboard_dir=tmp_path)
    monitor.on_step(tiny_gpt2(), 5)
    tags = {tag for tag, _, step in written if step == 5}
    assert "attention/entropy/L1H3" in tags and "attention/sink_score/L0H0" in tags
    assert "attention/error_findings" in tags

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # not installed: an info line, no crash
    monitor = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1, tensorboard_dir=tmp_path)
    with caplog.at_level(logging.INFO, logger="attnscope.monitor"):
        assert monitor.on_step(tiny_gpt2(), 0) is not None
    assert any("tensorboard is not installed" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_trainer_callback_writes_three_lines_on_three_steps(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    tokenizer = bpe_tokenizer()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=300, n_embd=32, n_layer=2, n_head=4, n_positions=64))
    ids = tokenizer("The quick brown fox jumps over the lazy dog.")["input_ids"]
    data = [{"input_ids": torch.tensor(ids), "labels": torch.tensor(ids)} for _ in range(6)]
    monitor = AttentionMonitor(probes=PROBES, every=1, log_path=tmp_path / "attention.jsonl")
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=2,
                             use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no",
                             disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
            callbacks=[monitor.callback()]).train()
    records = lines(tmp_path / "attention.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3]  # 0: the untrained model, measured at on_train_begin
    assert model.training  # the Trainer's mode, as found


def _trainer(tmp_path, tokenizer, monitor, steps=3, vocab_size=300):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=4, n_positions=64))
    ids = [i % vocab_size for i in bpe_tokenizer()("The quick brown fox jumps over the lazy dog.")["input_ids"]]
    data = [{"input_ids": torch.tensor(ids), "labels": torch.tensor(ids)} for _ in range(6)]
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=2,
                             use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no",
                             disable_tqdm=True)
    return Trainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                   callbacks=[monitor.callback()])


@pytest.mark.slow
def test_a_model_the_monitor_cannot_read_stops_the_run_before_its_first_step(tmp_path):
    """Another model's tokenizer (ids past the vocabulary) failed at the first due step (every=200: 200 steps of
    compute), ending the run with the checkpoint due at that step unsaved."""
    monitor = AttentionMonitor(probes=PROBES, every=2, log_path=tmp_path / "attention.jsonl")
    trainer = _trainer(tmp_path, bpe_tokenizer(), monitor, vocab_size=100)  # the tokenizer's ids reach 299
    with pytest.raises(InputError, match="the attention monitor cannot measure this model: .*vocabulary"):
        trainer.train()
    assert trainer.state.global_step == 0 and not (tmp_path / "attention.jsonl").exists()


@pytest.mark.slow
def test_a_second_train_call_continues_the_step_count_instead_of_logging_a_trained_model_as_step_0(tmp_path):
    """A notebook cell run twice: the Trainer's global_step starts at 0 again, so the trained model was logged as
    step 0 and steps 2 and 4 again, and the Timeline showed the second call's in place of the first's (audit, stop
    57). The monitor counts the Trainer's steps across its calls."""
    from diagnostics.timeline import read_log

    log_path = tmp_path / "attention.jsonl"
    monitor = AttentionMonitor(probes=PROBES, every=2, log_path=log_path)
    trainer = _trainer(tmp_path, bpe_tokenizer(), monitor, steps=3)
    trainer.train()
    trainer.train()
    assert [r["step"] for r in lines(log_path)] == [0, 2, 4, 6]  # 3 steps, then 3 more: 4 and 6
    timeline = read_log(log_path, allowed_roots=[tmp_path])
    assert timeline.steps == [0, 2, 4, 6] and not timeline.notes

    # a new model each train() (model_init; a cell that builds it again) is a new run: not drawn as one history
    log_path.unlink()
    trainer = _trainer(tmp_path, bpe_tokenizer(), AttentionMonitor(probes=PROBES, every=2, log_path=log_path))
    model = trainer.model
    trainer.model_init = lambda: type(model)(model.config)
    trainer.train()
    trainer.train()
    assert [r["step"] for r in lines(log_path)] == [0, 2, 0, 2]
    assert read_log(log_path, allowed_roots=[tmp_path]).notes == ["2 repeated steps: the later measurements are shown"]


@pytest.mark.slow
def test_a_measurement_that_fails_mid_run_is_logged_and_training_goes_on(tmp_path, monkeypatch, caplog):
    """A full disk at one measurement raised OSError out of Trainer.train(): the run ended there."""
    monitor = AttentionMonitor(probes=PROBES, every=1, log_path=tmp_path / "attention.jsonl")
    real_write = monitor._write

    def write(record):
        if record["step"] == 2:
            raise OSError(28, "No space left on device")
        real_write(record)

    monkeypatch.setattr(monitor, "_write", write)
    trainer = _trainer(tmp_path, bpe_tokenizer(), monitor)
    with caplog.at_level(logging.ERROR, logger="attnscope.monitor"):
        trainer.train()
    assert trainer.state.global_step == 3
    assert [r["step"] for r in lines(tmp_path / "attention.jsonl")] == [0, 1, 3]
    assert [r.getMessage() for r in caplog.records] == [
        "attention monitor, step 2: the measurement failed and was skipped (OSError: [Errno 28] No space left on "
        f"device); {tmp_path / 'attention.jsonl'} has no line for it; training goes on"]


def test_a_model_the_monitor_can_measure_no_head_of_is_refused_by_check():
    """A PyTorch model of no config and no tokenizer cannot be probed, even with random ids (no vocab_size):
    check() passed, and every step logged a record of no heads (custom-model audit, stop 57)."""
    class EncoderLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(300, 32)
            self.encoder = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True),
                                                       2, enable_nested_tensor=False)

        def forward(self, ids):
            return self.encoder(self.embed(ids))

    model = EncoderLM().eval()
    with pytest.raises(InputError, match="the attention monitor measured no head of this model .*vocab_size.*; "
                                         r"give it the model's tokenizer: AttentionMonitor\(tokenizer=...\)"):
        AttentionMonitor(probes=PROBES).check(model)
    assert len(AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES).check(model)["heads"]) == 8


def test_a_tokenizer_that_is_not_one_is_refused_when_the_monitor_is_made():
    """tokenizer="gpt2" was accepted and failed at the first measurement ('str' object is not callable)."""
    with pytest.raises(InputError, match="tokenizer must be a Hugging Face tokenizer, not a str: load the model's "
                                         "with AutoTokenizer.from_pretrained"):
        AttentionMonitor(tokenizer="gpt2", probes=PROBES)


def test_probes_given_as_a_generator_are_measured_at_every_step():
    """The argument check used a generator up, and every measurement then ran the default probes."""
    monitor = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=(text for text in PROBES[:1]), every=1)
    for step in (0, 1):
        assert monitor.on_step(tiny_gpt2(), step)["findings"] == AttentionMonitor(
            tokenizer=bpe_tokenizer(), probes=PROBES[:1], every=1).on_step(tiny_gpt2(), step)["findings"]
    assert monitor.probes == PROBES[:1]


def test_a_diverged_model_s_log_line_is_strict_json(tmp_path):
    model = tiny_gpt2()
    with torch.no_grad():
        model.h[0].attn.c_attn.weight[0, 0] = float("inf")
    log = tmp_path / "attention.jsonl"
    AttentionMonitor(tokenizer=bpe_tokenizer(), every=1, log_path=log).on_step(model, 0)
    record = json.loads(log.read_text(), parse_constant=lambda name: pytest.fail(f"bare {name} in the log"))
    assert "non_finite_attention" in {f["code"] for f in record["findings"]}
    heads = [h for h in record["heads"] if h["pattern"] is None]  # NaN attention: no label
    assert heads and parse_log(log.read_text()).pattern_changes() == []  # the Timeline reads the diverged run's log


@pytest.mark.parametrize("step", [-1, "3", 2.0, True, 2**53])
def test_a_step_that_is_not_a_whole_number_is_refused_before_it_is_logged(tmp_path, step):
    """on_step(model, -1) wrote a record that made the whole log unreadable in the Timeline; "3" was a TypeError."""
    import numpy as np

    log = tmp_path / "attention.jsonl"
    monitor = AttentionMonitor(bpe_tokenizer(), probes=["the cat sat on the mat"], every=1, log_path=log)
    monitor.on_step(tiny_gpt2(), np.int64(0))  # numpy's whole numbers are steps too
    with pytest.raises(InputError, match="step must be a whole number from 0"):
        monitor.on_step(tiny_gpt2(), step)
    assert [s for s in parse_log(log.read_text()).steps] == [0]


def test_a_name_with_a_unicode_line_separator_does_not_split_its_record(tmp_path):
    """The log is JSON with ensure_ascii=False: U+2028 or U+0085 in a name stayed raw, and splitlines() cut the
    record there ('line 1 of the log is not JSON'); CRLF logs still read."""
    log = tmp_path / "attention.jsonl"
    monitor = AttentionMonitor(bpe_tokenizer(), probes=["the cat sat on the mat"], every=1, log_path=log)
    model = tiny_gpt2()
    model.config.name_or_path = "runs/exp\u2028v2\x85"
    for step in (0, 1):
        monitor.on_step(model, step)
    timeline = parse_log(log.read_bytes())
    assert timeline.steps == [0, 1] and not timeline.notes
    assert parse_log(log.read_bytes().replace(b"\n", b"\r\n")).steps == [0, 1]


def test_no_uniform_warning_from_findings_that_are_only_information(caplog):
    """The "still near uniform, check the Q/K initialisation" warning fired on any diffuse_heads finding: on the
    healthy, trained demo-bert (2 of 16 heads near uniform, "info") and on probes too short to bear a verdict."""
    import core

    model, tokenizer = core.load_model("demo-bert")
    short = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=["The quick brown fox."], every=1, uniform_after=0)
    trained = AttentionMonitor(tokenizer=tokenizer, every=1, uniform_after=0)
    with caplog.at_level(logging.WARNING, logger="attnscope.monitor"):
        capped = short.on_step(tiny_gpt2().train(), 0)  # random init: every head near uniform, capped to info
        healthy = trained.on_step(model, 1000)
    assert {f["severity"] for f in capped["findings"] if f["code"] == "diffuse_heads"} == {"info"}
    assert {f["severity"] for f in healthy["findings"] if f["code"] == "diffuse_heads"} == {"info"}
    assert not [r.getMessage() for r in caplog.records if "still near uniform" in r.getMessage()]


def test_heads_that_go_near_uniform_after_they_had_learned_are_warned_about_at_once(caplog):
    """A MiniLM fine-tune at learning rate 1e-2 had a diffuse_heads error (60 of 72 heads) from step 10 on, and the
    monitor said nothing: near-uniform heads were taken for a new model's normal state until uniform_after (1000)."""
    import core

    model, tokenizer = core.load_model("demo-bert")
    monitor = AttentionMonitor(tokenizer=tokenizer, every=1)  # uniform_after: 1000
    with caplog.at_level(logging.WARNING, logger="attnscope.monitor"):
        monitor.on_step(model, 0)
        with torch.no_grad():
            model.embeddings.LayerNorm.weight.zero_()  # every layer's input carries no token's content
        records = [monitor.on_step(model, step) for step in (1, 2)]
    assert all(("diffuse_heads", "error") in [(f["code"], f["severity"]) for f in r["findings"]] for r in records)
    warned = [r.getMessage() for r in caplog.records if "near uniform" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("attention monitor, step 1: "), warned
    assert "At step 0 they were not: heads that had learned where to look lost it" in warned[0]


def test_a_tokenizer_panic_during_a_measurement_does_not_end_the_run(tmp_path, caplog):
    """tokenizers panics past Oniguruma's retry limit with a BaseException, which passed the measurement's
    `except Exception`: the training run ended, though a failed measurement is promised never to end it."""
    from transformers import AutoTokenizer

    from tiny import tiny_bert
    from tiny_checkpoints import PANICKING_PATTERN, save_splitting_bert

    tokenizer = AutoTokenizer.from_pretrained(save_splitting_bert(tmp_path / "panics", PANICKING_PATTERN))
    monitor = AttentionMonitor(tokenizer=tokenizer, every=1)  # the default probes: the regex panics on them
    with caplog.at_level(logging.ERROR, logger="attnscope.monitor"):
        assert monitor.on_step(tiny_bert(), 0) is None
    [failed] = [r.getMessage() for r in caplog.records]
    assert failed.startswith("attention monitor, step 0: the measurement failed and was skipped (the tokenizer "
                             "failed on this text (PanicException: "), failed
    with pytest.raises(InputError, match=r"^the attention monitor cannot measure this model: the tokenizer failed"):
        monitor.check(tiny_bert())


def test_a_model_that_changes_shape_is_not_appended_to_its_log(tmp_path, caplog):
    """A layer dropped mid-run was written to the same log, and the Timeline then refused the whole log, earlier
    steps included, blaming two runs. Now the changed model's measurement is logged as an error and skipped."""
    log_path = tmp_path / "attention.jsonl"
    model = tiny_gpt2().train()
    monitor = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1, log_path=log_path)
    with caplog.at_level(logging.ERROR, logger="attnscope.monitor"):
        monitor.on_step(model, 0)
        del model.h[1]  # a layer dropped
        assert monitor.on_step(model, 1) is None
    assert [r["step"] for r in lines(log_path)] == [0]
    assert [r["step"] for r in parse_log(log_path.read_bytes()).records] == [0]
    errors = [r.getMessage() for r in caplog.records]
    assert len(errors) == 1 and "step 1: the measurement failed and was skipped (the model is now GPT2Model: self " \
                                "1 × 4, but" in errors[0] and "holds GPT2Model: self 2 × 4" in errors[0]
    other = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1, log_path=log_path)
    with pytest.raises(InputError, match="needs its own log_path, as the Timeline reads one model per log"):
        other.check(model)  # a new run of another model, into the old log: refused before training
    assert other.check(tiny_gpt2())["step"] == 0  # the same model may go on in it


def test_the_shape_check_reads_the_log_each_time_and_only_monitor_records(tmp_path, caplog):
    """Review of the check above: check() on an empty log cached its model's shape, so two runs of different
    models starting together both wrote; a record longer than the 8 MB read back was missed; any JSON line (a
    metrics file) was taken for a record "of no heads". And the refused line had taken the warnings with it."""
    from transformers import BertConfig, BertModel

    log_path = tmp_path / "attention.jsonl"
    gpt2, bert = tiny_gpt2().train(), BertModel(BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2,
                                                           num_attention_heads=4, intermediate_size=64))
    first = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1, log_path=log_path)
    second = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1, log_path=log_path)
    first.check(gpt2), second.check(bert)  # both start on an empty log
    assert first.on_step(gpt2, 0) is not None and second.on_step(bert, 0) is None
    assert [r["model"]["architecture"] for r in lines(log_path)] == ["GPT2Model"]

    record = lines(log_path)[0]
    big = tmp_path / "big.jsonl"  # the last record is 3 MB: three of the 1 MB chunks read back, none whole
    big.write_text(json.dumps(record) + "\n" + json.dumps({**record, "padding": "x" * 3_000_000}) + "\n")
    with pytest.raises(InputError, match="holds GPT2Model: self 2 × 4"):
        AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, log_path=big).check(bert)
    assert monitor_module._last_shape(big, chunk=1000) == "GPT2Model: self 2 × 4"

    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"loss": 1.5}\n{"loss": 1.2}\n')
    assert AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, log_path=metrics).on_step(gpt2, 0)

    del gpt2.h[1]
    scale_qk_(gpt2, 100.0)
    with caplog.at_level(logging.WARNING, logger="attnscope.monitor"):
        assert first.on_step(gpt2, 1) is None  # its line is refused: the model lost a layer
    messages = [r.getMessage() for r in caplog.records]
    assert any("near one-hot" in m for m in messages) and any("needs its own log_path" in m for m in messages)


@pytest.mark.timeout(120)
def test_reading_the_log_back_never_hangs_or_raises(tmp_path):
    """Second review: a FIFO log_path hung check() for ever (a FIFO's open waits for a writer); a line nested past
    the JSON parser's depth raised RecursionError at every write; a whole record that began exactly where the
    read back stopped was missed."""
    import os

    fifo = tmp_path / "attention.fifo"
    os.mkfifo(fifo)
    assert AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, log_path=fifo).check(tiny_gpt2())["step"] == 0

    record = json.dumps({"schema": monitor_module.SCHEMA, "model": {"architecture": "A", "parts": {}}})
    deep = tmp_path / "deep.jsonl"
    deep.write_text(record + "\n" + "[" * 100_000 + "\n")
    assert monitor_module._last_shape(deep) == "A: no heads"

    edge = tmp_path / "edge.jsonl"
    edge.write_text("x" * 50 + "\n" + record + "\n")  # the record and its newline: the last len(record) + 1 bytes
    size = len(record) + 1  # one chunk reads exactly the record and stops there
    assert monitor_module._last_shape(edge, chunk=size, most=size) == "A: no heads"


def test_the_still_uniform_warning_gives_the_findings_own_advice(caplog):
    """demo-gpt2 with layer 1's ln_1 zeroed: the report said "not Q/K: look at the normalisation that feeds layer
    1", while the monitor warned "check the Q/K initialisation", the cause the report had ruled out."""
    import core

    model, tokenizer = core.load_model("demo-gpt2")
    with torch.no_grad():
        model.h[1].ln_1.weight.zero_()
        model.h[1].ln_1.bias.zero_()
    monitor = AttentionMonitor(tokenizer=tokenizer, every=1, uniform_after=0)
    with caplog.at_level(logging.WARNING, logger="attnscope.monitor"):
        record = monitor.on_step(model, 5)
    diffuse = next(f for f in record["findings"] if f["code"] == "diffuse_heads")
    warned = [r.getMessage() for r in caplog.records if "still near uniform" in r.getMessage()]
    assert len(warned) == 1 and warned[0].endswith(diffuse["suggestion"])
    assert "not Q/K: look at the normalisation that feeds layer 1" in warned[0]
