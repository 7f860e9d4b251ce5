from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from istar_tune.cli import _throughput, main
from istar_tune.errors import ConfigError
from istar_tune.search.cost import Throughput, trial_seconds
from istar_tune.search.plan import group_cost, plan, planned_configs
from istar_tune.search.space import SHARED_EPOCHS_KEY, completes, configuration
from istar_tune.search.space_file import load_search_space

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"


@pytest.mark.parametrize(("file", "configurations", "trials", "epochs", "unshared"),
                         [("paper_istar.yaml", 648, 216, 1080, 2592), ("paper_base.yaml", 27, 9, 45, 108),
                          ("paper_cosreg.yaml", 27, 9, 45, 108)])
def test_dry_run_counts_of_the_paper_grids(file, configurations, trials, epochs, unshared, capsys):
    assert main(["search", str(SPACES / file), "--models", "bert", "--tasks", "rte", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"total {configurations} configurations in {trials} trials, 1 group; {epochs} epochs trained, " \
           f"{unshared} without sharing (0.42×)" in out
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


def test_gpu_hours_come_from_the_measured_throughput_with_and_without_sharing(capsys):
    space = load_search_space(SPACES / "paper_base.yaml").narrow(["bert"], ["rte"])
    [group] = plan(space)
    slow, fast = Throughput({"bert": 10_000}, 256), Throughput({"bert": 20_000}, 256)
    cost_slow, cost_fast = group_cost(space, group, slow), group_cost(space, group, fast)
    assert cost_slow.gpu_hours > cost_fast.gpu_hours > 0
    assert cost_slow.unshared_gpu_hours > 2 * cost_slow.gpu_hours
    seconds = sum(trial_seconds(t, 250_000, slow) for t in planned_configs(space, group))
    assert cost_slow.gpu_hours == pytest.approx(seconds / 3600)
    assert main(["search", str(SPACES / "paper_base.yaml"), "--models", "bert", "--tasks", "rte", "--dry-run",
                 "--tokens-per-second", "bert=10000"]) == 0
    assert f"{cost_slow.gpu_hours:.1f} GPU-hours ({cost_slow.unshared_gpu_hours:.1f} without sharing) at bert 10000 " \
           "tokens/s" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["bert", "bert=fast", "bert=-3", "=5"])
def test_a_bad_throughput_is_one_clear_error(value):
    space = load_search_space(SPACES / "paper_base.yaml").narrow(["bert"], ["rte"])

    with pytest.raises(ConfigError, match="MODEL=TOKENS_PER_SECOND"):
        _throughput([value], space)
