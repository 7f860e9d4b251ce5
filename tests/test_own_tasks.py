"""A user's own task through every command, as a user runs them (``istar-tune`` in its own process each time, so
every reader starts knowing only the shipped tasks): ``train`` from files, a search of a definition file on real
tiny-bert trials, ``table``, ``status``, ``plots``, the YAML export read back by ``train --config`` from another
folder, ``analyze``, and what MLflow keeps of the definition."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent / "istar-tune"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "GLUE_DIR")}
    return {**env, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"}


def _run(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(BIN), *args], cwd=cwd, capture_output=True, text=True, env=_env(), timeout=300)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def searched(glue_tiny, write_own, tmp_path_factory, space_yaml):
    """A two-trial search of a definition file (SST-2 as a CSV with words as labels, ranked by F1), run once."""
    root = tmp_path_factory.mktemp("own")
    write_own(glue_tiny, root / "data", "sst2", "csv", string_labels=True)
    (root / "tasks").mkdir()
    (root / "tasks" / "reviews.yaml").write_text(
        "name: reviews\ndisplay_name: Reviews\ntrain: ../data/train.csv\nvalidation: ../data/dev.csv\nmetric: f1\n"
        "positive_label: positive\n")
    (root / "space.yaml").write_text(space_yaml(
        name="own-search", tasks=["tasks/reviews.yaml"], methods=["istar"],
        hyperparameters={"learning_rate": {"grid": [1.0e-3, 3.0e-3]}, "lam": -1.0}, settings={"eval_batch_size": 32}))
    done = _run("search", "space.yaml", "--storage-path", "runs", cwd=root)
    return root, done.stdout


def test_the_search_ranks_the_tasks_trials_by_its_metric(searched):
    root, output = searched
    assert "search own-search: 2 trials, 2 finished, 0 stopped early, 0 failed" in output
    assert ("\n  task reviews: input text; label label; classification, 2 classes: negative (36), positive (28); "
            "metric f1 of 'positive'; 64 train / 32 validation examples\n") in output  # once, after the preflight line
    assert "tiny-bert/reviews/istar: best dev f1 " in output
    assert " on disk)" in output.splitlines()[-1]  # what its results take


def test_table_status_and_plots_read_the_task_back_from_mlflow(searched):
    root, _ = searched
    table = _run("table", "--experiment", "own-search", "--storage-path", "runs", cwd=root).stdout
    row = next(line for line in table.splitlines() if "| reviews |" in line)
    assert row.startswith("| tiny-bert | reviews | istar | f1 of 'positive' |") and "| 2 |" in row  # says which
    paper = _run("table", "--experiment", "own-search", "--storage-path", "runs", "--against-paper", cwd=root).stdout
    reviews = next(line for line in paper.splitlines() if "| reviews |" in line)
    assert reviews.rstrip().endswith("| — |")  # no paper value beside a task of one's own
    assert "| tiny-bert | rte | istar |" in paper  # the paper's tasks are still listed, empty
    status = _run("status", "own-search", "--storage-path", "runs", cwd=root).stdout
    assert "| tiny-bert/reviews/istar | 0 | 0 | 2 | 0 | 0 | 0 | f1 |" in status
    plots = _run("plots", "--experiment", "own-search", "--storage-path", "runs", "--output-dir", "plots",
                 cwd=root).stdout
    assert "wrote plots/epochs-tiny-bert-reviews.png" in plots and (root / "plots/epochs-tiny-bert-reviews.png").stat(
    ).st_size > 1000


def test_resume_after_the_data_changed_is_refused_at_the_preflight(searched):
    root, _ = searched
    train = root / "data" / "train.csv"
    original = train.read_bytes()
    try:
        train.write_bytes(original + b"one more review,positive\n")
        resumed = _run("search", "space.yaml", "--storage-path", "runs", "--resume", cwd=root, check=False)
    finally:
        train.write_bytes(original)  # the module's other tests read it
    assert resumed.returncode == 2 and resumed.stderr.count("\n") == 1, resumed.stderr
    assert f"task reviews's train file {train} (sha256:" in resumed.stderr
    assert "changed since the search started" in resumed.stderr and "Traceback" not in resumed.stderr


def test_mlflow_keeps_the_definition_with_its_files_checksums(searched):
    from istar_tune import tracking

    root, _ = searched
    uri = f"sqlite:///{root / 'runs' / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = client.get_experiment_by_name("own-search").experiment_id
    parent = tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "search"})[0]
    files = parent.data.tags[f"{tracking.TAG_TASK_FILES}.reviews"]
    assert f"train {root / 'data' / 'train.csv'} sha256:" in files
    logged = yaml.safe_load(Path(client.download_artifacts(parent.info.run_id, "tasks/reviews.yaml",
                                                           str(root))).read_text())
    assert logged["label_names"] == ["negative", "positive"] and logged["examples"] == {"train": 64, "validation": 32}
    trials = tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial"})
    assert {t.data.tags["task"] for t in trials} == {"reviews"}
    assert all('"metric": "f1"' in t.data.tags[tracking.TAG_TASK] and '"positive_label": "positive"' in
               t.data.tags[tracking.TAG_TASK] for t in trials)


def test_replay_of_a_grid_of_ones_own_task(searched):
    """The replay reads the task, its metric and its sizes (the cost model) from the runs, as table and status do:
    no registry of names is asked."""
    root, _ = searched
    done = _run("replay", "--experiment", "own-search", "--storage-path", "runs", "--replays", "5", "--no-mlflow",
                cwd=root, check=False)
    assert done.returncode == 0, done.stderr
    assert "| tiny-bert | reviews | istar |" in done.stdout and "unknown task" not in done.stderr


def test_a_headerless_csv_trains_through_column_names_with_class_names_from_a_mapping(tmp_path):
    """AG News' layout: no header, classes 1..4: the definition names the columns and maps each label value to its
    class; the saved model says the class names."""
    rows = ["1,Talks resume in the capital", "2,The match ended in a draw", "3,Stocks fell on Monday",
            "4,A new chip was shown", "1,Elections were called", "2,The striker scored twice",
            "3,The bank raised rates", "4,The phone has a new camera"]
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "dev.csv").write_text("\n".join(rows[:4]) + "\n")
    (tmp_path / "news.yaml").write_text("name: news\ntrain: train.csv\nvalidation: dev.csv\n"
                                        "column_names: [label, text]\n"
                                        "label_names: {1: World, 2: Sports, 3: Business, 4: Sci/Tech}\n")
    done = _run("train", "--task", "news.yaml", "--model", "tiny-bert", "--epochs", "1", "--max-length", "16",
                "--no-progress", "--output-dir", "out", cwd=tmp_path)
    assert "best epoch 1: accuracy" in done.stdout
    import json

    saved = json.loads((tmp_path / "out" / "best-checkpoint" / "config.json").read_text())
    assert saved["id2label"] == {"0": "World", "1": "Sports", "2": "Business", "3": "Sci/Tech"}
    # Without column_names the first row would be the header: refused, naming the way out.
    (tmp_path / "plain.yaml").write_text("name: news\ntrain: train.csv\nvalidation: dev.csv\n")
    refused = _run("train", "--task", "plain.yaml", "--model", "tiny-bert", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and "the first row looks like data" in refused.stderr


def test_the_yaml_export_trains_again_from_another_folder(searched):
    root, _ = searched
    wrote = _run("table", "--experiment", "own-search", "--storage-path", "runs", "--format", "yaml", "--output",
                 "best.yaml", cwd=root).stdout
    assert "task definition(s): task-reviews.yaml" in wrote
    text = (root / "best-tiny-bert-reviews-istar.yaml").read_text()
    config = yaml.safe_load(text)
    assert config["task"] == "task-reviews.yaml"
    assert config["threads"] == 1  # the trial's count (its resources.cpu): the retrain computes as it did
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    trained = _run("train", "--config", "../best-tiny-bert-reviews-istar.yaml", "--no-progress", cwd=elsewhere).stdout
    assert "best epoch 1: accuracy" in trained and " f1 " in trained
    # The retrained configuration scores what its trial scored, to the digits both print.
    assert ": no data held out, the dev set chose it)" in text  # the header names the data that chose
    trial_f1 = text.split("chosen by dev f1 ", 1)[1].split(":", 1)[0]
    assert f"f1 {trial_f1}" in trained, (trial_f1, trained)


def test_train_from_files_then_analyze_without_the_files_definition(glue_tiny, own_data, tmp_path):
    files = own_data("rte", "jsonl")
    trained = _run("train", "--train-file", str(files["train"]), "--validation-file", str(files["validation"]),
                   "--text-fields", "premise,hypothesis", "--task", "pairs", "--model", "tiny-bert", "--epochs", "1",
                   "--max-length", "32", "--no-progress", "--output-dir", "out", cwd=tmp_path).stdout
    assert "best epoch 1: accuracy" in trained
    saved = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())
    assert saved["task_definition"]["name"] == "pairs" and saved["task_definition"]["text_fields"] == [
        "premise", "hypothesis"]
    analysed = _run("analyze", "out", "--max-eval-samples", "16", cwd=tmp_path).stdout
    assert "wrote out/analysis" in analysed


def test_the_shortcut_reads_decimal_scores_as_regression_and_the_saved_model_names_its_classes(own_data, tmp_path):
    scores = own_data("stsb", "csv")  # sentence1, sentence2, label: 0.0 to 5.0 with decimals
    trained = _run("train", "--train-file", str(scores["train"]), "--validation-file", str(scores["validation"]),
                   "--model", "tiny-bert", "--epochs", "1", "--max-length", "32", "--no-progress",
                   "--no-save-checkpoint", "--output-dir", "scores", cwd=tmp_path).stdout
    assert trained.splitlines()[0].startswith("task custom: input sentence1 + sentence2; label label; regression "
                                              "(labels are numbers with decimals")
    assert " 64 train / 32 validation examples" in trained.splitlines()[0] and " pearson " in trained
    classes = own_data("sst2", "csv", string_labels=True)
    trained = _run("train", "--train-file", str(classes["train"]), "--validation-file", str(classes["validation"]),
                   "--model", "tiny-bert", "--epochs", "1", "--max-length", "32", "--no-progress",
                   "--output-dir", "words", cwd=tmp_path).stdout
    assert ("task custom: input text; label label; classification (labels are words), 2 classes: negative (36), "
            "positive (28); 64 train / 32 validation examples") in trained  # the counts: awk over glue-tiny's file
    from transformers import pipeline

    classify = pipeline("text-classification", model=str(tmp_path / "words" / "best-checkpoint"), device="cpu")
    assert classify("a gorgeous, witty, seductive movie")[0]["label"] in ("negative", "positive")


def test_bad_input_to_train_is_one_line_and_exit_2(own_data, tmp_path):
    files = own_data("sst2", "csv")
    only = _run("train", "--train-file", str(files["train"]), cwd=tmp_path, check=False)
    assert only.returncode == 2 and only.stderr.strip() == ("istar-tune: error: --train-file and --validation-file go "
                                                            "together: give both files (or --train-file and "
                                                            "--validation-split SHARE)")
    field = _run("train", "--train-file", str(files["train"]), "--validation-file", str(files["validation"]),
                 "--label-field", "sentiment", "--model", "tiny-bert", "--no-progress", cwd=tmp_path, check=False)
    assert field.returncode == 2 and "\n" not in field.stderr.strip()
    assert "no field 'sentiment' (its fields: text, label)" in field.stderr
    fine = tmp_path / "fine"
    fine.mkdir()
    for split in ("train", "validation"):  # the usual second label column beside the text
        rows = files[split].read_text().splitlines()
        (fine / f"{split}.csv").write_text("\n".join([rows[0] + ",fine", *(f"{r},fine-{r[-1]}" for r in rows[1:])]))
    flags = ["--train-file", "fine/train.csv", "--validation-file", "fine/validation.csv", "--model", "tiny-bert",
             "--epochs", "1", "--max-length", "32", "--no-progress", "--no-save-checkpoint"]
    guessed = _run("train", *flags, cwd=tmp_path, check=False)
    assert guessed.returncode == 2 and "\n" not in guessed.stderr.strip() and guessed.stdout == ""
    assert "the data has 2 fields (text, fine): name the input with text_fields" in guessed.stderr
    named = _run("train", *flags, "--text-fields", "text", cwd=tmp_path).stdout
    assert named.startswith("task custom: input text; label label; classification")
    lone = _run("train", "--task", "sst2", "--text-fields", "text", cwd=tmp_path, check=False)
    assert lone.returncode == 2 and "--text-fields describe(s) the files of --train-file" in lone.stderr
    for split, rows in (("train", ["a fine; warm film;1", "a dull one;0"] * 4), ("validation", ["warm;1", "dull;0"])):
        (fine / f"{split}.txt").write_text("\n".join(["text;label", *(f'"{r.rsplit(";", 1)[0]}";{r[-1]}'
                                                                      for r in rows)]) + "\n")
    separated = _run("train", *flags[4:], "--train-file", "fine/train.txt", "--validation-file", "fine/validation.txt",
                     "--separator", ";", cwd=tmp_path).stdout
    assert separated.startswith("task custom: input text; label label; classification") and "8 train" in separated
    separator = _run("train", "--task", "sst2", "--separator", ";", cwd=tmp_path, check=False)
    assert separator.returncode == 2 and "--separator describe(s) the files of --train-file" in separator.stderr
    assert not (tmp_path / "outputs").exists()


def test_a_rehearsal_dry_run_and_seeds_stage_of_ones_own_task(own_data, tmp_path):
    own_data("stsb", "tsv", folder=tmp_path / "data")
    (tmp_path / "scores.yaml").write_text("name: scores\nproblem_type: regression\nmetric: spearman\n"
                                          "train: data/train.tsv\nvalidation: data/dev.tsv\n")
    (tmp_path / "search.yaml").write_text("name: own-sim\nmodels: [bert]\ntasks: [scores.yaml]\nmethods: [base]\n"
                                          "hyperparameters: {learning_rate: {grid: [1.0e-5, 3.0e-5]}}\n")
    (tmp_path / "seeds.yaml").write_text("name: own-seeds\nstage: seeds\nbest_of: [own-sim]\nseeds: [1, 2]\n"
                                         "models: [bert]\ntasks: [scores.yaml]\nmethods: [base]\n")
    dry = _run("search", "search.yaml", "--dry-run", "--tokens-per-second", "bert=50000", cwd=tmp_path).stdout
    assert "bert   scores  base    2               2       6" in dry and "GPU-hours" in dry
    assert ("\n  task scores: input sentence1 + sentence2; label label; regression, scores 0.5 to 5 (trained as "
            "z-scores); 64 train / 32 validation examples; validation rows whose input is also a training row's: 2\n"
            ) in dry  # glue-tiny's STS-B repeats two training pairs in its dev file
    _run("search", "search.yaml", "--simulate", "--gpus", "0", "--storage-path", "runs", cwd=tmp_path)
    seeds = _run("search", "seeds.yaml", "--simulate", "--gpus", "0", "--storage-path", "runs", cwd=tmp_path).stdout
    assert "search own-seeds: 2 trials, 2 finished" in seeds and "best dev spearman" in seeds
    # the stage's aggregate run, its two seed runs nested under it (the comparison where MLflow users look)
    assert "MLflow: 1 aggregate run(s) in own-seeds, one per model × task × method, its seed runs nested" in seeds
    from istar_tune import tracking

    store = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    client = tracking.client(store)
    stage = client.get_experiment_by_name("own-seeds").experiment_id
    [aggregate] = tracking.find_runs(client, stage, **{tracking.TAG_ROLE: "aggregate"})
    assert aggregate.info.run_name == "bert/scores/base: 2 seeds" and aggregate.data.metrics["seeds_n"] == 2
    assert {r.data.tags[tracking.TAG_PARENT] for r in tracking.find_runs(client, stage, **{tracking.TAG_ROLE: "trial"})
            } == {aggregate.info.run_id}
    table = _run("table", "--experiment", "own-seeds", "--kind", "seeds", "--simulated", "--storage-path", "runs",
                 cwd=tmp_path).stdout
    assert table.splitlines()[0] == "| model | method | scores |" and "| bert | Base |" in table
    # the grid as a public benchmark: its task's own name and metric, each configuration's whole curve
    _run("export", "--experiment", "own-sim", "--simulated", "--format", "curves", "--output", "curves.csv",
         "--storage-path", "runs", cwd=tmp_path)
    import pandas as pd

    curves = pd.read_csv(tmp_path / "curves.csv")
    assert set(curves.task) == {"scores"} and set(curves.metric) == {"spearman"}
    assert sorted(curves.groupby("configuration").epoch.max()) == [3, 3] and curves.dev_score.notna().all()


@pytest.mark.parametrize(("source", "fmt", "extra", "metric"), [
    ("stsb", "csv", "problem_type: regression\nmetric: spearman\n", "spearman"),
    ("squad", "jsonl", "problem_type: extractive_qa\n", "f1"),
])
def test_regression_and_extractive_qa_of_ones_own_train(own_data, tmp_path, source, fmt, extra, metric):
    own_data(source, fmt, folder=tmp_path / "data")
    (tmp_path / "task.yaml").write_text(f"name: mine\ntrain: data/train.{fmt}\nvalidation: data/dev.{fmt}\n{extra}")
    trained = _run("train", "--task", "task.yaml", "--model", "tiny-bert", "--epochs", "1", "--max-length", "64",
                   "--max-train-samples", "32", "--no-progress", "--output-dir", "out", cwd=tmp_path).stdout
    import json

    best = json.loads((tmp_path / "out" / "metrics.json").read_text())["best"]
    assert metric in best and f" {metric} " in trained


def test_one_file_with_validation_split_and_parallel_files_train_from_the_command_line(own_data, tmp_path):
    files = own_data("sst2", "csv", string_labels=True)
    trained = _run("train", "--train-file", str(files["train"]), "--validation-split", "0.25", "--model",
                   "tiny-bert", "--epochs", "1", "--max-length", "32", "--no-progress", "--no-save-checkpoint",
                   "--output-dir", "split", cwd=tmp_path).stdout
    assert "2 classes: negative (27), positive (21); 48 train / 16 validation examples" in trained  # 36/28 by 3/4
    saved = yaml.safe_load((tmp_path / "split" / "config.yaml").read_text())["task_definition"]
    assert (saved["validation_split"], saved["split_seed"], "validation" in saved) == (0.25, 0, False)
    refused = _run("train", "--train-file", str(files["train"]), "--model", "tiny-bert", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and "--train-file and --validation-split SHARE" in refused.stderr
    rows = [line.rsplit(",", 1) for line in files["train"].read_text().splitlines()[1:]]
    (tmp_path / "text.txt").write_text("\n".join(text.strip('"') for text, _ in rows) + "\n")
    (tmp_path / "labels.txt").write_text("\n".join(label for _, label in rows) + "\n")
    (tmp_path / "lines.yaml").write_text("name: lines\ntrain: {text: text.txt, label: labels.txt}\n"
                                         "validation: {text: text.txt, label: labels.txt}\n")
    trained = _run("train", "--task", "lines.yaml", "--model", "tiny-bert", "--epochs", "1", "--max-length", "32",
                   "--no-progress", "--no-save-checkpoint", "--output-dir", "lines", cwd=tmp_path).stdout
    assert ("task lines: input text; label label; classification (labels are words), 2 classes: negative (36), "
            "positive (28)") in trained


def test_a_question_of_ones_own_qa_task_that_leaves_no_room_is_one_line_and_exit_2(own_data, tmp_path):
    import json

    files = own_data("squad", "jsonl", folder=tmp_path / "data")
    rows = [json.loads(line) for line in files["validation"].read_text().splitlines()]
    rows[2]["question"] = " ".join(["which"] * 40) + "?"
    files["validation"].write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "task.yaml").write_text("name: mine\ntrain: data/train.jsonl\nvalidation: data/dev.jsonl\n"
                                        "problem_type: extractive_qa\n")
    refused = _run("train", "--task", "task.yaml", "--model", "tiny-bert", "--epochs", "1", "--max-length", "32",
                   "--no-progress", "--output-dir", "out", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "validation rows 3: a question of" in refused.stderr and "leaves no room for its context" in refused.stderr
    assert not (tmp_path / "out" / "metrics.json").exists()
