"""What a resampling interval covers at a given number of pairs, as measured by simulation
(``python -m benchmarks.bench_coverage`` writes coverage.json beside this file): the robust table prints a bootstrap
interval only where it covers within :data:`TOLERANCE` of its nominal level, and says what it would cover elsewhere.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

TOLERANCE = 0.02
"""How far below nominal a measured coverage may fall for the interval to be printed."""
NAMES = {"mean": "a bootstrap interval of the mean difference", "improvement": "a bootstrap interval of P(X > Y)",
         "across_tasks": "a stratified bootstrap interval", "paired_t": "the paired t-interval"}


@lru_cache(maxsize=1)
def measured() -> dict:
    """The benchmark's table: interval → {"replicates", "coverage": {distribution: {n: coverage}}}, and its level."""
    return json.loads(resources.files("istar_tune.results").joinpath("coverage.json").read_text(encoding="utf-8"))


def coverage(interval: str, n: int) -> float | None:
    """The lowest coverage measured for ``interval`` over the simulated distributions at the largest measured pair
    count at or below ``n`` (coverage grows with n); ``None`` below the smallest measured."""
    lows = []
    for by_n in measured()["intervals"][interval]["coverage"].values():
        below = [int(k) for k in by_n if int(k) <= n]
        if not below:
            return None
        lows.append(by_n[str(max(below))])
    return min(lows)


def holds(interval: str, n: int) -> bool:
    """Whether ``interval`` at ``n`` pairs covered within :data:`TOLERANCE` of nominal in every simulation."""
    found = coverage(interval, n)
    return found is not None and found >= measured()["level"] - TOLERANCE - 1e-12


def why_not(interval: str, n: int) -> str:
    """The note of an interval not printed: ``3 pairs: a bootstrap interval of the mean difference would cover about
    76 %``."""
    found = coverage(interval, n)
    unit = "runs a side" if interval == "improvement" else "pairs"
    if found is None:
        return f"{n} {unit}: {NAMES[interval]} is not computed"
    return f"{n} {unit}: {NAMES[interval]} would cover about {100 * found:.0f} %"
