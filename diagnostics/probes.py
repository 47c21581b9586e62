"""Probes through the model: which texts fit it, random-id and in-vocabulary probes, the repeated-sequence probe.

Probes must fit the model: a text the vocabulary cannot spell measures how the
model treats a run of [UNK]s, not the model (a healthy word-level model whose
vocabulary misses the English probes looks uniform on them). ``probe_coverage``
is the share of a probe's tokens that are real vocabulary: not the unknown
token, not a SentencePiece byte-fallback token ``<0x..>``, and not a byte-level
BPE token that is only part of a character (it decodes alone to U+FFFD). A
byte-level BPE vocabulary (GPT-2, SmolLM2) spells any text, so it misses only
characters it holds as raw bytes. A tokenizer without an unknown token may drop
what it cannot spell instead (a BPE model with no ``unk_token``): for a fast
tokenizer, the share of the characters it could spell that its tokens decode to
caps the coverage too (``core.extraction.spelling``). Below ``MIN_COVERAGE`` a default probe is
replaced by ``vocabulary_probe``s: random ordinary tokens of the model's own
vocabulary.

The default probe texts, and how long and how well spelt a text probe must be, are
``diagnostics.probe_texts``. ``fitting_probes`` keeps the probes that fit the vocabulary and ``verdict_cap``
says which probes the findings come from (those long, varied and fitting enough to judge) and how severe they
may be ("info" where no probe is long enough, "warning" where only a
caller's unfit texts are); both give the notes that say so.

The repeated-sequence probe (``repeated_probe``) is the induction test of
Olsson et al. 2022 ("In-context learning and induction heads") and of
TransformerLens's head detector: random in-vocabulary tokens, then the same
tokens again. In the second copy an induction head attends to the token after
the previous occurrence of the current one (offset ``-half + 1``) and a
duplicate-token head to the previous occurrence itself (offset ``-half``).
"""

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from core.custom_model import AttnScopeTransformer
from core.device import model_device
from core.errors import ExtractionError, InputError, counted
from core.extraction.hf_extract import causal_maps, eager_attention, map_windows, stack_layers, taken
from core.extraction.module_extract import attention_modules, called_modules
from core.extraction.encode import is_utf8, max_positions, special_marks, typed_specials
from core.extraction.extract import eval_mode, model_is_causal, module_ids_attention
from core.extraction.text_config import is_encoder_decoder, text_config, vocab_size
from core.extraction.spelling import can_drop, characters_spelt
from core.extraction.tokens import display_tokens, is_byte_level
from core.result import AttentionResult
from diagnostics.findings import note
from diagnostics.probe_texts import (CAUSAL_PROBES, DEFAULT_PROBES, MAX_DOMINANT, MAX_REPEATED, MIN_COVERAGE,
                                     MIN_DISTINCT_TOKENS, MIN_JUDGED_TOKENS, REPEAT_RUN, Probe, decoder_probe)

RANDOM_PROBES = 4  # probes of random token ids when there is no tokenizer
MIN_PROBE_TOKENS = 4  # a random probe shorter than this says nothing about a head
# Tokens in each copy of the repeated-sequence probe: TransformerLens's detector uses short random
# sequences; 48 keeps the probe at ~100 tokens (cheap as whole maps even for 30-layer models) while the
# chance that a random token repeats within a copy stays small for any real vocabulary.
REPEAT_HALF = 48
REPEAT_MIN_HALF = 4  # fewer tokens per copy say nothing about induction
VOCABULARY_PROBES = 4  # random in-vocabulary sequences that replace unfit default probes
# The random-token probes (no tokenizer; default probes that do not fit the vocabulary) are as long, or as the
# model's position limit if that is less. At 24 tokens healthy SmolLM2 got a `sink_heads` warning from either.
RANDOM_LENGTH = MIN_JUDGED_TOKENS
_BYTE_FALLBACK = re.compile(r"<0x[0-9A-Fa-f]{2}>")


@dataclass
class RepeatedProbe:
    """Attention on ``prefix`` special tokens, ``half`` random tokens, the same ``half`` again, then suffix."""

    result: AttentionResult  # whole maps [L, H, T, T], tokens displayed as text
    prefix: int  # index of the first random token (after [CLS] / <s>, if the tokenizer adds one)
    half: int  # length of each copy: token i of the second copy repeats token i - half

    @property
    def second_copy(self) -> range:
        """Query positions of the second copy."""
        return range(self.prefix + self.half, self.prefix + 2 * self.half)


def user_texts(texts):
    """The caller's probe texts as a list, or None for the default probes (None or an empty list); one string is
    one probe (iterated, it was a probe per character)."""
    if texts is None or isinstance(texts, str):
        return None if texts is None else [texts]
    if isinstance(texts, (bytes, dict)) or not isinstance(texts, Iterable):
        raise InputError(f"probe texts must be a list of texts or (text, pair) tuples, not {type(texts).__name__}")
    return list(texts) or None


def as_probes(texts, defaults=DEFAULT_PROBES):
    """User texts (strings or ``(text, pair)`` tuples) as ``Probe``s; None or [] gives ``defaults``."""
    texts = user_texts(texts)
    if texts is None:
        return list(defaults)
    return [_probe(t, i, len(texts)) for i, t in enumerate(texts)]


def _probe(item, i: int, count: int) -> Probe:
    """A caller's probe: a text, or a ``(text, pair)`` tuple (pair None or text); InputError naming it if not."""
    parts = list(item) if isinstance(item, (tuple, list)) else [item]
    if not 1 <= len(parts) <= 2 or not isinstance(parts[0], str) or not isinstance(parts[-1], (str, type(None))):
        raise InputError(f"probe {i + 1} of {count}: {repr(item)[:60]} is not a text or a (text, pair) tuple of "
                         "texts")
    return Probe(*parts)


def probe_coverage(tokenizer, probe: Probe, limit: int | None = None) -> float:
    """Share of ``probe``'s tokens that the vocabulary holds (see the module docstring), of those the model reads
    (cut to ``limit``, its position limit; a long text's unread tail would hide an unreadable head), special tokens
    left out. The unknown token counts as missed unless the tokenizer is byte-level, where it is a control token
    that no text gives (GPT-2's unk = eos = <|endoftext|>)."""
    cut = {"truncation": True, "max_length": limit} if limit else {}
    offsets = {"return_offsets_mapping": True} if can_drop(tokenizer) else {}  # what each token spells
    batch = tokenizer(probe.text, probe.text_pair, return_special_tokens_mask=True, verbose=False, **cut, **offsets)
    ids = [i for i, added in zip(batch["input_ids"], batch["special_tokens_mask"]) if not added]
    if not ids:
        return 1.0
    unknown = None if is_byte_level(tokenizer) else tokenizer.unk_token_id
    missed = sum(i == unknown or bool(_BYTE_FALLBACK.fullmatch(t or "")) or "\ufffd" in tokenizer.decode([i])
                 for i, t in zip(ids, tokenizer.convert_ids_to_tokens(ids)))
    cut_short = bool(limit) and len(batch["input_ids"]) >= limit
    spelt, could = characters_spelt(tokenizer, batch, (probe.text, probe.text_pair), cut_short) if offsets else (0, 0)
    return min(1 - missed / len(ids), spelt / could if could else 1.0)


def probe_tokens(tokenizer, probe: Probe) -> int:
    """How many tokens the model reads for ``probe``, special tokens included (before any truncation)."""
    return len(tokenizer(probe.text, probe.text_pair, verbose=False)["input_ids"])


NOT_RUN = object()  # a plain module's short run not made yet (None: made, and failed)


def default_probes(model, tokenizer, run=NOT_RUN) -> tuple[Probe, ...]:
    """``CAUSAL_PROBES`` for a decoder-only model that reads each of them whole, else ``DEFAULT_PROBES`` (a decoder
    reads them as ``decoder_probe`` gives them: also a plain module's, whose position limit no config says).
    ``run``: a plain module's ``module_run``, when the caller has made it."""
    if not reads_as_decoder(model, tokenizer, run):
        return DEFAULT_PROBES
    limit = max_positions(model, tokenizer)
    if is_plain_module(model) or limit is not None and max(probe_tokens(tokenizer, p) for p in CAUSAL_PROBES) > limit:
        return tuple(decoder_probe(p) for p in DEFAULT_PROBES)
    return CAUSAL_PROBES


def reads_as_decoder(model, tokenizer, run=NOT_RUN) -> bool:
    """True for a decoder-only model with a tokenizer: it reads its probes as ``decoder_probe`` gives them. A
    PyTorch model of no config says whether it is causal only by its masks, once run (``run``, or ``module_run``
    now; a failed run, None, is not made again)."""
    if tokenizer is None:
        return False
    if is_plain_module(model):
        run = module_run(model, tokenizer) if run is NOT_RUN else run
        return run is not None and run.causal
    return model_is_causal(model)


def is_plain_module(model) -> bool:
    """A PyTorch model of no config, built from ``nn.MultiheadAttention``: what it does shows only when it runs."""
    return getattr(model, "config", None) is None and bool(attention_modules(model))


SHORT_TEXT = "The cat sat on the mat."  # what a plain module is run on before its probes


@dataclass
class ModuleRun:
    causal: bool  # whether its layers mask later tokens
    called: list[str]  # its nn.MultiheadAttention modules' names, in the order it calls them


def module_run(model, tokenizer) -> ModuleRun | None:
    """``ModuleRun`` of a plain module (``is_plain_module``) on ``SHORT_TEXT``; None when that run fails, whose
    cause the probes' own run says. ``model_is_causal`` had read every such model as an encoder (a causal one got
    the encoder probes, its sentence pairs glued together), and its weights were numbered in registration order."""
    ids = tokenizer(SHORT_TEXT, return_tensors="pt")["input_ids"].to(model_device(model))  # (1, T)
    try:
        with torch.no_grad(), eval_mode(model), called_modules(model) as called:  # no dropout draw, no BatchNorm step
            causal = module_ids_attention(model, ids)[1]
    except (ExtractionError, InputError):
        return None
    return ModuleRun(causal, called)


def fitting_probes(tokenizer, texts, defaults=DEFAULT_PROBES, limit=None):
    """``(probes, coverage, notes)``: the probes to run, the coverage of each, and a note on default probes that did
    not fit the vocabulary.

    ``texts`` as ``user_texts`` gives them (None: ``defaults``, the model's ``default_probes``); ``limit``: the
    model's position limit (coverage is of the tokens it reads). Default probes below ``MIN_COVERAGE`` are dropped
    (``diagnose`` adds in-vocabulary probes in their place; ``unfit_defaults_note`` if they cannot run); the
    caller's own texts are kept, and ``verdict_cap`` notes them, with what became of the findings.
    """
    if tokenizer is None:
        return [], [], []
    probes = as_probes(texts, defaults)
    check_probes(tokenizer, probes)  # before any is tokenized: an unreadable one is named ("probe 3 of 3: ...")
    coverage = [probe_coverage(tokenizer, p, limit) for p in probes]
    if texts is not None or min(coverage, default=1.0) >= MIN_COVERAGE:
        return probes, coverage, []
    kept = [(p, c) for p, c in zip(probes, coverage) if c >= MIN_COVERAGE]
    note = _unfit_note(coverage, f"they were replaced by {VOCABULARY_PROBES} sequences of random in-vocabulary tokens")
    return [p for p, _ in kept], [c for _, c in kept], [note]


def unfit_defaults_note(notes, error):
    """The ``probes_unfit`` note of ``fitting_probes`` when the in-vocabulary probes meant to replace the unfit
    default probes could not run (``error``, the ExtractionError saying why): one note, saying what was done."""
    coverage = notes[0].details["coverage"]
    return _unfit_note(coverage, f"no in-vocabulary probe could replace them ({error})")


def _unfit_note(coverage, action):
    low = [c for c in coverage if c < MIN_COVERAGE]
    lowest = math.floor(min(low) * 1000) / 1000  # rounded down: 0.8974 had read "fewer than 90% (lowest 90%)"
    detail = (f"{len(low)} of {len(coverage)} probes have fewer than {MIN_COVERAGE:.0%} of their tokens in the "
              f"vocabulary (lowest {lowest:.1%}); {action}")
    return note("probes_unfit", detail=detail, coverage=[round(c, 4) for c in coverage], threshold=MIN_COVERAGE)


@dataclass(frozen=True)
class Variety:
    """How varied one probe is, as the model reads it (``probe_variety``): its distinct tokens, special ones aside;
    the share of its runs of ``REPEAT_RUN`` tokens seen earlier in it (``repeated_share``); and the share of its
    tokens that are its most frequent one (``dominant_share``)."""

    distinct: int
    repeated: float = 0.0
    dominant: float = 0.0

    def too_repetitive(self, least: int) -> bool:
        """Whether every key is nearly the same word, or has many copies: near-uniform rows are then right."""
        return self.distinct < least or self.repeated >= MAX_REPEATED or self.dominant >= MAX_DOMINANT


def verdict_cap(lengths, limit, coverage=None, variety=()):
    """``(worst, judged, notes)``: the highest severity the probes' attention findings may have, the probes they
    are to come from (a bool per probe; None: all of them), and notes saying why some or all cannot be judged.

    ``lengths`` and ``limit`` are ``read_lengths``'s. A probe shorter than ``MIN_JUDGED_TOKENS`` (or than the
    model's position limit, if that is less: no probe can be longer) cannot be judged, for the thresholds do not
    hold on it (the default probes are longer); nor can a caller's probe that is too repetitive (``variety``,
    ``probe_variety``'s ``Variety`` per probe, or the distinct tokens alone): of fewer than ``MIN_DISTINCT_TOKENS``
    distinct tokens, or a quarter of the tokens the model reads of it if that is less, mostly a copy of itself
    (``MAX_REPEATED``), or mostly one token (``MAX_DOMINANT``, a run of [UNK]s): where every key is the same word,
    or has many copies, near-uniform rows are right. Nor, at error severity,
    a caller's probe that does not fit the vocabulary (``coverage`` under ``MIN_COVERAGE``; None: all fit).
    The findings come from the probes that can be judged, at any severity, so one short sentence beside a
    paragraph does not hide what the paragraph shows; failing those, from the long and varied ones that do not
    fit, at most "warning"; failing those too, from all of them, at most "info".
    """
    needed = min(MIN_JUDGED_TOKENS, limit or MIN_JUDGED_TOKENS)
    short = [n < needed for n in lengths]
    # a model that reads few tokens needs fewer distinct ones (16 tokens: 4)
    least = [min(MIN_DISTINCT_TOKENS, n // 4) for n in lengths]
    variety = [v if isinstance(v, Variety) else Variety(v) for v in variety]
    repetitive = [not s and v.too_repetitive(most) for s, v, most in zip(short, variety, least)]  # no variety: none
    repetitive += [False] * (len(lengths) - len(repetitive))
    varied = [not s and not r for s, r in zip(short, repetitive)]
    fits = [c >= MIN_COVERAGE for c in coverage] if coverage else [True] * len(lengths)
    fitting = [v and f for v, f in zip(varied, fits)]
    if all(fitting):  # no probe (random ids, without a tokenizer) is none to doubt
        return "error", None, []
    worst, judged = ("error", fitting) if any(fitting) else ("warning", varied) if any(varied) else ("info", None)
    judged = None if judged is None or all(judged) else judged
    outcome = _outcome(worst, judged)
    notes = [] if all(fits) else [_unfit_note(coverage, f"they were kept; {outcome}")]
    if any(short):
        detail = (f"{sum(short)} of {len(lengths)} probes have fewer than {needed} tokens (shortest {min(lengths)}), "
                  f"too few for the thresholds; {outcome}")
        notes.append(note("probes_short", detail=detail, tokens=lengths, threshold=needed))
    if any(repetitive):
        notes.append(_repetitive_note(repetitive, variety, least, short, outcome))
    return worst, judged, notes


def _repetitive_note(repetitive, variety, least, short, outcome):
    """The ``probes_repetitive`` note: how many probes are too repetitive, and by which measures."""
    most = max(m for m, s in zip(least, short) if not s)
    chosen = [v for v, r in zip(variety, repetitive) if r]
    few = [v.distinct for v in chosen if v.distinct < most]
    copied = [v.repeated for v in chosen if v.repeated >= MAX_REPEATED]
    one = [v.dominant for v in chosen if v.dominant >= MAX_DOMINANT]
    down = lambda share: f"{math.floor(round(share * 100, 6))}%"  # noqa: E731  0.795 read "80%" under 80 %; 0.57 "56%"
    why = ([f"hold fewer than {most} distinct tokens (fewest {min(few)})"] if few else []) + (
        [f"repeat themselves ({MAX_REPEATED:.0%} or more of their runs of {REPEAT_RUN} tokens came earlier in "
         f"them; most {down(max(copied))})"] if copied else []) + (
        [f"are one token for {MAX_DOMINANT:.0%} or more of their length (most {down(max(one))})"] if one else [])
    detail = f"{sum(repetitive)} of {len(repetitive)} probes {' or '.join(why)}; {outcome}"
    return note("probes_repetitive", detail=detail, distinct=[v.distinct for v in variety], threshold=most,
                repeated=[round(v.repeated, 4) for v in variety], repeated_threshold=MAX_REPEATED,
                dominant=[round(v.dominant, 4) for v in variety], dominant_threshold=MAX_DOMINANT)


def _outcome(worst, judged) -> str:
    """What a probe note says became of the findings: which probes they come from, and how severe they may be."""
    if judged is None:
        return f"no finding from the maps goes above {worst} (the weight checks are not capped)"
    numbers = [str(i + 1) for i, ok in enumerate(judged) if ok]
    which = f"probe {numbers[0]}" if len(numbers) == 1 else f"probes {', '.join(numbers)}"
    return f"the findings come from {which} alone" + (f", at most {worst}" if worst != "error" else "")


def probe_variety(tokenizer, probes, limit=None) -> list[Variety]:
    """Each probe's ``Variety`` as the model reads it (cut to ``limit``), its special tokens left out; none
    without a tokenizer."""
    if tokenizer is None:
        return []
    special = typed_specials(tokenizer)  # a run of [UNK]s is one token repeated
    cut = {"truncation": True, "max_length": limit} if limit else {}
    ids = [[i for i in tokenizer(p.text, p.text_pair, verbose=False, **cut)["input_ids"] if i not in special]
           for p in probes]
    return [Variety(len(set(i)), repeated_share(i), dominant_share(i)) for i in ids]


def repeated_share(ids) -> float:
    """The share of the runs of ``REPEAT_RUN`` consecutive token ids in ``ids`` that occur earlier in it: 0 for
    prose, near 1 for a sentence repeated over and over."""
    runs = [tuple(ids[i:i + REPEAT_RUN]) for i in range(len(ids) - REPEAT_RUN + 1)]
    return (len(runs) - len(set(runs))) / len(runs) if runs else 0.0


def dominant_share(ids) -> float:
    """The share of ``ids`` that are its most frequent id: ~0.05 ("the") for English prose, 0.9 for Chinese that
    a word-piece vocabulary without it reads as [UNK]s."""
    return Counter(ids).most_common(1)[0][1] / len(ids) if ids else 0.0


def check_probes(tokenizer, probes) -> None:
    """InputError naming the first probe the model cannot read: an empty one, one that is not UTF-8 (a shell's
    ``$(cat latin1.txt)``: the tokenizer's TypeError was exit 3), or one that gives no tokens besides the
    tokenizer's own (a zero-width space: [CLS] [SEP]) or only one token in all (a decoder's "a": a 1 x 1 map);
    ``core``'s own message would not say which probe."""
    for i, probe in enumerate(probes if tokenizer is not None else []):
        where = f"probe {i + 1} of {len(probes)}"
        if not isinstance(probe.text, str) or not probe.text.strip():
            raise InputError(f"{where}: its text is empty; give it some words, or leave it out")
        if not all(is_utf8(text) for text in (probe.text, probe.text_pair or "")):  # a shell's Latin-1 file: surrogates
            raise InputError(f"{where}: its text is not UTF-8 (a file in another encoding?); convert it, e.g. "
                             "iconv -f latin1 -t utf-8, or leave it out")
        batch = tokenizer(probe.text, probe.text_pair, return_special_tokens_mask=True, verbose=False)
        special = special_marks(tokenizer, batch["input_ids"], batch["special_tokens_mask"])
        if all(special):
            own = f" besides the tokenizer's own ({counted(len(special), 'special token')})" if special else ""
            raise InputError(f"{where}: its text gives no tokens{own}; give it some words, or leave it out")
        if len(special) < 2:  # a 1 x 1 map is a single weight of 1: no pattern, no finding (Inspect refuses it too)
            raise InputError(f"{where}: the model reads it as one token, and a one-token map has nothing to measure; "
                             "give it some more words, or leave it out")


def read_lengths(model, tokenizer, probes):
    """``(lengths, limit)``: the tokens the model reads of each probe (cut to its position limit), and the limit
    (None: no fixed limit). Without a tokenizer there are no text probes: ``([], None)``."""
    if tokenizer is None:
        return [], None
    limit = max_positions(model, tokenizer)
    return [min(probe_tokens(tokenizer, p), limit or float("inf")) for p in probes], limit


def vocabulary_probe(model, tokenizer, seed, length=RANDOM_LENGTH) -> AttentionResult:
    """Attention on ``length`` random ordinary tokens of the vocabulary, wrapped in the tokenizer's special
    tokens: a probe that fits any vocabulary (for models whose vocabulary does not fit the default texts).
    Not for encoder-decoders."""
    _refuse_encoder_decoder(model, "an in-vocabulary probe")
    before, after = _special_wrapping(tokenizer)
    ordinary = _ordinary_ids(model, tokenizer)  # (V',)
    length = min(_fitted_length(model, tokenizer, length, len(before) + len(after)), len(ordinary))  # no repeats
    ids = before + _shuffled(ordinary, length, seed, "an in-vocabulary probe", MIN_PROBE_TOKENS).tolist() + after
    return _attend(model, tokenizer, ids, len(before), len(ids) - len(after))


def random_probe(model, seed, length=RANDOM_LENGTH):
    """Attention of ``model`` on random token ids: an ``AttentionResult`` with tokens ``#id``.

    For models that came without a tokenizer. Works for Hugging Face models
    (not encoder-decoders), AttnScope models and ``nn.MultiheadAttention``
    modules that take token ids.
    """
    config, vocab = text_config(model), vocab_size(model)  # a vision-language model's: its language model's
    if not isinstance(vocab, int) or vocab < 2:
        raise ExtractionError(f"{type(model).__name__} has no vocab_size, so it cannot be probed with token ids")
    if getattr(config, "is_encoder_decoder", False):  # text probes read both stacks: it takes a tokenizer
        raise ExtractionError("encoder-decoder models need a tokenizer to be probed")
    length = _fitted_length(model, None, length)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (1, length), generator=generator).to(model_device(model))  # (1, T)
    with eval_mode(model):
        attentions, causal = _run(model, ids)  # (L, H, T, T)
    tokens = [f"#{i}" for i in ids[0].tolist()]
    flags = [False] * length
    return AttentionResult(tokens, attentions, causal, flags, list(flags), token_ids=ids[0].tolist(),
                           model_name=type(model).__name__, windows=map_windows(model, attentions, causal))


def _refuse_encoder_decoder(model, what) -> None:
    """ExtractionError for an encoder-decoder: its forward needs decoder inputs, and token-id probes cover one
    stack of layers."""
    if is_encoder_decoder(model):
        raise ExtractionError(f"{what} covers encoders and decoders, not encoder-decoders")


def _fitted_length(model, tokenizer, length, special=0, minimum=MIN_PROBE_TOKENS, what="a random probe") -> int:
    """``length`` tokens, or fewer for a model that takes fewer (with ``special`` tokens around them);
    ExtractionError below ``minimum``."""
    limit = max_positions(model, tokenizer)
    if limit is not None:
        length = min(length, limit - special)
    if length < minimum:
        raise ExtractionError(f"the model takes {limit} tokens; {what} needs {minimum} plus its special tokens")
    return length


def _run(model, ids):
    if isinstance(model, PreTrainedModel):
        with eager_attention(model), torch.no_grad():
            out = model(input_ids=ids, output_attentions=True, return_dict=True)
        attentions = stack_layers(taken(out, "attentions"), "self", model)  # (L, H, T, T)
        return attentions, causal_maps(model, attentions)
    if isinstance(model, AttnScopeTransformer):
        with torch.no_grad():
            out = model(ids, output_attentions=True)
        return stack_layers(taken(out, "attentions"), "self", model), model_is_causal(model)
    if attention_modules(model):
        return module_ids_attention(model, ids, f"the probe's {ids.shape[-1]} token ids, drawn from the tokenizer's "
                                    "vocabulary, may be more than the module has positions or embedding rows for")
    raise ExtractionError(f"{type(model).__name__} cannot be probed: AttnScope cannot read its attention")


def repeated_probe(model, tokenizer, half=REPEAT_HALF, seed=0) -> RepeatedProbe:
    """Whole maps of ``model`` on random in-vocabulary tokens repeated twice (see the module docstring).

    Token ids are drawn from the tokenizer's ordinary (non-special) tokens that the model's
    vocabulary holds, without repeats inside a copy; the tokenizer's own special tokens
    ([CLS] … [SEP], <s>) wrap the sequence as they would wrap a text. Not for encoder-decoders.
    """
    _refuse_encoder_decoder(model, "the repeated-sequence probe")
    before, after = _special_wrapping(tokenizer)
    half = _fitted_length(model, tokenizer, 2 * half, len(before) + len(after), 2 * REPEAT_MIN_HALF,
                          "the repeated-sequence probe") // 2  # short-context models get shorter copies
    ordinary = _ordinary_ids(model, tokenizer)  # (V',)
    half = min(half, len(ordinary))  # small vocabularies (protein, DNA) get shorter copies too: no repeats in one
    ids = _shuffled(ordinary, half, seed, "the repeated-sequence probe", REPEAT_MIN_HALF)  # (half,)
    sequence = ids.tolist() * 2
    full, prefix = before + sequence + after, len(before)
    return RepeatedProbe(_attend(model, tokenizer, full, prefix, prefix + len(sequence)), prefix, half)


def _attend(model, tokenizer, ids, start, stop) -> AttentionResult:
    """Whole maps of ``model`` on token ``ids``; the tokens outside ``start:stop`` are marked special."""
    input_ids = torch.tensor([ids]).to(model_device(model))  # (1, T)
    with eval_mode(model):
        attentions, causal = _run(model, input_ids)  # (L, H, T, T)
    special = [not start <= i < stop for i in range(len(ids))]
    return AttentionResult(display_tokens(tokenizer, ids), attentions, causal, special, [False] * len(ids),
                           token_ids=ids, model_name=getattr(getattr(model, "config", None), "name_or_path", "") or "",
                           windows=map_windows(model, attentions, causal))


def _ordinary_ids(model, tokenizer) -> torch.Tensor:
    """The ids of the tokenizer's ordinary tokens that the model's vocabulary holds: not its special tokens, nor
    added tokens marked special that it does not list among them (Llama 3's 256 <|reserved_special_token_N|>,
    never trained; SmolLM2's <file_sep>, <jupyter_code>, ...)."""
    vocab = min(len(tokenizer), vocab_size(model) or len(tokenizer))
    special = typed_specials(tokenizer) | set(tokenizer.all_special_ids)  # the unknown token too
    return torch.tensor([i for i in range(vocab) if i not in special])  # (V',)


def _shuffled(ordinary, count, seed, what, needed) -> torch.Tensor:
    """``count`` distinct ids of ``ordinary`` in a seeded random order; ExtractionError below ``needed``."""
    if len(ordinary) < needed:
        raise ExtractionError(f"the vocabulary has only {len(ordinary)} ordinary tokens; {what} needs {needed}")
    generator = torch.Generator().manual_seed(seed)
    return ordinary[torch.randperm(len(ordinary), generator=generator)[:count]]  # (count,)


def _special_wrapping(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer adds before and after a text ([CLS] / [SEP], <s>, or nothing)."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    wrapped = tokenizer("a")["input_ids"]
    for start in range(len(wrapped) - len(plain) + 1):
        if wrapped[start:start + len(plain)] == plain:
            return wrapped[:start], wrapped[start + len(plain):]
    return [], []  # the tokenizer rewrites the text when it wraps it: add nothing
