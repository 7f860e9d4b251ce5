"""``search.algorithm: grid``: every configuration of the grid domains, ``num_samples`` times; a ``choice`` or a
range is drawn once per configuration (seeded). Configurations that differ only in ``epochs`` can share a trial
(``search.share_epochs``); ``replay`` reads a finished grid."""

from __future__ import annotations

from istar_tune.search.backends.backend import Backend

GRID = Backend(name="grid", kinds=("grid", "choice", "loguniform", "uniform", "randint"), enumerates=True,
               summary="every combination of the grid values, a choice or range drawn once per configuration")
