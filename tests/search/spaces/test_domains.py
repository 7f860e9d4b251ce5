"""Hyperparameter domains from YAML: each kind checked, values typed, every problem reported."""

from __future__ import annotations

from istar_tune.search.spaces.domains import (
    MAX_DOMAIN_VALUES,
    coerced,
    distinct_values,
    domains_from_yaml,
    value_kind,
)
from istar_tune.search.spaces.space import Domain


def _read(raw, algorithm="grid"):
    problems = []
    domains = domains_from_yaml(raw, "hyperparameters", algorithm, lambda key, text: problems.append(f"{key}: {text}"))
    return domains, problems


def test_each_kind_of_domain():
    domains, problems = _read({"batch_size": 16, "learning_rate": {"grid": [1e-5, 3e-5]},
                               "lam": {"uniform": [-1, 1]}, "seed": {"randint": [1, 5]}, "zeta": {"choice": [0.2]}})
    assert problems == []
    assert domains["batch_size"] == Domain("constant", (16,)) and domains["learning_rate"].size == 2
    assert {k: d.kind for k, d in domains.items()} == {"batch_size": "constant", "learning_rate": "grid",
                                                      "lam": "uniform", "seed": "randint", "zeta": "choice"}


def test_every_problem_is_reported_with_its_key():
    _, problems = _read({"colour": 1, "batch_size": {"grid": [8, 8.0]}, "zeta": {"uniform": [1, 0]},
                         "learning_rate": {"loguniform": [0, 1]}, "epochs": {"grid": [1, "2"]},
                         "lam": {"grid": list(range(MAX_DOMAIN_VALUES + 1))}})
    text = "\n".join(problems)
    for expected in ("hyperparameters.colour: unknown hyperparameter", "repeats 8 in [8, 8.0]",
                     "uniform needs [low, high] with low < high", "loguniform needs low > 0",
                     "mixes value kinds", f"a domain holds at most {MAX_DOMAIN_VALUES:,}"):
        assert expected in text, expected
    _, problems = _read({"learning_rate": {"grid": [1e-5]}}, algorithm="tpe")
    assert problems == ["hyperparameters.learning_rate: grid values need search.algorithm: grid; with tpe use "
                        "choice, loguniform, uniform or randint"]


def test_values_take_the_hyperparameters_type():
    assert coerced("batch_size", 8.0) == 8 and isinstance(coerced("batch_size", 8.0), int)
    assert value_kind(True) == "bool" and value_kind(3) == value_kind(3.5) == "number"


def test_distinct_values_count_what_a_domain_can_take():
    assert [distinct_values(Domain(kind, values)) for kind, values in
            [("constant", (3,)), ("grid", (1, 2)), ("choice", (0.1, 0.2, 0.3)), ("randint", (1, 5)),
             ("uniform", (0.0, 1.0)), ("loguniform", (1e-5, 1e-3))]] == [1, 2, 3, 5, None, None]
