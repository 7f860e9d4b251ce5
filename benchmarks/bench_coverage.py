"""The coverage of every interval ``table --kind seeds --stats robust`` can print, measured by simulation; writes the
table the tool reads (istar_tune/results/coverage.json) and prints it.

    python -m benchmarks.bench_coverage [--replicates 2000] [--output istar_tune/results/coverage.json]

Each interval is computed by the tool's own functions (istar_tune/results/resampling.py, paired.py) on
``--replicates`` simulated data sets per pair count n, the true value known:
* ``mean``: the percentile bootstrap of the mean of n paired differences (true mean 0);
* ``paired_t``: the paired Student t-interval of the same differences (the reference: nominal at every n when the
  differences are normal);
* ``improvement``: the percentile bootstrap of P(X > Y) from n runs a side drawn from one distribution (true 0.5),
  and with the method's runs shifted up by one SD of normal noise (``normal+1sd``: true Φ(1/√2) = 0.760);
* ``across_tasks``: the stratified bootstrap of the mean over 3 tasks of each task's paired difference in units of
  its pooled seed SD (a seed's effect shared by both runs of a pair, as in a seeds stage; true 0).
Each under two distributions of the noise: normal, and Student t with 3 degrees of freedom (heavy tails). The tool
prints a resampling interval only at pair counts whose coverage, the lower of the two, is within
``istar_tune.results.coverage.TOLERANCE`` of nominal; at an n not measured it takes the largest measured n below.
The Monte-Carlo standard error of a coverage near 0.95 from 2,000 replicates is 0.005.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy import stats

from istar_tune.results import paired, resampling

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "istar_tune" / "results" / "coverage.json"
PAIRS = [2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 25, 30, 40, 50]
IMPROVEMENT_PAIRS = [2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50]
"""P(X > Y)'s bootstrap enumerates 1,716² pairs of multisets at n = 7: measured below and above it."""
TASKS = 3
DISTRIBUTIONS = ("normal", "t3")
SHIFTED = "normal+1sd"
"""P(X > Y)'s third case: ours N(1, 1) against theirs N(0, 1)."""
SAMPLED_RESAMPLES = 1999
"""Resamples of a sampled bootstrap in the simulation (the tool draws 9,999; coverage moves by less than the
Monte-Carlo error)."""


def draw(rng: np.random.Generator, distribution: str, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape) if distribution == "normal" else rng.standard_t(3, shape)


def mean_coverage(rng, distribution: str, n: int, replicates: int) -> float:
    samples = draw(rng, distribution, (replicates, n))
    low, high = resampling.mean_interval(samples, resamples=SAMPLED_RESAMPLES)
    return float(np.mean((low <= 0) & (0 <= high)))


def t_coverage(rng, distribution: str, n: int, replicates: int) -> float:
    samples = draw(rng, distribution, (replicates, n))
    found = [paired.paired_t(row) for row in samples]
    return float(np.mean([f.low <= 0 <= f.high for f in found]))


def improvement_coverage(rng, distribution: str, n: int, replicates: int) -> float:
    shifted = distribution == SHIFTED
    base = "normal" if shifted else distribution
    ours, theirs = draw(rng, base, (replicates, n)) + shifted, draw(rng, base, (replicates, n))
    truth = float(stats.norm.cdf(1 / np.sqrt(2))) if shifted else 0.5
    covered = 0
    for a, b in zip(ours, theirs):  # one data set at a time, as the tool computes them (and memory allows at n = 6)
        low, high = resampling.improvement_interval(a[None], b[None], resamples=SAMPLED_RESAMPLES)
        covered += bool(low[0] <= truth <= high[0])
    return covered / replicates


def across_coverage(rng, distribution: str, n: int, replicates: int) -> float:
    covered = 0
    for _ in range(replicates):
        seed_effect = draw(rng, distribution, (TASKS, n)) / np.sqrt(2)
        base = seed_effect + draw(rng, distribution, (TASKS, n)) / np.sqrt(2)
        ours = seed_effect + draw(rng, distribution, (TASKS, n)) / np.sqrt(2)
        bounds = paired.across_tasks_interval(list(ours), list(base), resamples=SAMPLED_RESAMPLES)
        covered += bounds is not None and bounds[0] <= 0 <= bounds[1]
    return covered / replicates


MEASURES = {
    "mean": (mean_coverage, PAIRS, 1, DISTRIBUTIONS),
    "paired_t": (t_coverage, PAIRS, 1, DISTRIBUTIONS),
    "improvement": (improvement_coverage, IMPROVEMENT_PAIRS, 2, (*DISTRIBUTIONS, SHIFTED)),
    "across_tasks": (across_coverage, PAIRS, 4, DISTRIBUTIONS),
}
"""Interval → (its simulation, the n measured, the divisor of --replicates it runs (the slow ones run fewer), the
cases simulated)."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    began = time.perf_counter()
    table: dict = {"level": resampling.LEVEL, "command": "python -m benchmarks.bench_coverage", "intervals": {}}
    for name, (measure, counts, divisor, cases) in MEASURES.items():
        replicates = max(100, args.replicates // divisor)
        found = {}
        for distribution in cases:
            rng = np.random.default_rng([args.seed, len(name), len(distribution)])
            found[distribution] = {str(n): round(measure(rng, distribution, n, replicates), 4) for n in counts}
        table["intervals"][name] = {"replicates": replicates, "coverage": found}
        print(f"{name} ({replicates} replicates, {time.perf_counter() - began:.0f} s)")
        for distribution, by_n in found.items():
            print(f"  {distribution:6s} " + "  ".join(f"n={n}: {c:.3f}" for n, c in by_n.items()))
    args.output.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output} in {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
