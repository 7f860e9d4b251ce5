"""TODO docstring
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from istar_tune import tracking
from istar_tune.config import RunSettings, as_dict
from istar_tune.errors import ConfigError
from istar_tune.search.outcome import SearchSummary, expected_trials, group_outcomes
from istar_tune.search.plan import base_config, group_plans, max_epochs, plan
from istar_tune.search.simulate import Simulation
from istar_tune.search.space import SearchSpace, group_key, trial_group
from istar_tune.search.trainable import OBJECTIVE, trainable
from istar_tune.tracking.storage import artifact_root, is_remote, join, storage_root
from istar_tune.tracking.storage import tracking_uri as resolve_tracking_uri

log = logging.getLogger(__name__)


_USER_PENDING = os.environ.get("TUNE_MAX_PENDING_TRIALS_PG")
_USER_CHECKPOINT_S = os.environ.get("TUNE_GLOBAL_CHECKPOINT_S")


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
    from istar_tune.search import preflight
    from istar_tune.search.callbacks import MlflowTrialLogger, ProgressPrinter
    from istar_tune.search.scheduler import GroupScheduler
    from istar_tune.search.searcher import GroupSearcher

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
        from istar_tune.search.simulate import simulated_trainable

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
        tracking.record_plan(mlflow, parents[n], {group_key(base_config(p)): p.trials for p in planned[n]})
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
            horizons = {trial_group(base_config(p, n)): max_epochs(p.group) for n, space in zip(names, spaces)
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
        outcomes = {n: group_outcomes(planned[n], results, statuses, n) for n in names}
        ended = sum(len(g.trials) - g.count("interrupted") for n in names for g in outcomes[n])
        if not interrupted and ended < expected_trials(names, planned, outcomes):
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

    # Tune keeps every checkpoint it is told of; the trial itself prunes all but its newest (checkpoints.py):
    # a Tune limit would force a snapshot of every trial's state per checkpoint, which stalls large searches.
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, callbacks=callbacks,
                          failure_config=tune.FailureConfig(max_failures=space.max_failures),
                          checkpoint_config=tune.CheckpointConfig(num_to_keep=None))


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
    from istar_tune.training.data import resolve_data_dir

    chosen = resolve_data_dir(data_dir, space.settings.get("data_dir"))
    settings = space.run_settings(data_dir=str(chosen.resolve()) if chosen is not None else None)
    return replace(settings, progress=False, output_dir=None, save_checkpoint=False)


def _refuse_to_overwrite(results_root: str, resume: bool) -> None:
    if resume or is_remote(results_root):
        return
    if Path(results_root).exists() and any(Path(results_root).iterdir()):
        raise ConfigError(f"search results already exist in {results_root}: pass --resume to continue that search, "
                          "or --name to start a new one")
