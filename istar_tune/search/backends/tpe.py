"""``search.algorithm: tpe`` (once ``optuna``): Optuna's TPE sampler (its defaults), one study per model × task ×
method, told each trial's last objective: ``num_samples`` trials a group over ranges and choices."""

from __future__ import annotations

from typing import Any

from istar_tune.search.backends.backend import Backend


def tpe_sampler(seed: int | None) -> Any:
    import optuna

    return optuna.samplers.TPESampler(seed=seed)


TPE = Backend(name="tpe", kinds=("choice", "loguniform", "uniform", "randint"), enumerates=False,
              summary="Optuna's TPE over ranges and choices, a study per group that learns from each trial's result",
              sampler=tpe_sampler)
