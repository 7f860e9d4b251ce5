"""Expected validation performance (``table --kind budget``; Dodge et al., "Show Your Work", EMNLP 2019): per model ×
task × method of a search, what the best of n configurations would score, n = 1 … N, had they been drawn at random
(uniformly, with replacement) from the N the search finished: a method that wins after the whole grid may lose at ten
configurations. The expectation and its standard deviation are the closed form over the empirical distribution of the
N scores; the configuration is chosen by the value that chooses (``metrics.choosing_score``: held-out data where the
runs held some out), and the dev score of the chosen one is reported beside it; the cost axis is n × the mean epochs
a configuration trained.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from istar_tune.errors import ConfigError
from istar_tune.metrics import choosing_score, chosen_on, score
from istar_tune.results.groups import axes, percent
from istar_tune.tracking.runs import TrialRun, run_task
from istar_tune.trial_status import TrialStatus

BUDGET_CAPTION = ("Expected validation performance (Dodge et al., 2019): the expected best `chosen` score of n "
                  "configurations drawn uniformly, with replacement, from the N the search finished, ± its standard "
                  "deviation over such draws (closed form over their empirical distribution; percent); `dev`: the "
                  "expected dev score of the configuration chosen (with held-out data it chose nothing); `epochs`: n × "
                  "the mean epochs a configuration trained. A search that sampled or stopped early did not draw "
                  "uniformly: its curve is of the configurations it finished.")


def expected_best(choose: np.ndarray, report: np.ndarray, n: int) -> tuple[float, float]:
    """The expectation and standard deviation of ``report`` at the configuration with the largest ``choose`` among
    ``n`` drawn uniformly with replacement from the pairs given (a tie chosen at random among its members).

    With the distinct ``choose`` values c_1 < … < c_K, F_k the share of configurations at or below c_k, and r̄_k (the
    mean of ``report``, and of its square, over those at c_k): P(best at c_k) = F_k^n − F_(k-1)^n, so
    E = Σ_k (F_k^n − F_(k-1)^n) r̄_k; with ``report`` = ``choose`` this is Dodge et al.'s expected maximum."""
    choose, report = np.asarray(choose, dtype=float), np.asarray(report, dtype=float)
    if choose.shape != report.shape or choose.size == 0 or n < 1:
        raise ValueError(f"expected_best needs as many chosen as reported values, at least one, and n ≥ 1; got "
                         f"{choose.size}, {report.size}, n={n}")
    values, inverse, counts = np.unique(choose, return_inverse=True, return_counts=True)
    mean = np.bincount(inverse, weights=report) / counts
    square = np.bincount(inverse, weights=report ** 2) / counts
    below = np.cumsum(counts) / choose.size
    weight = below ** n - np.concatenate(([0.0], below[:-1])) ** n
    expected = float(weight @ mean)
    return expected, math.sqrt(max(float(weight @ square) - expected ** 2, 0.0))


def budgets(total: int) -> list[int]:
    """The n of a curve's rows: 1, 2, 4, … below ``total``, and ``total``."""
    return sorted({2 ** k for k in range(int(math.log2(total)) + 1)} | {total})


def budget_table(runs: list[TrialRun], models=None, tasks=None, methods=None, every_n: bool = False) -> pd.DataFrame:
    """The curve of every model × task × method of a search's finished runs (:data:`BUDGET_CAPTION`), at the n of
    :func:`budgets` or, ``every_n``, at every n from 1 to N (what ``plots`` draws)."""
    if runs and all(r.stage == "seeds" for r in runs):
        raise ConfigError("--kind budget draws configurations from a search's grid; a seeds stage re-runs one "
                          "configuration per group: tabulate the search it chose from")
    models, tasks, methods = axes(runs, models, tasks, methods)
    rows = []
    for model in models:
        for task_name in tasks:
            for method in methods:
                group = [r for r in runs if (r.model, r.task, r.method) == (model, task_name, method)
                         and r.status == TrialStatus.FINISHED and r.stage != "seeds"]
                rows += _curve(group, model, task_name, method, every_n)
    columns = ["model", "task", "method", "n", "configurations", "chosen_by", "chosen", "chosen_sd", "dev", "dev_sd",
               "epochs"]
    table = pd.DataFrame(rows, columns=columns)
    table.attrs["caption"] = BUDGET_CAPTION
    return table


def _curve(group: list[TrialRun], model: str, task_name: str, method: str, every_n: bool) -> list[dict]:
    if not group:
        return [{"model": model, "task": task_name, "method": method, "n": None, "configurations": 0}]
    task = run_task(group[0])
    metric = task.metric
    scored = [r for r in group if None not in (choosing_score(r.metrics, metric), score(r.metrics, metric))]
    choose = np.array([percent(task, choosing_score(r.metrics, metric)) for r in scored])
    report = np.array([percent(task, score(r.metrics, metric)) for r in scored])
    epochs = float(np.mean([float(r.config.get("epochs", 0) or 0) for r in scored])) if scored else 0.0
    by = sorted({chosen_on(r.metrics, metric) for r in scored})
    rows = []
    for n in (range(1, len(scored) + 1) if every_n else budgets(len(scored))) if scored else []:
        chosen, chosen_sd = expected_best(choose, choose, n)
        dev, dev_sd = expected_best(choose, report, n)
        rows.append({"model": model, "task": task.name, "method": method, "n": n, "configurations": len(scored),
                     "chosen_by": "+".join(by), "chosen": round(chosen, 2), "chosen_sd": round(chosen_sd, 2),
                     "dev": round(dev, 2), "dev_sd": round(dev_sd, 2), "epochs": round(n * epochs, 1)})
    return rows
