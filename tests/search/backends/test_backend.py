from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError
from istar_tune.search.backends import BACKENDS, get_backend, refusal, register
from istar_tune.search.backends.backend import Backend


def test_a_grid_enumerates_and_a_sampler_draws_its_budget():
    assert get_backend("grid").trials([2, 3, 1], num_samples=2) == 12
    assert get_backend("optuna").trials([2, 3, 1], num_samples=40) == 40


def test_each_backend_says_which_domains_it_takes_and_who_takes_the_others():
    assert refusal("grid", "loguniform") is None and refusal("qmc", "constant") is None
    assert refusal("optuna", "grid").startswith("grid values need search.algorithm: grid;")
    assert refusal("qmc", "choice") == ("choice values need search.algorithm: grid or optuna; with qmc use "
                                        "loguniform, uniform or randint")


def test_a_name_is_registered_once_and_an_unknown_one_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="registered already"):
        register(Backend("grid", ("grid",), True, "another grid"))
    with pytest.raises(ConfigError, match="unknown search.algorithm 'bayes': choose one of grid, optuna, qmc"):
        get_backend("bayes")
    assert list(BACKENDS)[:3] == ["grid", "optuna", "qmc"]
