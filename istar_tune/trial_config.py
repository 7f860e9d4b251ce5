"""A trial's configuration: the dict Ray Tune hands a trial (its hyperparameters, and the keys below), in one place:
the keys the search adds, what a shared trial completes, the members a fused trial trains, the group it is compared
within, the search it belongs to, and the task it reads (carried inside when the task is not shipped)."""

from __future__ import annotations

import json
from typing import Any

from istar_tune.config import HYPERPARAMETER_KEYS, Hyperparameters, from_dict, group_key
from istar_tune.tasks import definition_mapping, get_task, task_from_mapping
from istar_tune.tasks.task import Task

SEARCH_KEY = "search"
"""Key of a trial's configuration naming the search (MLflow experiment) it belongs to."""
SHARED_EPOCHS_KEY = "completes_epochs"
"""Key of a shared trial's configuration: the epoch counts of the configurations it completes on its way (its own
``epochs`` the largest); absent from an unshared trial's."""

FUSED_KEY = "fused_members"
"""Key of a fused trial's configuration (``search.fuse``): its members' configurations, in order (the trial's own
keys are its first member's); absent from a trial of one configuration."""
FUSED_MARK = "fused"
"""Key of a fused trial's member's configuration (``True``): it trained in a bundle, recorded with its run as the
exactness setting ``setting.fused`` (:data:`istar_tune.config.EXACTNESS_SETTINGS`)."""
FUSED_SHARED = ("model", "task", "batch_size", "grad_accum")
"""The hyperparameters a fused trial's members share (:data:`istar_tune.training.bundle.SHARED`); they may differ in
every other one, the method and the seed included (members of one seed read one batch stream, the others each their
own seed's data order). With ``include_padding`` the seed is shared too (padding to one length would add points)."""


TASK_DEFINITION_KEY = "task_definition"
"""Key of a trial's configuration holding its task's resolved definition when the task is not shipped: the trial
reads its data from it, on any node, without the driver's files or working folder."""


def with_task_definition(config: dict[str, Any], task: Task | None) -> dict[str, Any]:
    """``config`` with the definition of its ``task`` when the task is not a shipped one (``None``: a shipped task,
    found by its name)."""
    task = task if task is not None else get_task(config["task"])
    if not task.shipped and task.name != config["task"]:
        raise ValueError(f"a trial configuration of task {config['task']!r} given the definition of {task.name!r}")
    return config if task.shipped else {**config, TASK_DEFINITION_KEY: definition_mapping(task)}


def trial_task(config: dict[str, Any]) -> Task:
    """The task of a trial's configuration: from the definition it carries (a task that is not shipped), else the
    shipped task of its name. Nothing is registered: the configuration is the one source."""
    definition = config.get(TASK_DEFINITION_KEY)
    if definition is None:
        return get_task(config["task"])
    key = json.dumps(definition, sort_keys=True, default=str)
    if key not in _READ:
        if len(_READ) >= 64:  # a process meets a few tasks of its own; never an unbounded store
            _READ.clear()
        _READ[key] = task_from_mapping(definition, source=f"the task definition of trial config {config['task']}")
    return _READ[key]


_READ: dict[str, Task] = {}
"""The tasks :func:`trial_task` built, by their definition's text: a driver's callbacks and a trial's records ask
for its task many times, and a definition is parsed and checked once (a memo: the same text, the same task)."""


def completes(config: dict[str, Any]) -> tuple[int, ...]:
    """The epoch counts of the configurations a trial of ``config`` completes (its own ``epochs`` alone unless
    shared)."""
    shared = config.get(SHARED_EPOCHS_KEY)
    return tuple(int(k) for k in shared) if shared else (int(config.get("epochs", Hyperparameters.epochs)),)


def configuration(config: dict[str, Any], epochs: int) -> dict[str, Any]:
    """The configuration with ``epochs`` epochs that a (shared) trial of ``config`` completes."""
    return {**{k: v for k, v in config.items() if k != SHARED_EPOCHS_KEY}, "epochs": epochs}


def members(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The configurations a trial of ``config`` trains: a fused trial's members, else ``config`` itself."""
    return [dict(member) for member in config[FUSED_KEY]] if config.get(FUSED_KEY) else [config]


def fuse(configs: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """``configs`` as trials of at most ``size`` members each: the configurations that share a batch stream (the
    same :data:`FUSED_SHARED` hyperparameters and every key that is not a hyperparameter) in bundles, in their
    order; a configuration alone in its stream stays a trial of its own. A member may be a shared trial
    (:data:`SHARED_EPOCHS_KEY`): it completes its shorter configurations on its way, as it would alone."""
    streams: dict[str, list[dict[str, Any]]] = {}
    for config in configs:
        shared = (*FUSED_SHARED, "seed") if config.get("include_padding") else FUSED_SHARED
        key = json.dumps({k: v for k, v in config.items() if k != SHARED_EPOCHS_KEY and
                          (k not in HYPERPARAMETER_KEYS or k in shared)}, sort_keys=True, default=str)
        streams.setdefault(key, []).append(config)
    trials = []
    for same in streams.values():
        for start in range(0, len(same), size):
            bundle = [{**config, FUSED_MARK: True} for config in same[start:start + size]]
            epochs = max(int(c.get("epochs", Hyperparameters.epochs)) for c in bundle)  # the bundle's horizon
            trials.append(same[start] if len(bundle) == 1 else {**bundle[0], "epochs": epochs, FUSED_KEY: bundle})
    return trials


def for_search(config: dict[str, Any], by_search: dict[str, Any]) -> Any:
    """What ``by_search`` (``{search name: value}``) holds for the search of a trial's configuration."""
    search = config.get(SEARCH_KEY)
    if search not in by_search:
        raise KeyError(f"trial configuration of search {search!r}; this experiment runs {', '.join(by_search)}")
    return by_search[search]


def trial_group(config: dict[str, Any]) -> str:
    """``search:model/task/method``: the group a trial is compared within when several searches share one Tune
    experiment (``model/task/method`` for a configuration without a search)."""
    search = config.get(SEARCH_KEY)
    return f"{search}:{group_key(config)}" if search else group_key(config)


def hyperparameters(config: dict[str, Any]) -> Hyperparameters:
    """The typed, checked hyperparameters of a trial's configuration (its other keys left out): the one parse."""
    return from_dict(Hyperparameters, {k: v for k, v in config.items() if k in HYPERPARAMETER_KEYS},
                     source="trial config")
