"""The pages on training, searching, watching a search, its tables and plots, and the cluster run verbatim, in one
folder in the README's order (tests/docs/conftest.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_the_training_and_search_pages_run_verbatim(run_group):
    ran, skipped, work = run_group("searching")
    assert len(ran) >= 12 and any("ray up" in command for command in skipped)
    assert (work / "best-tiny-bert-rte-base.yaml").is_file() and (work / "runs" / "istar-sst2").is_dir()
    assert (work / "istar-runs" / "rehearsal").is_dir() and (work / "plots").is_dir()
