"""Searches on a real two-node Ray cluster on 127.0.0.1, tracked in a real MLflow store."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

from istar_tune import tracking
from istar_tune.cli import main
from istar_tune.search.run import run_search
from istar_tune.search.spaces.file import load_search_space
from istar_tune.tracking.storage import default_tracking_uri

pytestmark = pytest.mark.slow
SMOKE = Path(__file__).resolve().parents[2] / "search_spaces" / "smoke.yaml"


@pytest.fixture(scope="module")
def two_node_cluster(glue_tiny):
    import ray
    from ray.cluster_utils import Cluster

    patch = pytest.MonkeyPatch()
    patch.setenv("RAY_AUTH_MODE", "disabled")
    patch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every node on 127.0.0.1
    patch.setenv("GLUE_DIR", str(glue_tiny))
    # Each node declares one logical GPU (none is used on this machine) so a space may ask for a share of one.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1})
    cluster.add_node(num_cpus=1, num_gpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    yield cluster
    ray.shutdown()
    cluster.shutdown()
    patch.undo()


def test_smoke_search_runs_trials_on_both_nodes_and_tracks_them(two_node_cluster, tmp_path):
    import ray

    space = load_search_space(SMOKE).narrow(tasks=["rte"])
    summary = run_search(space, storage_path=tmp_path, address=two_node_cluster.address, write=lambda _: None)
    assert not summary.failed
    assert [len(g.trials) for g in summary.groups] == [2, 2]
    assert all(t.status == "finished" and t.epochs == 2 for g in summary.groups for t in g.trials)

    runs = tracking.trial_runs(summary.tracking_uri, "smoke")
    assert len(runs) == 4 and len({r.trial_id for r in runs}) == 4
    client = tracking.client(summary.tracking_uri)
    nodes = {client.get_run(r.run_id).data.tags[tracking.TAG_NODE] for r in runs}
    assert nodes == {n["NodeID"] for n in ray.nodes()}  # trials ran on both nodes
    parent = tracking.find_runs(client, client.get_experiment_by_name("smoke").experiment_id,
                                **{tracking.TAG_ROLE: "search"})
    assert len(parent) == 1 and parent[0].info.status == "FINISHED"
    for run in runs:
        data = client.get_run(run.run_id).data
        assert data.tags[tracking.TAG_SEARCH_RUN] == parent[0].info.run_id
        assert data.tags["model"] == "tiny-bert" and data.tags["task"] == "rte"
        assert data.tags[tracking.TAG_SPACE] == str(SMOKE)
        assert data.params["learning_rate"] in ("0.001", "0.003") and data.params["seed"] == "42"
        history = client.get_metric_history(run.run_id, "accuracy")
        assert sorted(m.step for m in history) == [1, 2]
    # `table --kind best` has one row per model × task × method, each Ray's own best trial of that group.
    from ray.tune import ExperimentAnalysis

    from istar_tune.results.tables import build_table

    table = build_table(summary.tracking_uri, "smoke", "best", tasks=list(space.tasks))
    assert [(r.model, r.task, r.method) for r in table.itertuples()] == [(g.model, g.task, g.method)
                                                                         for g in space.groups()]
    analysis = ExperimentAnalysis(summary.storage_path)  # the whole search is one Tune experiment
    for row, group in zip(table.itertuples(), space.groups()):
        trials = [t for t in analysis.trials if (t.config["task"], t.config["method"]) == (group.task, group.method)]
        ray_best = max(t.last_result["objective"] for t in trials)
        tied = {t.trial_id for t in trials if t.last_result["objective"] == ray_best}
        assert row.trials == 2 and row.score == pytest.approx(ray_best)
        assert row.trial_id in tied


def test_a_compiled_bucketed_trial_records_both_settings_in_its_mlflow_run(two_node_cluster, tmp_path, space_yaml):
    """``step_mode: compile`` with length buckets runs in a real trial (torch.compile on the CPU) and its MLflow run
    holds both, as the tables' exactness check reads them."""
    space_file = tmp_path / "compiled.yaml"
    space_file.write_text(space_yaml(
        name="compiled", tasks=["rte"], resources={"cpu": 1, "gpu": 0}, hyperparameters={"learning_rate": 1.0e-3},
        settings={"max_length": 48, "length_bucket": 8, "step_mode": "compile", "max_train_samples": 32,
                  "shrinkage_tokens": None}))
    summary = run_search(load_search_space(space_file), storage_path=tmp_path / "runs",
                         address=two_node_cluster.address, write=lambda _: None)
    assert not summary.failed
    (run,) = tracking.trial_runs(summary.tracking_uri, "compiled")
    assert run.status == "finished" and run.metrics["train_loss"] > 0
    params = tracking.client(summary.tracking_uri).get_run(run.run_id).data.params
    assert params["setting.step_mode"] == "compile" and params["setting.length_bucket"] == "8"


def test_seeds_stage_reruns_the_best_configuration_with_each_seed_and_a_study_varies_lambda(two_node_cluster,
                                                                                           tmp_path):
    storage = tmp_path / "runs"
    grid = load_search_space(SMOKE).narrow(tasks=["rte"], methods=["base"])
    first = run_search(grid, storage_path=storage, write=lambda _: None)
    best = first.groups[0].best
    seeds_file = tmp_path / "seeds.yaml"
    seeds_file.write_text("name: smoke-seeds\nstage: seeds\nbest_of: [smoke, never-ran]\nseeds: [1, 2]\n"
                          "models: [tiny-bert]\ntasks: [rte]\nmethods: [base]\nresources: {cpu: 1}\n"
                          "settings: {max_length: 48, shrinkage_tokens: 2000}\n")
    summary = run_search(load_search_space(seeds_file), storage_path=storage, write=lambda _: None)
    assert not summary.failed and len(summary.groups) == 1 and len(summary.groups[0].trials) == 2
    runs = tracking.trial_runs(summary.tracking_uri, "smoke-seeds")
    assert sorted(r.config["seed"] for r in runs) == [1, 2]
    for run in runs:
        assert run.stage == "seeds"
        assert run.config["learning_rate"] == pytest.approx(best.config["learning_rate"])
        assert run.config["epochs"] == best.config["epochs"]
    from istar_tune.results.tables import build_table

    table = build_table(summary.tracking_uri, "smoke-seeds", "seeds", tasks=["rte"])
    assert table.values.tolist()[0][:2] == ["tiny-bert", "Base"] and "±" in table.values.tolist()[0][2]

    # A λ study around Base's best (the paper's Figure 3): I-STAR at ζ = 0.2, λ ∈ {-1, 1} × 2 seeds.
    study_file = tmp_path / "study.yaml"
    study_file.write_text("name: smoke-study\nstage: seeds\nbest_of: [smoke]\nstart_from: base\nseeds: [1, 2]\n"
                          "models: [tiny-bert]\ntasks: [rte]\nmethods: [istar]\nhyperparameters: {zeta: 0.2}\n"
                          "vary: {lam: [-1, 1]}\nresources: {cpu: 1}\n"
                          "settings: {max_length: 48, shrinkage_tokens: 2000}\n")
    study = run_search(load_search_space(study_file), storage_path=storage, write=lambda _: None)
    assert not study.failed and len(study.groups[0].trials) == 4
    runs = tracking.trial_runs(study.tracking_uri, "smoke-study")
    assert sorted((r.config["lam"], r.config["seed"]) for r in runs) == [(-1, 1), (-1, 2), (1, 1), (1, 2)]
    for run in runs:
        assert run.method == "istar" and run.config["zeta"] == pytest.approx(0.2)
        assert run.config["learning_rate"] == pytest.approx(best.config["learning_rate"])
    from istar_tune.results.plots import write_plots

    written = write_plots(study.tracking_uri, "smoke-study", tmp_path / "plots")
    assert [p.name for p in written] == ["figure3-isoscore-vs-accuracy-tiny-bert-rte.png", "epochs-tiny-bert-rte.png"]
    plotted = json.loads(written[0].with_suffix(".json").read_text())
    assert plotted["varied"] == "lam" and [p["value"] for p in plotted["points"]] == [-1, 1]
    by_id = {r.run_id: r for r in runs}
    for point in plotted["points"]:  # each error bar: the two seeds of one λ, nothing else pooled
        assert point["seeds"] == [1, 2] and {by_id[i].config["lam"] for i in point["runs"]} == {point["value"]}
        values = [by_id[i].metrics["accuracy"] for i in point["runs"]]
        assert point["metric_std"] == pytest.approx(statistics.stdev(values))


def test_a_failing_trial_is_recorded_with_its_error_and_the_rest_finish(two_node_cluster, glue_tiny, tmp_path, capsys):
    space = tmp_path / "space.yaml"  # the smoke space elsewhere: its data folder given as an absolute path
    space.write_text(SMOKE.read_text().replace("max_failures: 1", "max_failures: 0").replace(
        "data_dir: ../../shared/data/glue-tiny", f"data_dir: {glue_tiny}"))
    # A model whose config resolves (so the preflight lets it through) but that cannot be loaded in the trial.
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "bert", "max_position_embeddings": 512}')
    code = main(["search", str(space), "--models", "tiny-bert", str(broken), "--tasks", "rte",
                 "--methods", "base", "--storage-path", str(tmp_path / "runs"), "--name", "failing"])
    out = capsys.readouterr().out
    assert code == 1
    assert "2 finished, 0 stopped early, 2 failed" in out
    assert out.count("FAILED") >= 2 and "cannot load model" in out
    runs = tracking.trial_runs(default_tracking_uri(tmp_path / "runs"), "failing")
    by_status = {}
    for run in runs:
        by_status.setdefault(run.status, []).append(run)
    assert len(by_status["finished"]) == 2 and len(by_status["failed"]) == 2
    client = tracking.client(default_tracking_uri(tmp_path / "runs"))
    for run in by_status["failed"]:
        info = client.get_run(run.run_id)
        assert info.info.status == "FAILED"
        assert "cannot load model" in info.data.tags[tracking.TAG_ERROR]


def _out_of_memory_in_istar_steps(config, settings, keep):
    """The real trainable, whose training steps raise CUDA's out-of-memory error for one configuration (I-STAR at
    the larger learning rate): the error rises where a real one would, inside the method's training epoch."""
    import torch

    from istar_tune.search.tune.trainable import trainable
    from istar_tune.training import loop

    real = loop.train_epoch

    def train_epoch(*args, **kwargs):
        if config["method"] == "istar" and config["learning_rate"] == 3.0e-3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 79.1 GiB total)")
        return real(*args, **kwargs)

    loop.train_epoch = train_epoch
    try:
        trainable(config, settings, keep)
    finally:
        loop.train_epoch = real


def test_an_out_of_memory_trial_fails_with_its_share_and_advice_and_the_others_finish(two_node_cluster, glue_tiny,
                                                                                        tmp_path):
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the trainable above reaches the workers
    space_file = tmp_path / "space.yaml"  # two trials a (logical) GPU, no retry
    space_file.write_text(SMOKE.read_text().replace("max_failures: 1", "max_failures: 0").replace(
        "gpu: 0}", "gpu: 0.5}").replace("data_dir: ../../shared/data/glue-tiny", f"data_dir: {glue_tiny}"))
    lines = []
    summary = run_search(load_search_space(space_file).narrow(tasks=["rte"]), storage_path=tmp_path / "runs",
                         trainable_fn=_out_of_memory_in_istar_steps, write=lines.append)
    assert [(g.method, t.config["learning_rate"]) for g, t in summary.failed] == [("istar", 3.0e-3)]
    error = summary.failed[0][1].error
    assert ("out of memory training tiny-bert × rte × istar at batch 16 × 48 tokens (its share: 0.5 of the GPU): "
            "lower batch_size or max_length") in error and "Tried to allocate 1.50 GiB" in error
    finished = [t for g in summary.groups for t in g.trials if t.status == "finished"]
    assert len(finished) == 3 and all(t.epochs == 2 for t in finished)  # the search went on
    assert not summary.systemic and "out of memory training" in "\n".join(lines)
    failed = [r for r in tracking.trial_runs(summary.tracking_uri, "smoke") if r.status == "failed"]
    client = tracking.client(summary.tracking_uri)
    assert len(failed) == 1 and "its share: 0.5 of the GPU" in client.get_run(failed[0].run_id).data.tags[
        tracking.TAG_ERROR]
    # It failed in its first epoch, before any report: what it had read still reaches its run, with the error.
    inputs = client.get_run(failed[0].run_id).inputs.dataset_inputs
    assert sorted((d.dataset.name, d.tags[0].value) for d in inputs) == [("rte/train", "training"),
                                                                         ("rte/validation", "evaluation")]


def test_existing_results_are_not_overwritten_without_resume(two_node_cluster, tmp_path, capsys):
    (tmp_path / "runs" / "smoke" / "tiny-bert-sst2-base").mkdir(parents=True)
    assert main(["search", str(SMOKE), "--storage-path", str(tmp_path / "runs")]) == 2
    assert "pass --resume" in capsys.readouterr().err


def test_a_task_definition_travels_with_its_trials_to_every_node(two_node_cluster, own_data, tmp_path, monkeypatch):
    import ray
    from ray.tune import ExperimentAnalysis

    own_data("sst2", "parquet", string_labels=True, folder=tmp_path / "data")
    (tmp_path / "tasks").mkdir()
    definition = tmp_path / "tasks" / "reviews.yaml"
    definition.write_text("name: reviews\ntrain: ../data/train.parquet\nvalidation: ../data/dev.parquet\nmetric: f1\n"
                          "positive_label: positive\n")
    (tmp_path / "space.yaml").write_text(
        "name: own\nmodels: [tiny-bert]\ntasks: [tasks/reviews.yaml]\nmethods: [base]\nhyperparameters:\n"
        "  batch_size: 16\n  epochs: 1\n  learning_rate: {grid: [1.0e-3, 3.0e-3]}\n"
        "settings: {max_length: 32, shrinkage_tokens: 1000}\n")
    space = load_search_space(tmp_path / "space.yaml")
    definition.unlink()  # the trials need neither the definition file ...
    (tmp_path / "driver").mkdir()
    monkeypatch.chdir(tmp_path / "driver")  # ... nor the driver's working folder
    summary = run_search(space, storage_path=tmp_path / "runs", address=two_node_cluster.address,
                         write=lambda _: None)
    assert not summary.failed and [t.status for g in summary.groups for t in g.trials] == ["finished"] * 2
    runs = tracking.trial_runs(summary.tracking_uri, "own")
    client = tracking.client(summary.tracking_uri)
    assert {client.get_run(r.run_id).data.tags[tracking.TAG_NODE] for r in runs} == {n["NodeID"]
                                                                                   for n in ray.nodes()}
    assert {r.task for r in runs} == {"reviews"} and all("f1" in r.metrics for r in runs)
    for trial in ExperimentAnalysis(summary.storage_path).trials:  # each carried the resolved definition
        carried = trial.config["task_definition"]
        assert carried["train"] == str(tmp_path / "data" / "train.parquet")
        assert carried["label_names"] == ["negative", "positive"] and carried["checksums"]["train"].startswith(
            "sha256:")
        assert Path(trial.local_path) != tmp_path / "driver"


def test_resume_if_started_starts_a_new_search_and_resumes_a_started_one(two_node_cluster, tmp_path, capsys):
    command = ["search", str(SMOKE), "--tasks", "sst2", "--simulate", "--storage-path", str(tmp_path / "runs"),
               "--address", two_node_cluster.address, "--resume-if-started"]
    assert main(command) == 0
    first = capsys.readouterr().out
    assert "resuming" not in first and "4 finished" in first
    assert main(command) == 0  # what a requeued batch job runs: the same command
    again = capsys.readouterr().out
    assert f"resuming smoke: it had started in {tmp_path / 'runs' / 'smoke'}" in again
    assert "every trial had ended; nothing to run" in again
