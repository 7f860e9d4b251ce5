"""The Python API: every name ``istar_tune`` exports imports, and is the object its documented module defines."""

from __future__ import annotations

import importlib

import pytest

import istar_tune

DOCUMENTED = {"train": "istar_tune.training.loop", "Hyperparameters": "istar_tune.config",
              "RunSettings": "istar_tune.config", "load_search_space": "istar_tune.search.spaces.file",
              "run_search": "istar_tune.search.run", "run_searches": "istar_tune.search.run",
              "Simulation": "istar_tune.search.tune.simulate", "build_table": "istar_tune.results.tables",
              "render": "istar_tune.results.formats", "replay_experiment": "istar_tune.replay.run",
              "dry_run": "istar_tune.search.dry_run", "write_plots": "istar_tune.results.plots",
              "watch_status": "istar_tune.results.status", "export_best": "istar_tune.results.export",
              "log_seed_aggregates": "istar_tune.results.aggregates", "analyze": "istar_tune.apps.analyze",
              "trial_runs": "istar_tune.tracking.runs",
              "METHODS": "istar_tune.methods", "TASKS": "istar_tune.tasks.registry", "Task": "istar_tune.tasks.task",
              "task_of": "istar_tune.tasks.registry",
              "load_task_file": "istar_tune.tasks.definition"}


@pytest.mark.parametrize("name", sorted(set(istar_tune.__all__) - {"__version__"}))
def test_every_exported_name_imports_as_the_documented_object(name):
    namespace: dict = {}
    exec(f"from istar_tune import {name}", namespace)  # noqa: S102 - the statement a user writes
    assert namespace[name] is getattr(importlib.import_module(DOCUMENTED[name]), name)


def test_every_exported_name_is_documented_here_and_an_unknown_one_is_refused():
    assert set(istar_tune.__all__) == {*DOCUMENTED, "__version__"}
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        istar_tune.nope  # noqa: B018
