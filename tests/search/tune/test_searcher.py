from __future__ import annotations

from pathlib import Path

from ray.tune.search import Searcher

from istar_tune.search.plan import group_plans, plan
from istar_tune.search.spaces.cost import trial_seconds
from istar_tune.search.spaces.file import load_search_space
from istar_tune.search.spaces.grid import grid_configs
from istar_tune.search.spaces.space import Domain
from istar_tune.search.tune.searcher import GroupQueue, GroupSearcher
from istar_tune.trial_config import SHARED_EPOCHS_KEY

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"


def test_grid_configs_are_the_product_of_the_grids_times_the_repeats():
    domains = {"learning_rate": Domain("grid", (1e-5, 3e-5)), "epochs": Domain("grid", (3, 4, 5)),
               "zeta": Domain("uniform", (0.2, 0.8)), "batch_size": Domain("constant", (16,))}
    configs = grid_configs({"model": "bert"}, domains, repeats=2, seed=0)
    assert len(configs) == 12
    assert {(c["learning_rate"], c["epochs"]) for c in configs} == {(a, b) for a in (1e-5, 3e-5) for b in (3, 4, 5)}
    assert all(0.2 <= c["zeta"] <= 0.8 and c["batch_size"] == 16 and c["model"] == "bert" for c in configs)
    assert grid_configs({"model": "bert"}, domains, 2, seed=0) == configs  # seeded


def test_the_paper_grids_hand_out_every_trial_once_longest_first():
    space = load_search_space(SPACES / "paper_istar.yaml").narrow(models=["bert"])
    plans = group_plans(space, plan(space))
    searcher = GroupSearcher(plans)
    handed = []
    while (config := searcher.suggest(f"t{len(handed)}")) not in (None, Searcher.FINISHED):
        handed.append(config)
    assert searcher.suggest("again") == Searcher.FINISHED
    assert len(handed) == 9 * 216  # 648 configurations per group, as 216 trials of 5 epochs that complete 3, 4 and 5
    keys = ("model", "task", "batch_size", "learning_rate", "lam", "zeta")
    assert len({tuple(c[k] for k in keys) for c in handed}) == len(handed)
    assert all(c["epochs"] == 5 and c[SHARED_EPOCHS_KEY] == [3, 4, 5] for c in handed)
    seconds = [trial_seconds(c) for c in handed]
    ordered = sorted(seconds, reverse=True)
    assert seconds[0::2] == ordered[:len(seconds[0::2])]  # by turns: the longest remaining ...
    assert seconds[1::2] == sorted(seconds)[:len(seconds[1::2])]  # ... and the shortest remaining
    assert max(seconds[-100:]) < ordered[len(ordered) // 4]  # no long trial starts last


def test_concurrency_is_per_group_and_a_finished_trial_frees_its_slot():
    plans = [GroupQueue(key="a", configs=[{"model": "bert", "task": "rte", "method": "base", "epochs": e}
                                         for e in (3, 4, 5)]),
             GroupQueue(key="b", configs=[{"model": "bert", "task": "sst2", "method": "base", "epochs": 3}])]
    searcher = GroupSearcher(plans, concurrency=1)
    first, second = searcher.suggest("1"), searcher.suggest("2")
    assert {first["task"], second["task"]} == {"rte", "sst2"}  # both groups in flight at once
    assert searcher.suggest("3") is None  # each group is at its limit
    rte = "1" if first["task"] == "rte" else "2"
    searcher.on_trial_complete(rte, {"objective": 0.5})
    assert searcher.suggest("3")["task"] == "rte"


def test_a_paused_trial_leaves_its_place_to_a_waiting_one_until_it_resumes():
    configs = [{"model": "bert", "task": "rte", "method": "base", "epochs": e} for e in (3, 4, 5)]
    searcher = GroupSearcher([GroupQueue(key="a", configs=configs)], concurrency=1)
    assert searcher.suggest("1") and searcher.suggest("2") is None
    searcher.on_pause("1")  # median stopping could not judge it yet: Tune saved it
    searcher.on_pause("1")  # told twice, counted once
    assert searcher.suggest("2") and searcher.suggest("3") is None
    searcher.on_unpause("1")
    searcher.on_trial_complete("2", {"objective": 0.5})
    assert searcher.plans[0].live == 1 and searcher.suggest("3") is None  # "1" runs again in the group's place
    searcher.on_pause("1")
    searcher.on_trial_complete("1", {"objective": 0.4})  # ended while paused (the search stopped)
    assert searcher.plans[0].live == 0 and searcher.suggest("3")


def test_optuna_groups_get_their_own_study_and_budget():
    space = load_search_space(SPACES / "optuna_asha.yaml").narrow(models=["bert"], tasks=["rte", "mrpc"],
                                                                   methods=["istar"])
    searcher = GroupSearcher(group_plans(space, plan(space)), seed=0)
    handed = []
    for index in range(80):
        config = searcher.suggest(f"t{index}")
        handed.append(config)
        searcher.on_trial_complete(f"t{index}", {"objective": 0.5, "training_iteration": 1})
    assert searcher.suggest("more") == Searcher.FINISHED
    assert sorted(c["task"] for c in handed) == ["mrpc"] * 40 + ["rte"] * 40
    assert all(-5 <= c["lam"] <= 5 and 0.2 <= c["zeta"] <= 0.8 and c["grad_accum"] == 2 for c in handed)
    assert len({id(p.searcher) for p in searcher.plans}) == 2


def test_optuna_studies_live_in_a_database_and_start_from_the_given_points(tmp_path):
    import optuna

    text = (SPACES / "optuna_asha.yaml").read_text().replace(
        "search: {algorithm: tpe, num_samples: 40, seed: 0}",
        "search:\n  algorithm: tpe\n  num_samples: 4\n  seed: 0\n"
        "  points_to_evaluate: [{learning_rate: 2.0e-5, batch_size: 16, epochs: 4, lam: -3, zeta: 0.5}]")
    (tmp_path / "space.yaml").write_text(text)
    space = load_search_space(tmp_path / "space.yaml").narrow(models=["bert"], tasks=["rte"], methods=["istar"])
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    searcher = GroupSearcher(group_plans(space, plan(space), "s"), seed=0, storage=storage)
    first = searcher.suggest("t0")
    assert ((first["learning_rate"], first["batch_size"], first["epochs"], first["lam"], first["zeta"]) ==
            (2e-5, 16, 4, -3, 0.5))
    searcher.on_trial_complete("t0", {"objective": 0.7, "training_iteration": 3})
    second = searcher.suggest("t1")
    searcher.on_trial_complete("t1", {"objective": 0.6, "training_iteration": 3})
    assert second != first
    study = optuna.load_study(study_name="s:bert/rte/istar", storage=storage)  # what optuna-dashboard shows
    assert [t.value for t in study.trials] == [0.7, 0.6]


def _drain(searcher: GroupSearcher, prefix: str) -> list[tuple[str, dict]]:
    handed = []
    while isinstance(config := searcher.suggest(f"{prefix}{len(handed)}"), dict):
        handed.append((f"{prefix}{len(handed)}", config))
    return handed


def test_a_seeds_group_waits_for_its_grid_group_then_reruns_its_best_trial_first_in_line():
    grid = [{"model": "bert", "task": "rte", "method": "istar", "search": "grid", "learning_rate": lr, "seed": 42}
            for lr in (1e-5, 2e-5, 3e-5)]
    other = [{"model": "bert", "task": "sst2", "method": "istar", "search": "grid", "learning_rate": lr}
             for lr in (1e-5, 2e-5, 3e-5, 4e-5)]
    seeds_base = {"model": "bert", "task": "rte", "method": "istar", "search": "seeds"}
    plans = [GroupQueue(key="grid:bert/rte/istar", configs=list(grid)),
             GroupQueue(key="grid:bert/sst2/istar", configs=list(other)),
             GroupQueue(key="seeds:bert/rte/istar", base=seeds_base, after="grid:bert/rte/istar",
                      variants=[{"seed": 1}, {"seed": 2}])]
    searcher = GroupSearcher(plans, concurrency=None)
    handed = _drain(searcher, "g")
    rte = [(t, c) for t, c in handed if c["task"] == "rte"]
    assert len(rte) == 3 and searcher.suggest("x") is None  # the seeds group waits: not FINISHED, nothing to run
    scores = {1e-5: 0.6, 2e-5: 0.7, 3e-5: 0.7}  # a tie: the configuration first in tie_order wins, as in tables
    for trial_id, config in rte[:-1]:
        searcher.on_trial_complete(trial_id, {"objective": scores[config["learning_rate"]]})
    assert searcher.suggest("y") is None  # one rte trial still runs
    last_id, last = rte[-1]
    searcher.on_trial_complete(last_id, {"objective": scores[last["learning_rate"]]})
    best_lr = 2e-5
    seeds = [searcher.suggest("s1"), searcher.suggest("s2")]
    assert [c["seed"] for c in seeds] == [1, 2]
    assert all(c["search"] == "seeds" and c["learning_rate"] == best_lr and c["task"] == "rte" for c in seeds)
    assert searcher.suggest("end") == Searcher.FINISHED  # nothing left to hand out (sst2 trials still run)


def test_a_seeds_group_whose_source_scored_nothing_runs_nothing_and_says_why():
    plans = [GroupQueue(key="grid:bert/rte/base", configs=[{"model": "bert", "task": "rte", "method": "base"}]),
             GroupQueue(key="seeds:bert/rte/base", base={"model": "bert", "task": "rte", "method": "base"},
                       after="grid:bert/rte/base", variants=[{"seed": 1}, {"seed": 2}, {"seed": 3}])]
    searcher = GroupSearcher(plans)
    searcher.suggest("t0")
    searcher.on_trial_complete("t0", None, error=True)
    assert searcher.suggest("t1") == Searcher.FINISHED
    assert "without a scored trial" in plans[1].note


def test_a_seeds_group_must_wait_for_a_group_of_the_same_experiment():
    import pytest

    with pytest.raises(ValueError, match="not in this experiment"):
        GroupSearcher([GroupQueue(key="seeds:a", after="grid:missing", variants=[{"seed": 1}])])


def test_a_group_waiting_for_a_shared_group_reruns_its_best_configuration_not_its_trial():
    shared = {"model": "bert", "task": "rte", "method": "base", "learning_rate": 1e-5, "epochs": 5,
              SHARED_EPOCHS_KEY: [3, 4, 5]}
    plans = [GroupQueue(key="grid:bert/rte/base", configs=[shared]),
             GroupQueue(key="seeds:bert/rte/base", base={"model": "bert", "task": "rte", "method": "base"},
                       after="grid:bert/rte/base", variants=[{"seed": 1}, {"seed": 2}])]
    searcher = GroupSearcher(plans)
    assert searcher.suggest("t1") == shared
    # the 4-epoch configuration scored best on its last epoch; the trial's own last epoch scored less
    searcher.on_trial_complete("t1", {"epoch": 5, "objective": 0.6, "objective_at_epoch_3": 0.7,
                                      "objective_at_epoch_4": 0.8, "objective_at_epoch_5": 0.6})
    reruns = [searcher.suggest("s1"), searcher.suggest("s2")]
    assert [(c["epochs"], c["seed"]) for c in reruns] == [(4, 1), (4, 2)]
    assert all(SHARED_EPOCHS_KEY not in c for c in reruns)


def test_what_was_handed_to_lost_trials_is_given_back_in_its_place_and_handed_out_again(tmp_path):
    space = load_search_space(SPACES / "paper_istar.yaml").narrow(models=["bert"], tasks=["rte", "mrpc"])
    straight = GroupSearcher(group_plans(space, plan(space)))
    order = _drain(straight, "s")
    searcher = GroupSearcher(group_plans(space, plan(space)))
    first = [searcher.suggest(f"t{i}") for i in range(5)]
    searcher.on_trial_complete("t0", {"objective": 0.5})
    searcher.save(str(tmp_path / "state.pkl"))
    restored = GroupSearcher.__new__(GroupSearcher)
    restored.restore(str(tmp_path / "state.pkl"))
    restored.give_back({"t2", "t4", "unknown"})  # lost: two running trials (and one this searcher never knew)
    assert restored.suggested == 3 and set(restored.handed) == {"t0", "t1", "t3"}
    assert sum(p.live for p in restored.plans) == 2  # t1 and t3 still run
    again = _drain(restored, "r")
    # The given-back configurations come first (their places were the earliest left), then the rest in order.
    assert [c for _, c in again[:2]] == [first[2], first[4]]
    assert [c for _, c in again] == [first[2], first[4], *[c for _, c in order[5:]]]
    assert restored.suggest("end") == Searcher.FINISHED


def test_a_searcher_state_saved_before_trials_were_recorded_still_restores(tmp_path):
    searcher = GroupSearcher([GroupQueue(key="a", configs=[{"model": "bert", "task": "rte", "method": "base"}])])
    state = {k: v for k, v in searcher.__dict__.items() if k != "handed"}
    import pickle

    (tmp_path / "old.pkl").write_bytes(pickle.dumps(state))
    restored = GroupSearcher.__new__(GroupSearcher)
    restored.restore(str(tmp_path / "old.pkl"))
    assert restored.handed is None and restored.suggest("t0")["task"] == "rte"


def test_a_queue_pickled_under_its_earlier_names_restores(tmp_path):
    import pickle

    from istar_tune.search.tune import searcher as module

    queue = GroupQueue(key="a", budget=2, algorithm="optuna")
    state = {**queue.__dict__, "optuna_space": {"learning_rate": "domain"}}
    del state["sampled"]
    restored = GroupQueue.__new__(GroupQueue)
    restored.__setstate__(state)
    assert restored.sampled == {"learning_rate": "domain"} and restored.algorithm == "tpe"
    assert module.GroupPlan is GroupQueue and pickle.loads(pickle.dumps(restored)).sampled == restored.sampled
