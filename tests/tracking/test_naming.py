"""What a trial's run is called and what it logs."""

from __future__ import annotations

import json

from istar_tune.tasks import task_of
from istar_tune.tracking.naming import error_summary, logged_params, resolved_hyperparameters, run_name, task_tags
from istar_tune.trial_config import with_task_definition


def test_a_run_is_named_by_what_applies_to_its_method():
    istar = {"model": "/models/bert", "task": "rte", "method": "istar", "lam": -1, "zeta": 0.2,
             "learning_rate": 1e-4, "batch_size": 32, "epochs": 3, "seed": 42}
    assert run_name(istar) == "bert/rte istar λ=-1 ζ=0.2 lr=1e-4 bs=32 ep=3 s42"
    base = {"model": "bert", "task": "rte", "method": "base", "learning_rate": 3e-5, "batch_size": 16, "epochs": 4,
            "seed": 1}
    assert run_name(base) == "bert/rte base lr=3e-5 bs=16 ep=4 s1"


def test_params_are_what_the_method_reads_and_the_searchs_settings():
    params = logged_params({"model": "bert", "task": "rte", "method": "base", "lam": 5.0}, {"max_length": 64,
                                                                                          "holdout": None})
    assert "lam" not in params and "zeta" not in params  # a Base run cannot be taken for λ = 0
    assert params["setting.max_length"] == "64" and "setting.holdout" not in params
    assert resolved_hyperparameters({"method": "cosreg"})["lam"] == 1.0  # the method's default λ, resolved


def test_a_task_of_ones_own_is_described_for_readers_and_a_shipped_one_is_not(tmp_path):
    (tmp_path / "train.csv").write_text("text,label\na,0\n")
    (tmp_path / "dev.csv").write_text("text,label\nb,1\n")
    mine = task_of({"name": "mine", "train": "train.csv", "validation": "dev.csv", "metric": "mcc"}, tmp_path)
    assert task_tags({"task": "rte"}) == {}
    assert task_tags({"task": "mine"}) == {}  # a name alone: nothing known of it
    described = json.loads(task_tags(with_task_definition({"task": "mine"}, mine))["istar_tune.task"])
    assert described == {"name": "mine", "display_name": "mine", "problem_type": "classification", "metric": "mcc"}


def test_an_error_is_shown_by_the_line_that_names_it():
    text = "Traceback (most recent call last):\n  File x\nValueError: bad lr\n\nduring handling\n"
    assert error_summary(text, "unknown") == "ValueError: bad lr"
    assert error_summary("", "unknown") == "unknown" and error_summary("just this\n", "x") == "just this"
