"""Expected validation performance (``table --kind budget``): per model × task × method of a search, what the best of
n configurations would score, n = 1 … N, had n of the N the search finished been drawn at random: a method that wins
after the whole grid may lose at ten configurations. By default the n are drawn **without** replacement (n distinct
configurations, as a random search runs them and as ``replay``'s random search draws them: the two agree exactly),
the expectation over the order statistics, ties to the configuration the tables' rule prefers; with
``with_replacement`` as Dodge et al. ("Show Your Work", EMNLP 2019) draw them, ties at random. The configuration is
chosen by the value that chooses (``metrics.choosing_score``: held-out data where the runs held some out), and the dev
score of the chosen one is reported beside it; the cost axis is n × the mean epochs a configuration trained.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from istar_tune.errors import ConfigError
from istar_tune.metrics import choosing_score, chosen_on, score, tie_order
from istar_tune.results.groups import axes, percent
from istar_tune.tracking.runs import TrialRun, run_task
from istar_tune.trial_status import TrialStatus

WITHOUT_REPLACEMENT = ("drawn at random, without replacement, from the N the search finished (n distinct ones, as a "
                       "random search of n runs them; ties to the configuration the tables choose), ± its standard "
                       "deviation over such draws (closed form over the order statistics; percent)")
WITH_REPLACEMENT = ("drawn uniformly, with replacement, from the N the search finished, as Dodge et al. (2019) draw "
                    "them (ties at random), ± its standard deviation over such draws (closed form over their "
                    "empirical distribution; percent)")


def budget_caption(with_replacement: bool = False) -> str:
    """What the budget table's numbers are, drawn as it drew them."""
    return (f"Expected validation performance: the expected best `chosen` score of n configurations "
            f"{WITH_REPLACEMENT if with_replacement else WITHOUT_REPLACEMENT}; `dev`: the expected dev score of the "
            "configuration chosen (with held-out data it chose nothing); `epochs`: n × the mean epochs a "
            "configuration trained. A search that sampled or stopped early did not draw uniformly: its curve is of "
            "the configurations it finished.")


BUDGET_CAPTION = budget_caption()


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


def expected_best_without_replacement(choose: np.ndarray, report: np.ndarray, n: int,
                                      preference: list | None = None) -> tuple[float, float]:
    """The expectation and standard deviation of ``report`` at the configuration with the largest ``choose`` among
    ``n`` distinct ones drawn uniformly from the N given, ties to the one first in ``preference`` (keys that sort
    the preferred first; by default the order given).

    With the N ranked from worst to best (k = 1 … N), the k-th is the best of a draw when it is drawn and the other
    n − 1 come from the k − 1 below it: P = C(k − 1, n − 1) / C(N, n); E = Σ_k P_k r_k."""
    choose, report = np.asarray(choose, dtype=float), np.asarray(report, dtype=float)
    total = choose.size
    if choose.shape != report.shape or total == 0 or not 1 <= n <= total:
        raise ValueError(f"expected_best_without_replacement needs as many chosen as reported values, at least one, "
                         f"and 1 ≤ n ≤ N; got {choose.size}, {report.size}, n={n}")
    preferred = list(range(total)) if preference is None else preference
    ranked_by_preference = sorted(range(total), key=lambda i: preferred[i])
    place = {i: position for position, i in enumerate(ranked_by_preference)}
    worst_first = sorted(range(total), key=lambda i: (choose[i], -place[i]))
    weight = np.array([math.comb(k - 1, n - 1) for k in range(1, total + 1)], dtype=float) / math.comb(total, n)
    ordered = report[worst_first]
    expected = float(weight @ ordered)
    return expected, math.sqrt(max(float(weight @ ordered ** 2) - expected ** 2, 0.0))


def budgets(total: int) -> list[int]:
    """The n of a curve's rows: 1, 2, 4, … below ``total``, and ``total``."""
    return sorted({2 ** k for k in range(int(math.log2(total)) + 1)} | {total})


def budget_table(runs: list[TrialRun], models=None, tasks=None, methods=None, every_n: bool = False,
                 with_replacement: bool = False) -> pd.DataFrame:
    """The curve of every model × task × method of a search's finished runs (:data:`BUDGET_CAPTION`), at the n of
    :func:`budgets` or, ``every_n``, at every n from 1 to N (what ``plots`` draws); ``with_replacement``: Dodge et
    al.'s draws."""
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
                rows += _curve(group, model, task_name, method, every_n, with_replacement)
    columns = ["model", "task", "method", "n", "configurations", "chosen_by", "chosen", "chosen_sd", "dev", "dev_sd",
               "epochs"]
    table = pd.DataFrame(rows, columns=columns)
    table.attrs["caption"] = budget_caption(with_replacement)
    return table


def _curve(group: list[TrialRun], model: str, task_name: str, method: str, every_n: bool,
           with_replacement: bool) -> list[dict]:
    if not group:
        return [{"model": model, "task": task_name, "method": method, "n": None, "configurations": 0}]
    task = run_task(group[0])
    metric = task.metric
    scored = [r for r in group if None not in (choosing_score(r.metrics, metric), score(r.metrics, metric))]
    choose = np.array([percent(task, choosing_score(r.metrics, metric)) for r in scored])
    report = np.array([percent(task, score(r.metrics, metric)) for r in scored])
    epochs = float(np.mean([float(r.config.get("epochs", 0) or 0) for r in scored])) if scored else 0.0
    by = sorted({chosen_on(r.metrics, metric) for r in scored})
    preference = [tie_order(r.config) for r in scored]
    rows = []
    for n in (range(1, len(scored) + 1) if every_n else budgets(len(scored))) if scored else []:
        if with_replacement:
            (chosen, chosen_sd), (dev, dev_sd) = expected_best(choose, choose, n), expected_best(choose, report, n)
        else:
            chosen, chosen_sd = expected_best_without_replacement(choose, choose, n, preference)
            dev, dev_sd = expected_best_without_replacement(choose, report, n, preference)
        rows.append({"model": model, "task": task.name, "method": method, "n": n, "configurations": len(scored),
                     "chosen_by": "+".join(by), "chosen": round(chosen, 2), "chosen_sd": round(chosen_sd, 2),
                     "dev": round(dev, 2), "dev_sd": round(dev_sd, 2), "epochs": round(n * epochs, 1)})
    return rows
