from __future__ import annotations

from pathlib import Path

import pytest

from istar_tune.errors import ConfigError
from istar_tune.search.dry_run import dry_run_report
from istar_tune.search.plan import plan
from istar_tune.search.spaces.file import load_search_space

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"
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
    assert "total 17496 configurations in 5832 trials, 27 groups" in dry_run_report(space, planned)


def test_optuna_space_counts_samples_per_group_and_narrowing():
    space = load_search_space(SPACES / "optuna_asha.yaml").narrow(["minilm"], ["sst2", "CoLA"], ["istar"])
    assert [(g.model, g.task, g.method) for g in space.groups()] == [("minilm", "sst2", "istar"),
                                                                    ("minilm", "cola", "istar")]
    assert all(space.trials_in(g) == 40 for g in space.groups())
    with pytest.raises(ConfigError, match="--methods: unknown method 'ist'"):
        space.narrow(methods=["ist"])
    with pytest.raises(ConfigError, match="--tasks, --methods: method isolayer applies to sentence-level tasks; "
                                          "SQuAD is extractive QA"):
        space.narrow(tasks=["squad"], methods=["isolayer"])
    assert [t.name for t in space.narrow(tasks=["squad"]).task_objects] == ["squad"]  # the objects follow the names




@pytest.mark.parametrize(("change", "reason"), [
    ({"recipe": "modern"}, "recipe modern: the learning rate warms up and decays"),
    ({"methods": ["isolayer"]}, "method isolayer: its second stage starts after the last fine-tuning epoch"),
    ({"epochs": [3]}, "one epoch count per configuration: nothing to share"),
    ({"share": False}, "search.share_epochs is false"),
    ({}, None)])
def test_configurations_share_epoch_prefixes_only_where_that_is_exact(change, reason, tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(f"""\
models: [bert]
tasks: [rte]
methods: {change.get("methods", ["base"])}
hyperparameters:
  epochs: {{grid: {change.get("epochs", [3, 4, 5])}}}
  learning_rate: {{grid: [1.0e-5, 3.0e-5]}}
search: {{share_epochs: {str(change.get("share", True)).lower()}}}
settings: {{recipe: {change.get("recipe", "paper")}}}
""")
    space = load_search_space(path)
    [group] = space.groups()
    problem = space.sharing_problem(group)
    assert problem is None if reason is None else problem.startswith(reason)
    assert space.tune_trials_in(group) == (2 if reason is None else space.trials_in(group))


def test_a_lambda_grid_given_to_every_method_plans_base_once_per_configuration(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("""\
models: [bert]
tasks: [rte]
methods: [base, cosreg, istar]
hyperparameters:
  learning_rate: {grid: [1.0e-5, 3.0e-5]}
  lam: {grid: [-1.0, -0.5, 0.5]}
  zeta: {grid: [0.1, 0.5]}
""")
    space = load_search_space(path)
    counts = {g.method: space.trials_in(g) for g in space.groups()}
    assert counts == {"base": 2, "cosreg": 6, "istar": 12}  # Base reads neither λ nor ζ: its 18 would be 2, 9 times
    base = next(p for p in plan(space) if p.group.method == "base")
    assert base.trials == 2 and {"lam", "zeta"}.isdisjoint(base.param_space)
