"""Each group's best checkpoint as an MLflow LoggedModel, after a real tiny-bert search on the user's path: a shipped
task and tasks of one's own (words as labels, integer labels with ``label_names``, regression, extractive QA) with
held-out data choosing. One model per group (a seeds stage: one per run), linked to its run, with the run's params, the
chosen epoch's tag and metrics, loadable and predicting what the task names (class names, scores in the data's scale,
answers); none twice on resume, none with ``log_models=False``; what keeps one from being logged is said."""

from __future__ import annotations

import collections
import csv
import json
import re
import statistics
import string

import pytest
import torch

from istar_tune import tracking
from istar_tune.metrics import HOLDOUT_PREFIX, SCORED_PREFIX
from istar_tune.results.export import export_best
from istar_tune.search import parent
from istar_tune.search.logged_models import _NotLogged, scored_state
from istar_tune.search.run import run_search, run_searches
from istar_tune.search.spaces.file import load_search_space
from istar_tune.training.state import STATE_FILE

pytestmark = pytest.mark.slow
RAY_CPUS = 2


def _models_space(space_yaml, tasks: list[str], rate: float, checkpoint: str, name: str = "models",
                  methods: tuple[str, ...] = ("base", "istar"), **settings) -> str:
    """Two epochs, one learning rate, 48 tokens, the checkpoint setting given (I-STAR at λ −1, ζ 0.2)."""
    return space_yaml(name=name, tasks=tasks, methods=list(methods),
                      hyperparameters={"epochs": 2, "learning_rate": {"grid": [rate]}},
                      method_hyperparameters={"istar": {"lam": -1.0, "zeta": 0.2}},
                      settings={"max_length": 48, "checkpoint": checkpoint, **settings})


def _search(folder, glue_tiny, lines, resume=False):
    """The search of the shipped task and three of one's own with held-out data choosing each trial's epoch, and
    beside it (one Tune experiment) extractive QA of one's own, which holds no data out."""
    spaces = [load_search_space(folder / "models.yaml"), load_search_space(folder / "models-qa.yaml")]
    return run_searches(spaces, storage_path=folder / "runs", data_dir=str(glue_tiny), write=lines.append,
                        resume=resume)


@pytest.fixture(scope="module")
def searched(local_ray, glue_tiny, user_tasks, tmp_path_factory, space_yaml):
    """The shipped task and the four tasks of one's own (:data:`conftest.USER_TASKS`), searched once."""
    folder = tmp_path_factory.mktemp("logged")
    definitions = user_tasks(glue_tiny, folder)
    tasks = ["sst2", *(definitions[kind].name for kind in ("words", "coded", "scores"))]
    (folder / "models.yaml").write_text(_models_space(space_yaml, tasks, 3.0e-3, "state", holdout=0.25))
    (folder / "models-qa.yaml").write_text(_models_space(space_yaml, ["answers.yaml"], 3.0e-3, "state",
                                                         name="models-qa", methods=("base",)))
    lines: list[str] = []
    summary, qa = _search(folder, glue_tiny, lines)
    return summary, lines, folder, qa


def _dev_rows(folder, kind):
    with open(folder / kind / "dev.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _predict(summary, model_id, inputs):
    import mlflow

    with pytest.MonkeyPatch.context() as patch:  # not mlflow.set_tracking_uri: it would outlive the test
        patch.setenv("MLFLOW_TRACKING_URI", summary.tracking_uri)
        return mlflow.pyfunc.load_model(f"models:/{model_id}").predict(inputs)


def test_every_group_of_every_task_has_one_ready_model_of_its_chosen_epoch(searched):
    from mlflow.entities import LoggedModelStatus

    from istar_tune.metrics import chosen_on, score

    summary, lines, _, qa = searched
    assert not any("not logged" in line for line in lines), "\n".join(lines)
    assert "MLflow models: 8 logged" in summary.report() and "MLflow models: 1 logged" in qa.report()
    client = tracking.client(summary.tracking_uri)
    for search, groups in ((summary, 8), (qa, 1)):
        experiment = client.get_experiment_by_name(search.name).experiment_id
        models = list(client.search_logged_models(experiment_ids=[experiment]))
        best = tracking.best_trials(search.tracking_uri, search.name)
        by_run = {run.run_id: run for run in best.values()}
        assert len(best) == groups and sorted(m.source_run_id for m in models) == sorted(by_run)
        for model in models:
            run = by_run[model.source_run_id]
            metric = tracking.run_task(run).metric
            assert model.status == LoggedModelStatus.READY
            outputs = client.get_run(run.run_id).outputs.model_outputs  # the run page's "Logged models" column
            assert [(o.model_id, o.step) for o in outputs] == [(model.model_id, int(model.tags["istar_tune.epoch"]))]
            assert model.params == client.get_run(run.run_id).data.params  # the run's: nothing its method ignores
            assert ("zeta" in model.params) == (run.method == "istar")
            epoch = int(run.metrics.get("scored_epoch", run.metrics["epoch"]))  # the epoch held-out data chose
            assert model.tags["istar_tune.epoch"] == str(epoch)
            # The run the search chose, marked on it, for the shipped tasks and the tasks of one's own alike.
            assert client.get_run(run.run_id).data.tags[tracking.TAG_CHOSEN] == f"yes (epoch {epoch})"
            expected = {f"model/{metric}": (score(run.metrics, metric), epoch, f"{run.task}/validation")}
            if chosen_on(run.metrics, metric) == "holdout":
                expected[f"model/{HOLDOUT_PREFIX}{metric}"] = (run.metrics[SCORED_PREFIX + HOLDOUT_PREFIX + metric],
                                                              epoch, f"{run.task}/holdout")
            assert {m.key: (m.value, m.step, m.dataset_name) for m in model.metrics} == expected
            assert (len(expected) == 2) == (search is summary)


def _model_of(summary, task, method="base"):
    client = tracking.client(summary.tracking_uri)
    experiment = client.get_experiment_by_name(summary.name).experiment_id
    run = tracking.best_trials(summary.tracking_uri, summary.name)[("tiny-bert", task, method)]
    model = next(m for m in client.search_logged_models(experiment_ids=[experiment]) if m.source_run_id == run.run_id)
    return model, run


@pytest.mark.parametrize(("task", "kind", "names"), [("sst2", None, {"negative", "positive"}),
                                                     ("my-words", "words", {"negative", "positive"}),
                                                     ("my-coded", "coded", {"negative", "positive"})])
def test_a_classifier_predicts_its_tasks_class_names_and_scores_what_its_run_linked(searched, task, kind, names):
    summary, _, folder, qa = searched
    model, run = _model_of(summary, task)
    rows = _dev_rows(folder, kind or "words")  # sst2's dev sentences, labelled as words
    predicted = _predict(summary, model.model_id, [row["text"] for row in rows])
    assert set(predicted["label"]) <= names and len(predicted) == len(rows)
    if kind is not None:  # its dev accuracy, computed here from its predictions, is the linked one
        truth = [row["label"] if kind == "words" else ("negative", "positive")[int(row["label"])] for row in rows]
        accuracy = sum(p == t for p, t in zip(predicted["label"], truth)) / len(rows)
        assert accuracy == pytest.approx(next(m.value for m in model.metrics if m.key == "model/accuracy"))


def test_a_regression_model_predicts_in_the_datas_scale_and_correlates_as_its_run_linked(searched):
    summary, _, folder, qa = searched
    model, _ = _model_of(summary, "my-scores")
    rows = _dev_rows(folder, "scores")
    pairs = [{"text": row["sentence1"], "text_pair": row["sentence2"]} for row in rows]
    predicted = [float(p) for p in _predict(summary, model.model_id, pairs)["score"]]
    with open(folder / "scores" / "train.csv", newline="", encoding="utf-8") as f:
        train = [float(row["label"]) for row in csv.DictReader(f)]
    # Trained as z-scores: an untrained-looking model predicts about the training mean in the data's scale (0 to 5),
    # not about 0, once the scale is folded in.
    assert abs(statistics.fmean(predicted) - statistics.fmean(train)) < statistics.pstdev(train)
    # Its pearson, from its predictions: a barely trained model's scores differ in their fourth decimal around 3.6, so
    # float32's 2.4e-7 steps there move the correlation by about 1e-4 (the pair dropped instead moved it by 0.48).
    pearson = statistics.correlation(predicted, [float(row["label"]) for row in rows])
    assert pearson == pytest.approx(next(m.value for m in model.metrics if m.key == "model/pearson"), abs=1e-3)


def _squad_f1(prediction: str, truths: list[str]) -> float:
    """SQuAD v1.1's F1 as its official script states it (lower case, no punctuation, no articles, token overlap), the
    best over the reference answers: a reference written here from the script's text."""
    def tokens(text):
        text = "".join(c for c in text.lower() if c not in string.punctuation)
        return re.sub(r"\b(a|an|the)\b", " ", text).split()

    def f1(truth):
        common = sum((collections.Counter(tokens(prediction)) & collections.Counter(tokens(truth))).values())
        if common == 0:
            return 0.0
        precision, recall = common / len(tokens(prediction)), common / len(tokens(truth))
        return 2 * precision * recall / (precision + recall)

    return max(f1(truth) for truth in truths)


def test_an_extractive_qa_model_answers_from_the_context_and_scores_what_its_run_linked(searched):
    _, _, folder, qa = searched
    model, run = _model_of(qa, "my-answers")
    assert model.tags["istar_tune.epoch"] == "2" and {m.key for m in model.metrics} == {"model/f1"}
    rows = [json.loads(line) for line in (folder / "answers" / "dev.jsonl").read_text().splitlines()]
    answers = list(_predict(qa, model.model_id, [{"question": r["question"], "context": r["context"]} for r in rows]))
    assert len(answers) == len(rows) and all(a in r["context"] for a, r in zip(answers, rows))
    f1 = 100 * statistics.fmean(_squad_f1(a, r["answers"]["text"]) for a, r in zip(answers, rows))
    linked = next(m.value for m in model.metrics if m.key == "model/f1")
    assert f1 == pytest.approx(linked, abs=1e-6) and linked == run.metrics["f1"]


def test_the_saved_view_ranks_by_the_held_out_value_that_chose_with_the_dev_value_beside_it(searched):
    summary, _, _, qa = searched
    client = tracking.client(summary.tracking_uri)
    experiment = client.get_experiment_by_name("models")
    view = json.loads(experiment.tags[f"mlflow.sharedViewState.{parent.SHARED_VIEW}"])
    assert view["orderByKey"] == "metrics.`scored_holdout_accuracy`"
    assert view["selectedColumns"][1:5] == [f"metrics.`{prefix}{m}`" for prefix in ("scored_holdout_", "scored_")
                                            for m in ("accuracy", "pearson")]
    qa_tags = client.get_experiment_by_name("models-qa").tags
    qa_view = json.loads(qa_tags[f"mlflow.sharedViewState.{parent.SHARED_VIEW}"])
    assert qa_view["orderByKey"] == "metrics.`f1`"  # no data held out: the dev value chose
    assert "ranked by the held-out value that chose" in experiment.tags[tracking.NOTE_TAG]
    # Each ranked column from the run's own per-epoch record: the best held-out value (its first epoch), and the dev
    # value at that epoch beside it.
    for run in tracking.trial_runs(summary.tracking_uri, "models"):
        metric = tracking.run_task(run).metric
        held = sorted((m.step, m.value) for m in client.get_metric_history(run.run_id, f"holdout_{metric}"))
        dev = {m.step: m.value for m in client.get_metric_history(run.run_id, metric)}
        best = max(value for _, value in held)
        chose = next(step for step, value in held if value == best)
        assert run.metrics[f"scored_holdout_{metric}"] == best and run.metrics[f"scored_{metric}"] == dev[chose]


def test_the_export_and_the_summary_name_the_data_that_chose(searched):
    summary, _, folder, qa = searched
    assert "best held-out accuracy" in summary.report() and "which chose nothing" in summary.report()
    client = tracking.client(summary.tracking_uri)
    experiment = client.get_experiment_by_name("models").experiment_id
    models = list(client.search_logged_models(experiment_ids=[experiment]))
    export_best(summary.tracking_uri, "models", folder / "best.yaml")
    exported = "".join(path.read_text() for path in folder.glob("best-*.yaml"))
    assert all(f"model = mlflow.pyfunc.load_model('models:/{m.model_id}')" in exported for m in models)
    assert f"mlflow.set_tracking_uri({summary.tracking_uri!r})" in exported
    assert exported.count("chosen by held-out ") == 8
    export_best(qa.tracking_uri, "models-qa", folder / "qa.yaml")
    assert "chosen by dev f1 " in (folder / "qa-tiny-bert-my-answers-base.yaml").read_text()
    assert "best dev f1 " in qa.report() and "(no data held out: the dev set chose it)" in qa.report()


def test_a_resumed_search_logs_no_model_twice(searched, glue_tiny):
    summary, _, folder, qa = searched
    _search(folder, glue_tiny, [], resume=True)
    client = tracking.client(summary.tracking_uri)
    experiment = client.get_experiment_by_name("models").experiment_id
    assert len(list(client.search_logged_models(experiment_ids=[experiment]))) == 8


def test_a_seeds_stage_logs_every_seeds_run_as_a_model_of_its_own(searched, glue_tiny):
    summary, _, folder, qa = searched
    (folder / "seeds.yaml").write_text("name: models-seeds\nstage: seeds\nbest_of: [models]\nseeds: [1, 2]\n"
                                       "models: [tiny-bert]\ntasks: [sst2, words.yaml]\nmethods: [base]\n"
                                       "settings: {max_length: 48, shrinkage_tokens: 1000}\n")
    lines: list[str] = []
    seeds = run_search(load_search_space(folder / "seeds.yaml"), storage_path=folder / "runs",
                       data_dir=str(glue_tiny), write=lines.append)
    client = tracking.client(seeds.tracking_uri)
    models = list(client.search_logged_models(
        experiment_ids=[client.get_experiment_by_name("models-seeds").experiment_id]))
    runs = tracking.trial_runs(seeds.tracking_uri, "models-seeds")
    assert len(runs) == 4 and sorted(m.source_run_id for m in models) == sorted(r.run_id for r in runs)
    assert sorted((m.name, m.params["seed"]) for m in models) == [
        ("tiny-bert-my-words-base-seed1", "1"), ("tiny-bert-my-words-base-seed2", "2"),
        ("tiny-bert-sst2-base-seed1", "1"), ("tiny-bert-sst2-base-seed2", "2")]
    assert any(line.startswith("MLflow models: 4 (one per run: each seed's checkpoint)") for line in lines)
    assert {r.chosen_by for r in runs} == {"holdout"}  # what chose the configurations the seeds re-ran
    by_run = {r.run_id: r for r in runs}
    for model in models:  # each seed's own run: no held-out data in this stage, its last epoch scored
        run = by_run[model.source_run_id]
        assert model.tags["istar_tune.epoch"] == "2" and model.params["task"] == run.task
        assert [o.model_id for o in client.get_run(run.run_id).outputs.model_outputs] == [model.model_id]
        linked = {m.key: m.value for m in model.metrics}
        assert linked == {f"model/{tracking.run_task(run).metric}": run.metrics[tracking.run_task(run).metric]}
    words = next(m for m in models if m.name == "tiny-bert-my-words-base-seed1")
    predicted = _predict(seeds, words.model_id, [row["text"] for row in _dev_rows(folder, "words")])
    assert set(predicted["label"]) <= {"negative", "positive"}


def test_no_models_when_asked_and_a_records_only_checkpoint_says_why(local_ray, glue_tiny, tmp_path, space_yaml):
    (tmp_path / "models.yaml").write_text(_models_space(space_yaml, ["sst2"], 1.0e-3, "resume"))
    space = load_search_space(tmp_path / "models.yaml")
    lines: list[str] = []
    summary = run_search(space, storage_path=tmp_path / "off", data_dir=str(glue_tiny), write=lines.append,
                         log_models=False)
    client = tracking.client(summary.tracking_uri)
    experiment = client.get_experiment_by_name("models").experiment_id
    assert not list(client.search_logged_models(experiment_ids=[experiment]))
    assert not any("MLflow model" in line for line in lines)

    lines.clear()
    summary = run_search(space, storage_path=tmp_path / "on", data_dir=str(glue_tiny), write=lines.append)
    said = [line for line in lines if "MLflow model of" in line]
    assert len(said) == 2 and all("keeps only the trial's records (checkpoint: resume)" in line for line in said)


def test_scored_state_takes_the_scored_weights_of_the_epoch_asked_for(tmp_path):
    trial = tmp_path / "trainable_abc123_base_lr=1e-3"
    for index, epoch in enumerate((1, 2)):
        (trial / f"checkpoint_00000{index}").mkdir(parents=True)
        state = {"epoch": epoch, "hparams": {"model": "tiny-bert"}, "model": {"w": torch.tensor([float(epoch)])}}
        if epoch == 2:
            state["best_model"] = {"w": torch.tensor([1.5])}
        torch.save(state, trial / f"checkpoint_00000{index}" / STATE_FILE)
    assert scored_state(tmp_path, "abc123", 1)["model"]["w"].item() == 1.0
    assert scored_state(tmp_path, "abc123", 2)["model"]["w"].item() == 1.5  # the scored epoch's, not the last
    with pytest.raises(_NotLogged, match=r"keeps the checkpoints of epochs \[1, 2\], not epoch 3's"):
        scored_state(tmp_path, "abc123", 3)
    with pytest.raises(_NotLogged, match="has no checkpoint"):
        scored_state(tmp_path, "other", 1)


def test_a_model_that_cannot_be_logged_is_one_whole_line_and_counted():
    from istar_tune.search.logged_models import LoggedModels, one_line, trained_task

    said = one_line(RuntimeError("Error(s) in loading state_dict:\n\tsize mismatch for classifier.weight " * 20))
    assert "\n" not in said and said.endswith(" …") and len(said) <= 302 and not said[:-2].endswith("classifier.")
    logged = LoggedModels(found={"a/b/base": "models:/m-1"}, not_logged=["a/b/istar"])
    assert logged.line() == "MLflow models: 1 logged, 1 not logged (a/b/istar: the lines above say why)"
    assert LoggedModels().line() == ""
    state = {"hparams": {"task": "mine"}, "model": {"classifier.weight": torch.zeros(3, 4)},
             "task_definition": {"name": "mine", "problem_type": "classification", "metric": "accuracy",
                                 "label_names": ["neg", "pos"]}}
    run = tracking.TrialRun(run_id="r", trial_id="t1", model="tiny-bert", task="mine", method="base", status="finished",
                            config={}, metrics={})
    with pytest.raises(_NotLogged, match=r"its weights predict 3 outputs, and the task it recorded has 2 \(neg, pos\)"):
        trained_task(state, run)
    del state["task_definition"]
    with pytest.raises(_NotLogged, match="does not record the definition of task 'mine'"):
        trained_task(state, run)


def test_the_table_plots_and_analyze_read_every_task_as_the_search_chose(searched, tmp_path):
    from istar_tune.apps.analyze import analyze
    from istar_tune.results.plots import write_plots
    from istar_tune.results.tables import build_table

    summary, _, folder, qa = searched
    for search in (summary, qa):  # one row per group, each with its own task's metric and the trial that chose
        table = build_table(search.tracking_uri, search.name)
        best = tracking.best_trials(search.tracking_uri, search.name)
        assert len(table) == len(best)
        for row in table.to_dict("records"):
            run = best[(row["model"], row["task"], row["method"])]
            assert row["metric"] == tracking.run_task(run).metric and row["trial_id"] == run.trial_id
    written = write_plots(summary.tracking_uri, "models", tmp_path / "plots", log_to_mlflow=False)
    assert {p.name for p in written if p.suffix == ".png"} >= {f"epochs-tiny-bert-{t}.png" for t in
                                                               ("sst2", "my-words", "my-coded", "my-scores")}
    coded = tracking.best_trials(summary.tracking_uri, "models")[("tiny-bert", "my-coded", "base")]
    trial = next((folder / "runs" / "models+models-qa").glob(f"trainable_{coded.trial_id}_*"))
    checkpoint = sorted(trial.glob("checkpoint_*"))[-1]
    measured = analyze(checkpoint, output_dir=tmp_path / "analyzed")  # its own task, from what the checkpoint holds
    assert measured["task"] == "my-coded" and all(0.0 <= v <= 1.0 for v in measured["layer_isoscore_star"])


def test_the_docs_snippet_loads_a_logged_model_as_written_in_a_fresh_process(searched, tmp_path):
    """docs/watching.md's snippet, run as written (its store and model id filled in) by a new Python with no
    MLFLOW_TRACKING_URI: without its set_tracking_uri line it would look in ./mlruns and find nothing."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    summary, *_ = searched
    client = tracking.client(summary.tracking_uri)
    experiment = client.get_experiment_by_name("models").experiment_id
    model = next(m for m in client.search_logged_models(experiment_ids=[experiment]) if "-sst2-" in m.name)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "watching.md").read_text(encoding="utf-8")
    snippet = docs.split("<!-- load-model -->\n```python\n", 1)[1].split("```", 1)[0]
    snippet = snippet.replace("sqlite:///istar-runs/mlflow.db", summary.tracking_uri)
    snippet = snippet.replace("MODEL_ID", model.model_id)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "label" in done.stdout and ("negative" in done.stdout or "positive" in done.stdout), done.stdout
