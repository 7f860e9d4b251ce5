from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError
from istar_tune.search.spaces.cost import gpu_share, packing_of, trial_seconds


def test_the_cost_model_grows_with_data_epochs_and_small_batches_and_i_star_costs_more():
    base = {"model": "bert", "task": "rte", "method": "base", "learning_rate": 3e-5, "batch_size": 32, "epochs": 3}
    assert trial_seconds({**base, "task": "qqp"}) > 50 * trial_seconds(base) / 2
    assert trial_seconds({**base, "epochs": 5}) > trial_seconds(base)
    assert trial_seconds({**base, "batch_size": 8}) > trial_seconds(base)
    assert trial_seconds({**base, "method": "istar"}) > trial_seconds(base)
    assert trial_seconds({**base, "model": "distilbert"}) < trial_seconds(base)


def test_the_gpu_share_of_a_packing_fits_that_many_trials_on_one_gpu_and_reads_back_as_it():
    for packing in range(1, 17):
        share = gpu_share(packing)
        assert packing * share <= 1.0 and (packing + 1) * share > 1.0, packing  # Ray fits exactly `packing`
        assert packing_of(share) == packing
    assert (gpu_share(4), gpu_share(6), gpu_share(7)) == (0.25, 0.166, 0.142)  # not round()'s 0.167 and 0.143


def test_memory_and_time_of_ones_own_tasks_come_from_their_heads_and_files(own_data, tmp_path, capsys):
    """Task definitions (regression, extractive QA, classes as words): each group's memory estimate counts the
    weights of the model built for that task's head, and an epoch's modelled time the definition's own examples."""
    from istar_tune.cli import main
    from istar_tune.config import RunSettings
    from istar_tune.methods import get_method
    from istar_tune.models import load_model
    from istar_tune.search.plan import plan
    from istar_tune.search.preflight import resolve_data
    from istar_tune.search.spaces.cost import epoch_seconds, group_memory, throughput
    from istar_tune.search.spaces.file import load_search_space
    from istar_tune.trial_config import with_task_definition

    own_data("stsb", "csv", folder=tmp_path / "scores")
    own_data("squad", "jsonl", folder=tmp_path / "qa")
    words = own_data("sst2", "csv", string_labels=True, folder=tmp_path / "words")
    (tmp_path / "twice.csv").write_text(words["train"].read_text() + "".join(
        words["train"].read_text().splitlines(keepends=True)[1:]))  # every training row twice
    definitions = {"scores": "problem_type: regression\nmetric: spearman\ntrain: scores/train.csv\n"
                             "validation: scores/dev.csv\n",
                   "qa": "problem_type: extractive_qa\ntrain: qa/train.jsonl\nvalidation: qa/dev.jsonl\n",
                   "words": "train: words/train.csv\nvalidation: words/dev.csv\n",
                   "twice": "train: twice.csv\nvalidation: words/dev.csv\n"}
    for name, text in definitions.items():
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\n{text}")
    (tmp_path / "space.yaml").write_text("name: own-cost\nmodels: [tiny-bert]\n"
                                         "tasks: [scores.yaml, qa.yaml, words.yaml, twice.yaml]\nmethods: [base]\n"
                                         "hyperparameters: {batch_size: {grid: [8, 16]}}\n")
    assert main(["search", str(tmp_path / "space.yaml"), "--dry-run"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("tiny-bert ")]
    assert [row[1] for row in rows] == ["scores", "qa", "words", "twice"] and all(float(row[-1]) > 0.5 for row in rows)
    weights = {}
    space = load_search_space(tmp_path / "space.yaml")
    resolved, problems = resolve_data(list(space.task_objects), None, definitions_only=True)  # as the dry run does
    assert problems == []
    space = space.with_tasks(resolved)
    for item in plan(space):
        what, estimate = group_memory(item, RunSettings())
        assert what == f"tiny-bert × {item.group.task} × base at batch 16 × 128 tokens"  # the largest batch
        real = load_model("tiny-bert", item.group.task_object)
        weights[item.group.task] = estimate.weights
        assert estimate.weights == sum(p.numel() * 4 for p in real.parameters()), item.group.task
    assert len({weights["scores"], weights["qa"], weights["words"]}) == 3  # one output, two spans, two classes
    once, doubled = space.task("words").train_examples, space.task("twice").train_examples
    assert doubled == 2 * once > 0
    config = {"model": "tiny-bert", "method": "base", "learning_rate": 3e-5, "batch_size": 16, "epochs": 1}
    twice, words = (with_task_definition({**config, "task": n}, space.task(n)) for n in ("twice", "words"))
    extra = epoch_seconds(twice) - epoch_seconds(words)  # the configurations carry their tasks
    assert extra == pytest.approx(once / throughput("tiny-bert", 16) * get_method("base").relative_step_cost)


def test_the_packing_advice_says_which_of_memory_and_cores_binds():
    from istar_tune.search.spaces.cost import by_cores, packing_advice

    assert by_cores(16, 4) == 4 and by_cores(2, 0.5) == 2 and by_cores(1.5, 1) == 1
    assert packing_advice(8, 6, 16, 16, 1).startswith("8 trials a GPU asked; memory holds 6, cores hold 16")
    assert packing_advice(8, 6, 16, 16, 1).endswith("the memory bind, so 6 run a GPU")
    assert packing_advice(4, None, None) == "4 trials a GPU (neither memory nor cores given)"
    assert packing_advice(2, 3, None) == "2 trials a GPU asked; memory holds 3: all 2 fit"


def test_a_calibrated_bundles_rate_is_read_apart_and_times_its_members_with_one_start(tmp_path):
    """calibrate's fused rows (``fuse`` > 1) are not one trial's rate: they are read as the bundle's, by members and
    packing; a fused trial then starts once and trains each member's work at that rate."""
    import yaml

    from istar_tune.search.spaces.cost import STARTUP_SECONDS, Throughput, bundle_seconds, training_seconds

    path = tmp_path / "calibration.yaml"
    path.write_text(yaml.safe_dump({"model": "tiny-bert", "max_length": 64, "recommended": {"packing": 1},
                                    "measurements": [
                                        {"packing": 1, "fuse": 1, "tokens_per_second_per_trial": 1000.0},
                                        {"packing": 1, "fuse": 4, "tokens_per_second_per_trial": 3000.0},
                                        {"packing": 1, "fuse": 8, "error": "out of memory"}]}))
    measured = Throughput.read([str(path)], ("tiny-bert",), max_length=128)
    assert measured.tokens_per_second == {"tiny-bert": 2000.0}  # rescaled to 128 tokens; the bundle's not taken
    assert measured.bundle_rate("tiny-bert", 4, 1) == 6000.0 and measured.bundle_rate("tiny-bert", 8, 1) is None
    config = {"model": "tiny-bert", "task": "rte", "method": "base", "epochs": 2, "batch_size": 32}
    alone, training = trial_seconds(config, measured=measured), training_seconds(config, measured)
    assert 0 < training < alone - STARTUP_SECONDS
    bundle = bundle_seconds([config] * 4, 6000.0, measured)  # training at 3× the rate, evaluation as alone, one start
    assert bundle == pytest.approx(STARTUP_SECONDS + 4 * (alone - STARTUP_SECONDS - training) + 4 * training / 3)
    bundles_only = tmp_path / "bundles.yaml"
    bundles_only.write_text(yaml.safe_dump({"model": "tiny-bert", "max_length": 64, "recommended": {"packing": 1},
                                            "measurements": [{"packing": 1, "fuse": 4,
                                                              "tokens_per_second_per_trial": 3000.0}]}))
    with pytest.raises(ConfigError, match="only fused bundles were: measure --fuse 1 too"):
        Throughput.read([str(bundles_only)], ("tiny-bert",), max_length=128)
