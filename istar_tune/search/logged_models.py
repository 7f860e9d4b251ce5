"""Each group's best checkpoint as an MLflow ``LoggedModel``: at a search's end, the best trial of each
(model, task, method) is read back from its checkpoint at the epoch its configuration was scored at, saved in
MLflow's transformers format (a text-classification or question-answering pipeline, ``id2label`` as the task names its
classes) and logged as a model linked to the trial's run, with the configuration as its params and the scored metric
linked to the model and to the run's validation dataset (as ``model/<metric>``). One model per group, never one per
epoch; in a seeds stage one per finished run (each seed's: the stage reports their spread, so none is chosen); a run
already holding its model (a resumed search) keeps it. ``search --no-models`` logs none (storage-poor clusters).

What cannot be logged is said in a line and the search goes on: a checkpoint that keeps no weights
(``checkpoint: resume``/``none``, or an epoch a shared trial no longer keeps), IsoLayer's second stage (its trained
layer is not part of a transformers model), results on remote storage.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from istar_tune import tracking
from istar_tune.errors import TrainingError
from istar_tune.tasks import EXTRACTIVE_QA, REGRESSION
from istar_tune.tracking.storage import is_remote
from istar_tune.trial_status import TrialStatus

log = logging.getLogger(__name__)

PIPELINES = {EXTRACTIVE_QA: "question-answering"}
"""A task's problem type → the transformers pipeline its model is saved as (else text classification)."""


def log_best_models(tracking_uri: str, name: str, results_root: str, simulated: bool,
                    say: Callable[[str], None], seeds: bool = False) -> dict[str, str]:
    """Log each group's best checkpoint of search ``name`` (a ``seeds`` stage: each run's) as a model; returns the label
    of each (``model/task/method``, ``… seed N``) → ``models:/<id>`` of those that hold one now (logged here or
    before). A failure is said and never fails the search."""
    try:
        return _log_all(tracking_uri, name, results_root, simulated, say, seeds)
    except Exception as err:  # noqa: BLE001 — the trials are recorded either way
        log.debug("logging the models failed", exc_info=True)
        say(f"MLflow models: not logged ({type(err).__name__}: {str(err)[:200]})")
        return {}


def _log_all(tracking_uri: str, name: str, results_root: str, simulated: bool,
             say: Callable[[str], None], seeds: bool) -> dict[str, str]:
    if simulated:
        return {}
    if is_remote(results_root):
        say(f"MLflow models: not logged (the results are on remote storage, {results_root}); the checkpoints stay "
            "there")
        return {}
    client = tracking.client(tracking_uri)
    experiment_id = tracking.get_experiment(client, tracking_uri, name).experiment_id
    held = tracking.logged_models(client, experiment_id)
    found: dict[str, str] = {}
    for label, run in runs_to_log(tracking_uri, name, seeds):
        if run.run_id in held:
            found[label] = held[run.run_id]
            continue
        try:
            found[label] = _log(client, experiment_id, run, Path(results_root), seeds)
        except (TrainingError, _NotLogged) as err:
            say(f"  MLflow model of {label}: not logged: {err}")
        except Exception as err:  # noqa: BLE001 — the trials are recorded either way
            log.debug("logging the model failed", exc_info=True)
            say(f"  MLflow model of {label}: not logged ({type(err).__name__}: {str(err)[:200]})")
    if found:
        each = "one per run: each seed's checkpoint" if seeds else "one per group: the best trial's checkpoint"
        say(f"MLflow models: {len(found)} ({each}), e.g. {next(iter(found.values()))}")
    return found


def runs_to_log(tracking_uri: str, name: str, seeds: bool) -> list[tuple[str, tracking.TrialRun]]:
    """The runs of search ``name`` whose checkpoints it logs as models, each with its label: a grid's best run per
    group; a ``seeds`` stage's every finished run (the stage reports the seeds' spread: keeping the best seed's alone
    would choose once more, on the data that scores it)."""
    if seeds:
        finished = sorted((r for r in tracking.trial_runs(tracking_uri, name) if r.status == TrialStatus.FINISHED),
                          key=lambda r: (r.group, r.config.get("seed", 0), r.trial_id))
        return [(f"{'/'.join(r.group)} seed {r.config.get('seed')}", r) for r in finished]
    return [("/".join(group), run) for group, run in sorted(tracking.best_trials(tracking_uri, name).items())]


class _NotLogged(Exception):
    """What keeps a group's model from being logged, in words."""


def _log(client, experiment_id: str, run: tracking.TrialRun, results_root: Path, seeds: bool) -> str:
    """Save and log ``run``'s model (named with its seed in a seeds stage); its ``models:/`` URI."""
    trained_by = client.get_run(run.run_id).data.tags.get(tracking.TAG_TRAINED_BY) or run.trial_id
    epoch = int(run.metrics.get("epoch", run.config["epochs"]))
    state = scored_state(results_root, trained_by, epoch)
    task = tracking.run_task(run)
    with tempfile.TemporaryDirectory(prefix="istar-model-") as folder:
        save_pipeline(state, task, Path(folder) / "model")
        group = f"{run.model}/{run.task}/{run.method}"
        model = client.create_logged_model(
            experiment_id, name=_model_name(run, seeds), source_run_id=run.run_id,
            params={k: str(v) for k, v in state["hparams"].items() if v is not None},
            tags={tracking.TAG_GROUP: group, tracking.TAG_TRIAL_ID: run.trial_id, "istar_tune.epoch": str(epoch)},
            model_type="transformers")
        try:
            client.log_model_artifacts(model.model_id, str(Path(folder) / "model"))
        except Exception:
            client.finalize_logged_model(model.model_id, "FAILED")
            raise
    client.finalize_logged_model(model.model_id, "READY")
    _link_metric(client, run, task, model.model_id)
    return f"models:/{model.model_id}"


def _model_name(run: tracking.TrialRun, seeds: bool) -> str:
    name = f"{run.model}-{run.task}-{run.method}" + (f"-seed{run.config.get('seed')}" if seeds else "")
    return name.replace("/", "-")


def scored_state(results_root: Path, trial_id: str, epoch: int) -> dict[str, Any]:
    """The saved state of Ray trial ``trial_id`` at ``epoch``, its ``model`` the scored epoch's weights."""
    from istar_tune.training.state import read_state

    folders = sorted(results_root.glob(f"trainable_{trial_id}_*/checkpoint_*"), reverse=True)
    if not folders:
        raise _NotLogged(f"trial {trial_id} has no checkpoint in {results_root}")
    kept = []
    for folder in folders:
        state = read_state(folder)
        if state.get("epoch") != epoch:
            kept.append(state.get("epoch"))
            continue
        if "model" not in state:
            raise _NotLogged(f"its checkpoint keeps only the trial's records (checkpoint: "
                             f"{state.get('settings', {}).get('checkpoint', 'resume')}); checkpoint: state keeps "
                             "the weights")
        if state.get("isolayer") is not None:
            raise _NotLogged("IsoLayer's trained layer is not part of a transformers model; the checkpoint stays in "
                             f"{folder}")
        if state.get("best_model") is not None:  # the scored epoch's weights, where they are not the last ones
            state["model"] = state["best_model"]
        return state
    raise _NotLogged(f"trial {trial_id} keeps the checkpoints of epochs {sorted(kept)}, not epoch {epoch}'s: a "
                     "shared trial keeps its newest checkpoints_to_keep; set it to the number of epoch values the "
                     "space shares (each kept checkpoint is a full state) to log every group's model")


def save_pipeline(state: dict[str, Any], task, folder: Path) -> None:
    """Save ``state``'s model (its weights in the architecture its hyperparameters name) with its tokenizer as an
    MLflow transformers model in ``folder``."""
    import mlflow.transformers
    import torch
    import transformers

    from istar_tune.models import load_model, load_tokenizer

    name = state["hparams"]["model"]
    model = load_model(name, task)
    model.load_state_dict(state["model"])
    model.eval()
    pipeline = PIPELINES.get(task.problem_type, "text-classification")
    config = {"truncation": True, "max_length": int(state.get("settings", {}).get("max_length") or 128)}
    if task.problem_type == REGRESSION:
        config["function_to_apply"] = "none"  # the score itself, not a probability
    if pipeline != "text-classification":
        config.pop("truncation")
    requirements = [f"torch=={torch.__version__.split('+')[0]}", f"transformers=={transformers.__version__}",
                    f"mlflow=={mlflow.__version__}"]
    quiet = logging.getLogger("mlflow.transformers")  # no model card or licence to find for a fine-tuned copy
    level, bars = quiet.level, transformers.utils.logging.is_progress_bar_enabled()
    quiet.setLevel(logging.ERROR)
    transformers.utils.logging.disable_progress_bar()
    try:
        mlflow.transformers.save_model({"model": model, "tokenizer": load_tokenizer(name)}, str(folder),
                                       task=pipeline, model_config=config, pip_requirements=requirements)
    finally:
        quiet.setLevel(level)
        if bars:
            transformers.utils.logging.enable_progress_bar()


MODEL_METRIC = "model/{metric}"
"""The key under which a run logs its scored metric linked to its model (MLflow links a model's metrics through its
run; under the metric's own key it would add a second value to the run's per-epoch history)."""


def _link_metric(client, run: tracking.TrialRun, task, model_id: str) -> None:
    """The run's scored metric, logged as :data:`MODEL_METRIC` linked to the model and the run's validation
    dataset."""
    if task.metric not in run.metrics:
        return
    validation = next((d.dataset for d in client.get_run(run.run_id).inputs.dataset_inputs
                       if any(t.key == "mlflow.data.context" and t.value == "evaluation" for t in d.tags)), None)
    client.log_metric(run.run_id, MODEL_METRIC.format(metric=task.metric), run.metrics[task.metric],
                      step=int(run.metrics.get("epoch", 0)),
                      model_id=model_id, dataset_name=validation.name if validation else None,
                      dataset_digest=validation.digest if validation else None)
