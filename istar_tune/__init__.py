"""istar-tune: hyperparameter search for fine-tuning transformer encoders with isotropy regularisers.

The Python API (each name is imported on first use, so ``import istar_tune`` loads neither torch nor Ray)::

    from istar_tune import load_search_space, run_search, build_table, train, Simulation

    space = load_search_space("search_spaces/smoke.yaml")
    summary = run_search(space, storage_path="istar-runs")
    print(build_table(summary.tracking_uri, space.name, kind="best"))

A task of one's own travels as an object: ``task = task_of("my-task/task.yaml")`` (or ``load_task_file``), then
``train(Hyperparameters(task=task.name), settings, task=task)``; a search space holds its own. Only the shipped tasks
are known by their names alone.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_API = {
    "train": "istar_tune.training.loop",
    "Hyperparameters": "istar_tune.config",
    "RunSettings": "istar_tune.config",
    "load_search_space": "istar_tune.search.spaces.file",
    "run_search": "istar_tune.search.run",
    "run_searches": "istar_tune.search.run",
    "Simulation": "istar_tune.search.tune.simulate",
    "build_table": "istar_tune.results.tables",
    "render": "istar_tune.results.formats",
    "replay_experiment": "istar_tune.replay.run",
    "dry_run": "istar_tune.search.dry_run",
    "write_plots": "istar_tune.results.plots",
    "watch_status": "istar_tune.results.status",
    "export_best": "istar_tune.results.export",
    "log_seed_aggregates": "istar_tune.results.aggregates",
    "analyze": "istar_tune.apps.analyze",
    "trial_runs": "istar_tune.tracking",
    "METHODS": "istar_tune.methods",
    "TASKS": "istar_tune.tasks",
    "Task": "istar_tune.tasks",
    "task_of": "istar_tune.tasks",
    "load_task_file": "istar_tune.tasks",
}

__all__ = [*_API, "__version__"]


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'istar_tune' has no attribute {name!r}")
