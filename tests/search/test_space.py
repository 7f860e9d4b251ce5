from __future__ import annotations

from pathlib import Path

import pytest

from istar_tune.errors import ConfigError
from istar_tune.search.plan import dry_run_report, plan
from istar_tune.search.space_file import load_search_space

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
SHIPPED = sorted(SPACES.glob("*.yaml"))


def test_the_shipped_spaces_exist():
    names = {p.name for p in SHIPPED}
    assert {"paper_base.yaml", "paper_cosreg.yaml", "paper_istar.yaml", "optuna_asha.yaml", "smoke.yaml",
            "paper_seeds.yaml", "isolayer.yaml", "demo.yaml"} <= names


def test_paper_spaces_cover_the_papers_models_and_nine_tasks():
    space = load_search_space(SPACES / "paper_istar.yaml")
    assert set(space.models) == {"bert", "albert", "distilbert"} and len(space.tasks) == 9
    planned = plan(space)
    assert len(planned) == 27 and all(p.trials == 648 for p in planned)
    assert "total 17496 trials" in dry_run_report(space, planned)


def test_optuna_space_counts_samples_per_group_and_narrowing():
    space = load_search_space(SPACES / "optuna_asha.yaml").narrow(["minilm"], ["sst2", "CoLA"], ["istar"])
    assert [(g.model, g.task, g.method) for g in space.groups()] == [("minilm", "sst2", "istar"),
                                                                    ("minilm", "cola", "istar")]
    assert all(space.trials_in(g) == 40 for g in space.groups())
    with pytest.raises(ConfigError, match="--methods: unknown method 'ist'"):
        space.narrow(methods=["ist"])


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
