from __future__ import annotations

import json

import pytest

from istar_tune import tracking
from istar_tune.apps.analyze import analyze, log_to_mlflow, trial_id_of, write_outputs
from istar_tune.cli import main
from istar_tune.config import Hyperparameters, RunSettings
from istar_tune.errors import ConfigError
from istar_tune.training.loop import train


def _check(result: dict, layers: int, d: int):
    assert len(result["layer_isoscore_star"]) == layers
    assert all(0.0 <= v <= 1.0 for v in result["layer_isoscore_star"])
    assert all(v > 0 for v in result["cls_intrinsic_dimension"])
    ev = result["last_layer_explained_variance"]
    assert 0 < ev[0] <= ev[1] <= ev[2] <= 1
    assert -1.0 <= result["last_layer_avg_cosine_similarity"] <= 1.0
    assert len(result["last_layer_mean_activation"]) == d


def test_analyze_a_minilm_train_output_on_sst2(glue_tiny, tmp_path, capsys):
    out = tmp_path / "minilm"
    assert main(["train", "--model", "minilm", "--task", "sst2", "--data-dir", str(glue_tiny), "--epochs", "1",
                 "--batch-size", "32", "--lr", "1e-4", "--max-length", "32", "--max-eval-samples", "20",
                 "--output-dir", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["analyze", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in printed[1:7]]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4, 5, 6]  # MiniLM's six layers
    assert all(0.0 <= float(r[1]) <= 1.0 for r in rows)
    analysis = out / "analysis"
    for name in ("analysis.json", "layer-isoscore.png", "cls-intrinsic-dimension.png", "mean-activation.png"):
        assert (analysis / name).stat().st_size > 0
    result = json.loads((analysis / "analysis.json").read_text())
    _check(result, layers=6, d=384)
    assert result["eval_examples"] == 20 and result["max_length"] == 32  # the run's dev examples and length
    assert [float(r[1]) for r in rows] == pytest.approx(result["layer_isoscore_star"], abs=5e-5)


class _KeepState:
    wants_checkpoint = True

    def __init__(self, keep):
        self.keep = keep

    def __call__(self, record, checkpoint_dir):
        import shutil

        shutil.copytree(checkpoint_dir, self.keep, dirs_exist_ok=True)


def test_analyze_a_search_trial_checkpoint_and_log_it_to_its_run(glue_tiny, tmp_path):
    state = tmp_path / "runs" / "trainable_abcde_00003_3_lr=0.001" / "checkpoint_000000"
    hp = Hyperparameters(model="tiny-bert", task="rte", method="istar", lam=-1.0, epochs=1, batch_size=16)
    settings = RunSettings(data_dir=str(glue_tiny), max_length=32, progress=False, shrinkage_tokens=500,
                           checkpoint="state")  # a trial checkpoint that holds the model
    train(hp, settings, _KeepState(state))
    assert trial_id_of(state) == "abcde_00003"
    assert trial_id_of(state / "m2") == "abcde_00003-m2"  # a fused trial's member: its own run
    result = analyze(state)  # the trial's own data folder and max length, saved with its state
    _check(result, layers=2, d=32)
    assert (result["data_dir"], result["max_length"]) == (str(glue_tiny), 32)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "s", str(tmp_path / "artifacts"))
    run = client.create_run(exp, tags={tracking.TAG_TRIAL_ID: "abcde_00003"}).info.run_id
    files = write_outputs(result, tmp_path / "out")
    assert log_to_mlflow(result, files, uri, None, state) == run
    history = client.get_metric_history(run, "analysis_layer_isoscore_star")
    assert [m.step for m in history] == [1, 2]
    assert {a.path for a in client.list_artifacts(run, "analysis")} >= {"analysis/analysis.json"}
    # A shared trial's checkpoint goes to the run of the longest configuration the trial completed.
    shared = {k: client.create_run(exp, tags={tracking.TAG_TRIAL_ID: f"fghij_00001-e{k}",
                                              tracking.TAG_TRAINED_BY: "fghij_00001"}).info.run_id for k in (1, 3, 2)}
    for epochs, run_id in shared.items():
        client.log_param(run_id, "epochs", str(epochs))
    other = tmp_path / "runs" / "trainable_fghij_00001_1_lr=0.001" / "checkpoint_000002"
    assert log_to_mlflow(result, files, uri, None, other) == shared[3]
    # A fused trial's shared member: the run of that member's longest configuration, not another member's.
    members = {(m, k): client.create_run(exp, tags={tracking.TAG_TRIAL_ID: f"klmno_00002-m{m}-e{k}",
                                                   tracking.TAG_TRAINED_BY: "klmno_00002"}).info.run_id
               for m in (0, 1) for k in (1, 2)}
    for (_, epochs), run_id in members.items():
        client.log_param(run_id, "epochs", str(epochs))
    folder = tmp_path / "runs" / "trainable_klmno_00002_2_lr=0.001" / "checkpoint_000001" / "m1"
    assert log_to_mlflow(result, files, uri, None, folder) == members[(1, 2)]


def test_analyze_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        analyze(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no model"):
        analyze(tmp_path / "empty")
