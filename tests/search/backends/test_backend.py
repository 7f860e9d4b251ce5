from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError
from istar_tune.search.backends import BACKENDS, canonical, get_backend, refusal, register
from istar_tune.search.backends.backend import Backend, Sampling


def test_a_grid_enumerates_and_a_sampler_draws_its_budget():
    assert get_backend("grid").trials([2, 3, 1], num_samples=2) == 12
    assert get_backend("tpe").trials([2, 3, 1], num_samples=40) == 40


def test_each_backend_says_which_domains_it_takes_and_who_takes_the_others():
    assert refusal("grid", "loguniform") is None and refusal("qmc", "constant") is None
    assert refusal("tpe", "grid").startswith("grid values need search.algorithm: grid;")
    assert refusal("qmc", "choice") == ("choice values need search.algorithm: grid, random or tpe; with qmc use "
                                        "loguniform, uniform or randint")


def test_a_name_is_registered_once_and_an_unknown_one_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="registered already"):
        register(Backend("grid", ("grid",), True, "another grid"))
    with pytest.raises(ConfigError, match="registered already"):
        register(Backend("optuna", ("choice",), False, "taken by an earlier name", sampler=lambda seed: None))
    with pytest.raises(ConfigError, match="unknown search.algorithm 'bayes': choose one of grid, random, tpe, qmc"):
        get_backend("bayes")
    assert list(BACKENDS)[:4] == ["grid", "random", "tpe", "qmc"]


def test_the_earlier_names_of_tpe_are_read_as_tpe():
    assert canonical("optuna") == canonical("optuna_tpe") == "tpe" and get_backend("optuna") is get_backend("tpe")


def test_a_sampling_backend_must_say_how_it_samples_and_builds_its_own_searcher():
    with pytest.raises(ValueError, match="gives neither searcher nor sampler"):
        Backend("lazy", ("choice",), False, "samples nothing")
    built = []
    own = Backend("own", ("choice",), False, "its own searcher", searcher=lambda s: built.append(s) or "searcher")
    sampling = Sampling(space={}, metric="objective", mode="max", seed=3)
    assert own.build_searcher(sampling) == "searcher" and built == [sampling] and not own.keeps_studies
    assert get_backend("tpe").keeps_studies and not get_backend("random").keeps_studies
    with pytest.raises(ValueError, match="enumerates"):
        get_backend("grid").build_searcher(sampling)
