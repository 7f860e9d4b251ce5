"""Planning a search: its (model, task, method) groups and their trial counts (the seeds stage reads each
group's best configuration from MLflow, or waits for a search of the same run), their configurations, and what each
group's searcher hands out (the dry run's report: :mod:`istar_tune.search.dry_run`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from istar_tune import tracking
from istar_tune.config import HYPERPARAMETER_KEYS, group_key
from istar_tune.errors import ConfigError
from istar_tune.metrics import chosen_on
from istar_tune.search.backends import get_backend
from istar_tune.search.spaces.cost import trial_seconds
from istar_tune.search.spaces.grid import grid_configs
from istar_tune.search.spaces.space import Domain, Group, SearchSpace
from istar_tune.trial_config import SEARCH_KEY, fuse, trial_group, with_task_definition

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
    fusing: str | None = "search.fuse is 1"
    """Why its configurations do not train as fused trials (``None``: those of one batch stream do)."""
    bundle: int = 1
    """Its largest trial's configurations (more than 1: a fused trial's members)."""
    chosen_by: str = ""
    """Seeds stage: what chose the configuration it re-runs (``holdout`` or ``dev``; empty: chosen as the search
    runs, by its objective's rule)."""

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
                         sharing=space.sharing_problem(g), fusing=space.fuse_problem(g),
                         bundle=max(space.bundles_in(g)) if space.fuse_problem(g) is None else 1)
            for g in space.groups()]


def _plan_seeds(space: SearchSpace, tracking_uri: str | None, simulated: bool, search: str,
                chained: dict[str, SearchSpace], refuse_empty: bool = True) -> list[PlannedGroup]:
    # Each group starts from the best of its source group: the same model and task, the method ``start_from``.
    studied = {(g.model, g.task, space.source_method(g.method)): g for g in space.groups()}
    metrics = {g.task: g.task_object.metric for g in studied.values()}  # the tasks the space holds, not a registry
    wanted = set(studied)
    planned, missing, sources = [], [], {}
    for experiment in space.best_of:
        if experiment in chained:
            for group, after in _chained_sources(space, experiment, chained[experiment], wanted):
                sources.setdefault(group, []).append(after)
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
                                        choose_by=space.choose_by, metrics=metrics)
        except tracking.NoExperiment:
            missing.append(experiment)  # that search has not run (yet): only the others are re-run
            continue
        if not best and refuse_empty and space.choose_by == "holdout" and tracking.best_trials(
                tracking_uri, experiment, simulated, groups=sorted(wanted), metrics=metrics):
            raise ConfigError(f"{space.path}: choose_by: holdout, but the trials of {experiment} have no held-out "
                              "scores: run that search with settings.holdout (e.g. `search --holdout 0.3`)")
        for source, run in best.items():
            if source not in wanted:
                continue
            chosen_by = _chosen_by(space, experiment, run, metrics[source[1]])
            config = {k: v for k, v in run.config.items() if k in HYPERPARAMETER_KEYS and k not in _NOT_CARRIED}
            group = seeds_group(space, studied[source])
            planned.append(PlannedGroup(group=group, trials=space.trials_in(group), param_space=config,
                                        chosen_by=chosen_by, tune_trials=space.tune_trials_in(group),
                                        fusing=space.fuse_problem(group),
                                        bundle=max(space.bundles_in(group)) if space.fuse_problem(group) is None
                                        else 1))
    for source, keys in sources.items():
        group = seeds_group(space, studied[source])
        fusing = "its configuration is chosen as the search runs" if space.fuse > 1 else "search.fuse is 1"
        planned += [PlannedGroup(group=group, trials=space.trials_in(group), after=key, chosen_by=chosen_by,
                                 fusing=fusing) for key, chosen_by in keys]
    counted = Counter(group_key(base_config(p)) for p in planned)
    repeated = sorted(key for key, count in counted.items() if count > 1)
    if repeated:
        raise ConfigError(f"{space.path}: best_of {', '.join(space.best_of)}: the groups {', '.join(repeated)} are in "
                          "more than one of those searches; name one search per group")
    if not planned and refuse_empty:
        absent = f" (no experiment {', '.join(missing)})" if missing else ""
        raise ConfigError(f"{space.path}: no finished trial of {', '.join(space.models)} × {', '.join(space.tasks)}"
                          f" × {', '.join(space.methods)} in the searches {', '.join(space.best_of)} at "
                          f"{tracking_uri}{absent}: run those searches first")
    return planned


def _chained_sources(space: SearchSpace, experiment: str, search: SearchSpace, wanted: set) -> list[tuple]:
    """Each wanted group of ``search``, run in the same experiment, with the group key its seeds wait for and what
    will choose its configuration: the search's held-out data where it holds some out, else its dev set."""
    if space.choose_by == "holdout":
        raise ConfigError(f"{space.path}: choose_by: holdout reads the held-out scores of {experiment} from "
                          "MLflow: run that search first, then this seeds stage")
    chosen_by = "holdout" if search.run_settings().holdout is not None else "dev"
    found = []
    for model, task, method in sorted(wanted & {(g.model, g.task, g.method) for g in search.groups()}):
        source = {"model": absolute_if_path(model), "task": task, "method": method, SEARCH_KEY: experiment}
        found.append(((model, task, method), (trial_group(source), chosen_by)))
    return found


def _chosen_by(space: SearchSpace, experiment: str, run, metric: str) -> str:
    """What chose the best run a seeds group re-runs: ``holdout`` where its search held data out (``choose_by: dev``
    refused there: the dev set would choose what it then scores), else ``dev``."""
    chosen_by = chosen_on(run.metrics, metric)
    if space.choose_by == "dev" and chosen_by == "holdout":
        raise ConfigError(f"{space.path}: choose_by: dev, but the trials of {experiment} held training data out to "
                          "choose: the dev set would choose what it then scores; leave choose_by out (their "
                          "held-out scores choose)")
    return "holdout" if space.choose_by == "holdout" else chosen_by


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
    return replace(group, domains=domains)


def planned_size(planned: list[PlannedGroup]) -> str:
    """``12 configurations in 4 trials in 2 groups`` (the configurations only where trials share epochs)."""
    trials, configurations = sum(p.trainings for p in planned), sum(p.trials for p in planned)
    shared = f"{configurations} configurations in " if configurations != trials else ""
    return f"{shared}{counted(trials, 'trial')} in {counted(len(planned), 'group')}"


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def planned_configs(space: SearchSpace, item: PlannedGroup, name: str = "") -> list[dict[str, Any]]:
    """The trials' configurations of a grid or seeds group; a typical configuration per trial of a sampled group or a
    seeds group whose configuration is not known yet."""
    base, domains = base_config(item, name or None), item.group.domains
    if space.stage == "seeds":  # the best configuration (when known: its values are in the base) per variant
        configs = [{**base, **variant} for variant in space.variants(item.group.model, item.group.method)]
    elif get_backend(space.algorithm).enumerates:
        configs = grid_configs(base, domains, space.num_samples, space.seed, item.sharing is None)
    else:
        return [typical_config(base, domains)] * item.trials
    return configs if item.fusing is not None else fuse(configs, space.fuse)


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
    # A configuration carries its task's definition (a task that is not shipped): the trials, and the cost model,
    # read it from there.
    base = with_task_definition(base, group.definition)
    return {**base, SEARCH_KEY: search} if search else base


def group_plans(space: SearchSpace, planned: list[PlannedGroup], name: str = ""):
    """What :class:`~istar_tune.search.tune.searcher.GroupSearcher` hands out: every configuration of grid and seeds
    groups, a budget and the sampled domains for sampled groups; each configuration names its search (``name``)."""
    from istar_tune.search.tune.searcher import GroupQueue

    name = name or space.name
    plans = []
    for item in planned:
        base, domains = base_config(item, name), item.group.domains
        key = trial_group(base)
        if item.after:
            plans.append(GroupQueue(key=key, base=base, after=item.after,
                                   variants=space.variants(item.group.model, item.group.method),
                                   concurrency=space.concurrency))
            continue
        if space.stage == "seeds" or get_backend(space.algorithm).enumerates:
            plans.append(GroupQueue(key=key, configs=planned_configs(space, item, name),
                                   concurrency=space.concurrency))
            continue
        constants = {k: d.values[0] for k, d in domains.items() if d.kind == "constant"}
        sampled = {k: d.tune() for k, d in domains.items() if d.kind != "constant"}
        for point in space.points_to_evaluate:
            missing = sorted(set(sampled) - set(point))
            if missing:
                raise ConfigError(f"{space.path}: search.points_to_evaluate: {point} lacks {', '.join(missing)}, "
                                  f"sampled in group {key}: give every sampled hyperparameter")
        plans.append(GroupQueue(key=key, budget=item.trials, base={**base, **constants}, sampled=sampled,
                               algorithm=space.algorithm,
                               estimate=trial_seconds(typical_config(base, domains)), study=key,
                               points=[dict(p) for p in space.points_to_evaluate], concurrency=space.concurrency))
    return plans


def absolute_if_path(model: str) -> str:
    """Trials run in their own working folder: a relative local model path is made absolute on the driver."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model

