from __future__ import annotations

import warnings

import optuna

from istar_tune.search.backends.qmc import QMC


def test_qmc_fills_a_range_evenly_and_quietly():
    assert not QMC.enumerates and not QMC.searches("choice") and QMC.searches("uniform")
    with warnings.catch_warnings():
        warnings.simplefilter("error", optuna.exceptions.ExperimentalWarning)
        sampler = QMC.sampler(0)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=8)
    xs = sorted(t.params["x"] for t in study.trials)
    assert len(set(xs)) == 8 and all(b - a < 0.3 for a, b in zip([0.0, *xs], [*xs, 1.0]))  # no wide gap
