"""The experiment a run of searches is (:class:`Experiment`): the searches' names, storage, tracking URI and trial
settings, checked for what they must share; then every check that needs no cluster (``preflight``), whose resolved
tasks the spaces carry on, and each search's plan; then, once connected, the cluster's resources."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

from istar_tune.config import RunSettings
from istar_tune.errors import ConfigError, repeated
from istar_tune.search import guard, preflight
from istar_tune.search.plan import PlannedGroup, plan
from istar_tune.search.shard import Shard, take_shard
from istar_tune.search.spaces.space import SearchSpace
from istar_tune.search.tune.simulate import Simulation
from istar_tune.tasks.data_folder import resolve_data_dir
from istar_tune.tracking.storage import join, storage_root
from istar_tune.tracking.storage import tracking_uri as resolve_tracking_uri


@dataclass
class Experiment:
    """The searches of one Tune experiment and what they share."""

    names: list[str]
    spaces: list[SearchSpace]
    name: str
    """The Tune experiment (results folder)."""
    storage: str
    tracking_uri: str
    settings: dict[str, RunSettings]
    simulation: Simulation | None
    planned: dict[str, list[PlannedGroup]] = field(default_factory=dict)
    parents: dict[str, str] = field(default_factory=dict)
    loggers: dict[str, Any] = field(default_factory=dict)
    lock: guard.Lock = field(default_factory=lambda: guard.Lock(None))
    restored: set[str] | None = None
    """A resumed search: the trial ids Tune's (repaired) state holds."""
    log_models: bool = True
    """At the end, each group's best checkpoint as an MLflow model (:mod:`~istar_tune.search.logged_models`)."""
    seen: dict[str, Any] = field(default_factory=dict)
    """Each task as the preflight read it with the trials' cuts (task name → :class:`~istar_tune.tasks.Task`): what
    the search's task lines show."""
    shard: Shard | None = None
    """A job array's share (:mod:`~istar_tune.search.shard`): its own results folder and parent runs, the searches'
    MLflow experiments shared with the other shards."""

    @property
    def results_root(self) -> str:
        return join(self.storage, self.name)

    @property
    def simulated(self) -> bool:
        return self.simulation is not None

    @property
    def total(self) -> int:
        """Tune trials of every search (fewer than configurations where they share epoch prefixes)."""
        return sum(p.trainings for n in self.names for p in self.planned[n])


def experiment_of(spaces: list[SearchSpace], storage_path, tracking_uri: str | None, name: str | None,
                  data_dir: str | None, simulation: Simulation | None, shard: Shard | None = None) -> Experiment:
    """Names, storage, tracking URI and trial settings of the searches, checked for what they must share; with a
    ``shard``, the spaces narrowed to its pairs and the results folder its own."""
    if not spaces:
        raise ConfigError("no search space to run: give at least one")
    given = [name or spaces[0].name] if len(spaces) == 1 else [s.name for s in spaces]
    names = [guard.validate_name(n) for n in given]
    twice = repeated(names)
    if twice:
        raise ConfigError(f"searches run together need different names; {', '.join(twice)} is given twice")
    _check_shared(spaces)
    fused = [s.name for s in spaces if s.fuse > 1]
    if simulation is not None and fused:
        raise ConfigError(f"search {fused[0]}: search.fuse with --simulate: the stand-in trial is not fused (and a "
                          "fused search has no scheduler to rehearse): drop --simulate, or set fuse 1")
    storage = storage_root(storage_path)
    folder = names[0] if len(spaces) == 1 else guard.validate_name(name or "+".join(names))
    if shard is not None:  # the spaces that hold a pair of the shard, narrowed to its pairs
        taken = take_shard(list(spaces), shard)
        names = [n for n, space in zip(names, taken) if space is not None]
        spaces, folder = [space for space in taken if space is not None], guard.validate_name(folder + shard.suffix)
    return Experiment(names=names, spaces=list(spaces), storage=storage, name=folder, shard=shard,
                       tracking_uri=resolve_tracking_uri(tracking_uri, storage), simulation=simulation,
                       settings={n: trial_settings(s, data_dir) for n, s in zip(names, spaces)})


def check_and_plan(experiment: Experiment, resume: bool) -> float:
    """Every check that needs no cluster, then each search's plan; the seconds the checks took."""
    names, spaces, settings = experiment.names, experiment.spaces, experiment.settings
    resolved: dict[str, list] = {}

    def data(n: str, space: SearchSpace, **read) -> list[str]:  # each search's tasks, as its preflight resolved them
        seen: list = []
        limits = (settings[n].max_train_samples, settings[n].max_eval_samples)
        resolved[n], problems = preflight.resolve_data(list(space.task_objects or space.tasks), settings[n].data_dir,
                                                       limits=limits, seen=seen, **read)
        experiment.seen.update({task.name: task for task in seen})
        return problems + preflight.holdout_problems(resolved[n], settings[n], space.path)

    checks = [("storage", lambda: preflight.check_storage(experiment.storage)),
              ("tracking", lambda: preflight.check_tracking(experiment.tracking_uri))]
    if experiment.simulated:  # a rehearsal loads no model and reads only what task definitions need: their sizes
        checks += [(f"tasks of {n}", functools.partial(data, n, space, definitions_only=True))
                   for n, space in zip(names, spaces)]
    else:
        for n, space in zip(names, spaces):
            checks += [(f"data of {n}", functools.partial(data, n, space)),
                       (f"models of {n}", lambda s=space, n=n: preflight.check_models(list(s.models),
                                                                                    settings[n].max_length))]
    checked_s = preflight.run_checks(checks)
    experiment.spaces = spaces = [space.with_tasks(resolved[n]) for n, space in zip(names, spaces)]
    experiment.planned = {n: plan(space, experiment.tracking_uri, experiment.simulated, search=n,
                                  chained=dict(zip(names[:i], spaces[:i])))
                          for i, (n, space) in enumerate(zip(names, spaces))}
    guard.refuse_to_overwrite(experiment.results_root, resume)
    if resume:
        guard.refuse_nothing_to_resume(experiment.storage, experiment.name, experiment.results_root)
    return checked_s


def check_resources(experiment: Experiment, gpu_memory_gb: float | None) -> float:
    """Some node of the connected cluster holds one trial's resources, and its GPUs the packing's memory; the seconds
    the check took."""
    import ray

    space = experiment.spaces[0]

    def needs() -> list[tuple[str, int]]:  # each planned trial's memory, computed only where a GPU is asked for
        return [need for name in experiment.names
                for need in preflight.trial_needs(experiment.planned[name], experiment.settings[name])]

    def resources() -> list[str]:
        return preflight.check_cluster(space.cpu, space.gpu, ray.nodes(), needs, gpu_memory_gb)

    return preflight.run_checks([("resources", resources)])


def _check_shared(spaces: list[SearchSpace]) -> None:
    """Searches in one Tune experiment share what Tune sets per experiment: trial resources and retries (each group
    has its own early-stopping rule)."""
    first = spaces[0]
    for space in spaces[1:]:
        for what, of in (("resources", lambda s: {"cpu": s.cpu, "gpu": s.gpu}),
                         ("max_failures", lambda s: s.max_failures)):
            if of(space) != of(first):
                raise ConfigError(f"searches run together share {what}: {first.path} has {of(first)}, {space.path} "
                                  f"has {of(space)}; make them equal or run the searches one by one")


def trial_settings(space: SearchSpace, data_dir: str | None) -> RunSettings:
    """Settings of every trial, its data folder by the one rule
    (:func:`istar_tune.tasks.data_folder.resolve_data_dir`: flag, then search-space file, then ``$GLUE_DIR``), made
    absolute: trials run in their own working folders."""
    chosen = resolve_data_dir(data_dir, space.settings.get("data_dir"))
    settings = space.run_settings(data_dir=str(chosen.resolve()) if chosen is not None else None)
    # A trial computes with the threads Ray gives it (OMP_NUM_THREADS = its CPUs): recorded, so an export repeats it.
    threads = settings.threads if settings.threads is not None else max(1, int(space.cpu))
    return replace(settings, progress=False, output_dir=None, save_checkpoint=False, threads=threads)
