from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError
from istar_tune.search.backends import BACKENDS, get_backend, register
from istar_tune.search.backends.backend import Backend


def test_a_grid_enumerates_and_a_sampler_draws_its_budget():
    assert get_backend("grid").trials([2, 3, 1], num_samples=2) == 12
    assert get_backend("optuna").trials([2, 3, 1], num_samples=40) == 40


def test_each_backend_says_which_domains_it_takes_and_who_takes_the_others():
    assert get_backend("grid").refuses("loguniform") is None and get_backend("qmc").refuses("constant") is None
    assert get_backend("optuna").refuses("grid").startswith("grid values need search.algorithm: grid;")
    assert "choice values need search.algorithm: grid, optuna" in get_backend("qmc").refuses("choice")


def test_a_name_is_registered_once_and_an_unknown_one_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="registered already"):
        register(Backend("grid", ("grid",), True, "another grid"))
    with pytest.raises(ConfigError, match="unknown search.algorithm 'bayes': choose one of grid, optuna, qmc"):
        get_backend("bayes")
    assert list(BACKENDS)[:3] == ["grid", "optuna", "qmc"]
