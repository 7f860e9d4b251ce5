"""Searches on Ray Tune: each trial runs :func:`istar_tune.train.train` on its sampled configuration.

A search is one Tune experiment holding every (model, task, method) group (``groups.py``): the groups' trials are
in flight together, the longest first, so the cluster stays full until the end, while each group's searcher and
scheduler still compare only that group's trials. Every epoch is reported to Tune with a checkpoint (what it holds:
the ``checkpoint`` setting), so a retried trial continues from its last epoch, and MLflow records every trial
(``tune_callbacks.py``, ``tracking.py``). ``resume=True`` restores the experiment with ``Tuner.restore``: finished
trials are not run again. With a :class:`~istar_tune.simulate.Simulation`, trials are rehearsed without training.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from istar_tune import tracking, trial_checkpoints
from istar_tune.config import HYPERPARAMETER_KEYS, Hyperparameters, RunSettings, as_dict, from_dict
from istar_tune.errors import ConfigError
from istar_tune.methods import get_method, trial_epochs
from istar_tune.metrics import score
from istar_tune.search_space import SEARCH_KEY, Domain, Group, SearchSpace, for_search, group_key, trial_group
from istar_tune.simulate import Simulation
from istar_tune.storage import artifact_root, is_remote, join, storage_root
from istar_tune.storage import tracking_uri as resolve_tracking_uri
from istar_tune.tasks import get_task

log = logging.getLogger(__name__)

OBJECTIVE = "objective"
"""Every trial reports its task's selection metric under this key too (its score: the scored epoch's value where the
run chooses one on held-out data, see ``metrics.score``), so one searcher/scheduler setting fits every task
(accuracy, mcc, pearson or f1)."""


# ---------------------------------------------------------------------------------------------- the trial


class TuneReporter:
    """Reports each epoch to Tune with a checkpoint (none with ``checkpoint: none``), keeping the newest ``keep``."""

    def __init__(self, metric: str, keep: int = 1, wants_checkpoint: bool = True, note: str = ""):
        self.metric = metric
        self.keep = keep
        self.wants_checkpoint = wants_checkpoint
        self.note = note

    def __call__(self, record: dict[str, Any], checkpoint_dir: Path | None) -> None:
        import ray
        from ray import tune

        metrics = {**record, OBJECTIVE: score(record, self.metric), "node_id": ray.get_runtime_context().get_node_id()}
        if checkpoint_dir is not None:
            metrics["checkpoint_bytes"] = sum(f.stat().st_size for f in Path(checkpoint_dir).rglob("*") if f.is_file())
        if self.note:  # a resume that had to fall back to an older checkpoint says so once, in its MLflow run
            metrics[RESTORE_NOTE], self.note = self.note, ""
        checkpoint = tune.Checkpoint.from_directory(str(checkpoint_dir)) if checkpoint_dir else None
        tune.report(metrics, checkpoint=checkpoint)
        if checkpoint is not None:
            trial_checkpoints.prune(self.keep)


_USER_PENDING = os.environ.get("TUNE_MAX_PENDING_TRIALS_PG")
_USER_CHECKPOINT_S = os.environ.get("TUNE_GLOBAL_CHECKPOINT_S")
RESTORE_NOTE = "restore_note"
"""Result key of the note a trial reports when it resumed from an older checkpoint than Tune gave it."""


def trainable(config: dict[str, Any], settings: dict[str, dict[str, Any]], keep: dict[str, int]) -> None:
    """The Ray Tune trainable: a plain function of the sampled config (plus the fixed run settings and checkpoints
    to keep of each search in the experiment, by search name)."""
    from ray import tune

    from istar_tune.train import read_state, train

    for name in ("ray.train", "ray.tune"):  # per-checkpoint info lines of every trial would drown the progress
        logging.getLogger(name).setLevel(logging.WARNING)
    hparams = from_dict(Hyperparameters, {k: v for k, v in config.items() if k in HYPERPARAMETER_KEYS},
                        source="trial config")
    run_settings = from_dict(RunSettings, for_search(config, settings), source="settings")
    reporter = TuneReporter(get_task(hparams.task).metric, for_search(config, keep), run_settings.checkpoint != "none")
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        train(hparams, run_settings, reporter)
        return
    with tempfile.TemporaryDirectory(prefix="istar-tune-resume-") as local:
        def copy(folder: Path) -> Path:
            read_state(folder)  # a missing or truncated state fails here, and an older checkpoint is tried
            shutil.copytree(folder, local, dirs_exist_ok=True)
            return Path(local)

        state_dir, reporter.note = trial_checkpoints.restore(checkpoint, copy)
        train(hparams, run_settings, reporter, resume_from=state_dir)


# -------------------------------------------------------------------------------------------- planning


@dataclass
class PlannedGroup:
    group: Group
    trials: int
    param_space: dict[str, Any] = field(default_factory=dict)
    after: str = ""
    """Seeds stage: the group (``search:model/task/method``, same experiment) whose best trial this re-runs."""


def plan(space: SearchSpace, tracking_uri: str | None = None, simulated: bool = False, search: str | None = None,
         chained: dict[str, SearchSpace] | None = None) -> list[PlannedGroup]:
    """The groups of a search and their trial counts.

    The seeds stage reads its configurations from MLflow at ``tracking_uri``; without one it plans every group of
    the space (an upper bound: only groups with a finished trial in ``best_of`` run). Its groups that re-run a search
    of ``chained`` (``{name: space}`` run in the same experiment) wait for that search's group instead (``after``).
    """
    search = search or space.name
    chained = chained or {}
    if space.stage == "seeds" and (tracking_uri is not None or chained):
        return _plan_seeds(space, tracking_uri, simulated, search, chained)
    return [PlannedGroup(group=g, trials=space.trials_in(g)) for g in space.groups()]


def _plan_seeds(space: SearchSpace, tracking_uri: str | None, simulated: bool, search: str,
                chained: dict[str, SearchSpace]) -> list[PlannedGroup]:
    wanted = {(g.model, g.task, g.method) for g in space.groups()}
    seeds = {"seed": Domain("grid", tuple(space.seeds))}
    planned, missing, sources = [], [], {}
    for experiment in space.best_of:
        if experiment in chained:
            for model, task, method in sorted(wanted & {(g.model, g.task, g.method)
                                                        for g in chained[experiment].groups()}):
                source = {"model": _absolute_if_path(model), "task": task, "method": method, SEARCH_KEY: experiment}
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
            best = tracking.best_trials(tracking_uri, experiment, simulated, groups=sorted(wanted))
        except ConfigError:
            missing.append(experiment)  # that search has not run (yet): only the others are re-run
            continue
        for (model, task, method), run in best.items():
            if (model, task, method) not in wanted:
                continue
            config = {k: v for k, v in run.config.items() if k in HYPERPARAMETER_KEYS and k != "seed"}
            group = Group(model=model, task=task, method=method, domains=seeds)
            planned.append(PlannedGroup(group=group, trials=len(space.seeds), param_space=config))
    for (model, task, method), keys in sources.items():
        group = Group(model=model, task=task, method=method, domains=seeds)
        planned += [PlannedGroup(group=group, trials=len(space.seeds), after=key) for key in keys]
    repeated = sorted({group_key(_base_config(p)) for p in planned
                       if sum(group_key(_base_config(q)) == group_key(_base_config(p)) for q in planned) > 1})
    if repeated:
        raise ConfigError(f"{space.path}: best_of {', '.join(space.best_of)}: the groups {', '.join(repeated)} are in "
                          "more than one of those searches; name one search per group")
    if not planned:
        absent = f" (no experiment {', '.join(missing)})" if missing else ""
        raise ConfigError(f"{space.path}: no finished trial of {', '.join(space.models)} × {', '.join(space.tasks)}"
                          f" × {', '.join(space.methods)} in the searches {', '.join(space.best_of)} at "
                          f"{tracking_uri}{absent}: run those searches first")
    return planned


def dry_run_report(space: SearchSpace, planned: list[PlannedGroup]) -> str:
    rows = [(p.group.model, p.group.task, p.group.method, str(p.trials)) for p in planned]
    header = ("model", "task", "method", "trials")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines = [f"search {space.name} ({space.path}): {space.stage}, algorithm {space.algorithm}, "
             f"scheduler {space.scheduler}"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in [header, *rows]]
    if space.stage == "seeds":
        chained = sorted({p.after.split(":")[0] for p in planned if p.after})
        source = (f"the searches {', '.join(chained)} of this run: each group starts when the group it re-runs has "
                  "ended") if chained else "MLflow when the search runs"
        lines.append(f"(at most: the best configuration of each group found in {', '.join(space.best_of)} is re-run "
                     f"with seeds {list(space.seeds)}; read from {source})")
    total = sum(p.trials for p in planned)
    concurrency = space.concurrency or "as the cluster allows"
    lines.append(f"total {total} trials in {len(planned)} groups; each trial {space.cpu:g} CPU, {space.gpu:g} GPU; "
                 f"trials at once per group: {concurrency}; retries per trial: {space.max_failures}")
    return "\n".join(lines)


def _tune_domain(domain: Domain):
    from ray import tune

    kind, values = domain.kind, domain.values
    if kind == "constant":
        return values[0]
    if kind == "grid":
        return tune.grid_search(list(values))
    if kind == "choice":
        return tune.choice(list(values))
    if kind == "loguniform":
        return tune.loguniform(*values)
    if kind == "uniform":
        return tune.uniform(*values)
    return tune.randint(values[0], values[1] + 1)  # both bounds included


def _base_config(planned: PlannedGroup, search: str | None = None) -> dict[str, Any]:
    group = planned.group
    base = {"model": _absolute_if_path(group.model), "task": group.task, "method": group.method,
            **planned.param_space}
    return {**base, SEARCH_KEY: search} if search else base


def group_plans(space: SearchSpace, planned: list[PlannedGroup], name: str = ""):
    """What :class:`~istar_tune.groups.GroupSearcher` hands out: every configuration of grid and seeds groups,
    an Optuna budget and space for Optuna groups; each configuration names its search (``name``)."""
    from istar_tune.groups import GroupPlan, grid_configs
    from istar_tune.simulate import trial_seconds

    name = name or space.name
    plans = []
    for item in planned:
        base, domains = _base_config(item, name), item.group.domains
        key = trial_group(base)
        if item.after:
            plans.append(GroupPlan(key=key, base=base, after=item.after, seeds=list(space.seeds),
                                   concurrency=space.concurrency))
            continue
        if space.stage == "seeds" or space.algorithm == "grid":
            repeats = 1 if space.stage == "seeds" else space.num_samples
            plans.append(GroupPlan(key=key, configs=grid_configs(base, domains, repeats, space.seed),
                                   concurrency=space.concurrency))
            continue
        constants = {k: d.values[0] for k, d in domains.items() if d.kind == "constant"}
        sampled = {k: _tune_domain(d) for k, d in domains.items() if d.kind != "constant"}
        typical = {**base, **constants, **{k: d.values[0] for k, d in domains.items() if d.kind == "choice"}}
        for point in space.points_to_evaluate:
            missing = sorted(set(sampled) - set(point))
            if missing:
                raise ConfigError(f"{space.path}: search.points_to_evaluate: {point} lacks {', '.join(missing)}, "
                                  f"sampled in group {key}: give every sampled hyperparameter")
        plans.append(GroupPlan(key=key, budget=item.trials, base={**base, **constants}, optuna_space=sampled,
                               estimate=trial_seconds(typical), study=key,
                               points=[dict(p) for p in space.points_to_evaluate], concurrency=space.concurrency))
    return plans


def _absolute_if_path(model: str) -> str:
    """Trials run in their own working folder: a relative local model path is made absolute on the driver."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


# ---------------------------------------------------------------------------------------------- running


@dataclass
class TrialOutcome:
    trial_id: str
    status: str  # finished | stopped_early | failed | interrupted
    config: dict[str, Any]
    value: float | None
    epochs: int
    error: str = ""
    ended_at: float | None = None
    """Unix time of its last report."""


@dataclass
class GroupOutcome:
    group: Group
    metric: str
    trials: list[TrialOutcome]
    best: TrialOutcome | None

    def count(self, status: str) -> int:
        return sum(t.status == status for t in self.trials)


@dataclass
class SearchSummary:
    name: str
    storage_path: str
    tracking_uri: str
    groups: list[GroupOutcome]
    planned_trials: int = 0
    interrupted: str = ""
    """Why the search stopped before every trial ended (empty when it ran to the end)."""
    mlflow_latencies_ms: list[float] = field(default_factory=list)
    mlflow_errors: list[str] = field(default_factory=list)
    phases_s: dict[str, float] = field(default_factory=dict)
    """Wall seconds of the search's phases: ``setup`` (checks, planning, MLflow experiment and parent run),
    ``fit`` (Tune running every trial) and ``flush`` (MLflow writes still queued when the last trial ended)."""

    @property
    def failed(self) -> list[tuple[Group, TrialOutcome]]:
        return [(g.group, t) for g in self.groups for t in g.trials if t.status == "failed"]

    def report(self) -> str:
        total = sum(len(g.trials) for g in self.groups)
        finished = sum(g.count("finished") for g in self.groups)
        stopped = sum(g.count("stopped_early") for g in self.groups)
        unfinished = sum(g.count("interrupted") for g in self.groups)
        lines = [f"search {self.name}: {total} trials, {finished} finished, {stopped} stopped early, "
                 f"{len(self.failed)} failed" + (f", {unfinished} interrupted" if unfinished else "")]
        if self.interrupted:
            left = self.planned_trials - finished - stopped - len(self.failed)
            lines.append(f"INTERRUPTED ({self.interrupted}): {left} of {self.planned_trials} trials did not finish; "
                         "continue with --resume")
        for outcome in self.groups:
            best = outcome.best
            if best is None:
                lines.append(f"  {outcome.group.key}: no finished trial")
                continue
            method = get_method(outcome.group.method)
            keys = [*_SHOWN, *(("lam",) if method.uses_lambda else ()), *(("zeta",) if method.uses_zeta else ()),
                    *(_SECOND_STAGE_SHOWN if method.second_stage else ())]
            shown = {k: best.config[k] for k in keys if k in best.config}
            lines.append(f"  {outcome.group.key}: best {outcome.metric} {best.value:.4f} with "
                         + ", ".join(f"{k}={v}" for k, v in shown.items()) + f" (trial {best.trial_id})")
        for group, trial in self.failed:
            lines.append(f"  FAILED {group.key} trial {trial.trial_id}: {trial.error}")
        if self.mlflow_errors:
            lines.append(f"  MLflow writes lost: {self.mlflow_errors[-1]}")
        lines.append(f"MLflow: {self.tracking_uri} (experiment {self.name}); Ray results: {self.storage_path}")
        return "\n".join(lines)


_SHOWN = ("learning_rate", "batch_size", "epochs", "seed")
_SECOND_STAGE_SHOWN = ("alpha", "isolayer_learning_rate")


def _print(text: str) -> None:
    print(text, flush=True)


def validate_name(name: str) -> str:
    """A search name is a folder under the storage path and an MLflow experiment: no path separators, no ``..``."""
    text = str(name).strip()
    if not text or "/" in text or "\\" in text or text in (".", "..") or ".." in text.split("/") \
            or text.startswith("~") or ("'" in text and '"' in text):
        raise ConfigError(f"search name {name!r} is not usable: give a plain name (letters, digits, '-', '_', '.'; "
                          "no '/', '\\' or '..', not both quote characters)")
    return text


def run_search(space: SearchSpace, **options) -> SearchSummary:
    """Run (or resume) every group of ``space``: :func:`run_searches` of one space (``name`` names its MLflow
    experiment and results folder)."""
    return run_searches([space], **options)[0]


def run_searches(spaces: list[SearchSpace], *, storage_path: str | os.PathLike | None = None,
                 tracking_uri: str | None = None, name: str | None = None, address: str | None = None,
                 resume: bool = False, data_dir: str | None = None, write: Callable[[str], None] | None = None,
                 trainable_fn: Callable[..., None] = trainable,
                 simulation: Simulation | None = None) -> list[SearchSummary]:
    """Run (or resume) several searches as one Tune experiment; one summary per search, in order.

    Each search keeps its own MLflow experiment (its space's name; with one space, ``name`` if given), settings and
    groups; their trials share the cluster, so it stays full from the first trial of the first search to the last
    trial of the last. A seeds search whose ``best_of`` names a search of the same run does not wait for that
    whole search: each of its groups starts as soon as the group it re-runs has ended. ``name`` names the Tune
    experiment (results folder; default: the searches' names joined by ``+``).

    ``trainable_fn(config, settings, keep)`` runs one trial (default: :func:`trainable`, which fine-tunes;
    ``settings`` and ``keep`` map each search's name to its run settings and to how many of its newest
    checkpoints a trial keeps). With ``simulation``, trials are rehearsed by
    :func:`istar_tune.simulate.simulated_trainable` instead.
    """
    from istar_tune import preflight
    from istar_tune.groups import GroupScheduler, GroupSearcher
    from istar_tune.tune_callbacks import MlflowTrialLogger, ProgressPrinter

    if not spaces:
        raise ConfigError("no search space to run: give at least one")
    names = [validate_name(name or spaces[0].name)] if len(spaces) == 1 else [validate_name(s.name) for s in spaces]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"searches run together need different names; {', '.join(repeated)} is given twice")
    _check_shared(spaces)
    name = names[0] if len(spaces) == 1 else validate_name(name or "+".join(names))
    storage = storage_root(storage_path)
    tracking_uri = resolve_tracking_uri(tracking_uri, storage)
    simulated = simulation is not None
    settings = {n: _trial_settings(s, data_dir) for n, s in zip(names, spaces)}
    say = write or _print
    began = time.monotonic()
    phases: dict[str, float] = {}
    checks = [("storage", lambda: preflight.check_storage(storage)),
              ("tracking", lambda: preflight.check_tracking(tracking_uri))]
    if not simulated:  # a rehearsal reads no data and loads no model
        for n, space in zip(names, spaces):
            checks += [(f"data of {n}", lambda s=space, n=n: preflight.check_data(list(s.tasks), settings[n].data_dir)),
                       (f"models of {n}", lambda s=space, n=n: preflight.check_models(list(s.models),
                                                                                    settings[n].max_length))]
    checked_s = preflight.run_checks(checks)
    planned = {n: plan(space, tracking_uri, simulated, search=n, chained=dict(zip(names[:i], spaces[:i])))
               for i, (n, space) in enumerate(zip(names, spaces))}
    results_root = join(storage, name)
    _refuse_to_overwrite(results_root, resume)
    if resume and not results_exist(storage, name):
        raise ConfigError(f"--resume: search {name!r} has no results in {storage} to continue; run it without "
                          "--resume (or check --name and --storage-path)")
    extra: dict[str, Any] = {}
    if simulated:
        from istar_tune.simulate import simulated_trainable

        trainable_fn, extra = simulated_trainable, {"simulation": simulation}

    _connect(address)
    import ray
    from ray import tune

    first = spaces[0]
    checked_s += preflight.run_checks([("resources", lambda: preflight.check_resources(first.cpu, first.gpu,
                                                                                         ray.nodes()))])
    say(f"preflight: storage, tracking{'' if simulated else ', data, models'} and cluster resources checked in "
        f"{checked_s:.1f} s")
    if not is_remote(storage):
        Path(storage).mkdir(parents=True, exist_ok=True)
    tracking.prepare_store(tracking_uri)
    mlflow = tracking.client(tracking_uri)
    # A tracking server keeps artifacts where it serves them from; a local store gets a folder beside it.
    artifacts = artifact_root(tracking_uri, storage)
    loggers, parents = {}, {}
    for n, space in zip(names, spaces):
        experiment_id = tracking.ensure_experiment(mlflow, n, artifacts)
        tags = {tracking.TAG_SPACE: space.path, tracking.TAG_COMMIT: tracking.git_commit(),
                tracking.TAG_STAGE: space.stage}
        if simulated:
            tags[tracking.TAG_SIMULATED] = "true"
        parents[n] = tracking.parent_run(mlflow, experiment_id, n, tags)
        tracking.record_plan(mlflow, parents[n], {group_key(_base_config(p)): p.trials for p in planned[n]})
        loggers[n] = MlflowTrialLogger(tracking_uri, n, parents[n], experiment_id, tags,
                                       threads=8)

    total = sum(p.trials for n in names for p in planned[n])
    # Snapshot the experiment state every second in small searches, so a trial that finished just before the driver
    # died is not run again on --resume; in large ones, Ray's adaptive period keeps snapshots under 5% of the time
    # (a re-run trial still gets one MLflow run: it is found by its trial id).
    if _USER_CHECKPOINT_S is None:  # per search (one process may run several, as the benchmark does)
        os.environ["TUNE_GLOBAL_CHECKPOINT_S"] = "1" if total <= 500 else "auto"
    # Every epoch checkpoints by design; Ray's warning about frequent snapshots would repeat all search long.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: no tables; our progress lines instead
    # Ray's default per-trial loggers add a CSV file and a TensorBoard writer thread per trial on the driver; MLflow
    # holds the record, so only result.json (read by Ray's ExperimentAnalysis) is kept.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    # Tune lets a custom searcher keep only one trial pending; with as many pending as the cluster has slots, a
    # finished trial's worker is handed the next trial at once (actor reuse) and a new GPU node is never idle.
    if _USER_PENDING is None:
        os.environ["TUNE_MAX_PENDING_TRIALS_PG"] = str(max(8, _slots(ray.cluster_resources(), first)))

    printer = ProgressPrinter(total, say)
    from ray.tune.logger import JsonLoggerCallback

    callbacks = [*loggers.values(), printer, JsonLoggerCallback()]
    keep = {n: (s.checkpoints_to_keep if settings[n].checkpoint == "state" else 1) for n, s in zip(names, spaces)}
    run_trial = tune.with_resources(tune.with_parameters(trainable_fn, settings={n: as_dict(v) for n, v in
                                                                                 settings.items()},
                                                         keep=keep, **extra), {"cpu": first.cpu, "gpu": first.gpu})
    headline = " then ".join(f"{n} ({sum(p.trials for p in planned[n])} trials in {len(planned[n])} groups)"
                             for n in names)
    printer.write(f"== {headline}" if len(names) > 1 else f"== {name}: {total} trials in {len(planned[name])} groups")
    interrupted = ""
    grid = None
    phases["setup"] = time.monotonic() - began
    try:
        if resume and tune.Tuner.can_restore(results_root):
            tuner = tune.Tuner.restore(results_root, trainable=run_trial, resume_unfinished=True,
                                       resume_errored=False)
            _replace_callbacks(tuner, callbacks)
        else:
            plans = [p for n, space in zip(names, spaces) for p in group_plans(space, planned[n], n)]
            storages = {_optuna_storage(s, storage) for s in spaces} - {None}
            if len(storages) > 1:
                raise ConfigError(f"searches run together keep their Optuna studies in one database; they name "
                                  f"{len(storages)} ({', '.join(sorted(storages))}): give them the same search.storage")
            searcher = GroupSearcher(plans, seed=first.seed, metric=OBJECTIVE, storage=next(iter(storages), None))
            horizons = {trial_group(_base_config(p, n)): _max_epochs(p.group) for n, space in zip(names, spaces)
                        if space.scheduler == "asha" and space.stage != "seeds" for p in planned[n]}
            asha = next((s for s in spaces if s.scheduler == "asha" and s.stage != "seeds"), first)
            scheduler = GroupScheduler(horizons or None, asha.grace_period, asha.reduction_factor, metric=OBJECTIVE)
            tuner = tune.Tuner(run_trial, param_space={}, tune_config=tune.TuneConfig(
                metric=OBJECTIVE, mode="max", search_alg=searcher, scheduler=scheduler, num_samples=-1,
                # Trials are independent (each seeds and loads its own model): starting a new worker process per
                # trial would cost more than a short trial.
                reuse_actors=True), run_config=_run_config(first, name, storage, callbacks))
        grid = tuner.fit()
    except KeyboardInterrupt:
        interrupted = "interrupted by a signal"
        raise
    except BaseException as err:
        interrupted = f"{type(err).__name__}: {err}"
        raise
    finally:
        phases["fit"] = time.monotonic() - began - phases["setup"]
        results = list(grid) if grid is not None else []
        statuses = {t.trial_id: t.status for t in getattr(getattr(grid, "_experiment_analysis", None), "trials", [])}
        outcomes = {n: _outcomes(planned[n], results, statuses, n) for n in names}
        ended = sum(len(g.trials) - g.count("interrupted") for n in names for g in outcomes[n])
        if not interrupted and ended < _expected_trials(names, planned, outcomes):
            interrupted = "stopped before every trial ended (Ctrl-C, or Ray stopped the experiment)"
        flushing = time.monotonic()
        for logger in loggers.values():
            if interrupted:
                logger.interrupt(interrupted)
        flushed = all([logger.close(timeout=None if not interrupted else 120) for logger in loggers.values()])
        phases["flush"] = time.monotonic() - flushing
        for n in names:
            failed = any(t.status == "failed" for g in outcomes[n] for t in g.trials)
            mlflow.set_terminated(parents[n], "KILLED" if interrupted else ("FAILED" if failed else "FINISHED"))
        if not flushed:
            log.error("some MLflow writes did not land before the search ended")
    return [SearchSummary(name=n, storage_path=str(results_root), tracking_uri=tracking_uri, groups=outcomes[n],
                          planned_trials=sum(p.trials for p in planned[n]), interrupted=interrupted,
                          mlflow_latencies_ms=list(loggers[n].writer.latencies_ms),
                          mlflow_errors=list(loggers[n].writer.errors), phases_s=phases) for n in names]


def _check_shared(spaces: list[SearchSpace]) -> None:
    """Searches in one Tune experiment share what Tune sets per experiment: trial resources, retries, ASHA."""
    first = spaces[0]
    for space in spaces[1:]:
        for what, of in (("resources", lambda s: {"cpu": s.cpu, "gpu": s.gpu}),
                         ("max_failures", lambda s: s.max_failures)):
            if of(space) != of(first):
                raise ConfigError(f"searches run together share {what}: {first.path} has {of(first)}, {space.path} "
                                  f"has {of(space)}; make them equal or run the searches one by one")
    asha = [s for s in spaces if s.scheduler == "asha" and s.stage != "seeds"]
    if len({(s.grace_period, s.reduction_factor) for s in asha}) > 1:
        raise ConfigError(f"searches run together share one ASHA setting; {asha[0].path} and {asha[1].path} differ "
                          "in scheduler.grace_period or scheduler.reduction_factor")


def _expected_trials(names: list[str], planned: dict[str, list[PlannedGroup]],
                     outcomes: dict[str, list[GroupOutcome]]) -> int:
    """Trials that run when every trial ends: the planned ones, less the seeds of groups that wait for a group
    which ended without a scored trial."""
    best = {trial_group(_base_config(p, n)): o.best for n in names for p, o in zip(planned[n], outcomes[n])}
    return sum(p.trials for n in names for p in planned[n] if not p.after or best.get(p.after) is not None)


def _optuna_storage(space: SearchSpace, storage: str) -> str | None:
    """Where an Optuna search keeps its studies: ``search.storage``, else a sqlite file beside the results (a
    remote storage path without ``search.storage`` keeps them in the driver's memory)."""
    if space.algorithm != "optuna":
        return None
    if space.optuna_storage:
        return space.optuna_storage
    if is_remote(storage):
        log.warning("search.storage is not set and the storage path is remote: Optuna studies stay in memory")
        return None
    return f"sqlite:///{Path(storage) / 'optuna.db'}"


def _slots(cluster: dict[str, float], space: SearchSpace) -> int:
    """How many trials of ``space`` the cluster's resources hold at once."""
    fits = [cluster.get(name, 0.0) / amount for name, amount in (("CPU", space.cpu), ("GPU", space.gpu)) if amount]
    return int(min(fits, default=1.0))


def _connect(address: str | None) -> None:
    """Join the cluster at ``address`` (or ``$RAY_ADDRESS``; ``auto`` finds a running one), else start a local Ray
    instance bound to 127.0.0.1, never one found through Ray's temporary files."""
    import ray

    if ray.is_initialized():
        return
    cluster = address or os.environ.get("RAY_ADDRESS") or None
    if cluster is None:
        loopback_only()
        cluster = "local"
    ray.init(address=cluster, include_dashboard=False, log_to_driver=True, logging_level=logging.WARNING)


def loopback_only() -> None:
    """Make a Ray instance started from this process listen on 127.0.0.1 only.

    Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` when it is imported (``ray._private.ray_constants``) and its
    processes read it when they start: the CLI sets it before importing Ray; when Ray is already imported, its
    constant is set too."""
    import sys

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False


def _replace_callbacks(tuner, callbacks) -> None:
    """Give a restored experiment this run's callbacks (this tracking URI and progress printer). Ray restores the
    pickled ones otherwise, which also work (they find their MLflow runs by trial id), so a Ray version without this
    private attribute loses nothing essential."""
    local = getattr(tuner, "_local_tuner", None)
    if local is not None and hasattr(local, "get_run_config"):
        local.get_run_config().callbacks = callbacks


def _run_config(space: SearchSpace, name: str, storage: str, callbacks):
    from ray import tune

    # Tune keeps every checkpoint it is told of; the trial itself prunes all but its newest (trial_checkpoints.py):
    # a Tune limit would force a snapshot of every trial's state per checkpoint, which stalls large searches.
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, callbacks=callbacks,
                          failure_config=tune.FailureConfig(max_failures=space.max_failures),
                          checkpoint_config=tune.CheckpointConfig(num_to_keep=None))


def _max_epochs(group: Group) -> int:
    """The most epochs a trial of ``group`` can report (ASHA's horizon)."""
    def largest(key: str) -> int:
        domain = group.domains.get(key)
        if domain is None:
            return int(getattr(Hyperparameters, key))
        return int(max(domain.values)) if domain.kind != "constant" else int(domain.values[0])

    return trial_epochs({"method": group.method, "epochs": largest("epochs"),
                         "isolayer_epochs": largest("isolayer_epochs")})


def _outcomes(planned: list[PlannedGroup], results: list, statuses: dict[str, str],
              search: str) -> list[GroupOutcome]:
    """Each planned group's trials among ``results`` (Tune's, of every search in the experiment) of ``search``."""
    from ray.tune.experiment import Trial

    by_group: dict[str, list[TrialOutcome]] = {}
    for result in results:
        config = dict(result.config or {})
        if config.get(SEARCH_KEY, search) != search:
            continue
        metrics = result.metrics or {}
        trial_id = str(metrics.get("trial_id", Path(result.path or "?").name))
        epochs = int(metrics.get("epoch", 0) or 0)
        value = metrics.get(OBJECTIVE)
        ended = metrics.get("timestamp")
        key = group_key(config)
        if result.error is not None:
            error = tracking.error_summary(str(result.error), type(result.error).__name__)
            outcome = TrialOutcome(trial_id, "failed", config, value, epochs, error, ended)
        elif statuses.get(trial_id, Trial.TERMINATED) != Trial.TERMINATED:
            outcome = TrialOutcome(trial_id, "interrupted", config, value, epochs, ended_at=ended)
        else:
            status = "stopped_early" if epochs < trial_epochs(config) else "finished"
            outcome = TrialOutcome(trial_id, status, config, value, epochs, ended_at=ended)
        by_group.setdefault(key, []).append(outcome)
    outcomes = []
    for item in planned:
        group = item.group
        trials = by_group.get(group_key(_base_config(item)), [])
        scored = sorted((t for t in trials if t.status in ("finished", "stopped_early") and t.value is not None),
                        key=lambda t: t.trial_id)
        best = max(scored, key=lambda t: t.value) if scored else None  # ties: the lowest trial id, as tables do
        outcomes.append(GroupOutcome(group=group, metric=get_task(group.task).metric, trials=trials, best=best))
    return outcomes


def results_exist(storage_path: str | os.PathLike, name: str) -> bool:
    """Whether a search called ``name`` has Ray results under ``storage_path`` (what ``--resume`` continues)."""
    from ray import tune

    root = storage_root(storage_path)
    if not is_remote(root) and not Path(root, name).is_dir():
        return False
    return bool(tune.Tuner.can_restore(join(root, name)))


def _trial_settings(space: SearchSpace, data_dir: str | None) -> RunSettings:
    """Settings of every trial, its data folder by the one rule (:func:`istar_tune.data.resolve_data_dir`: flag,
    then search-space file, then ``$GLUE_DIR``), made absolute: trials run in their own working folders."""
    from istar_tune.data import resolve_data_dir

    chosen = resolve_data_dir(data_dir, space.settings.get("data_dir"))
    settings = space.run_settings(data_dir=str(chosen.resolve()) if chosen is not None else None)
    return replace(settings, progress=False, output_dir=None, save_checkpoint=False)


def _refuse_to_overwrite(results_root: str, resume: bool) -> None:
    if resume or is_remote(results_root):
        return
    if Path(results_root).exists() and any(Path(results_root).iterdir()):
        raise ConfigError(f"search results already exist in {results_root}: pass --resume to continue that search, "
                          "or --name to start a new one")


def exit_code(summary: SearchSummary) -> int:
    if summary.interrupted:
        return 130
    return 1 if summary.failed else 0
