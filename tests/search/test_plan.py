from __future__ import annotations

from pathlib import Path

import pytest

from istar_tune.cli import main

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
SHIPPED = sorted(SPACES.glob("*.yaml"))


@pytest.mark.parametrize(("file", "expected"), [("paper_istar.yaml", 648), ("paper_base.yaml", 27),
                                                ("paper_cosreg.yaml", 27)])
def test_dry_run_counts_of_the_paper_grids(file, expected, capsys):
    assert main(["search", str(SPACES / file), "--models", "bert", "--tasks", "rte", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "bert   rte   " in out and f"total {expected} trials in 1 groups" in out


BASE = """\
name: bad
models: [tiny-bert]
tasks: [sst2]
methods: [base, istar]
hyperparameters:
  learning_rate: {grid: [1.0e-3]}
"""

BAD_SPACES = {
    "unknown top-level key": (BASE + "colour: red\n", "colour: unknown key"),
    "unknown hyperparameter": (BASE + "  dropout: 0.1\n", "hyperparameters.dropout: unknown hyperparameter"),
    "wrong type": (BASE + "  batch_size: big\n", "batch_size must be an integer, got 'big'"),
    "empty grid": (BASE + "  epochs: {grid: []}\n", "grid needs a non-empty list"),
    "zeta outside [0, 1]": (BASE + "  zeta: {grid: [0.2, 1.5]}\n", "zeta must lie in [0, 1], got 1.5"),
    "unknown task": (BASE.replace("[sst2]", "[sst2, mnli]"), "unknown task 'mnli'"),
    "unknown method": (BASE.replace("[base, istar]", "[base, isotropy]"), "unknown method 'isotropy'"),
    "unknown algorithm": (BASE + "search: {algorithm: bayes}\n", "search.algorithm: must be one of grid, optuna"),
    "loguniform at zero": (BASE + "  weight_decay: {loguniform: [0, 0.1]}\n", "loguniform needs low > 0"),
    "range the wrong way": (BASE + "  warmup_ratio: {uniform: [0.5, 0.1]}\n", "uniform needs [low, high]"),
    "grid with optuna": (BASE + "search: {algorithm: optuna}\n", "grid values need search.algorithm: grid"),
    "negative gpu": (BASE + "resources: {cpu: 1, gpu: -1}\n", "resources.gpu: must be a non-negative number"),
    "empty models": (BASE.replace("[tiny-bert]", "[]"), "models: must be a non-empty list"),
    "unknown scheduler": (BASE + "scheduler: {type: hyperband}\n", "scheduler.type: must be one of none, asha"),
    "unknown setting": (BASE + "settings: {max_len: 64}\n", "unknown key 'max_len'"),
    "seeds stage without seeds": (BASE + "stage: seeds\nbest_of: [x]\n", "seeds: must be a non-empty list"),
    "not YAML": ("name: [unclosed\n", "not valid YAML"),
}
