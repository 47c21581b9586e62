"""Synthetic attention maps with known pattern labels, to tune and test the classifier.

Each map is a clean pattern mixed with noise: row i is ``(1 - e_i) * pattern_i +
e_i * background_i``, where the background is a random near-uniform row over the
valid keys and ``e_i`` scatters around the noise level; the pattern's own weights
are also jittered (log-normal, sigma = noise). The patterns follow the taxonomy
of Kovaleva et al. 2019 ("Revealing the Dark Secrets of BERT", Fig. 1) and
Clark et al. 2019 ("What Does BERT Look At?"):

- diagonal: one offset -3..+3 (causal: -3..0), optionally smeared onto the
  neighbouring offsets; edge rows whose target is out of range fall back to the
  nearest valid key (GPT-2's previous-token heads put row 0 on itself).
- block: contiguous segments of random sizes; each query spreads over its own
  segment (causal: over the segment's keys up to itself).
- vertical: most mass on one or two keys: a punctuation-like key in the middle
  (causal: in the first half; queries before it use the first token), the last
  ([SEP], bidirectional only), or the first token (at most half) together with
  one of these. A stripe on the first token alone is not drawn: the classifier
  factors the sink out, so such a head is the ``sink`` role over whatever its
  rest does (vertical only when almost all of its mass is on the sink,
  ``patterns.PURE_SINK``).
- sparse: one to three random peaks per row, drawn independently for every row.
- diffuse: uniform over the valid keys with log-normal jitter.

Tuning used ``TUNING_SEEDS``; ``HELDOUT_SEEDS`` were never looked at while the
thresholds in ``patterns`` were set.
"""

from dataclasses import dataclass, field

import numpy as np

from core.errors import InputError
from diagnostics.classify.patterns import PATTERNS

TUNING_SEEDS = (0, 1, 2)
HELDOUT_SEEDS = (1000, 1001, 1002)
DEFAULT_LENGTHS = (4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512)
BIG_LENGTHS = (1024, 4096)  # one map per label each, random noise and causality
NOISE_LEVELS = (0.0, 0.1, 0.25)
BACKGROUND_SIGMA = 1.0  # log-normal spread of the noise rows


@dataclass
class Sample:
    """One labelled map ``weights [n, n]`` (float32) and how it was made."""

    label: str
    weights: np.ndarray
    causal: bool
    noise: float
    info: dict = field(default_factory=dict)


def make_map(label, n, causal, noise, rng, **options):
    """One ``[n, n]`` float32 map of pattern ``label``; returns ``(weights, info)``.

    options: ``offset`` (diagonal), ``sizes`` (block), ``sinks`` (vertical, key
    indices) override the random choices.
    """
    if label not in _MAKERS:
        raise InputError(f"Unknown pattern {label!r}; choose one of {PATTERNS}.")
    if n < 2:
        raise InputError(f"Maps need at least 2 tokens, got n={n}.")
    valid = np.tril(np.ones((n, n), bool)) if causal else np.ones((n, n), bool)
    pattern, info = _MAKERS[label](n, causal, rng, valid, **options)
    pattern = _jitter(pattern, noise, rng, valid)
    background = _jitter(valid.astype(np.float64), BACKGROUND_SIGMA, rng, valid)
    e = np.clip(noise * rng.uniform(0.5, 1.5, size=(n, 1)), 0.0, 0.9)
    weights = (1 - e) * pattern + e * background
    return (weights / weights.sum(-1, keepdims=True)).astype(np.float32), info


def make_dataset(seed, lengths=DEFAULT_LENGTHS, noise_levels=NOISE_LEVELS, big_lengths=BIG_LENGTHS,
                 labels=PATTERNS):
    """Yield ``Sample``s: every label x length x noise x causal/bidirectional, plus a few big maps.

    A generator, so 4096-token maps are not all held at once.
    """
    rng = np.random.default_rng(seed)
    for n in lengths:
        for noise in noise_levels:
            for causal in (False, True):
                for label in labels:
                    weights, info = make_map(label, n, causal, noise, rng)
                    yield Sample(label, weights, causal, noise, info)
    for n in big_lengths:
        for label in labels:
            causal, noise = bool(rng.integers(2)), float(rng.choice(noise_levels))
            weights, info = make_map(label, n, causal, noise, rng)
            yield Sample(label, weights, causal, noise, info)


def _jitter(p, sigma, rng, valid):
    """Multiply every weight by exp(sigma * z) and renormalise over the valid keys."""
    p = p * np.exp(sigma * rng.standard_normal(p.shape)) * valid
    return p / p.sum(-1, keepdims=True)


def _diagonal(n, causal, rng, valid, offset=None):
    reach = min(3, max(1, n // 4))  # offset 3 of a 4-token map would be one row's choice
    offsets = range(-reach, 1) if causal else range(-reach, reach + 1)
    offset = int(rng.choice(list(offsets))) if offset is None else offset
    rows = np.arange(n)
    p = np.zeros((n, n))
    p[rows, np.clip(rows + offset, 0, n - 1)] = 1.0
    smear = rng.uniform(0.0, 0.2) if rng.random() < 0.5 else 0.0
    for side in (-1, 1):  # a little mass on the neighbouring diagonals
        p[rows, np.clip(rows + offset + side, 0, n - 1)] += smear / 2
    p = p * valid
    p[p.sum(-1) == 0, 0] = 1.0  # causal rows that see no target keep the first key
    return p / p.sum(-1, keepdims=True), {"offset": offset, "smear": smear}


def _block(n, causal, rng, valid, sizes=None):
    if sizes is None:
        sizes = _segment_sizes(n, rng)
    seg = np.repeat(np.arange(len(sizes)), sizes)  # segment id of every token
    p = (seg[:, None] == seg[None, :]) * valid
    return p / p.sum(-1, keepdims=True), {"sizes": list(sizes)}


def _segment_sizes(n, rng):
    """Random segment sizes of at least 2 tokens and at most half the map, summing to n."""
    lo, hi = max(2, n // 12), max(2, n // 2)
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(rng.integers(lo, hi + 1)))
    sizes[-1] -= sum(sizes) - n
    if sizes[-1] < 2:
        last = sizes.pop()
        sizes[-1] += last
    return sizes


def _vertical(n, causal, rng, valid, sinks=None):
    if sinks is None:
        # causal: in the first half, so that most queries see it (the rows before it use the first token)
        middle = int(rng.integers(1, max(2, n // 2) if causal else n - 1)) if n > 2 else 0
        choices = [[middle], [0, middle]] + ([] if causal else [[n - 1], [0, n - 1]])
        sinks = choices[int(rng.integers(len(choices)))]
    p = np.zeros((n, n))
    # with the first token, the other key keeps at least half: the rest (the map with the sink factored out)
    # must have a stripe to see, or the head is a sink over noise
    share = (rng.uniform(0.3, 0.5) if sinks[0] == 0 else rng.uniform(0.3, 0.7)) if len(sinks) == 2 else 1.0
    for s, mass in zip(sinks, (share, 1 - share)):
        p[:, s] += mass
    p = p * valid
    p[p.sum(-1) == 0, 0] = 1.0  # causal queries before the sink use the first token
    strength = rng.uniform(0.6, 0.95, size=(n, 1))
    p = strength * p / p.sum(-1, keepdims=True) + (1 - strength) * valid / valid.sum(-1, keepdims=True)
    return p, {"sinks": list(sinks)}


def _sparse(n, causal, rng, valid, peaks=None):
    p = np.zeros((n, n))
    for i in range(n):
        keys = np.flatnonzero(valid[i])
        k = min(len(keys), int(rng.integers(1, 4)) if peaks is None else peaks)
        chosen = rng.choice(keys, size=k, replace=False)
        p[i, chosen] = rng.dirichlet(np.full(k, 2.0))
    strength = rng.uniform(0.7, 0.95, size=(n, 1))
    p = strength * p + (1 - strength) * valid / valid.sum(-1, keepdims=True)
    return p, {}


def _diffuse(n, causal, rng, valid):
    return valid / valid.sum(-1, keepdims=True), {}


_MAKERS = {"diagonal": _diagonal, "block": _block, "vertical": _vertical, "sparse": _sparse, "diffuse": _diffuse}
