"""Replays of each search strategy over many seeds of its own randomness, summarised per unit and setting: how often
it chose the grid's best configuration (or one within the seed noise of it), its regret, and what it cost as a share
of the grid; and the one recommendation: the cheapest setting that chose the best (or within noise) in at least
:data:`TARGET` of the replays of every unit."""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

import numpy as np
import pandas as pd

from istar_tune.errors import ConfigError
from istar_tune.replay import schedulers
from istar_tune.replay.curves import Choice, Curve, Unit, arms
from istar_tune.search.schedulers import Rule, registered, stopping
from istar_tune.search.schedulers.conformal import NOT_PROMISED, PROMISE, margin, needed

TARGET = 0.95
"""The share of replays a recommended setting must choose the best (or within noise) in."""
SAMPLE_SHARES = (1 / 16, 1 / 8, 1 / 4, 1 / 2)
"""Random search and TPE: the configurations they try, as shares of the grid's."""
SHORT = {"grace_period": "grace", "reduction_factor": "eta", "alpha": "alpha"}
"""A ``scheduler.*`` setting as a replay row's setting names it (``replay/fragment.py`` reads it back)."""
TPE_LARGEST_SHARE = 1 / 4
"""TPE's largest share (its cost per proposal grows with the trials told: half of a 648-point grid takes 1 s a
replay)."""
COLUMNS = ["model", "task", "method", "scheduler", "setting", "replays", "configurations", "chose_best",
           "chose_best_low", "chose_best_high", "within_noise", "within_noise_low", "within_noise_high",
           "mean_regret", "worst_regret", "mean_dev_regret", "worst_dev_regret", "epochs_share", "grid_epochs",
           "gpu_hours", "gpu_hours_share"]


@dataclass(frozen=True)
class Setting:
    """A search strategy with its parameters, as one row of the replay table names it."""

    scheduler: str
    setting: str
    run: Callable[[list[Curve], np.random.Generator], Choice]


def settings_for(unit: Unit, workers: int, schedulers_asked: tuple[str, ...] | None = None) -> list[Setting]:
    """The default settings replayed on ``unit``: random search over :data:`SAMPLE_SHARES` of its configurations,
    TPE over those up to :data:`TPE_LARGEST_SHARE`; every registered scheduler that stops trials with each of the
    settings it declares (:meth:`~istar_tune.search.schedulers.Scheduler.replayed`: ASHA with grace 1 and 2 × η 2,
    3, 4; asynchronous Hyperband with η 2 and 3; median stopping with grace 1 and 2; conformal with grace 1 and 2 ×
    α 0.1 and 0.2), wherever its first rung, the grace period, lies below the largest epochs (at 3 epochs, grace 1
    with η 3 or 4 cuts once, after epoch 1), driven on the unit's :func:`~istar_tune.replay.curves.arms` (with shared
    prefixes, ``epochs`` is their budget, not a hyperparameter)."""
    count, horizon = len(unit.curves), max(c.epochs for c in unit.curves)
    sizes = sorted({max(1, round(count * share)) for share in SAMPLE_SHARES if round(count * share) < count})
    found = [Setting("random", f"k={k}", lambda c, r, k=k: schedulers.random_search(c, r, k)) for k in sizes]
    found += [Setting("tpe", f"k={k}", lambda c, r, k=k: schedulers.tpe(c, r, k)) for k in sizes
              if k <= count * TPE_LARGEST_SHARE]
    on = _on_arms(arms(unit.curves))
    found += [_driven(scheduler, values, horizon, workers, on) for scheduler in registered().values()
              if scheduler.build is not None for values in scheduler.replayed(horizon)]
    return [s for s in found if schedulers_asked is None or s.scheduler in schedulers_asked]


def strategy_names() -> tuple[str, ...]:
    """Every strategy a replay knows: random search, TPE and each registered scheduler that stops trials."""
    return ("random", "tpe", *stopping())


def _named(values: dict[str, float], workers: int) -> str:
    return " ".join([*(f"{SHORT.get(k, k)}={v:g}" for k, v in values.items()), f"workers={workers}"])


def _driven(scheduler, values: dict[str, float], horizon: int, workers: int, on) -> Setting:
    """A registered scheduler with ``values`` of its settings, replayed by driving the object it builds."""
    rule = Rule(scheduler.name, horizon, int(values.get("grace_period", 1)),
                float(values.get("reduction_factor", 3.0)), alpha=float(values.get("alpha", 0.1)))
    return Setting(scheduler.name, _named(values, workers),
                   on(lambda c, r, done: schedulers.driven(c, r, lambda: scheduler.build(rule), workers,
                                                           completes=done)))


def _on_arms(found: dict[int, list[int]]):
    """A strategy run on the curves ``found`` names (:func:`~istar_tune.replay.curves.arms`, with the epochs each
    completes on its way), its choice named by the unit's own indices."""
    indices = list(found)
    completes = {j: found[i] for j, i in enumerate(indices)}

    def wrap(run):
        def on(curves, rng):
            choice = run([curves[i] for i in indices], rng, completes)
            chosen = (indices[choice.chosen[0]], choice.chosen[1]) if choice.chosen else None
            return Choice(chosen, choice.epochs_trained, choice.seconds)
        return on
    return wrap


def summary_row(unit: Unit, scheduler: str, name: str, replays: int, choices: list[Choice]) -> dict:
    """One row of the table: a setting's ``choices`` over its ``replays`` on ``unit``, counted."""
    best, best_dev = unit.score_of(unit.best), unit.dev_score_of(unit.best)
    regrets = np.array([best - unit.score_of(c.chosen) if c.chosen else math.inf for c in choices])
    dev_regrets = np.array([best_dev - unit.dev_score_of(c.chosen) if c.chosen else math.inf for c in choices])
    has_dev = unit.curves[0].dev is not None
    within = (float(np.mean(regrets <= unit.noise)) if unit.noise is not None else math.nan)
    gpu_hours = float(np.mean([c.seconds for c in choices])) / 3600
    chose = float(np.mean([unit.is_best(c.chosen) for c in choices]))
    chose_low, chose_high = wilson(chose, len(choices))
    within_low, within_high = wilson(within, len(choices)) if not math.isnan(within) else (math.nan, math.nan)
    return {"model": unit.model, "task": unit.task, "method": unit.method, "scheduler": scheduler,
            "setting": name, "replays": replays, "configurations": len(unit.curves),
            "chose_best": chose, "chose_best_low": chose_low, "chose_best_high": chose_high,
            "within_noise": within, "within_noise_low": within_low, "within_noise_high": within_high,
            "mean_regret": float(np.mean(regrets)), "worst_regret": float(np.max(regrets)),
            "mean_dev_regret": float(np.mean(dev_regrets)) if has_dev else math.nan,
            "worst_dev_regret": float(np.max(dev_regrets)) if has_dev else math.nan,
            "epochs_share": float(np.mean([c.epochs_trained for c in choices])) / unit.grid_epochs,
            "grid_epochs": unit.grid_epochs,
            "gpu_hours": gpu_hours, "gpu_hours_share": gpu_hours * 3600 / unit.grid_seconds}


def replay_table(units: list[Unit], replays: int = 50, workers: int = 4, seed: int = 0,
                 schedulers_asked: tuple[str, ...] | None = None,
                 progress: Callable[[str], None] | None = None, processes: int | None = None) -> pd.DataFrame:
    """Every default setting (:func:`settings_for`) replayed on every unit; a row each. The replays run side by side
    in ``processes`` processes (default: one per core this process may use; one below :data:`PARALLEL_FROM`
    configurations); the table is the same whatever their number: each replay draws from its own seed."""
    settings = [settings_for(unit, workers, schedulers_asked) for unit in units]
    if processes is None:
        processes = cores() if sum(len(unit.curves) for unit in units) >= PARALLEL_FROM else 1
    # A piece: some replays of one setting on one unit (a setting's replays split, so no long one runs alone).
    step = math.ceil(replays / max(1, processes))
    pieces = [(u, index, first) for u, found in enumerate(settings) for index in range(len(found))
              for first in range(0, replays, step)]
    choices: dict[tuple[int, int], list[tuple[int, Choice]]] = {}  # (unit, setting) → (replay, its choice)
    left = [sum(1 for p in pieces if p[0] == u) for u in range(len(units))]

    def done(piece: tuple[int, int, int], found: list[Choice]) -> None:
        u, index, first = piece
        choices.setdefault((u, index), []).extend(enumerate(found, start=first))
        left[u] -= 1
        if progress and not left[u]:
            unit = units[u]
            progress(f"replayed {unit.model}/{unit.task}/{unit.method}: {len(unit.curves)} configurations")

    if processes <= 1:
        for u, index, first in pieces:
            done((u, index, first), _replays(units[u], workers, schedulers_asked, _name(settings[u][index]), first,
                                             replays, seed))
    else:  # spawned, not forked: the caller may hold threads (MLflow's, Ray's)
        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
            pending = {pool.submit(_replays, units[u], workers, schedulers_asked, _name(settings[u][index]), first,
                                   min(first + step, replays), seed): (u, index, first)
                       for u, index, first in pieces}
            for future in as_completed(pending):
                done(pending[future], future.result())
    rows = []
    for u, found in enumerate(settings):
        for index, setting in enumerate(found):
            ordered = [choice for _, choice in sorted(choices[(u, index)], key=lambda item: item[0])]
            rows.append(summary_row(units[u], setting.scheduler, setting.setting, replays, ordered))
    return pd.DataFrame(rows, columns=COLUMNS)


GUARANTEE = "Guarantee (α = {alpha:g}): " + PROMISE + "; " + NOT_PROMISED + "."


def conformal_bounds(units: list[Unit], alpha: float = 0.1, grace: int = 1) -> list[str]:
    """Per group, conformal early stopping's rule (:mod:`istar_tune.search.schedulers.conformal`) fitted on the
    grid's curves that reach its last epoch (each shared trial's longest): the margin after each epoch a stop can
    happen at; then the guarantee, once."""
    lines = []
    for unit in units:
        curves = [unit.curves[i] for i in arms(unit.curves)]
        horizon = max(c.epochs for c in curves)
        full = [c for c in curves if c.epochs == horizon and not c.failed and math.isfinite(c.score())]
        level = alpha / max(1, horizon - grace)
        cuts = {t: margin([c.score() - c.score(t) for c in full if math.isfinite(c.score(t))], level)
                for t in range(grace, horizon)}
        said = ", ".join(f"after epoch {t} {'+inf' if math.isinf(q) else f'{q:+.4f}'}" for t, q in cuts.items())
        few = "" if len(full) >= needed(level) else f"; it needs {needed(level)} to bound an epoch: it stops nothing"
        lines.append(f"conformal rule for {unit.model}/{unit.task}/{unit.method} (α {alpha:g}, {len(full)} curves to "
                     f"epoch {horizon}): stop a trial whose score so far plus its margin ({said or 'no epoch'}) is "
                     f"below the best finished score{few}")
    return [*lines, GUARANTEE.format(alpha=alpha)] if lines else []


def _name(setting: Setting) -> tuple[str, str]:
    return setting.scheduler, setting.setting


PARALLEL_FROM = 200
"""Configurations from which :func:`replay_table` replays in several processes by default (below, starting them, a
second or two each, costs more than they save)."""


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _replays(unit: Unit, workers: int, schedulers_asked: tuple[str, ...] | None, name: tuple[str, str],
             first: int, end: int, seed: int) -> list[Choice]:
    """Replays ``first``..``end - 1`` of the setting ``name`` (scheduler, setting) of ``unit`` (settings hold
    closures, so a process builds its own, from the schedulers registered there)."""
    setting = {(s.scheduler, s.setting): s for s in settings_for(unit, workers, schedulers_asked)}.get(name)
    if setting is None:
        raise ConfigError(f"replay: scheduler {name[0]} is registered in the replaying process only (register() "
                          "there), not in the processes replaying beside it: replay with --processes 1, or install "
                          "it as an entry point (docs/searching.md)")
    return [setting.run(unit.curves, np.random.default_rng([seed, r])) for r in range(first, end)]


Z_95 = 1.959963984540054
"""The normal quantile of a two-sided 95 % interval."""


def wilson(share: float, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval (95 %) of a share observed in ``n`` replays: how sure a 50-replay estimate is (50 of
    50 is [0.929, 1])."""
    if n <= 0 or math.isnan(share):
        return math.nan, math.nan
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def replays_to_decide(target: float = 0.95, z: float = Z_95) -> int:
    """The fewest replays whose interval can lie wholly at or above ``target``: every replay a success, the Wilson
    lower bound n / (n + z²) reaching it."""
    return math.ceil(target * z * z / (1 - target))


@dataclass(frozen=True)
class Advice:
    """What the replay recommends: ``kind`` ``setting`` (a cheaper setting decided on the lower bound), ``undecided``
    (one reached the target but its interval does not lie above it), ``grid`` (keep the grid) or ``nothing``; the
    setting's scheduler and parameters (``setting``, ``undecided``; ``grid``: the most reliable one), its lowest share
    over the units (of ``what``: the best, or within the seed noise of it where a seeds stage gave the noise), the
    lower bound of that share's interval, its share of the grid's epochs (its epochs over the grid's, all units
    pooled: what a search of it measures) and its lowest share of choosing the grid's own best (``chose``: the same
    as ``reached`` unless the noise counted)."""

    kind: str
    scheduler: str = ""
    setting: str = ""
    reached: float = 0.0
    low: float = 0.0
    share: float = 0.0
    replays: int = 0
    what: str = "the best"
    chose: float = 0.0


def advice(table: pd.DataFrame) -> Advice:
    """The cheapest setting (by its share of the grid's epochs, the units pooled) that chose the grid's best, or one
    within the seed noise of it, in at least :data:`TARGET` of the replays of every unit, judged on the lower bound
    of its 95 % interval (:func:`wilson`); else one whose share reached the target but whose interval does not lie
    above it (undecided); else keep the grid, naming the most reliable setting replayed in every unit."""
    if table.empty:
        return Advice("nothing")
    replays = int(table.replays.min()) if "replays" in table else 0
    reached = table.chose_best.where(table.within_noise.isna(), np.maximum(table.chose_best, table.within_noise))
    low = np.array([wilson(share, replays)[0] if replays else share for share in reached])
    by = table.assign(reached=reached, low=low, epochs=table.epochs_share * table.grid_epochs).groupby(
        ["scheduler", "setting"], sort=False)
    summary = by.agg(reached=("reached", "min"), low=("low", "min"), chose=("chose_best", "min"),
                     epochs=("epochs", "sum"), grid=("grid_epochs", "sum"), units=("reached", "size"))
    summary["share"] = summary.epochs / summary.grid
    everywhere = summary[summary.units == table.groupby(["model", "task", "method"]).ngroups]
    cheaper = everywhere[everywhere.share < 1].sort_values("share", kind="stable")
    sure, likely = cheaper[cheaper.low >= TARGET], cheaper[cheaper.reached >= TARGET]
    what = "the best or one within its seed noise" if table.within_noise.notna().any() else "the best"
    if everywhere.empty:
        return Advice("grid", replays=replays, what=what)
    kind, rows = next(((k, rows) for k, rows in (("setting", sure), ("undecided", likely)) if not rows.empty),
                      ("grid", everywhere.sort_values(["reached", "share"], ascending=[False, True], kind="stable")))
    top = rows.iloc[0]
    return Advice(kind, top.name[0], top.name[1], float(top.reached), float(top.low), float(top.share), replays, what,
                  float(top.chose))


def recommendation(table: pd.DataFrame) -> str:
    """:func:`advice` in one line."""
    found = advice(table)
    if found.kind == "nothing":
        return "recommendation: nothing was replayed"
    name = f"{found.scheduler} {found.setting}"
    interval = f" (95 % interval from {found.low:.0%}, {found.replays} replays)" if found.replays else ""
    exact = (f"; the grid's own choice in {found.chose:.0%}, judged on the first" if found.what != "the best"
             else "")
    if found.kind == "setting":
        return (f"recommendation: {name}: chose {found.what} in {found.reached:.0%} of the replays (the lowest of "
                f"any group{exact}){interval}, for {found.share:.0%} of the grid's epochs")
    if found.kind == "undecided":
        return (f"recommendation: undecided: {name} chose {found.what} in {found.reached:.0%} of the replays "
                f"(the lowest of any group{exact}){interval}, for {found.share:.0%} of the grid's epochs, but its "
                f"interval reaches below {TARGET:.0%}: replay again with --replays {replays_to_decide(TARGET)} or "
                "more to decide")
    if not found.scheduler:
        return "recommendation: keep the grid: no setting was replayed in every group"
    return (f"recommendation: keep the grid: no cheaper setting chose {found.what} in {TARGET:.0%} of the replays of "
            f"every group (the most reliable, {name}, did in {found.reached:.0%} at "
            f"{found.share:.0%} of the grid's epochs{exact})")
