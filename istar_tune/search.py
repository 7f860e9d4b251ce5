"""Searches on Ray Tune: each trial runs :func:`istar_tune.train.train` on its sampled configuration.

A search runs one Tune experiment per (model, task, method) group, one group after another, each with as many
trials at once as the cluster's resources (or ``concurrency``) allow; trials spread over the cluster's nodes.
Every epoch is reported to Tune with a resumable checkpoint, so a retried trial continues from its last epoch,
and MLflow records every trial (``tracking.py``). ``resume=True`` restores each group's experiment with
``Tuner.restore``: finished trials are not run again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from istar_tune import tracking
from istar_tune.config import HYPERPARAMETER_KEYS, Hyperparameters, RunSettings, as_dict, from_dict
from istar_tune.errors import ConfigError
from istar_tune.search_space import Domain, Group, SearchSpace
from istar_tune.tasks import get_task

log = logging.getLogger(__name__)

OBJECTIVE = "objective"
"""Every trial reports its task's selection metric under this key too, so one searcher/scheduler setting fits
every task (accuracy, mcc, pearson or f1)."""


# ---------------------------------------------------------------------------------------------- the trial


class TuneReporter:
    """Reports each epoch to Tune with a resumable checkpoint."""

    wants_checkpoint = True

    def __init__(self, metric: str):
        self.metric = metric

    def __call__(self, record: dict[str, Any], checkpoint_dir: Path | None) -> None:
        import ray
        from ray import tune

        metrics = {**record, OBJECTIVE: record[self.metric], "node_id": ray.get_runtime_context().get_node_id()}
        checkpoint = tune.Checkpoint.from_directory(str(checkpoint_dir)) if checkpoint_dir else None
        tune.report(metrics, checkpoint=checkpoint)


def trainable(config: dict[str, Any], settings: dict[str, Any]) -> None:
    """The Ray Tune trainable: a plain function of the sampled config (plus fixed run settings)."""
    from ray import tune

    from istar_tune.train import train

    for name in ("ray.train", "ray.tune"):  # per-checkpoint info lines of every trial would drown the progress
        logging.getLogger(name).setLevel(logging.WARNING)
    hparams = from_dict(Hyperparameters, {k: v for k, v in config.items() if k in HYPERPARAMETER_KEYS},
                        source="trial config")
    run_settings = from_dict(RunSettings, settings, source="settings")
    reporter = TuneReporter(get_task(hparams.task).metric)
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        train(hparams, run_settings, reporter)
        return
    with checkpoint.as_directory() as state_dir:
        train(hparams, run_settings, reporter, resume_from=state_dir)


# -------------------------------------------------------------------------------------------- planning


@dataclass
class PlannedGroup:
    group: Group
    trials: int
    param_space: dict[str, Any] = field(default_factory=dict)


def plan(space: SearchSpace, tracking_uri: str | None = None) -> list[PlannedGroup]:
    """The groups of a search and their trial counts.

    The seeds stage reads its configurations from MLflow at ``tracking_uri``; without one it plans every group of
    the space (an upper bound: only groups with a finished trial in ``best_of`` run).
    """
    if space.stage == "seeds" and tracking_uri is not None:
        return _plan_seeds(space, tracking_uri)
    return [PlannedGroup(group=g, trials=space.trials_in(g)) for g in space.groups()]


def _plan_seeds(space: SearchSpace, tracking_uri: str) -> list[PlannedGroup]:
    tracking.check_store(tracking_uri)
    wanted = {(g.model, g.task, g.method) for g in space.groups()}
    planned, missing = [], []
    for experiment in space.best_of:
        try:
            best = tracking.best_trials(tracking_uri, experiment)
        except ConfigError:
            missing.append(experiment)  # that search has not run (yet): only the others are re-run
            continue
        for (model, task, method), run in best.items():
            if (model, task, method) not in wanted:
                continue
            config = {k: v for k, v in run.config.items() if k in HYPERPARAMETER_KEYS and k != "seed"}
            group = Group(model=model, task=task, method=method,
                          domains={"seed": Domain("grid", tuple(space.seeds))})
            planned.append(PlannedGroup(group=group, trials=len(space.seeds), param_space=config))
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
        lines.append(f"(at most: the best configuration of each group found in {', '.join(space.best_of)} is re-run "
                     f"with seeds {list(space.seeds)}; they are read from MLflow when the search runs)")
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


def param_space(planned: PlannedGroup) -> dict[str, Any]:
    group = planned.group
    space = {"model": _absolute_if_path(group.model), "task": group.task, "method": group.method,
             **planned.param_space}
    space.update({key: _tune_domain(domain) for key, domain in group.domains.items()})
    return space


def _absolute_if_path(model: str) -> str:
    """Trials run in their own working folder: a relative local model path is made absolute on the driver."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


# ---------------------------------------------------------------------------------------------- running


@dataclass
class TrialOutcome:
    trial_id: str
    status: str  # finished | stopped_early | failed
    config: dict[str, Any]
    value: float | None
    epochs: int
    error: str = ""


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

    @property
    def failed(self) -> list[tuple[Group, TrialOutcome]]:
        return [(g.group, t) for g in self.groups for t in g.trials if t.status == "failed"]

    def report(self) -> str:
        total = sum(len(g.trials) for g in self.groups)
        finished = sum(g.count("finished") for g in self.groups)
        stopped = sum(g.count("stopped_early") for g in self.groups)
        lines = [f"search {self.name}: {total} trials, {finished} finished, {stopped} stopped early, "
                 f"{len(self.failed)} failed"]
        for outcome in self.groups:
            best = outcome.best
            if best is None:
                lines.append(f"  {outcome.group.key}: no finished trial")
                continue
            shown = {k: best.config[k] for k in _SHOWN if k in best.config and
                     (k not in ("lam", "zeta") or outcome.group.method in ("istar", "cosreg"))}
            if outcome.group.method == "isolayer":
                shown.update({k: best.config[k] for k in ("alpha", "isolayer_learning_rate") if k in best.config})
            lines.append(f"  {outcome.group.key}: best {outcome.metric} {best.value:.4f} with "
                         + ", ".join(f"{k}={v}" for k, v in shown.items()) + f" (trial {best.trial_id})")
        for group, trial in self.failed:
            lines.append(f"  FAILED {group.key} trial {trial.trial_id}: {trial.error}")
        lines.append(f"MLflow: {self.tracking_uri} (experiment {self.name}); Ray results: {self.storage_path}")
        return "\n".join(lines)


_SHOWN = ("learning_rate", "batch_size", "epochs", "lam", "zeta", "seed")


class ProgressPrinter(tracking.TuneCallback):  # a ray.tune.Callback
    """Tune callback printing one line per reported epoch and per finished trial (picklable)."""

    def __init__(self, total: int, write: Callable[[str], None] | None = None):
        self.total = total
        self.done = 0
        self.write = write or _print

    def on_trial_result(self, iteration, trials, trial, result, **info):
        metric = get_task(trial.config["task"]).metric
        self.write(f"  trial {trial.trial_id} epoch {result.get('epoch')}: {metric} "
                   f"{result.get(metric, float('nan')):.4f} ({result.get('epoch_time_s', 0):.0f} s)")

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        config = trial.config
        self.write(f"[{self.done}/{self.total}] trial {trial.trial_id} done "
                   f"({config['model']}/{config['task']}/{config['method']})")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.done += 1
        self.write(f"[{self.done}/{self.total}] trial {trial.trial_id} FAILED: {tracking.trial_error_text(trial)}")


def _print(text: str) -> None:
    print(text, flush=True)


def run_search(space: SearchSpace, *, storage_path: str | os.PathLike = "istar-runs", tracking_uri: str | None = None,
               name: str | None = None, address: str | None = None, resume: bool = False,
               data_dir: str | None = None, write: Callable[[str], None] | None = None,
               trainable_fn: Callable[..., None] = trainable) -> SearchSummary:
    """Run (or resume) every group of ``space``; returns what finished, stopped early or failed, and the best.

    ``trainable_fn(config, settings)`` runs one trial (default: :func:`trainable`, which fine-tunes).
    """
    import ray
    from ray import tune

    name = name or space.name
    storage = _storage_root(storage_path)
    tracking_uri = tracking_uri or _default_tracking(storage)
    planned = plan(space, tracking_uri)
    settings = _trial_settings(space, data_dir)
    results_root = _join(storage, name)
    _refuse_to_overwrite(results_root, planned, resume)

    mlflow = tracking.client(tracking_uri)
    artifact_root = None if "://" in str(storage) else str(Path(storage) / "mlartifacts")
    experiment_id = tracking.ensure_experiment(mlflow, name, artifact_root)
    tags = {tracking.TAG_SPACE: space.path, tracking.TAG_COMMIT: tracking.git_commit(), tracking.TAG_STAGE: space.stage}
    parent = tracking.parent_run(mlflow, experiment_id, name, tags)

    # Snapshot the experiment state at least every second (Ray's default starts at 10 s), so a trial that finished
    # just before the driver died is not run again on --resume.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: no tables; our progress lines instead
    if not ray.is_initialized():
        cluster = address or os.environ.get("RAY_ADDRESS") or None
        if cluster is None:
            # A local instance listens on loopback only (Ray's single-machine mode).
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        ray.init(address=cluster, include_dashboard=False, log_to_driver=True, logging_level=logging.WARNING)
    printer = ProgressPrinter(sum(p.trials for p in planned), write)
    say = printer.write
    outcomes = []
    try:
        for planned_group in planned:
            group = planned_group.group
            say(f"== {group.key}: {planned_group.trials} trials")
            logger = tracking.MlflowTrialLogger(tracking_uri, name, parent, experiment_id, tags)
            callbacks = [logger, printer]
            path = _join(results_root, group.slug)
            if resume and tune.Tuner.can_restore(path):
                tuner = tune.Tuner.restore(path, trainable=_trainable(space, settings, trainable_fn),
                                           resume_unfinished=True,
                                           resume_errored=False)
                _replace_callbacks(tuner, callbacks)
            else:
                tuner = _new_tuner(space, planned_group, settings, str(results_root), callbacks, trainable_fn)
            grid = tuner.fit()
            outcomes.append(_outcome(group, grid))
    finally:
        failed = any(t.status == "failed" for g in outcomes for t in g.trials)
        mlflow.set_terminated(parent, "FAILED" if failed else "FINISHED")
    return SearchSummary(name=name, storage_path=str(results_root), tracking_uri=tracking_uri, groups=outcomes)


def _replace_callbacks(tuner, callbacks) -> None:
    """Give a restored experiment this run's callbacks (this tracking URI and progress printer). Ray restores the
    pickled ones otherwise, which also work (they find their MLflow runs by trial id), so a Ray version without this
    private attribute loses nothing essential."""
    local = getattr(tuner, "_local_tuner", None)
    if local is not None and hasattr(local, "get_run_config"):
        local.get_run_config().callbacks = callbacks


def _trainable(space: SearchSpace, settings: RunSettings, trainable_fn: Callable[..., None]):
    from ray import tune

    resources = {"cpu": space.cpu, "gpu": space.gpu}
    return tune.with_resources(tune.with_parameters(trainable_fn, settings=as_dict(settings)), resources)


def _new_tuner(space: SearchSpace, planned: PlannedGroup, settings: RunSettings, results_root: str, callbacks,
               trainable_fn: Callable[..., None]):
    from ray import tune

    search_alg, scheduler, num_samples = None, None, space.num_samples
    if space.stage == "seeds":
        num_samples = 1
    elif space.algorithm == "optuna":
        from ray.tune.search.optuna import OptunaSearch

        search_alg = OptunaSearch(seed=space.seed)
        if space.concurrency:
            from ray.tune.search import ConcurrencyLimiter

            search_alg = ConcurrencyLimiter(search_alg, max_concurrent=space.concurrency)
    if space.scheduler == "asha" and space.stage != "seeds":
        from ray.tune.schedulers import ASHAScheduler

        max_epochs = _max_epochs(planned.group)
        scheduler = ASHAScheduler(time_attr="training_iteration", max_t=max_epochs,
                                  grace_period=min(space.grace_period, max_epochs),
                                  reduction_factor=space.reduction_factor)
    tune_config = tune.TuneConfig(metric=OBJECTIVE, mode="max", search_alg=search_alg, scheduler=scheduler,
                                  num_samples=num_samples, max_concurrent_trials=space.concurrency,
                                  # Trials are independent (each seeds and loads its own model): starting a new
                                  # worker process per trial would cost more than a short trial.
                                  reuse_actors=True)
    run_config = tune.RunConfig(
        name=planned.group.slug, storage_path=results_root, verbose=0, callbacks=callbacks,
        failure_config=tune.FailureConfig(max_failures=space.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=space.checkpoints_to_keep,
                                                checkpoint_score_attribute=OBJECTIVE, checkpoint_score_order="max"))
    return tune.Tuner(_trainable(space, settings, trainable_fn), param_space=param_space(planned),
                      tune_config=tune_config,
                      run_config=run_config)


def _max_epochs(group: Group) -> int:
    domain = group.domains.get("epochs")
    epochs = max(domain.values) if domain and domain.kind != "constant" else (
        domain.values[0] if domain else Hyperparameters.epochs)
    isolayer = group.domains.get("isolayer_epochs")
    extra = (max(isolayer.values) if isolayer else Hyperparameters.isolayer_epochs) if group.method == "isolayer" else 0
    return int(epochs) + int(extra)


def _outcome(group: Group, grid) -> GroupOutcome:
    metric = get_task(group.task).metric
    trials = []
    for result in grid:
        config = dict(result.config or {})
        trial_id = str((result.metrics or {}).get("trial_id", Path(result.path or "?").name))
        epochs = int((result.metrics or {}).get("epoch", 0) or 0)
        value = (result.metrics or {}).get(OBJECTIVE)
        if result.error is not None:
            error = tracking.error_summary(str(result.error), type(result.error).__name__)
            trials.append(TrialOutcome(trial_id, "failed", config, value, epochs, error))
            continue
        status = "stopped_early" if epochs < tracking.expected_epochs(config) else "finished"
        trials.append(TrialOutcome(trial_id, status, config, value, epochs))
    scored = sorted((t for t in trials if t.status != "failed" and t.value is not None), key=lambda t: t.trial_id)
    best = max(scored, key=lambda t: t.value) if scored else None  # ties: the lowest trial id, as tables do
    return GroupOutcome(group=group, metric=metric, trials=trials, best=best)


def _storage_root(storage_path) -> str:
    text = str(storage_path)
    return text if "://" in text else str(Path(text).expanduser().resolve())


def _join(root: str, child: str) -> str:
    return f"{root.rstrip('/')}/{child}" if "://" in root else str(Path(root) / child)


def _default_tracking(storage: str) -> str:
    if "://" in storage:
        raise ConfigError(f"storage path {storage!r} is remote: give --tracking-uri (an http:// MLflow server)")
    Path(storage).mkdir(parents=True, exist_ok=True)
    return tracking.default_tracking_uri(storage)


def _trial_settings(space: SearchSpace, data_dir: str | None) -> RunSettings:
    """Settings of every trial. Data: ``--data-dir``, else ``$GLUE_DIR``, else the space's ``data_dir``."""
    settings = space.run_settings(data_dir=data_dir or os.environ.get("GLUE_DIR") or None)
    chosen = settings.data_dir
    if chosen:
        path = Path(chosen).expanduser()
        if not path.is_dir():
            raise ConfigError(f"data directory {chosen!r} does not exist: give --data-dir or GLUE_DIR of a folder "
                              "in the GLUE layout")
        settings = replace(settings, data_dir=str(path.resolve()))  # trials run in their own working folders
    return replace(settings, progress=False, output_dir=None, save_checkpoint=False)


def _refuse_to_overwrite(results_root: str, planned: list[PlannedGroup], resume: bool) -> None:
    if resume or "://" in results_root:
        return
    existing = [p.group.key for p in planned if Path(results_root, p.group.slug).exists()]
    if existing:
        raise ConfigError(f"search results already exist in {results_root} for {', '.join(existing[:3])}"
                          f"{' ...' if len(existing) > 3 else ''}: pass --resume to continue that search, or --name "
                          "to start a new one")


def exit_code(summary: SearchSummary) -> int:
    return 1 if summary.failed else 0


