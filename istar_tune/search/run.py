"""Running searches: one Tune experiment for one or several search spaces, recorded in MLflow.

:func:`run_searches` checks everything first (``preflight``), plans each search's groups (``plan``), opens its
MLflow experiment and parent run, hands every group's configurations to Ray Tune through one searcher and one
scheduler (``searcher``, ``scheduler``), and ends with a summary per search (``outcome``), whichever way the
experiment ended. ``resume=True`` restores the experiment with ``Tuner.restore``: finished trials are not run again;
a search whose every trial had ended is summarised from Tune's saved state without starting Ray.
With a :class:`~istar_tune.search.tune.simulate.Simulation`, trials are rehearsed without training.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from istar_tune import console, tracking
from istar_tune.config import as_dict, group_key
from istar_tune.errors import ConfigError
from istar_tune.search import cluster, guard, logged_models, parent, stopping, system_metrics
from istar_tune.search.backends import get_backend
from istar_tune.search.experiment import Experiment, check_and_plan, check_resources, experiment_of
from istar_tune.search.outcome import SearchSummary, every_trial_ended, folder_bytes, group_outcomes
from istar_tune.search.parent import logged_settings
from istar_tune.search.plan import base_config, group_plans, planned_size
from istar_tune.search.shard import Shard
from istar_tune.search.shard import describe as describe_shard
from istar_tune.search.spaces.space import SearchSpace
from istar_tune.search.tune.reporter import OBJECTIVE
from istar_tune.search.tune.simulate import Simulation, simulated_trainable
from istar_tune.search.tune.trainable import trainable
from istar_tune.tracking.storage import artifact_root, is_remote
from istar_tune.trial_config import trial_group
from istar_tune.trial_status import TrialStatus

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class SearchOptions:
    """How :func:`run_searches` runs its searches (every field a keyword of :func:`run_searches` and
    :func:`run_search` too)."""

    storage_path: str | os.PathLike | None = None
    """Ray's results (default: ``$ISTAR_TUNE_STORAGE_PATH``, else ``istar-runs``)."""
    tracking_uri: str | None = None
    """MLflow (default: ``$MLFLOW_TRACKING_URI``, else sqlite beside the results)."""
    name: str | None = None
    """The Tune experiment's name (results folder; default: the searches' names joined by ``+``); with one space,
    its MLflow experiment too."""
    address: str | None = None
    """The Ray cluster (default: ``$RAY_ADDRESS``, else a local instance)."""
    resume: bool = False
    """Continue the interrupted search in the results folder."""
    resume_if_started: bool = False
    """``resume`` when the search has started before (its plan or Tune's state is in the results folder), else start
    it: a batch job that may be requeued runs the same command every time."""
    data_dir: str | None = None
    """A folder in the GLUE layout (else the space's ``data_dir``, else ``$GLUE_DIR``, else the hub)."""
    write: Callable[[str], None] | None = None
    """Where progress lines go (default: :func:`istar_tune.console.say`)."""
    trainable_fn: Callable[..., None] = trainable
    """``trainable_fn(config, settings, keep)`` runs one trial (default:
    :func:`~istar_tune.search.tune.trainable.trainable`, which fine-tunes; ``settings`` and ``keep`` map each search's
    name to its run settings and to how many of its newest checkpoints a trial keeps)."""
    simulation: Simulation | None = None
    """Rehearse the trials (:func:`istar_tune.search.tune.simulate.simulated_trainable`) instead of training."""
    accept_changed_space: bool = False
    """With ``resume``: go on although the space now plans other trials (the search keeps the grid it started
    with)."""
    gpu_memory_gb: float | None = None
    """The memory of the cluster's GPUs, for the check that the packing (``resources.gpu``) fits (else the GPU type
    Ray reports says it)."""
    system_metrics_s: float | None = system_metrics.DEFAULT_INTERVAL_S
    """Seconds between samples of every node's load, logged to each search's run (0 or ``None``: none)."""
    log_models: bool = True
    """Each group's best checkpoint as an MLflow model at the end (:mod:`~istar_tune.search.logged_models`)."""
    shard: Shard | None = None
    """Only this share of the searches' (model, task) pairs (a job array's task: :mod:`~istar_tune.search.shard`)."""


def run_search(space: SearchSpace, options: SearchOptions | None = None, **given) -> SearchSummary:
    """Run (or resume) every group of ``space``: :func:`run_searches` of one space (``name`` names its MLflow
    experiment and results folder)."""
    return run_searches([space], options, **given)[0]


def run_searches(spaces: list[SearchSpace], options: SearchOptions | None = None, **given) -> list[SearchSummary]:
    """Run (or resume) several searches as one Tune experiment; one summary per search, in order. ``options`` (or its
    fields as keywords, e.g. ``storage_path=...``): :class:`SearchOptions`.

    Each search keeps its own MLflow experiment (its space's name; with one space, ``name`` if given), settings and
    groups; their trials share the cluster, so it stays full from the first trial of the first search to the last
    trial of the last. A seeds search whose ``best_of`` names a search of the same run does not wait for that
    whole search: each of its groups starts as soon as the group it re-runs has ended. One search at a time per
    results folder (:mod:`~istar_tune.search.guard`: its lock is held from the plan check to the end, however the
    search ends); ``resume`` refuses a space that plans other trials than the search started with, unless
    ``accept_changed_space``.
    """
    options = replace(options or SearchOptions(), **given)
    say = options.write or console.say
    began = time.monotonic()
    stop = stopping.Stop()
    # A signal at any moment stops the search, saying what it kept; ``held`` keeps the results folder's lock to the end.
    with stopping.catch_signals(stop) as listen_again, contextlib.ExitStack() as held:
        with contextlib.ExitStack() as writing:
            try:
                experiment = experiment_of(spaces, options.storage_path, options.tracking_uri, options.name,
                                           options.data_dir, options.simulation, options.shard)
                if options.shard is not None:
                    say(describe_shard(experiment.spaces, options.shard))
                options = _resolve_resume(options, experiment, say)
                experiment.log_models = options.log_models
                checked_s, ended = check_and_plan(experiment, options.resume), None
                if options.resume:  # before Ray starts: a refusal, or a search whose every trial had ended, needs none
                    _guard(experiment, options, say, held)
                    ended = _ended(experiment)
                if ended is None:
                    simulation = options.simulation
                    cluster.connect(options.address, rehearse=(simulation.gpus, experiment.spaces[0])
                                    if simulation else None)
                    listen_again()  # ray.init puts its own SIGTERM handler in (which aborts the process)
                    checked_s += check_resources(experiment, options.gpu_memory_gb)
                writing.enter_context(stop.deferred())  # a signal waits for the plan, store and parent runs
            except KeyboardInterrupt as err:
                raise type(err)("interrupted before the search started; nothing was written: run it again") from None
            _say_checked(experiment, checked_s, say, cluster_checked=ended is None)
            if ended is not None:
                return _summarise_ended(experiment, ended, say, began, stop)
            if not options.resume:
                _guard(experiment, options, say, held)
            _open_tracking(experiment)
            cluster.tune_environment(experiment.total, experiment.spaces[0])
        trainable_fn = simulated_trainable if experiment.simulated else options.trainable_fn
        monitor = system_metrics.monitoring(experiment.tracking_uri, list(experiment.parents.values()),
                                            options.system_metrics_s)
        return _fit(experiment, trainable_fn, options.resume, say, began, stop, monitor)


def _resolve_resume(options: SearchOptions, experiment: Experiment, say: Callable[[str], None]) -> SearchOptions:
    """``resume_if_started``: ``resume`` when the search has started before, said in a line."""
    if options.resume or not options.resume_if_started:
        return options
    started = guard.started(experiment.results_root) or guard.results_exist(experiment.storage, experiment.name)
    if started:
        say(f"resuming {experiment.name}: it had started in {experiment.results_root}")
    return replace(options, resume=started)


def _say_checked(experiment: Experiment, checked_s: float, say: Callable[[str], None], cluster_checked: bool) -> None:
    """The preflight's line, and each task as it read it."""
    said = f"storage, tracking{'' if experiment.simulated else ', data, models'}"
    say(f"preflight: {said}{' and cluster resources' if cluster_checked else ''} checked in {checked_s:.1f} s")
    for task in {t.name: t for space in experiment.spaces for t in space.task_objects}.values():
        say(f"  {experiment.seen.get(task.name, task).describe()}")  # the rows and classes the trials train on


def _ended(experiment: Experiment) -> tuple[list, list] | None:
    """Tune's saved trials and results of a resumed search (read without Ray) when every configuration it planned
    trained to its last epoch; ``None`` when anything is left to run or to retry (a failed trial, one short of its
    epochs), or the state cannot be read so: Tune's restore then takes it."""
    from ray.tune import ExperimentAnalysis, ResultGrid
    from ray.tune.experiment import Trial

    try:
        analysis = ExperimentAnalysis(str(experiment.results_root))
        trials = analysis.trials
        if not trials or any(t.status != Trial.TERMINATED for t in trials):
            return None
        results = list(ResultGrid(analysis))
        statuses = {t.trial_id: t.status for t in trials}
        # As if stopped: a trial short of its last epoch counts as interrupted (Tune may save a trial the search's
        # stop ended as TERMINATED; one its scheduler stopped goes the full way too, this process not knowing which).
        outcomes = {n: group_outcomes(experiment.planned[n], results, statuses, n, stopped=True)
                    for n in experiment.names}
    except Exception:  # noqa: BLE001 - Tune's restore reads its state again and says what is wrong with it
        log.debug("Tune's state could not be read without Ray", exc_info=True)
        return None
    return (trials, results) if every_trial_ended(experiment.names, experiment.planned, outcomes) else None


def _summarise_ended(experiment: Experiment, ended: tuple[list, list], say: Callable[[str], None], began: float,
                     stop: stopping.Stop) -> list[SearchSummary]:
    """A resumed search whose every trial had ended: its MLflow records reconciled and its runs ended as Tune's
    restore would (the trial loggers' end of experiment), and its summaries, without starting Ray or a worker."""
    trials, results = ended
    _open_tracking(experiment)
    for logger in experiment.loggers.values():
        logger.on_experiment_end(trials)
    say(f"== {experiment.name}: every trial had ended; nothing to run")
    phases = {"setup": time.monotonic() - began, "fit": 0.0}
    return _close(experiment, results, {t.trial_id: t.status for t in trials}, "", phases, stop, say)


def _guard(experiment: Experiment, options: SearchOptions, say: Callable[[str], None],
           held: contextlib.ExitStack) -> None:
    """The results folder's lock (held by ``held`` to the search's end), then the plan check (after every other
    check: a refusal creates nothing), then Tune's state repaired for ``--resume``
    (:mod:`~istar_tune.search.tune.state`)."""
    from istar_tune.search.tune import state

    experiment.lock = held.enter_context(guard.hold(experiment.storage, experiment.name))
    started = guard.check_plan(experiment.results_root, guard.fingerprint(experiment.spaces, experiment.planned),
                               options.resume, options.accept_changed_space)
    guard.check_data_files(experiment.results_root, list({t.name: t for space in experiment.spaces
                                                          for t in space.task_objects}.values()), options.resume)
    if started is not None:  # a changed space, accepted: the experiment goes on with its own grid
        guard.keep_started(experiment.planned, started)
    experiment.restored = state.repair(experiment.results_root, say) if options.resume else None


def _open_tracking(experiment: Experiment) -> None:
    """Each search's MLflow experiment, parent run (its plan recorded) and trial logger."""
    from istar_tune.search.tune.callbacks import MlflowTrialLogger

    if not is_remote(experiment.storage):
        Path(experiment.storage).mkdir(parents=True, exist_ok=True)
    tracking.prepare_store(experiment.tracking_uri)
    mlflow = tracking.client(experiment.tracking_uri)
    # A tracking server keeps artifacts where it serves them from; a local store gets a folder beside it.
    artifacts = artifact_root(experiment.tracking_uri, experiment.storage)
    for n, space in zip(experiment.names, experiment.spaces):
        experiment_id = tracking.ensure_experiment(mlflow, n, artifacts)
        tags = {tracking.TAG_SPACE: space.path, tracking.TAG_COMMIT: tracking.git_commit(),
                tracking.TAG_STAGE: space.stage}
        if space.stage == "seeds":
            chosen = sorted({p.chosen_by for p in experiment.planned[n] if p.chosen_by})
            tags[tracking.TAG_CHOSEN_BY] = ",".join(chosen) if chosen else space.choose_by
        if experiment.simulated:
            tags[tracking.TAG_SIMULATED] = "true"
        experiment.parents[n] = tracking.parent_run(mlflow, experiment_id, n, tags,
                                                    shard=str(experiment.shard) if experiment.shard else None)
        if job := cluster.slurm_job():  # set again on each requeue: a resumed search run shows the count so far
            mlflow.set_tag(experiment.parents[n], tracking.TAG_SLURM_JOB, job)
        tracking.record_plan(mlflow, experiment.parents[n],
                             {group_key(base_config(p)): p.trials for p in experiment.planned[n]})
        parent.describe(mlflow, experiment.parents[n], space, experiment.planned[n], experiment.settings[n])
        parent.share_view(mlflow, experiment_id, space)
        experiment.loggers[n] = MlflowTrialLogger(experiment.tracking_uri, n, experiment.parents[n], experiment_id,
                                                  tags, threads=8, settings=logged_settings(experiment.settings[n]),
                                                  restored=experiment.restored)


def _tuner(experiment: Experiment, trainable_fn: Callable[..., None], callbacks: list, resume: bool):
    """A restored Tuner (``resume``), else a new one with the searches' searcher and scheduler."""
    from ray import tune

    from istar_tune.search.tune.scheduler import GroupScheduler
    from istar_tune.search.tune.searcher import GroupSearcher

    names, spaces, first = experiment.names, experiment.spaces, experiment.spaces[0]
    keep = {n: (s.checkpoints_to_keep if experiment.settings[n].checkpoint == "state" else 1)
            for n, s in zip(names, spaces)}
    extra = {"simulation": experiment.simulation} if experiment.simulated else {}
    run_trial = tune.with_resources(
        tune.with_parameters(trainable_fn, settings={n: as_dict(v) for n, v in experiment.settings.items()},
                             keep=keep, **extra), {"cpu": first.cpu, "gpu": first.gpu})
    if resume and tune.Tuner.can_restore(experiment.results_root):
        tuner = tune.Tuner.restore(experiment.results_root, trainable=run_trial, resume_unfinished=True,
                                   resume_errored=guard.repair_systemic_errors(experiment.results_root))
        cluster.replace_callbacks(tuner, callbacks)
        return tuner
    plans = [p for n, space in zip(names, spaces) for p in group_plans(space, experiment.planned[n], n)]
    storages = {_study_storage(s, experiment.storage) for s in spaces} - {None}
    if len(storages) > 1:
        raise ConfigError(f"searches run together keep their studies in one database; they name "
                          f"{len(storages)} ({', '.join(sorted(storages))}): give them the same search.storage")
    searcher = GroupSearcher(plans, seed=first.seed, metric=OBJECTIVE, storage=next(iter(storages), None))
    rules = {trial_group(base_config(p, n)): space.stopping_rule(p.group.max_epochs, OBJECTIVE)
             for n, space in zip(names, spaces) if space.stage != "seeds" for p in experiment.planned[n]}
    scheduler = GroupScheduler(rules)
    return tune.Tuner(run_trial, param_space={}, tune_config=tune.TuneConfig(
        metric=OBJECTIVE, mode="max", search_alg=searcher, scheduler=scheduler, num_samples=-1,
        # Trials are independent (each seeds and loads its own model): starting a new worker process per trial
        # would cost more than a short trial.
        reuse_actors=True, trial_dirname_creator=cluster.trial_dirname),
        run_config=cluster.run_config(first, experiment.name, experiment.storage, callbacks))


def _fit(experiment: Experiment, trainable_fn: Callable[..., None], resume: bool, say: Callable[[str], None],
         began: float, stop: stopping.Stop, monitor: contextlib.AbstractContextManager) -> list[SearchSummary]:
    """Run the Tune experiment (unless a signal came while the search was being set up); however it ends, close
    the MLflow records and summarise each search. ``monitor``: the system metrics' (:mod:`system_metrics`), held
    while the tracebacks go to the errors file, so its last writes' (to a full store, say) go there too."""
    from ray.tune.logger import JsonLoggerCallback

    from istar_tune.search.tune.progress import ProgressPrinter, TrialStatuses
    from istar_tune.search.tune.state import StateCopier

    names, planned = experiment.names, experiment.planned
    phases: dict[str, float] = {}
    for logger in experiment.loggers.values():
        logger.stop = stop
    printer, statuses = ProgressPrinter(experiment.total, say), TrialStatuses()
    callbacks = [*experiment.loggers.values(), printer, statuses, JsonLoggerCallback()]
    if not is_remote(experiment.storage):  # a whole copy of Tune's state, for a --resume after a full disk
        callbacks.append(StateCopier(experiment.results_root))
    if len(names) > 1:
        printer.write("== " + " then ".join(f"{n} ({planned_size(planned[n])})" for n in names))
    else:
        printer.write(f"== {experiment.name}: {planned_size(planned[names[0]])}")
    interrupted, grid = "", None
    phases["setup"] = time.monotonic() - began
    with contextlib.ExitStack() as ending:
        ending.enter_context(stopping.errors_to_file(_errors_log(experiment)))  # tracebacks to a file, to the end
        ending.enter_context(monitor)  # ends first: its last write's traceback (MLflow logs one) goes to the file
        try:
            try:
                if not stop.reason:
                    grid = _tuner(experiment, trainable_fn, callbacks, resume).fit()
            except Exception:  # Tune may fail reading its own results back after the failure (a full disk)
                if not stop.systemic:
                    raise
                log.debug("Tune ended with an error after a systemic failure", exc_info=True)
            interrupted = stop.reason
        except KeyboardInterrupt:
            interrupted = stop.reason or "interrupted by a signal"
            raise
        except BaseException as err:
            interrupted = f"{type(err).__name__}: {err}"
            raise
        finally:
            phases["fit"] = time.monotonic() - began - phases["setup"]
            # Tune may have failed reading its results back (after a full disk): the trials as its callbacks saw them
            ended = grid if grid is not None else statuses.results()
            summaries = _close(experiment, ended, statuses.statuses, interrupted, phases, stop, say)
    return summaries


def _errors_log(experiment: Experiment) -> Path:
    """Where failed trials' tracebacks go: beside the results folder (a local file for a remote storage path)."""
    folder = Path(experiment.storage) if not is_remote(experiment.storage) else Path.cwd()
    return folder / f"{experiment.name}.errors.log"


def _close(experiment: Experiment, grid, statuses: dict[str, str], interrupted: str, phases: dict[str, float],
           stop: stopping.Stop, say: Callable[[str], None]) -> list[SearchSummary]:
    """Each search's outcomes from Tune's results; its trial logger flushed and its parent run ended."""
    names, planned = experiment.names, experiment.planned
    results = list(grid) if grid is not None else []
    outcomes = {n: group_outcomes(planned[n], results, statuses, n, stopped=bool(stop.reason)) for n in names}
    if not interrupted and not every_trial_ended(names, planned, outcomes):
        interrupted = "stopped before every trial ended (Ctrl-C, or Ray stopped the experiment)"
    flushing = time.monotonic()
    for logger in experiment.loggers.values():
        if interrupted:
            logger.interrupt(interrupted)
    flushed = all([logger.close(timeout=None if not interrupted else 120) for logger in experiment.loggers.values()])
    phases["flush"] = time.monotonic() - flushing
    lost, models = [], {}
    try:
        mlflow = tracking.client(experiment.tracking_uri)
        for n, space in zip(names, experiment.spaces):
            parent.log_best(experiment.tracking_uri, n, experiment.parents[n], planned[n], experiment.simulated)
            if experiment.log_models and not interrupted:
                groups = {(p.group.model, p.group.task, p.group.method) for p in planned[n]}
                models[n] = logged_models.log_best_models(
                    experiment.tracking_uri, n, str(experiment.results_root), experiment.simulated, say,
                    seeds=space.stage == "seeds", groups=groups).line()
            failed = any(t.status == TrialStatus.FAILED for g in outcomes[n] for t in g.trials)
            mlflow.set_terminated(experiment.parents[n],
                                  "KILLED" if interrupted else ("FAILED" if failed else "FINISHED"))
    except Exception as err:  # a full or read-only store after a systemic failure: say so, never a traceback
        if not stop.systemic:
            raise
        log.debug("ending the search's MLflow run failed", exc_info=True)
        lost.append(f"the search's run could not be ended ({type(err).__name__}: the store cannot be written); "
                    "--resume ends it once it can")
    if not flushed:
        log.error("some MLflow writes did not land before the search ended")
    return [SearchSummary(name=n, storage_path=str(experiment.results_root), tracking_uri=experiment.tracking_uri,
                          groups=outcomes[n], planned_trials=sum(p.trials for p in planned[n]),
                          interrupted=interrupted, signal_number=stop.signal_number, systemic=stop.systemic,
                          mlflow_latencies_ms=list(experiment.loggers[n].writer.latencies_ms),
                          mlflow_errors=[*experiment.loggers[n].writer.errors, *lost], phases_s=phases,
                          time_factor=experiment.simulation.time_factor if experiment.simulated else 0.0,
                          disk_bytes=None if is_remote(experiment.storage) else folder_bytes(experiment.results_root),
                          checkpoint=experiment.settings[n].checkpoint, models=models.get(n, ""))
            for n in names]


def _study_storage(space: SearchSpace, storage: str) -> str | None:
    """Where a backend that keeps studies (Optuna's) keeps them: ``search.storage``, else a sqlite file beside the
    results (a remote storage path without ``search.storage`` keeps them in the driver's memory)."""
    if not get_backend(space.algorithm).keeps_studies:
        return None
    if space.study_storage:
        return space.study_storage
    if is_remote(storage):
        log.warning("search.storage is not set and the storage path is remote: the studies stay in memory")
        return None
    return f"sqlite:///{Path(storage) / 'optuna.db'}"
