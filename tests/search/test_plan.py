from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from istar_tune.cli import main
from istar_tune.errors import ConfigError
from istar_tune.search.plan import plan, planned_configs
from istar_tune.search.spaces.file import load_search_space
from istar_tune.trial_config import SHARED_EPOCHS_KEY, completes, configuration

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"


@pytest.mark.parametrize(("file", "configurations", "trials", "epochs", "unshared"),
                         [("paper_istar.yaml", 648, 216, 1080, 2592), ("paper_base.yaml", 27, 9, 45, 108),
                          ("paper_cosreg.yaml", 27, 9, 45, 108)])
def test_dry_run_counts_of_the_paper_grids(file, configurations, trials, epochs, unshared, capsys):
    assert main(["search", str(SPACES / file), "--models", "bert", "--tasks", "rte", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (f"total {configurations} configurations in {trials} trials, 1 group; {epochs} epochs trained, "
            f"{unshared} without sharing (0.42×)" in out)
    assert "epoch prefixes shared in 1 of 1 groups" in out


def test_a_modern_space_runs_unshared_and_the_dry_run_says_why(tmp_path, capsys):
    text = (SPACES / "paper_istar.yaml").read_text().replace("recipe: paper ", "recipe: modern")
    (tmp_path / "modern.yaml").write_text(text)
    assert main(["search", str(tmp_path / "modern.yaml"), "--models", "bert", "--tasks", "rte", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "total 648 configurations in 648 trials, 1 group; 2592 epochs trained, 2592 without sharing\n" in out
    assert "epoch prefixes not shared: recipe modern: the learning rate warms up and decays" in out


def test_share_epochs_false_turns_sharing_off(tmp_path):
    text = (SPACES / "paper_base.yaml").read_text().replace("search: {algorithm: grid}",
                                                               "search: {algorithm: grid, share_epochs: false}")
    (tmp_path / "base.yaml").write_text(text)
    [group] = plan(load_search_space(tmp_path / "base.yaml").narrow(["bert"], ["rte"]))
    assert (group.trials, group.trainings, group.sharing) == (27, 27, "search.share_epochs is false")


def test_shared_trials_complete_every_configuration_of_the_grid_exactly_once():
    space = load_search_space(SPACES / "paper_istar.yaml").narrow(["bert"], ["rte"])
    [group] = plan(space)
    trials = planned_configs(space, group)
    assert len(trials) == group.trainings == 216
    assert all(t["epochs"] == 5 and t[SHARED_EPOCHS_KEY] == [3, 4, 5] for t in trials)
    done = [tuple(sorted(configuration(t, k).items())) for t in trials for k in completes(t)]
    unshared = load_search_space(SPACES / "paper_istar.yaml").narrow(["bert"], ["rte"])
    [plain] = plan(replace(unshared, share_epochs=False))
    expected = [tuple(sorted(c.items())) for c in planned_configs(unshared, plain)]
    assert len(done) == len(set(done)) == 648 and set(done) == set(expected)


def test_a_study_starts_from_the_best_base_configuration_and_plans_each_lambda_times_each_seed(tmp_path, log_trial,
                                                                                               capsys):
    from istar_tune import tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(client, "paper-base", str(tmp_path / "artifacts"))
    log_trial(client, experiment, "a", "bert", "rte", "base", {"accuracy": [0.6, 0.62]}, learning_rate=1e-5)
    log_trial(client, experiment, "b", "bert", "rte", "base", {"accuracy": [0.6, 0.7]}, learning_rate=5e-5,
              batch_size=32)
    space = load_search_space("paper_figure3").narrow(models=["bert"], tasks=["rte"])
    [group] = plan(space, uri)
    assert (group.group.method, group.trials) == ("istar", 35)
    configs = planned_configs(space, group)
    assert sorted((c["lam"], c["seed"]) for c in configs) == [(lam, seed) for lam in (-5, -3, -1, 0.5, 1, 3, 5)
                                                              for seed in (1, 2, 3, 4, 5)]
    for config in configs:  # Base's best batch, epochs and learning rate; I-STAR at zeta 0.2
        assert (config["method"], config["batch_size"], config["epochs"]) == ("istar", 32, 2)
        assert config["learning_rate"] == pytest.approx(5e-5) and config["zeta"] == pytest.approx(0.2)
    assert main(["search", "paper_figure3", "--models", "bert", "--tasks", "rte", "--dry-run",
                 "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "total 35 configurations in 35 trials, 1 group" in out
    assert "the best base configuration of each model × task found in paper-base" in out


def test_a_study_goes_on_without_a_search_not_run_yet_but_not_past_a_store_it_cannot_read(tmp_path, log_trial):
    from istar_tune import tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    space = load_search_space("paper_figure3").narrow(models=["bert"], tasks=["rte"])
    tracking.prepare_store(uri)
    with pytest.raises(ConfigError, match="no finished trial of bert × rte × istar .*no experiment paper-base"):
        plan(space, uri)  # that search has not run: nothing to start from, and it says which
    experiment = tracking.ensure_experiment(client, "paper-base", str(tmp_path / "artifacts"))
    run_id = log_trial(client, experiment, "a", "bert", "rte", "base", {"accuracy": [0.6]}, learning_rate=1e-5)
    client.set_tag(run_id, tracking.TAG_SIMULATED, "true")
    with pytest.raises(ConfigError, match="experiment 'paper-base' at .* holds simulated runs"):
        plan(space, uri)  # a rehearsal's runs are not taken for a search not run (they were, as "missing")


@pytest.mark.parametrize(("name", "per_group"), [("paper_figure3", 35), ("paper_figure7", 30), ("paper_seeds", 5)])
def test_a_dry_run_before_the_searches_it_starts_from_plans_the_upper_bound(name, per_group, tmp_path, capsys):
    store = f"sqlite:///{tmp_path / 'empty.db'}"
    from istar_tune import tracking

    tracking.prepare_store(store)  # a store without those searches: planned as an upper bound, not refused
    assert main(["search", name, "--models", "bert", "--tasks", "rte", "--dry-run", "--tracking-uri", store]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("bert ")]
    assert rows and all(int(row[3]) == per_group for row in rows)


def test_the_layer_study_lists_each_models_own_layers():
    space = load_search_space("paper_figure8")
    counts = {g.model: space.trials_in(g) for g in space.groups()}
    assert counts == {"bert": 65, "albert": 65, "distilbert": 35}
    variants = space.variants("distilbert", "istar")
    assert [v["layer"] for v in variants[::5]] == [None, 1, 2, 3, 4, 5, 6]


def test_the_fair_option_chooses_configurations_by_held_out_score_not_the_dev_set(tmp_path, log_trial):
    from istar_tune import tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(client, "paper-base", str(tmp_path / "artifacts"))
    # The dev set prefers 5e-5; the held-out training examples prefer 1e-5 (the dev winner was lucky on dev).
    log_trial(client, experiment, "a", "bert", "rte", "base", {"accuracy": [0.60], "holdout_accuracy": [0.71]},
              learning_rate=1e-5)
    log_trial(client, experiment, "b", "bert", "rte", "base", {"accuracy": [0.66], "holdout_accuracy": [0.64]},
              learning_rate=5e-5)
    chosen = {}
    for choose_by in ("auto", "holdout"):
        space = replace(load_search_space("paper_seeds_fair").narrow(models=["bert"], tasks=["rte"],
                                                                     methods=["base"]), choose_by=choose_by)
        [group] = plan(space, uri)
        chosen[choose_by] = (group.param_space["learning_rate"], group.chosen_by)
    assert chosen == {"auto": (pytest.approx(1e-5), "holdout"), "holdout": (pytest.approx(1e-5), "holdout")}
    # Insisting on the dev set for runs that held data out would let it choose what it then scores: refused.
    space = replace(load_search_space("paper_seeds_fair").narrow(models=["bert"], tasks=["rte"], methods=["base"]),
                    choose_by="dev")
    with pytest.raises(ConfigError, match="the dev set would choose what it then scores"):
        plan(space, uri)


def test_the_fair_option_refuses_searches_run_without_held_out_data(tmp_path, log_trial):
    from istar_tune import tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(client, "paper-base", str(tmp_path / "artifacts"))
    log_trial(client, experiment, "a", "bert", "rte", "base", {"accuracy": [0.60]})
    space = load_search_space("paper_seeds_fair").narrow(models=["bert"], tasks=["rte"], methods=["base"])
    with pytest.raises(ConfigError, match=r"trials of paper-base have no held-out scores: .*--holdout 0.3"):
        plan(space, uri)


@pytest.mark.parametrize(("holdout", "chosen_by"), [(0.3, "holdout"), (None, "dev")])
def test_a_seeds_stage_run_with_its_search_says_what_will_choose(holdout, chosen_by):
    # Chained in one experiment, its configurations are chosen when its search ends: by that search's held-out data
    # where it holds some out, else by its dev set; never "auto" (what the stage's own choose_by says).
    search = load_search_space("paper_base").narrow(models=["bert"], tasks=["rte"])
    search = replace(search, settings={**search.settings, "holdout": holdout})
    seeds = replace(load_search_space("paper_seeds").narrow(models=["bert"], tasks=["rte"], methods=["base"]),
                    best_of=[search.name])
    planned = plan(seeds, chained={search.name: search})
    assert planned and {group.chosen_by for group in planned} == {chosen_by}
