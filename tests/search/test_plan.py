from __future__ import annotations

from pathlib import Path

import pytest

from istar_tune.cli import main

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"


@pytest.mark.parametrize(("file", "expected"), [("paper_istar.yaml", 648), ("paper_base.yaml", 27),
                                                ("paper_cosreg.yaml", 27)])
def test_dry_run_counts_of_the_paper_grids(file, expected, capsys):
    assert main(["search", str(SPACES / file), "--models", "bert", "--tasks", "rte", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "bert   rte   " in out and f"total {expected} trials in 1 groups" in out


