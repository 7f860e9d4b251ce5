"""What ``search.fuse`` bundles: a grid's configurations of one batch stream, ``fuse`` a trial, in the plan, the
trials Tune runs and the dry run; the settings it is refused with in one line, and the groups it says are not fused
and why."""

from __future__ import annotations

import re

import pytest

from istar_tune.errors import ConfigError
from istar_tune.search.dry_run import dry_run_report, memory_column
from istar_tune.search.plan import group_plans, plan
from istar_tune.search.spaces.cost import group_memory
from istar_tune.search.spaces.file import load_search_space
from istar_tune.trial_config import FUSED_KEY

EAGER = {"attn_implementation": "eager", "max_length": 32}


def _space(tmp_path, space_yaml, **overrides):
    path = tmp_path / "fused.yaml"
    values = {"methods": ["base", "istar", "isolayer"], "search": {"fuse": 4}, "settings": EAGER,
              "hyperparameters": {"epochs": 1, "learning_rate": {"grid": [1e-3, 2e-3, 3e-3]},
                                  "batch_size": {"grid": [16, 32]}}, **overrides}
    path.write_text(space_yaml(**values))
    return load_search_space(path)


def test_a_groups_configurations_of_one_batch_stream_train_as_fused_trials(tmp_path, space_yaml):
    space = _space(tmp_path, space_yaml)
    planned = {p.group.method: p for p in plan(space)}
    assert {m: (p.trials, p.trainings, p.bundle, p.fusing) for m, p in planned.items()} == {
        "base": (6, 2, 3, None), "istar": (6, 2, 3, None),
        "isolayer": (6, 6, 1, "isolayer has a second stage, which is not fused")}
    queues = {q.key.split("/")[-1]: q for q in group_plans(space, list(planned.values()))}
    trials = queues["base"].configs
    assert [[m["learning_rate"] for m in t[FUSED_KEY]] for t in trials] == [[1e-3, 2e-3, 3e-3]] * 2
    assert [{m["batch_size"] for m in t[FUSED_KEY]} for t in trials] == [{16}, {32}]  # one batch stream a trial
    report = dry_run_report(space, list(planned.values()))
    assert "fused tiny-bert/sst2/base: 6 configurations in 2 trials of 3, 3 members" in report
    assert "not fused: isolayer has a second stage, which is not fused" in report
    assert "total 18 configurations in 10 trials, 3 groups" in report


def test_configurations_that_share_epoch_prefixes_join_a_bundle_as_one_member(tmp_path, space_yaml):
    """Under a constant learning rate the epochs {1, 2, 3} of a configuration share a trial; fused, that shared trial
    is one member: 3 × 2 learning rates × 2 batch sizes are 12 configurations in 2 trials of 2 members (one per batch
    size), 12 epochs trained where 24 would be without sharing."""
    space = _space(tmp_path, space_yaml, methods=["base"], settings={"recipe": "paper", "attn_implementation": "eager"},
                   hyperparameters={"epochs": {"grid": [1, 2, 3]}, "learning_rate": {"grid": [1e-3, 2e-3]},
                                    "batch_size": {"grid": [16, 32]}})
    (planned,) = plan(space)
    assert (planned.trials, planned.trainings, planned.bundle, planned.sharing) == (12, 2, 2, None)
    report = dry_run_report(space, [planned])
    assert "fused tiny-bert/sst2/base: 12 configurations in 2 trials of 2, 2 members" in report
    assert "total 12 configurations in 2 trials, 1 group; 12 epochs trained, 24 without sharing (0.50×)" in report


def test_a_bundles_memory_is_its_members_weights_optimizer_state_and_activations(tmp_path, space_yaml):
    space = _space(tmp_path, space_yaml, methods=["base"])
    alone = _space(tmp_path, space_yaml, methods=["base"], search={"fuse": 1})
    (what, fused), (_, single) = (group_memory(plan(s)[0], s.run_settings()) for s in (space, alone))
    assert "base (fused trial of 3)" in what
    for part in ("weights", "gradients", "optimizer", "activations", "point_cloud"):
        assert getattr(fused, part) == 3 * getattr(single, part), part
    assert (fused.context, fused.forward_pass) == (single.context, single.forward_pass)  # one process, one at a time
    assert single.largest_bundle(int(fused.peak / 0.9) + 1) == 3
    column = float(memory_column(plan(space), space.run_settings(), readable=True)[0][0])
    assert column == pytest.approx(fused.peak_gb, abs=0.01)


@pytest.mark.parametrize("overrides, message", [
    ({"search": {"fuse": 4, "algorithm": "random"}, "hyperparameters": {"learning_rate": {"loguniform": [1e-4, 1e-3]}}},
     "search.fuse: 4 bundles a grid's configurations, but search.algorithm random hands out one configuration at a "
     "time: use algorithm grid, or fuse 1"),
    ({"scheduler": {"type": "asha"}, "hyperparameters": {"epochs": 2, "learning_rate": {"grid": [1e-3, 2e-3]}}},
     "search.fuse: 4 with scheduler asha: an early-stopping scheduler stops whole trials"),
    ({"settings": {"attn_implementation": "sdpa"}}, "search.fuse: 4 needs settings.attn_implementation: eager"),
])
def test_what_fuse_cannot_bundle_is_refused_in_one_line(overrides, message, tmp_path, space_yaml):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        _space(tmp_path, space_yaml, **{"methods": ["base"], **overrides})


def test_the_dry_run_says_how_many_members_a_gpu_holds_and_how_many_bundles(tmp_path, space_yaml, capsys):
    from istar_tune.cli import main

    _space(tmp_path, space_yaml, methods=["base"], resources={"gpu": 0.5})
    assert main(["search", str(tmp_path / "fused.yaml"), "--dry-run", "--gpu-memory-gb", "80"]) == 0
    out = capsys.readouterr().out
    held = re.search(r"packing: 2 trials a GPU asked; memory holds (\d+): all 2 fit \(resources.gpu 0.5, 80 GiB "
                     r"GPUs\); fused: one GPU holds bundles of up to (\d+) members of tiny-bert \(the space's largest: "
                     r"3\)", out)
    assert held is not None, out
    assert int(held.group(2)) > 3 * int(held.group(1))  # bundles of 3 share one CUDA context each
