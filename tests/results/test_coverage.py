"""The coverage table the robust statistics read: written by the committed benchmark, it holds every interval at
every measured n; its figures agree with a simulation written here (a numpy bootstrap, another generator); and
which intervals it lets through follows the documented rule (within 2 points of 95 % in every case simulated)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks import bench_coverage
from istar_tune.results import coverage


def test_the_table_is_the_benchmarks_every_interval_at_every_n():
    table = coverage.measured()
    assert table["level"] == 0.95 and table["command"] == "python -m benchmarks.bench_coverage"
    for name, (_, counts, _, cases) in bench_coverage.MEASURES.items():
        found = table["intervals"][name]
        assert set(found["coverage"]) == set(cases)
        for by_n in found["coverage"].values():
            assert [int(n) for n in by_n] == counts


def _numpy_percentile_coverage(n: int, replicates: int = 3000, draws: int = 2000) -> float:
    rng = np.random.default_rng(99)
    covered = 0
    for differences in rng.normal(size=(replicates, n)):
        means = differences[rng.integers(0, n, size=(draws, n))].mean(axis=1)
        covered += np.quantile(means, 0.025) <= 0 <= np.quantile(means, 0.975)
    return covered / replicates


@pytest.mark.parametrize("n", [3, 5])
def test_the_bootstrap_figures_agree_with_a_simulation_written_here(n):
    """3 pairs: about 76 %; 5 pairs: about 84 % (the issue's audit measured 0.76 and 0.83)."""
    table = coverage.measured()["intervals"]["mean"]
    measured = table["coverage"]["normal"][str(n)]
    error = math.sqrt(measured * (1 - measured) / table["replicates"]) + math.sqrt(measured * (1 - measured) / 3000)
    assert abs(_numpy_percentile_coverage(n) - measured) < 4 * error


def test_what_is_printed_follows_the_documented_rule():
    table = coverage.measured()
    for name, found in table["intervals"].items():
        for n in range(2, 60):
            lows = []
            for by_n in found["coverage"].values():
                below = [int(k) for k in by_n if int(k) <= n]
                lows.append(by_n[str(max(below))])
            assert coverage.holds(name, n) == (min(lows) >= 0.95 - coverage.TOLERANCE - 1e-12), (name, n)
    assert coverage.holds("paired_t", 2) and coverage.holds("paired_t", 3)  # the reference: nominal at every n
    assert not coverage.holds("mean", 3) and not coverage.holds("mean", 5) and not coverage.holds("improvement", 3)
    assert coverage.why_not("mean", 3).startswith("3 pairs: a bootstrap interval of the mean difference would cover")
