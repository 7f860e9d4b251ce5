"""Planning a search: its (model, task, method) groups and their trial counts (the seeds stage reads each
group's best configuration from MLflow, or waits for a search of the same run), the dry-run report, and what each
group's searcher hands out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from istar_tune import tracking
from istar_tune.config import HYPERPARAMETER_KEYS, group_key, trial_epochs
from istar_tune.errors import ConfigError
from istar_tune.search.spaces.cost import Throughput, trial_seconds
from istar_tune.search.spaces.space import (
    ANY_MODEL,
    SEARCH_KEY,
    Domain,
    Group,
    SearchSpace,
    completes,
    configuration,
    grid_configs,
    trial_group,
    with_task_definition,
)

# -------------------------------------------------------------------------------------------- planning


@dataclass
class PlannedGroup:
    group: Group
    trials: int
    """Configurations: each gets its MLflow run."""
    param_space: dict[str, Any] = field(default_factory=dict)
    after: str = ""
    """Seeds stage: the group (``search:model/task/method``, same experiment) whose best trial this re-runs."""
    tune_trials: int | None = None
    """Tune trials that train them (``None``: one per configuration); fewer where configurations share epochs."""
    sharing: str | None = "one epoch count per configuration: nothing to share"
    """Why its configurations do not share epoch prefixes (``None``: they do)."""

    @property
    def trainings(self) -> int:
        """Tune trials of the group."""
        return self.trials if self.tune_trials is None else self.tune_trials


def plan(space: SearchSpace, tracking_uri: str | None = None, simulated: bool = False, search: str | None = None,
         chained: dict[str, SearchSpace] | None = None, dry_run: bool = False) -> list[PlannedGroup]:
    """The groups of a search and their trial counts.

    The seeds stage reads its configurations from MLflow at ``tracking_uri``; without one it plans every group of
    the space (an upper bound: only groups with a finished trial in ``best_of`` run). Its groups that re-run a search
    of ``chained`` (``{name: space}`` run in the same experiment) wait for that search's group instead (``after``).
    A ``dry_run`` whose sources have no finished trial yet plans that upper bound instead of refusing.
    """
    search = search or space.name
    chained = chained or {}
    if space.stage == "seeds" and (tracking_uri is not None or chained):
        planned = _plan_seeds(space, tracking_uri, simulated, search, chained, refuse_empty=not dry_run)
        if planned:
            return planned
    return [PlannedGroup(group=g, trials=space.trials_in(g), tune_trials=space.tune_trials_in(g),
                         sharing=space.sharing_problem(g)) for g in space.groups()]


def _plan_seeds(space: SearchSpace, tracking_uri: str | None, simulated: bool, search: str,
                chained: dict[str, SearchSpace], refuse_empty: bool = True) -> list[PlannedGroup]:
    # Each group starts from the best of its source group: the same model and task, the method ``start_from``.
    studied = {(g.model, g.task, space.source_method(g.method)): g for g in space.groups()}
    wanted = set(studied)
    planned, missing, sources = [], [], {}
    for experiment in space.best_of:
        if experiment in chained:
            if space.choose_by == "holdout":
                raise ConfigError(f"{space.path}: choose_by: holdout reads the held-out scores of {experiment} from "
                                  "MLflow: run that search first, then this seeds stage")
            for model, task, method in sorted(wanted & {(g.model, g.task, g.method)
                                                        for g in chained[experiment].groups()}):
                source = {"model": absolute_if_path(model), "task": task, "method": method, SEARCH_KEY: experiment}
                sources.setdefault((model, task, method), []).append(trial_group(source))
            continue
        if tracking_uri is None:
            continue
        try:
            tracking.check_store(tracking_uri)
        except ConfigError:
            if not chained:
                raise
            missing.append(experiment)  # no store yet: this run's searches are the ones re-run
            continue
        try:
            best = tracking.best_trials(tracking_uri, experiment, simulated, groups=sorted(wanted),
                                        choose_by=space.choose_by)
        except ConfigError:
            missing.append(experiment)  # that search has not run (yet): only the others are re-run
            continue
        if not best and refuse_empty and space.choose_by == "holdout" and tracking.best_trials(
                tracking_uri, experiment, simulated, groups=sorted(wanted)):
            raise ConfigError(f"{space.path}: choose_by: holdout, but the trials of {experiment} have no held-out "
                              "scores: run that search with settings.holdout (e.g. `search --holdout 0.3`)")
        for source, run in best.items():
            if source not in wanted:
                continue
            config = {k: v for k, v in run.config.items() if k in HYPERPARAMETER_KEYS and k not in _NOT_CARRIED}
            group = seeds_group(space, studied[source])
            planned.append(PlannedGroup(group=group, trials=space.trials_in(group), param_space=config))
    for source, keys in sources.items():
        group = seeds_group(space, studied[source])
        planned += [PlannedGroup(group=group, trials=space.trials_in(group), after=key) for key in keys]
    repeated = sorted({group_key(base_config(p)) for p in planned
                       if sum(group_key(base_config(q)) == group_key(base_config(p)) for q in planned) > 1})
    if repeated:
        raise ConfigError(f"{space.path}: best_of {', '.join(space.best_of)}: the groups {', '.join(repeated)} are in "
                          "more than one of those searches; name one search per group")
    if not planned and refuse_empty:
        absent = f" (no experiment {', '.join(missing)})" if missing else ""
        raise ConfigError(f"{space.path}: no finished trial of {', '.join(space.models)} × {', '.join(space.tasks)}"
                          f" × {', '.join(space.methods)} in the searches {', '.join(space.best_of)} at "
                          f"{tracking_uri}{absent}: run those searches first")
    return planned


_NOT_CARRIED = ("seed", "model", "task", "method")
"""What a seeds group does not take from the configuration it starts from (its own group names the rest)."""


def seeds_group(space: SearchSpace, group: Group) -> Group:
    """A seeds-stage group as planned: its domains are the seeds (and a study's varied values); the values it
    starts from come from the best configuration of its source group."""
    domains = {"seed": Domain("grid", tuple(space.seeds))}
    if space.vary is not None:
        key = space.vary[0]
        values = tuple(dict.fromkeys(v[key] for v in space.variants(group.model, group.method)))
        domains[key] = Domain("grid", values)
    return Group(model=group.model, task=group.task, method=group.method, domains=domains)


def dry_run_report(space: SearchSpace, planned: list[PlannedGroup], measured: Throughput | None = None) -> str:
    """Per group: configurations, Tune trials, epochs trained (and without shared prefixes) and, with a measured
    throughput, GPU-hours; then the totals and why epochs are or are not shared."""
    costs = [group_cost(space, p, measured) for p in planned]
    header = ["model", "task", "method", "configurations", "trials", "epochs", "unshared epochs"]
    rows = [[p.group.model, p.group.task, p.group.method, str(p.trials), str(p.trainings), f"{c.epochs:g}",
             f"{c.unshared_epochs:g}"] for p, c in zip(planned, costs)]
    if measured is not None:
        header.append("GPU-hours")
        rows = [[*row, f"{c.gpu_hours:.1f}"] for row, c in zip(rows, costs)]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [f"search {space.name} ({space.path}): {space.stage}, algorithm {space.algorithm}, "
             f"scheduler {space.scheduler}"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    if space.stage == "seeds":
        chained = sorted({p.after.split(":")[0] for p in planned if p.after})
        source = (f"the searches {', '.join(chained)} of this run: each group starts when the group it re-runs has "
                  "ended") if chained else "MLflow when the search runs"
        start = (f"the best {space.start_from} configuration of each model × task" if space.start_from
                 else "the best configuration of each group")
        constants = {k: d.values[0] for k, d in space.hyperparameters.items()}
        fixed = f" with {', '.join(f'{k} = {v}' for k, v in constants.items())}," if constants else ""
        each = f" for each {space.vary[0]} of {_listed(space.vary[1], space.models)} and" if space.vary else " with"
        if space.choose_by == "holdout":
            start += " (chosen by its held-out training examples' score, not the dev set)"
        lines.append(f"(at most: {start} found in {', '.join(space.best_of)} is re-run{fixed}{each} seeds "
                     f"{list(space.seeds)}; read from {source})")
    shared = [p for p in planned if p.sharing is None]
    if shared:
        lines.append(f"epoch prefixes shared in {len(shared)} of {len(planned)} groups: configurations that differ "
                     "only in epochs run as one trial to the largest count, each smaller count completed on the way "
                     "(its own MLflow run)")
    for reason in dict.fromkeys(p.sharing for p in planned if p.sharing):
        lines.append(f"epoch prefixes not shared: {reason}")
    configurations, trials = sum(p.trials for p in planned), sum(p.trainings for p in planned)
    epochs, unshared = sum(c.epochs for c in costs), sum(c.unshared_epochs for c in costs)
    saved = f" ({epochs / unshared:.2f}×)" if unshared and epochs != unshared else ""
    groups = f"{len(planned)} group{'s' if len(planned) != 1 else ''}"
    total = (f"total {configurations} configurations in {trials} trials, {groups}; {epochs:g} epochs "
             f"trained, {unshared:g} without sharing{saved}")
    if measured is not None:
        gpu_hours = sum(c.gpu_hours for c in costs)
        unshared_hours = sum(c.unshared_gpu_hours for c in costs)
        total += (f"; {gpu_hours:.1f} GPU-hours ({unshared_hours:.1f} without sharing) at "
                  + ", ".join(f"{m} {r:g} tokens/s" for m, r in measured.tokens_per_second.items()))
    lines.append(total)
    concurrency = space.concurrency or "as the cluster allows"
    lines.append(f"each trial {space.cpu:g} CPU, {space.gpu:g} GPU; trials at once per group: {concurrency}; "
                 f"retries per trial: {space.max_failures}")
    if space.algorithm == "optuna" or (space.stage == "seeds" and not all(p.param_space for p in planned)):
        lines.append("(epochs of sampled or not yet chosen configurations estimated from the space's typical values)")
    return "\n".join(lines)


def _listed(per_model: dict[str, tuple], models: tuple[str, ...]) -> str:
    return "; ".join(f"{list(values)}" + ("" if model == ANY_MODEL else f" ({model})")
                     for model, values in per_model.items() if model == ANY_MODEL or model in models)


@dataclass
class GroupCost:
    epochs: float
    """Epochs its trials train (as planned: shared where they share)."""
    unshared_epochs: float
    gpu_hours: float = 0.0
    unshared_gpu_hours: float = 0.0


def group_cost(space: SearchSpace, item: PlannedGroup, measured: Throughput | None = None) -> GroupCost:
    """What a group's trials cost, with and without shared epoch prefixes (one cost model:
    :func:`istar_tune.search.spaces.cost.trial_seconds`)."""
    trials = planned_configs(space, item)
    unshared = [configuration(t, k) for t in trials for k in completes(t)]
    tokens = space.run_settings().shrinkage_tokens

    def hours(configs: list[dict]) -> float:
        return sum(trial_seconds(c, tokens, measured) for c in configs) * space.gpu / 3600.0

    cost = GroupCost(epochs=sum(map(trial_epochs, trials)), unshared_epochs=sum(map(trial_epochs, unshared)))
    if measured is not None:
        cost.gpu_hours, cost.unshared_gpu_hours = hours(trials), hours(unshared)
    return cost


def planned_configs(space: SearchSpace, item: PlannedGroup, name: str = "") -> list[dict[str, Any]]:
    """The trials' configurations of a grid or seeds group; a typical configuration per trial of an Optuna group or a
    seeds group whose configuration is not known yet."""
    base, domains = base_config(item, name or None), item.group.domains
    if space.stage == "seeds":  # the best configuration (when known: its values are in the base) per variant
        return [{**base, **variant} for variant in space.variants(item.group.model, item.group.method)]
    if space.algorithm == "grid":
        return grid_configs(base, domains, space.num_samples, space.seed, item.sharing is None)
    return [typical_config(base, domains)] * item.trials


def typical_config(base: dict[str, Any], domains: dict[str, Domain]) -> dict[str, Any]:
    """A sampled group's configuration for estimates: constants, each choice's first value and each range's
    middle."""
    typical = dict(base)
    for key, domain in domains.items():
        if domain.kind in ("constant", "grid", "choice"):
            typical[key] = domain.values[0]
        elif domain.kind == "randint":
            typical[key] = (domain.values[0] + domain.values[1]) // 2
        else:
            typical[key] = type(domain.values[0])((domain.values[0] + domain.values[1]) / 2)
    return typical


def base_config(planned: PlannedGroup, search: str | None = None) -> dict[str, Any]:
    group = planned.group
    base = {"model": absolute_if_path(group.model), "task": group.task, "method": group.method,
            **planned.param_space}
    # The configurations handed to Tune carry the task's definition (a task that is not shipped).
    return {**with_task_definition(base), SEARCH_KEY: search} if search else base


def group_plans(space: SearchSpace, planned: list[PlannedGroup], name: str = ""):
    """What :class:`~istar_tune.search.tune.searcher.GroupSearcher` hands out: every configuration of grid and seeds
    groups, an Optuna budget and space for Optuna groups; each configuration names its search (``name``)."""
    from istar_tune.search.tune.searcher import GroupPlan

    name = name or space.name
    plans = []
    for item in planned:
        base, domains = base_config(item, name), item.group.domains
        key = trial_group(base)
        if item.after:
            plans.append(GroupPlan(key=key, base=base, after=item.after,
                                   variants=space.variants(item.group.model, item.group.method),
                                   concurrency=space.concurrency))
            continue
        if space.stage == "seeds" or space.algorithm == "grid":
            plans.append(GroupPlan(key=key, configs=planned_configs(space, item, name),
                                   concurrency=space.concurrency))
            continue
        constants = {k: d.values[0] for k, d in domains.items() if d.kind == "constant"}
        sampled = {k: d.tune() for k, d in domains.items() if d.kind != "constant"}
        for point in space.points_to_evaluate:
            missing = sorted(set(sampled) - set(point))
            if missing:
                raise ConfigError(f"{space.path}: search.points_to_evaluate: {point} lacks {', '.join(missing)}, "
                                  f"sampled in group {key}: give every sampled hyperparameter")
        plans.append(GroupPlan(key=key, budget=item.trials, base={**base, **constants}, optuna_space=sampled,
                               estimate=trial_seconds(typical_config(base, domains)), study=key,
                               points=[dict(p) for p in space.points_to_evaluate], concurrency=space.concurrency))
    return plans


def absolute_if_path(model: str) -> str:
    """Trials run in their own working folder: a relative local model path is made absolute on the driver."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model

