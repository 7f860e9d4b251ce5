from __future__ import annotations

from pathlib import Path

import pytest

from istar_tune.cli import main
from istar_tune.errors import ConfigError
from istar_tune.search.spaces.file import load_search_space

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"
SHIPPED = sorted(SPACES.glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_space_loads_and_validates(path):
    space = load_search_space(path)
    assert space.models and space.tasks and space.methods
    space.run_settings()  # its settings are valid RunSettings
    if space.stage == "search":
        assert all(space.trials_in(g) >= 1 for g in space.groups())
    if path.name.startswith("paper_"):  # the papers' protocols name their recipe: no default decides it silently
        assert "recipe" in space.settings


BASE = """\
name: bad
models: [tiny-bert]
tasks: [sst2]
methods: [base, istar]
hyperparameters:
  learning_rate: {grid: [1.0e-3]}
"""

STUDY = "name: bad\nstage: seeds\nbest_of: [x]\nseeds: [1]\nmodels: [tiny-bert]\ntasks: [sst2]\nmethods: [istar]\n"

BAD_SPACES = {
    "unknown top-level key": (BASE + "colour: red\n", "colour: unknown key"),
    "unknown hyperparameter": (BASE + "  dropout: 0.1\n", "hyperparameters.dropout: unknown hyperparameter"),
    "wrong type": (BASE + "  batch_size: big\n", "batch_size must be an integer, got 'big'"),
    "empty grid": (BASE + "  epochs: {grid: []}\n", "grid needs a non-empty list"),
    "zeta outside [0, 1]": (BASE + "  zeta: {grid: [0.2, 1.5]}\n", "zeta must lie in [0, 1], got 1.5"),
    "unknown task": (BASE.replace("[sst2]", "[sst2, mnli]"), "unknown task 'mnli'"),
    "unknown method": (BASE.replace("[base, istar]", "[base, isotropy]"), "unknown method 'isotropy'"),
    "unknown algorithm": (BASE + "search: {algorithm: bayes}\n",
                          "search.algorithm: must be one of grid, random, tpe, qmc"),
    "loguniform at zero": (BASE + "  weight_decay: {loguniform: [0, 0.1]}\n", "loguniform needs low > 0"),
    "range the wrong way": (BASE + "  warmup_ratio: {uniform: [0.5, 0.1]}\n", "uniform needs [low, high]"),
    "grid with tpe": (BASE + "search: {algorithm: tpe}\n", "grid values need search.algorithm: grid"),
    "negative gpu": (BASE + "resources: {cpu: 1, gpu: -1}\n", "resources.gpu: must be a non-negative number"),
    "empty models": (BASE.replace("[tiny-bert]", "[]"), "models: must be a non-empty list"),
    "unknown scheduler": (BASE + "scheduler: {type: bohb}\n",
                          "scheduler.type: must be one of none, asha, hyperband, median, conformal, got 'bohb'"),
    "unknown setting": (BASE + "settings: {max_len: 64}\n",
                        "settings: max_len: unknown key (max_len: did you mean max_length?)"),
    "seeds stage without seeds": (BASE + "stage: seeds\nbest_of: [x]\n", "seeds: must be a non-empty list"),
    "not YAML": ("name: [unclosed\n", "not valid YAML"),
    "vary outside a seeds stage": (BASE + "vary: {lam: [-1, 1]}\n", "vary: belongs to a seeds stage"),
    "a study varying two": (STUDY + "vary: {lam: [-1, 1], zeta: [0.2]}\n", "a study varies one hyperparameter"),
    "a study varying the seed": (STUDY + "vary: {seed: [1, 2]}\n", "not a hyperparameter a study can vary"),
    "a study's values for one model": (STUDY + "vary: {layer: {bert: [1, 2]}}\n", "lists no values for tiny-bert"),
    "a study's bad value": (STUDY + "vary: {zeta: [0.2, 1.5]}\n", "zeta must lie in [0, 1], got 1.5"),
    "a seeds stage's grid": (STUDY + "hyperparameters: {zeta: {grid: [0.2, 0.4]}}\n",
                             "a seeds stage sets constants on top of the best configuration"),
    "start from an unknown method": (STUDY + "start_from: bayes\n", "start_from: unknown method 'bayes'"),
    "random draws beyond the choices": (
        BASE.replace("{grid: [1.0e-3]}", "{choice: [1.0e-3, 2.0e-3]}\n  epochs: {randint: [1, 3]}")
        + "search: {algorithm: random, num_samples: 7}\n",
        "search.num_samples is 7, but base on tiny-bert × sst2 has 6 distinct configuration(s)"),
}


@pytest.mark.parametrize("kind", sorted(BAD_SPACES))
def test_bad_spaces_fail_with_one_line_and_exit_2_before_ray_starts(kind, tmp_path, capsys):
    import ray

    text, message = BAD_SPACES[kind]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["search", str(path), "--storage-path", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("istar-tune: error:") and "\n" not in err
    assert message in err and str(path) in err
    assert not ray.is_initialized()
    assert not (tmp_path / "runs").exists()


def test_all_problems_of_a_space_are_listed_together(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BASE + "  zeta: 3\n  batch_size: 0\ncolour: red\n")
    with pytest.raises(ConfigError) as err:
        load_search_space(path)
    assert len(err.value.problems) == 3


def test_tasks_are_names_definition_files_beside_the_space_or_inline_definitions(own_data, tmp_path):
    from istar_tune.tasks import get_task

    files = own_data("sst2", "csv", folder=tmp_path / "data")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "reviews.yaml").write_text("name: reviews\ntrain: ../data/train.csv\n"
                                                     "validation: ../data/dev.csv\nmetric: f1\npositive_label: 1\n")
    space = tmp_path / "space.yaml"
    space.write_text(BASE.replace("tasks: [sst2]", "tasks: [rte, tasks/reviews.yaml, {name: inline, train: "
                                                   "data/train.csv, validation: data/dev.csv}]"))
    loaded = load_search_space(space)
    assert loaded.tasks == ("rte", "reviews", "inline")
    assert loaded.task("reviews").files["train"] == str(files["train"])  # relative to the definition's own folder
    assert loaded.task("inline").files["train"] == str(files["train"])  # inline: relative to the space's folder
    assert loaded.task("rte") is get_task("rte")
    with pytest.raises(ConfigError, match="unknown task 'reviews'"):
        get_task("reviews")  # the space holds its tasks: nothing registered
    assert [g.task for g in loaded.groups()] == ["rte", "rte", "reviews", "reviews", "inline", "inline"]


def test_bad_task_definitions_in_a_space_are_listed_together_and_nothing_is_written(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("name: sst2\ntrain: nowhere.csv\nvalidation: nowhere.csv\nmetric: mcc\n"
                                       "problem_type: regression\n")
    space = tmp_path / "space.yaml"
    space.write_text(BASE.replace("tasks: [sst2]", "tasks: [bad.yaml, rte, RTE, {name: x}]"))
    assert main(["search", str(space), "--storage-path", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    for expected in ("'sst2' is the name of a shipped task", "metric: 'mcc' does not fit a regression task",
                     "nowhere.csv' does not exist", "tasks[3]: train: give the data", "lists rte more than once"):
        assert expected in err, expected
    assert not (tmp_path / "runs").exists()


def test_relative_paths_in_a_space_start_at_its_own_folder(tmp_path, monkeypatch):
    (tmp_path / "spaces").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "my-model").mkdir()
    space = tmp_path / "spaces" / "space.yaml"
    space.write_text(BASE.replace("models: [tiny-bert]", "models: [../my-model, tiny-bert]")
                     + "settings: {data_dir: ../data, init_checkpoint: ~/ckpt}\n")
    monkeypatch.chdir(tmp_path / "data")  # wherever the command runs
    loaded = load_search_space(space)
    assert loaded.settings["data_dir"] == str(tmp_path / "data")
    assert loaded.settings["init_checkpoint"] == "~/ckpt"  # a home-relative path stays the user's
    assert loaded.models == (str(tmp_path / "my-model"), "tiny-bert")


def test_a_second_stage_method_on_a_question_answering_task_of_ones_own_is_refused_by_the_space(own_data, tmp_path):
    own_data("squad", "jsonl", folder=tmp_path / "qa")
    space = tmp_path / "space.yaml"
    space.write_text(BASE.replace("tasks: [sst2]", "tasks: [{name: qa, problem_type: extractive_qa, train: "
                                                   "qa/train.jsonl, validation: qa/dev.jsonl}]")
                     .replace("methods: [base, istar]", "methods: [base, isolayer]"))
    with pytest.raises(ConfigError, match="method isolayer applies to sentence-level tasks; qa is extractive QA"):
        load_search_space(space)


def test_scalar_fields_are_coerced_by_the_typed_loader_within_their_declared_ranges(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(BASE + "search: {algorithm: grid, num_samples: '4', share_epochs: 'false', seed: 7.0}\n"
                           "resources: {cpu: '2', gpu: 0.5}\nconcurrency: 3.0\n")
    space = load_search_space(path)
    assert (space.num_samples, space.share_epochs, space.seed, space.cpu, space.gpu, space.concurrency) == (
        4, False, 7, 2.0, 0.5, 3)
    path.write_text(BASE + "search: {num_samples: 0, seed: x}\nscheduler: {type: asha, reduction_factor: 1}\n"
                           "resources: {cpu: 0}\nmax_failures: -1\n")
    with pytest.raises(ConfigError) as err:
        load_search_space(path)
    assert [p.split(": ", 1)[1] for p in err.value.problems] == [
        "search.num_samples: must be an integer >= 1, got 0", "search.seed: must be an integer, got 'x'",
        "scheduler.reduction_factor: must be a number greater than 1, got 1.0",
        "resources.cpu: must be a positive number, got 0.0", "max_failures: must be a non-negative integer, got -1"]
