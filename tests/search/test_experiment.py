"""The experiment of a run of searches: checked before anything runs, its tasks resolved by the preflight and carried
by the spaces into the plan and every trial's configuration, nothing registered on the way."""

from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError
from istar_tune.search.experiment import check_and_plan, experiment_of
from istar_tune.search.plan import base_config
from istar_tune.search.spaces.file import load_search_space
from istar_tune.tasks import get_task
from istar_tune.trial_config import TASK_DEFINITION_KEY, trial_task

SPACE = """\
name: {name}
models: [tiny-bert]
tasks: [rte, {{name: reviews, train: data/train.csv, validation: data/dev.csv}}]
methods: [base]
hyperparameters: {{learning_rate: {{grid: [1.0e-3, 2.0e-3]}}}}
resources: {{cpu: {cpu}}}
"""


def _space(tmp_path, name="own", cpu=1):
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPACE.format(name=name, cpu=cpu))
    return load_search_space(path)


def test_the_preflight_resolves_the_tasks_the_plan_and_trials_carry_and_registers_nothing(own_data, glue_tiny,
                                                                                        tmp_path):
    files = own_data("sst2", "csv", string_labels=True, folder=tmp_path / "data")
    space = _space(tmp_path)
    assert not space.task("reviews").resolved  # as the file defines it
    experiment = experiment_of([space], tmp_path / "runs", f"sqlite:///{tmp_path / 'mlflow.db'}", None,
                               str(glue_tiny), None)
    check_and_plan(experiment, resume=False)
    reviews = experiment.spaces[0].task("reviews")
    assert reviews.resolved and reviews.label_names == ("negative", "positive")
    assert reviews.files["train"] == str(files["train"])
    configs = {p.group.task: base_config(p, "own") for p in experiment.planned["own"]}
    assert trial_task(configs["reviews"]).label_names == ("negative", "positive")  # the trial reads it from there
    assert TASK_DEFINITION_KEY not in configs["rte"] and trial_task(configs["rte"]) is get_task("rte")
    with pytest.raises(ConfigError, match="unknown task 'reviews'"):
        get_task("reviews")  # no order of calls hidden in a global: the objects travelled


def test_searches_run_together_must_share_their_resources_and_have_different_names(own_data, tmp_path):
    own_data("sst2", "csv", folder=tmp_path / "data")
    with pytest.raises(ConfigError, match="no search space to run"):
        experiment_of([], tmp_path / "runs", None, None, None, None)
    with pytest.raises(ConfigError, match="need different names; own is given twice"):
        experiment_of([_space(tmp_path), _space(tmp_path)], tmp_path / "runs", None, None, None, None)
    with pytest.raises(ConfigError, match=r"share resources: .*\{'cpu': 1.0, 'gpu': 0.0\}.*\{'cpu': 2.0"):
        experiment_of([_space(tmp_path), _space(tmp_path, "other", cpu=2)], tmp_path / "runs", None, None, None,
                      None)


def test_a_fused_search_is_not_rehearsed_with_the_stand_in_trial(tmp_path, space_yaml):
    from istar_tune.search.tune.simulate import Simulation

    path = tmp_path / "fused.yaml"
    path.write_text(space_yaml(name="fused", search={"fuse": 4}, settings={"attn_implementation": "eager"}))
    with pytest.raises(ConfigError, match="search fused: search.fuse with --simulate: the stand-in trial is not "
                                          "fused"):
        experiment_of([load_search_space(path)], tmp_path / "runs", None, None, None, Simulation())
