"""A search as a person sees it in the MLflow UI: a smoke search with held-out data choosing, against `mlflow server`
on 127.0.0.1, checked through MLflow's API, then the UI's runs page rendered by headless Chromium (Debian's `chromium`
package)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from istar_tune import tracking
from istar_tune.search.parent import BEST_TABLE
from istar_tune.testing import MlflowServer

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
PICTURES = bool(os.environ.get("ISTAR_TUNE_SCREENSHOT") or os.environ.get("ISTAR_TUNE_SCREENSHOTS"))
"""Taking the docs' pictures: MiniLM, pretrained, at rates it learns with (its trials differ, as a picture of a search
should show); else tiny-bert at the smoke space's rates, the same records and pages in a fraction of the time."""
MODEL, RATES = ("minilm", ("3e-5", "1e-4")) if PICTURES else ("tiny-bert", ("1e-3", "3e-3"))


@pytest.fixture(scope="module")
def smoke_on_a_server(glue, tmp_path_factory):
    """The smoke search's grid on :data:`MODEL` at :data:`RATES`, 400 SST-2 sentences a trial, a quarter held out to
    choose, tracked by an MLflow server: (server URI, experiment id, trial runs, search run)."""
    folder = tmp_path_factory.mktemp("ui")
    space = (SPACES / "smoke.yaml").read_text().replace("models: [tiny-bert]", f"models: [{MODEL}]").replace(
        "tasks: [sst2, rte]", "tasks: [sst2]").replace("[1.0e-3, 3.0e-3]", f"[{', '.join(RATES)}]").replace(
        "  max_length: 48", "  max_length: 48\n  max_train_samples: 400\n  max_eval_samples: 200\n  holdout: 0.25")
    (folder / "smoke.yaml").write_text(space)
    with MlflowServer() as server:
        env = {**{k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")},
               "RAY_AUTH_MODE": "disabled"}
        done = subprocess.run([sys.executable, "-m", "istar_tune", "search", str(folder / "smoke.yaml"),
                               "--data-dir", str(glue), "--storage-path", str(folder / "runs"),
                               "--tracking-uri", server.uri], capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        client = tracking.client(server.uri)
        experiment = client.get_experiment_by_name("smoke")
        runs = tracking.find_runs(client, experiment.experiment_id, **{tracking.TAG_ROLE: "trial"})
        search = tracking.find_runs(client, experiment.experiment_id, **{tracking.TAG_ROLE: "search"})[0]
        yield server.uri, experiment, runs, search, folder


def test_runs_are_named_by_what_they_are_and_carry_only_what_applies(smoke_on_a_server):
    uri, experiment, runs, search, _ = smoke_on_a_server
    client = tracking.client(uri)
    assert experiment.tags[tracking.EXPERIMENT_KIND_TAG] == "custom_model_development"  # opens on its runs
    names = sorted(run.info.run_name for run in runs)
    assert names == sorted(f"{MODEL}/sst2 {method} lr={rate} bs=16 ep=2 s42" for rate in RATES
                           for method in ("base", "istar λ=-1 ζ=0.2"))  # model and task first: never cut off
    for run in runs:
        params, metrics = run.data.params, run.data.metrics
        assert ("lam" in params) == ("zeta" in params) == (run.data.tags["method"] == "istar")  # Base: neither
        assert "alpha" not in params and "isolayer_learning_rate" not in params
        assert params["setting.max_length"] == "48" and params["setting.shrinkage_tokens"] == "2000"
        assert "scheduled_lr" in metrics and "learning_rate" not in metrics  # the schedule, not the param
        assert run.data.tags[tracking.TAG_SEARCH_RUN] == search.info.run_id
        assert tracking.TAG_PARENT not in run.data.tags  # listed, not folded under the search's row
    if PICTURES:  # a picture of trials that differ
        assert len({run.data.metrics["scored_holdout_accuracy"] for run in runs}) > 1
    assert search.data.params["trials"] == "4" and search.data.params["setting.max_length"] == "48"
    note = search.data.tags[tracking.NOTE_TAG]
    assert "4 configurations in 2 model × task × method groups" in note and "**Best configuration" in note
    table = json.loads(open(client.download_artifacts(search.info.run_id, BEST_TABLE)).read())
    assert [row[table["columns"].index("method")] for row in table["data"]] == ["base", "istar"]


def test_trial_folders_are_named_exactly_and_keep_their_resolved_config(smoke_on_a_server):
    import yaml

    from istar_tune.config import split_config

    *_, folder = smoke_on_a_server
    trials = sorted(p for p in (folder / "runs" / "smoke").iterdir() if p.name.startswith("trainable_"))
    assert len(trials) == 4 and all(p.name.endswith(tuple(f"_lr={rate}_bs=16_ep=2_s42" for rate in RATES))
                                    for p in trials)
    for trial in trials:
        config = yaml.safe_load((trial / "config.yaml").read_text())
        hparams, settings = split_config(config)
        assert f"lr={hparams.learning_rate:.0e}".replace("e-0", "e-") in trial.name and settings.max_length == 48


MODEL_TRAINING = "workflowType=machine_learning"


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_from_the_experiment_list_a_click_opens_the_runs_table_with_the_metric_the_searched_values_and_the_status(
        smoke_on_a_server, tmp_path):
    """As a person goes: the experiment list, the search's experiment (a link there), then the link its description
    shows first; each step follows only a link the page before rendered."""
    import re

    uri, experiment, runs, _, _ = smoke_on_a_server
    browser = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1900,900",
               "--virtual-time-budget=20000"]

    def render(path: str) -> str:
        return subprocess.run([*browser, "--dump-dom", f"{uri}/{path}"], capture_output=True, text=True,
                              timeout=120).stdout

    listing = render(f"#/experiments?{MODEL_TRAINING}")  # the address the demo and docs/watching.md give
    experiment_link = re.search(rf'href="[^"]*?(#/experiments/{experiment.experiment_id})"', listing)
    assert experiment_link and ">smoke<" in listing and ">Model training<" in listing
    # MLflow 3.17 keeps the UI's mode (GenAI or model training) in the browser; a fresh profile per render here
    # carries it in the address. In the model-training mode the click opens the runs table, every trial a row.
    runs_page = render(f"{experiment_link.group(1)}?{MODEL_TRAINING}")
    assert ">Run Name<" in runs_page and all(run.info.run_name in runs_page for run in runs)
    assert ">Token Usage<" not in runs_page  # not the GenAI overview
    page = render(experiment_link.group(1))
    view_link = re.search(r'href="[^"]*?(#/experiments/\d+/runs\?viewStateShareKey=[\w-]+&amp;'
                          rf'{MODEL_TRAINING})"', page)
    assert view_link and "compare its trials" in page
    view = view_link.group(1).replace("&amp;", "&")
    table = render(view)
    # The value that chose (held-out, at each trial's scored epoch), the dev value beside it, the searched value,
    # the status.
    for column in (">scored_holdout_accuracy<", ">scored_accuracy<", ">learning_rate<", ">istar_tune.status<"):
        assert column in table, column
    # The trial the search chose, marked in the first column (ties in the choosing value would hide it otherwise).
    assert ">istar_tune.chosen<" in table
    assert table.count(">yes (epoch ") == len({r.data.tags[tracking.TAG_GROUP] for r in runs})  # one a group
    for run in runs:  # every trial, no row expanded
        assert run.info.run_name in table
    chose = sorted((r.data.metrics["scored_holdout_accuracy"] for r in runs), reverse=True)
    first = table.index(">scored_holdout_accuracy<")
    shown = [float(v) for v in re.findall(r">(0\.\d+)<", table[first:])]
    assert [v for v in shown if any(abs(v - a) < 1e-4 for a in chose)][:1] == [pytest.approx(chose[0], abs=1e-4)]
    shot = tmp_path / "runs.png"
    subprocess.run([*browser, f"--screenshot={shot}", f"{uri}/{view}"], capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    if os.environ.get("ISTAR_TUNE_SCREENSHOT"):  # the docs' picture, taken by this test
        _without_the_assistant(shot, Path(os.environ["ISTAR_TUNE_SCREENSHOT"]))


ASSISTANT_PANEL = 485
"""Pixels of the right edge the MLflow Assistant's panel takes at 1900 pixels wide: MLflow opens it beside every page
of a server on the local machine (a person closes it once), so the docs' pictures leave it out."""


def _without_the_assistant(shot: Path, to: Path) -> None:
    from PIL import Image

    with Image.open(shot) as image:
        image.crop((0, 0, image.width - ASSISTANT_PANEL, image.height)).save(to)


def test_each_group_has_its_model_and_each_trial_its_datasets_through_the_server(smoke_on_a_server):
    uri, experiment, runs, _, _ = smoke_on_a_server
    client = tracking.client(uri)
    models = list(client.search_logged_models(experiment_ids=[experiment.experiment_id]))
    assert sorted(m.name for m in models) == [f"{MODEL}-sst2-base", f"{MODEL}-sst2-istar"]
    assert {m.source_run_id for m in models} <= {run.info.run_id for run in runs}
    for run in runs:
        assert {d.dataset.name for d in run.inputs.dataset_inputs} == {"sst2/train", "sst2/validation", "sst2/holdout"}


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_the_models_tab_lists_each_groups_model_and_the_runs_table_their_datasets(smoke_on_a_server, tmp_path):
    uri, experiment, runs, _, _ = smoke_on_a_server
    browser = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1900,900",
               "--virtual-time-budget=20000"]
    pages = {"models": f"#/experiments/{experiment.experiment_id}/models?{MODEL_TRAINING}",
             "datasets": f"#/experiments/{experiment.experiment_id}/runs?{MODEL_TRAINING}"}
    shown = {name: subprocess.run([*browser, "--dump-dom", f"{uri}/{path}"], capture_output=True, text=True,
                                  timeout=120).stdout for name, path in pages.items()}
    assert f">{MODEL}-sst2-base<" in shown["models"] and f">{MODEL}-sst2-istar<" in shown["models"]
    assert "sst2/validation" in shown["datasets"] or "sst2/train" in shown["datasets"]
    for name, path in pages.items():
        shot = tmp_path / f"{name}.png"
        subprocess.run([*browser, f"--screenshot={shot}", f"{uri}/{path}"], capture_output=True, timeout=120)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
        if os.environ.get("ISTAR_TUNE_SCREENSHOTS"):  # the docs' pictures, taken by this test
            _without_the_assistant(shot, Path(os.environ["ISTAR_TUNE_SCREENSHOTS"]) / f"mlflow-{name}.png")
