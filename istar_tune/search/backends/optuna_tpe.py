"""``search.algorithm: optuna``: Optuna's TPE sampler (its defaults), one study per model × task × method, told each
trial's last objective: ``num_samples`` trials a group over ranges and choices."""

from __future__ import annotations

from typing import Any

from istar_tune.search.backends.backend import Backend


def tpe_sampler(seed: int | None) -> Any:
    import optuna

    return optuna.samplers.TPESampler(seed=seed)


TPE = Backend(name="optuna", kinds=("choice", "loguniform", "uniform", "randint"), enumerates=False,
              summary="Optuna's TPE, a study per group (ranges and choices, no grids)", sampler=tpe_sampler)
