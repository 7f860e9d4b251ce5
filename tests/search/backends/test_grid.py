from __future__ import annotations

from istar_tune.search.backends.grid import GRID


def test_the_grid_takes_every_domain_kind_and_enumerates():
    assert GRID.enumerates and GRID.sampler is None and GRID.searcher is None
    kinds = ("constant", "grid", "choice", "uniform", "loguniform", "randint")
    assert all(GRID.searches(kind) for kind in kinds)
