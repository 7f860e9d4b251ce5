"""Percentile bootstrap intervals that depend on no generator where they need not: the mean of n paired differences
and P(X > Y) of two samples, each computed for a stack of samples at once (arrays in, arrays out; the coverage
benchmark calls the same functions the tables do).

Up to :data:`EXACT_UP_TO` values a side the bootstrap distribution is enumerated, not sampled: every multiset of n
draws from n values (there are C(2n − 1, n), 1,716 at n = 7) with its multinomial probability n!/(∏ c_i!)/nⁿ, so an
interval is the same on every run and every machine. Above that, :data:`RESAMPLES` draws of one seeded generator.
The interval of a discrete distribution: its lower end the smallest value whose cumulative probability reaches
α/2, its upper end the largest value whose upper tail holds α/2.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

LEVEL = 0.95
EXACT_UP_TO = 7
"""The most values a side whose bootstrap distribution is enumerated exactly."""
RESAMPLES = 9999
"""Draws of a sampled bootstrap (above :data:`EXACT_UP_TO` values)."""
SEED = 0
"""The sampled bootstrap's generator."""
_TOLERANCE = 1e-12


@lru_cache(maxsize=16)
def multisets(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every multiset of ``n`` draws from ``n`` values as counts (K, n), and its probability (K,)."""
    rows = []
    for chosen in itertools.combinations_with_replacement(range(n), n):
        rows.append(np.bincount(chosen, minlength=n))
    counts = np.array(rows, dtype=float)
    log_p = (math.lgamma(n + 1) - np.sum([[math.lgamma(c + 1) for c in row] for row in counts], axis=1)
             - n * math.log(n))
    return counts, np.exp(log_p)


def _discrete_interval(values: np.ndarray, weights: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``values`` (R, K) with probabilities ``weights`` (K,): the interval's two ends (R,)."""
    order = np.argsort(values, axis=1, kind="stable")
    ordered = np.take_along_axis(values, order, axis=1)
    p = weights[order]
    below = np.cumsum(p, axis=1)
    above = 1.0 - below + p
    tail = (1 - level) / 2
    low = np.argmax(below >= tail - _TOLERANCE, axis=1)
    high = p.shape[1] - 1 - np.argmax((above >= tail - _TOLERANCE)[:, ::-1], axis=1)
    rows = np.arange(values.shape[0])
    return ordered[rows, low], ordered[rows, high]


def _sampled_interval(draws: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    tail = (1 - level) / 2
    return np.quantile(draws, tail, axis=1), np.quantile(draws, 1 - tail, axis=1)


def mean_interval(samples: np.ndarray, level: float = LEVEL, resamples: int = RESAMPLES,
                  seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """The percentile bootstrap interval of the mean of each row of ``samples`` (R, n): exact up to
    :data:`EXACT_UP_TO` values, else ``resamples`` seeded draws (the same draws for every row)."""
    samples = np.atleast_2d(np.asarray(samples, dtype=float))
    n = samples.shape[1]
    if n <= EXACT_UP_TO:
        counts, weights = multisets(n)
        return _discrete_interval(samples @ counts.T / n, weights, level)
    picks = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    lows, highs = [], []
    for chunk in np.array_split(samples, max(1, samples.shape[0] * resamples // 20_000_000 + 1)):
        low, high = _sampled_interval(chunk[:, picks].mean(axis=2), level)
        lows.append(low)
        highs.append(high)
    return np.concatenate(lows), np.concatenate(highs)


def improvement(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """P(X > Y) + ½ P(X = Y) over every pair of a value of ours and one of theirs, per row ((R, n) and (R, m))."""
    ours, theirs = np.atleast_2d(ours), np.atleast_2d(theirs)
    return _beats(ours, theirs).mean(axis=(1, 2))


def _beats(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """(R, n, m): 1 where ours beats theirs, ½ on a tie."""
    return (ours[:, :, None] > theirs[:, None, :]) + 0.5 * (ours[:, :, None] == theirs[:, None, :])


def improvement_interval(ours: np.ndarray, theirs: np.ndarray, level: float = LEVEL, resamples: int = RESAMPLES,
                         seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """The percentile bootstrap interval of :func:`improvement`, each side resampled on its own: exact where both
    sides have at most :data:`EXACT_UP_TO` values (every pair of multisets), else ``resamples`` seeded draws."""
    ours, theirs = np.atleast_2d(np.asarray(ours, float)), np.atleast_2d(np.asarray(theirs, float))
    n, m = ours.shape[1], theirs.shape[1]
    beats = _beats(ours, theirs)  # (R, n, m)
    if max(n, m) <= EXACT_UP_TO:
        (ours_counts, ours_p), (theirs_counts, theirs_p) = multisets(n), multisets(m)
        values = np.einsum("kn,rnm,jm->rkj", ours_counts, beats, theirs_counts) / (n * m)
        weights = np.outer(ours_p, theirs_p).ravel()
        return _discrete_interval(values.reshape(values.shape[0], -1), weights, level)
    rng = np.random.default_rng(seed)
    ours_counts = rng.multinomial(n, np.full(n, 1 / n), size=resamples).astype(float)
    theirs_counts = rng.multinomial(m, np.full(m, 1 / m), size=resamples).astype(float)
    draws = np.stack([((ours_counts @ row) * theirs_counts).sum(axis=1) for row in beats]) / (n * m)
    return _sampled_interval(draws, level)
