"""``search.algorithm: qmc``: Optuna's quasi-Monte Carlo sampler (scrambled Sobol points), a space-filling design over
the ranges: ``num_samples`` trials a group that cover a range more evenly than random draws, none waiting on another's
result (every trial can start at once). Ranges only: a choice would be drawn at random, outside the design."""

from __future__ import annotations

import warnings
from typing import Any

from istar_tune.search.backends.backend import Backend


def qmc_sampler(seed: int | None) -> Any:
    import optuna

    with warnings.catch_warnings():  # experimental in Optuna: said once in the docs, not on every search
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=seed)


QMC = Backend(name="qmc", kinds=("loguniform", "uniform", "randint"), enumerates=False,
              summary="Optuna's quasi-Monte Carlo (scrambled Sobol) points over the ranges, a study per group",
              sampler=qmc_sampler)
