from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError
from istar_tune.trial_config import (
    FUSED_KEY,
    SEARCH_KEY,
    SHARED_EPOCHS_KEY,
    TASK_DEFINITION_KEY,
    completes,
    configuration,
    for_search,
    fuse,
    trial_group,
    trial_task,
    with_task_definition,
)


def test_a_shared_trial_completes_each_count_and_names_each_configuration():
    shared = {"model": "bert", "task": "rte", "method": "base", "epochs": 5, SHARED_EPOCHS_KEY: [3, 4, 5]}
    assert completes(shared) == (3, 4, 5) and completes({"epochs": 2}) == (2,)
    assert configuration(shared, 4) == {"model": "bert", "task": "rte", "method": "base", "epochs": 4}


def test_a_trial_is_grouped_within_its_search_and_finds_its_searchs_value():
    config = {"model": "bert", "task": "rte", "method": "istar", SEARCH_KEY: "grid"}
    assert trial_group(config) == "grid:bert/rte/istar"
    assert trial_group({k: v for k, v in config.items() if k != SEARCH_KEY}) == "bert/rte/istar"
    assert for_search(config, {"grid": 1, "seeds": 2}) == 1
    with pytest.raises(KeyError, match="search 'grid'; this experiment runs seeds"):
        for_search(config, {"seeds": 2})


def test_a_task_that_is_not_shipped_travels_inside_the_configuration_and_registers_nothing(tmp_path):
    from istar_tune.tasks import get_task, task_from_mapping

    for name in ("train.jsonl", "dev.jsonl"):
        (tmp_path / name).write_text('{"text": "a", "label": 0}\n{"text": "b", "label": 1}\n')
    task = task_from_mapping({"name": "tickets", "train": "train.jsonl", "validation": "dev.jsonl"}, tmp_path)
    config = with_task_definition({"model": "tiny-bert", "task": task.name, "method": "base"}, task)
    assert config[TASK_DEFINITION_KEY]["name"] == task.name
    assert trial_task(config).name == task.name and trial_task(config).files == task.files
    assert trial_task(dict(config)) is trial_task(config)  # a definition is read once, however often it is asked for
    other = with_task_definition(config, task_from_mapping({"name": "tickets", "train": "train.jsonl",
                                                            "validation": "dev.jsonl", "metric": "mcc"}, tmp_path))
    assert trial_task(other).metric == "mcc" and trial_task(config).metric == "accuracy"
    with pytest.raises(ConfigError, match="unknown task 'tickets'"):
        get_task("tickets")  # the configuration is the one source: no process-global registry was filled
    assert TASK_DEFINITION_KEY not in with_task_definition({"model": "bert", "task": "rte", "method": "base"}, None)
    with pytest.raises(ValueError, match="given the definition of 'tickets'"):
        with_task_definition({"model": "bert", "task": "other", "method": "base"}, task)


def test_the_hyperparameters_of_a_configuration_are_parsed_once_and_checked():
    from istar_tune.errors import ConfigError
    from istar_tune.trial_config import hyperparameters

    typed = hyperparameters({"model": "bert", "task": "rte", "method": "istar", "lam": -1, "zeta": 0.2,
                             SEARCH_KEY: "grid", SHARED_EPOCHS_KEY: [3, 4]})
    assert (typed.model, typed.lam, typed.zeta) == ("bert", -1.0, 0.2)
    with pytest.raises(ConfigError, match="zeta"):
        hyperparameters({"model": "bert", "task": "rte", "method": "istar", "zeta": 2.0})


def test_fused_configurations_join_by_batch_stream_and_a_trial_holds_at_most_fuse_of_them():
    base = {"model": "tiny-bert", "task": "rte", "method": "base", "batch_size": 16, "search": "s"}
    configs = [{**base, "learning_rate": lr, "seed": seed} for seed in (1, 2) for lr in (1e-3, 2e-3, 3e-3)]
    configs.append({**base, "learning_rate": 1e-3, "seed": 1, "batch_size": 32})
    trials = fuse(configs, 4)
    assert [[(m["seed"], m["learning_rate"]) for m in t.get(FUSED_KEY, [t])] for t in trials] == [
        [(1, 1e-3), (1, 2e-3), (1, 3e-3), (2, 1e-3)], [(2, 2e-3), (2, 3e-3)], [(1, 1e-3)]]  # seeds fuse, batches not
    assert FUSED_KEY not in trials[2] and "fused" not in trials[2]  # alone in its stream: a plain trial
    assert all(m["fused"] is True for m in trials[0][FUSED_KEY])
    padded = fuse([{**c, "include_padding": True} for c in configs[:6]], 4)  # padding to one length would add points
    assert [{m["seed"] for m in t[FUSED_KEY]} for t in padded] == [{1}, {2}]
    shared = [{**base, "learning_rate": 1e-3, "epochs": 3, SHARED_EPOCHS_KEY: [1, 3]}, {**base, "epochs": 2}]
    (bundle,) = fuse(shared, 4)  # a shared trial joins a bundle as one member; the bundle trains to 3 epochs
    assert [m.get(SHARED_EPOCHS_KEY) for m in bundle[FUSED_KEY]] == [[1, 3], None] and bundle["epochs"] == 3
