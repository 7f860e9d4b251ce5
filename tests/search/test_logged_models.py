"""Each group's best checkpoint as an MLflow LoggedModel, after a real tiny-bert search: one per group (a seeds stage:
one per run), linked to its run, with its configuration and scored metric, loadable and predicting class names; none
twice on resume, none with ``log_models=False``; what keeps one from being logged is said."""

from __future__ import annotations

import pytest
import torch

from istar_tune import tracking
from istar_tune.results.export import export_best
from istar_tune.search.logged_models import _NotLogged, scored_state
from istar_tune.search.run import run_search
from istar_tune.search.spaces.file import load_search_space
from istar_tune.training.state import STATE_FILE

pytestmark = pytest.mark.slow
RAY_CPUS = 2
SPACE = """\
name: models
models: [tiny-bert]
tasks: [sst2]
methods: [base, istar]
hyperparameters:
  batch_size: 16
  epochs: 2
  learning_rate: {{grid: {grid}}}
method_hyperparameters:
  istar: {{lam: -1.0, zeta: 0.2}}
settings: {{max_length: 32, shrinkage_tokens: 1000, checkpoint: {checkpoint}}}
"""


@pytest.fixture(scope="module")
def searched(local_ray, glue_tiny, tmp_path_factory):
    folder = tmp_path_factory.mktemp("logged")
    (folder / "models.yaml").write_text(SPACE.format(grid="[1.0e-3, 3.0e-3]", checkpoint="state"))
    lines: list[str] = []
    summary = run_search(load_search_space(folder / "models.yaml"), storage_path=folder / "runs",
                         data_dir=str(glue_tiny), write=lines.append)
    return summary, lines, folder


def test_each_group_has_one_model_linked_to_its_best_run_and_it_predicts_class_names(searched):
    import mlflow
    from mlflow.entities import LoggedModelStatus

    summary, lines, folder = searched
    client = tracking.client(summary.tracking_uri)
    experiment = client.get_experiment_by_name("models").experiment_id
    models = list(client.search_logged_models(experiment_ids=[experiment]))
    best = tracking.best_trials(summary.tracking_uri, "models")
    assert len(models) == len(best) == 2
    assert {m.source_run_id for m in models} == {run.run_id for run in best.values()}
    by_run = {run.run_id: run for run in best.values()}
    for model in models:
        run = by_run[model.source_run_id]
        assert model.status == LoggedModelStatus.READY
        assert float(model.params["learning_rate"]) == run.config["learning_rate"]
        assert model.tags[tracking.TAG_TRIAL_ID] == run.trial_id
        linked = [m for m in model.metrics if m.key == "model/accuracy"]
        assert [(m.value, m.dataset_name) for m in linked] == [(run.metrics["accuracy"], "sst2/validation")]
        history = client.get_metric_history(run.run_id, "accuracy")
        assert sorted(m.step for m in history) == [1, 2]  # the run's own per-epoch record is left as it was
    assert any(line.startswith("MLflow models: 2 (one per group") for line in lines)

    with pytest.MonkeyPatch.context() as patch:  # not mlflow.set_tracking_uri: it would outlive the test
        patch.setenv("MLFLOW_TRACKING_URI", summary.tracking_uri)
        predicted = mlflow.pyfunc.load_model(f"models:/{models[0].model_id}").predict(["a moving film", "dull"])
    assert set(predicted["label"]) <= {"negative", "positive"} and len(predicted) == 2

    export_best(summary.tracking_uri, "models", folder / "best.yaml")
    exported = "".join(path.read_text() for path in folder.glob("best-*.yaml"))
    assert all(f"# Its weights as an MLflow model: models:/{m.model_id}" in exported for m in models)


def test_a_resumed_search_logs_no_model_twice(searched, glue_tiny):
    summary, _, folder = searched
    lines: list[str] = []
    run_search(load_search_space(folder / "models.yaml"), storage_path=folder / "runs", data_dir=str(glue_tiny),
               resume=True, write=lines.append)
    client = tracking.client(summary.tracking_uri)
    experiment = client.get_experiment_by_name("models").experiment_id
    assert len(list(client.search_logged_models(experiment_ids=[experiment]))) == 2


def test_a_seeds_stage_logs_every_seeds_run_as_a_model_of_its_own(searched, glue_tiny):
    summary, _, folder = searched
    (folder / "seeds.yaml").write_text("name: models-seeds\nstage: seeds\nbest_of: [models]\nseeds: [1, 2]\n"
                                       "models: [tiny-bert]\ntasks: [sst2]\nmethods: [base]\n"
                                       "settings: {max_length: 32, shrinkage_tokens: 1000}\n")
    lines: list[str] = []
    seeds = run_search(load_search_space(folder / "seeds.yaml"), storage_path=folder / "runs",
                       data_dir=str(glue_tiny), write=lines.append)
    client = tracking.client(seeds.tracking_uri)
    models = list(client.search_logged_models(
        experiment_ids=[client.get_experiment_by_name("models-seeds").experiment_id]))
    runs = tracking.trial_runs(seeds.tracking_uri, "models-seeds")
    assert len(runs) == 2 and sorted(m.source_run_id for m in models) == sorted(r.run_id for r in runs)
    assert sorted((m.name, m.params["seed"]) for m in models) == [("tiny-bert-sst2-base-seed1", "1"),
                                                                  ("tiny-bert-sst2-base-seed2", "2")]
    assert any(line.startswith("MLflow models: 2 (one per run: each seed's checkpoint)") for line in lines)


def test_no_models_when_asked_and_a_records_only_checkpoint_says_why(local_ray, glue_tiny, tmp_path):
    (tmp_path / "models.yaml").write_text(SPACE.format(grid="[1.0e-3]", checkpoint="resume"))
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
