from __future__ import annotations

import logging

import pytest

from istar_tune.errors import ConfigError
from istar_tune.search import backends, schedulers
from istar_tune.search.spaces.file import load_search_space
from istar_tune.search.spaces.strategy import apply_strategy, read_strategy, registered_name

RAW = {"hyperparameters": {"epochs": {"grid": [1, 2]}, "learning_rate": {"loguniform": [1e-5, 1e-4]}},
       "method_hyperparameters": {"istar": {"lam": {"grid": [-1, 1]}, "zeta": 0.2}},
       "search": {"algorithm": "grid", "seed": 3, "storage": "sqlite:///x.db"},
       "scheduler": {"type": "asha", "grace_period": 2, "reduction_factor": 4}}


def test_a_strategy_replaces_the_spaces_own_and_keeps_its_seed_and_storage():
    merged, changed = apply_strategy(RAW, {"scheduler": {"type": "median", "grace_period": 1}, "concurrency": 4})
    assert merged["scheduler"] == {"type": "median", "grace_period": 1} and merged["concurrency"] == 4
    assert merged["search"] == RAW["search"] and changed == "" and RAW["scheduler"]["type"] == "asha"
    merged, changed = apply_strategy(RAW, {"search": {"algorithm": "tpe", "num_samples": 5}})
    assert merged["search"] == {"algorithm": "tpe", "seed": 3, "storage": "sqlite:///x.db", "num_samples": 5}
    assert merged["hyperparameters"]["epochs"] == {"choice": [1, 2]} and changed == "2 grid domains searched as choices"
    assert merged["method_hyperparameters"]["istar"] == {"lam": {"choice": [-1, 1]}, "zeta": 0.2}
    assert RAW["hyperparameters"]["epochs"] == {"grid": [1, 2]}


def test_a_fragment_file_is_read_and_anything_else_is_refused(tmp_path):
    (tmp_path / "s.yaml").write_text("scheduler: {type: hyperband}\n")
    assert read_strategy(str(tmp_path / "s.yaml"), "sqlite:///unused.db") == ({"scheduler": {"type": "hyperband"}},
                                                                             str(tmp_path / "s.yaml"))
    (tmp_path / "bad.yaml").write_text("settings: {seed: 1}\n")
    with pytest.raises(ConfigError, match="a strategy sets only search, scheduler, concurrency, got \\['settings'\\]"):
        read_strategy(str(tmp_path / "bad.yaml"), "sqlite:///unused.db")
    with pytest.raises(ConfigError, match="--strategy-from nowhere: not a file, and no MLflow experiment named"):
        read_strategy("nowhere", f"sqlite:///{tmp_path / 'mlflow.db'}")


def test_a_space_read_with_a_strategy_says_where_it_came_from(tmp_path):
    (tmp_path / "space.yaml").write_text("name: s\nmodels: [bert]\ntasks: [rte]\nmethods: [base]\nhyperparameters:\n"
                                         "  epochs: {grid: [1, 2, 3]}\n  learning_rate: {grid: [1.0e-5, 2.0e-5]}\n")
    space = load_search_space(tmp_path / "space.yaml", ({"search": {"algorithm": "random", "num_samples": 3}},
                                                        "the replay of x"))
    assert space.algorithm == "random" and space.num_samples == 3 and space.hyperparameters["epochs"].kind == "choice"
    assert space.strategy_source == "the replay of x (2 grid domains searched as choices)"


def test_an_earlier_name_is_read_as_the_new_one_with_a_note(caplog):
    problems = []
    with caplog.at_level(logging.WARNING):
        assert registered_name("optuna", "search.algorithm", backends, lambda *a: problems.append(a), "s.yaml") == "tpe"
        assert registered_name("median_stopping", "scheduler.type", schedulers, lambda *a: problems.append(a),
                               "s.yaml") == "median"
    assert not problems and "s.yaml: search.algorithm: optuna is now called tpe" in caplog.text
    assert registered_name(7, "scheduler.type", schedulers, lambda *a: problems.append(a), "s.yaml") == "none"
    assert problems == [("scheduler.type", "must be one of none, asha, hyperband, median, conformal, got 7")]
