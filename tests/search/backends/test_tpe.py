from __future__ import annotations

import optuna

from istar_tune.search.backends.tpe import TPE


def test_tpe_is_optunas_default_sampler_seeded():
    assert not TPE.enumerates and not TPE.searches("grid")
    sampler = TPE.sampler(7)
    assert isinstance(sampler, optuna.samplers.TPESampler)
    draws = []
    for _ in range(2):
        study = optuna.create_study(sampler=TPE.sampler(7))
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
        draws.append([t.params["x"] for t in study.trials])
    assert draws[0] == draws[1]
