"""What every table shares: the papers' published values, transcribed from their text; the axes shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from istar_tune.errors import ConfigError
from istar_tune.results.groups import paper_results


def test_the_isolayer_papers_tables_are_transcribed_from_its_text():
    text = Path(__file__).resolve().parents[3] / "shared" / "docs" / "papers" / "isolayer.txt"
    if not text.is_file():
        pytest.skip("../shared/docs/papers/isolayer.txt is not beside the checkout")
    lines = text.read_text(encoding="utf-8").splitlines()
    models = {"BERT-base": "bert", "RoBERTa-L": "roberta-large"}
    # Table 3: "<task>\t<model>[+Isotropy]\t<IsoBN> (std)\t<IsoLayer> (std)\t<IsoBN EV>\t<IsoLayer EV>".
    start = next(i for i, line in enumerate(lines) if line.startswith("Dataset\tWiethou"))
    found, task = {}, None
    for line in lines[start + 1:start + 13]:
        cells = [c.strip() for c in line.split("\t")]
        task = cells[0].lower() or task
        model, _, layered = cells[1].partition("+")
        median, std = cells[3].rstrip(")").split(" (")
        found.setdefault(models[model], {}).setdefault(task, {})["isolayer" if layered else "finetuned"] = {
            "median": float(median), "std": float(std), "ev": [float(v) for v in cells[5].split("/")]}
    assert found == paper_results()["isolayer_table3"]
    # Table 2: "<task>\tFinetuned Language Model (LM)\t<bert> <IsoScore>\t<roberta> <IsoScore>", then "+ Isotropy".
    start = next(i for i, line in enumerate(lines) if line.startswith("Dataset\tMethod\tPerformance"))
    table2, task = {}, None
    for line in lines[start + 1:start + 10]:
        cells = [c.strip() for c in line.split("\t")]
        task = cells[0].lower() or task
        if cells[1].startswith("Improvement"):
            continue
        key = "isolayer" if "Isotropy Layer" in cells[1] else "finetuned"
        for model, (score, iso) in zip(("bert", "roberta-large"), (cells[2:4], cells[4:6])):
            table2.setdefault(model, {}).setdefault(task, {})[key] = {"score": float(score),
                                                                      "sentence_isoscore": float(iso)}
    assert table2 == paper_results()["isolayer_table2"]


def test_percent_follows_the_problem_type_and_axes_show_what_the_runs_hold():
    from istar_tune.results.groups import axes, percent
    from istar_tune.tasks import TASKS, task_from_facts
    from istar_tune.tracking import TrialRun

    assert percent(TASKS["sst2"], 0.91) == pytest.approx(91.0) and percent(TASKS["squad"], 88.5) == 88.5
    runs = [TrialRun("r", "t", "bert", "rte", "istar", "finished", {}, {}),
            TrialRun("s", "u", "bert", "sst2", "base", "finished", {}, {})]
    assert axes(runs, None, None, None) == (["bert"], ["sst2", "rte"], ["base", "istar"])  # the paper's order
    assert axes(runs, None, ["RTE"], None)[1] == ["rte"]
    tickets = task_from_facts({"name": "tickets", "problem_type": "classification", "metric": "mcc"}, "MLflow")
    own = TrialRun("o", "v", "bert", "tickets", "base", "finished", {}, {}, definition=tickets)
    assert axes([*runs, own], None, ["tickets", "sst-2"], None)[1] == ["tickets", "sst2"]  # the runs' own task, by name
    with pytest.raises(ConfigError, match="unknown task 'tickets'"):
        axes(runs, None, ["tickets"], None)  # runs that do not hold it: no process-wide memory of it either


def _space(folder: Path, glue_tiny: Path, space_yaml, method: str, attention: str) -> Path:
    space = folder / f"{method}.yaml"
    space.write_text(space_yaml(name=method, tasks=["rte"], methods=[method], resources={"cpu": 1, "gpu": 0},
                                hyperparameters={"learning_rate": 1.0e-3, "lam": -1.0},
                                settings={"data_dir": str(glue_tiny), "shrinkage_tokens": 500,
                                          "attn_implementation": attention}))
    return space


@pytest.mark.slow
def test_runs_record_their_attention_and_a_table_mixing_two_kernels_is_refused(glue_tiny, tmp_path, capsys,
                                                                              monkeypatch, space_yaml):
    """Two real tiny-bert searches into one MLflow experiment, one with eager attention and one with sdpa: each run
    records its kernel, and `table` refuses to compare them in one line (exit 2) unless asked."""
    from istar_tune import tracking
    from istar_tune.cli import main

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for method, attention in (("base", "eager"), ("istar", "sdpa")):
        space = _space(tmp_path, glue_tiny, space_yaml, method, attention)
        assert main(["search", str(space), "--name", "mixed", "--tracking-uri", uri,
                     "--storage-path", str(tmp_path / method)]) == 0
    runs = tracking.trial_runs(uri, "mixed")
    assert sorted((r.method, r.settings["attn_implementation"], r.settings["matmul_precision"]) for r in runs) == [
        ("base", "eager", "highest"), ("istar", "sdpa", "highest")]
    capsys.readouterr()
    assert main(["table", "--experiment", "mixed", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "attn_implementation eager and sdpa" in err and "--mix-exactness" in err
    assert main(["table", "--experiment", "mixed", "--tracking-uri", uri, "--mix-exactness"]) == 0
    assert "istar" in capsys.readouterr().out


def test_runs_that_recorded_no_exactness_setting_count_as_the_defaults_they_ran_with(mlflow_store, log_trial):
    from istar_tune.errors import ConfigError
    from istar_tune.results.groups import refuse_mixed_exactness
    from istar_tune.tracking.runs import trial_runs

    uri, client, experiment = mlflow_store
    log_trial(client, experiment, "t1", "bert", "rte", "base", {"accuracy": [0.6]})  # recorded before the setting
    log_trial(client, experiment, "t2", "bert", "rte", "istar", {"accuracy": [0.7]},
              **{"setting.attn_implementation": "sdpa", "setting.matmul_precision": "highest"})
    refuse_mixed_exactness(trial_runs(uri, "exp"), "exp")  # the same kernels: nothing to refuse
    log_trial(client, experiment, "t3", "bert", "rte", "cosreg", {"accuracy": [0.65]},
              **{"setting.matmul_precision": "high"})
    with pytest.raises(ConfigError, match="matmul_precision high and highest"):
        refuse_mixed_exactness(trial_runs(uri, "exp"), "exp")
    refuse_mixed_exactness(trial_runs(uri, "exp"), "exp", allowed=True)
    refuse_mixed_exactness(trial_runs(uri, "exp"), "exp", methods=["base", "istar"])  # the rows shown agree
    log_trial(client, experiment, "t4", "bert", "rte", "base", {"accuracy": [0.61]}, **{"setting.length_bucket": "16"})
    with pytest.raises(ConfigError, match="length_bucket 0 and 16"):  # padded to buckets: other float effects
        refuse_mixed_exactness(trial_runs(uri, "exp"), "exp", methods=["base"])
    log_trial(client, experiment, "t5", "bert", "rte", "cosreg", {"accuracy": [0.66]},
              **{"setting.step_mode": "compile", "setting.matmul_precision": "high"})
    with pytest.raises(ConfigError, match="step_mode compile and eager"):  # compiled: other kernels, other dropout
        refuse_mixed_exactness(trial_runs(uri, "exp"), "exp", methods=["cosreg"])
