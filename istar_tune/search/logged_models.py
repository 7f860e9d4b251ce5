"""Each group's best checkpoint as an MLflow ``LoggedModel``: at a search's end, the best trial of each
(model, task, method) is read back from its checkpoint at the epoch its configuration was scored at (with held-out
data, the epoch the held-out metric chose), saved as an MLflow model (a transformers text-classification pipeline,
``id2label`` as the task names its classes, a regression's scale folded in, a pair task's input as ``text`` and
``text_pair``; extractive QA as a model from code, :mod:`istar_tune.search.qa_pyfunc`) and logged as a model linked to
the trial's run. The task is rebuilt from what the checkpoint recorded (a task of one's own: its
definition, with its class names; a shipped task: its name). The model's params are the run's, its
``istar_tune.epoch`` tag the scored epoch, and its linked metrics that epoch's: the dev value (``model/<metric>``,
linked to the run's validation dataset) and, with held-out data, the held-out value that chose it
(``model/holdout_<metric>``, linked to the held-out dataset). One model per group, never one per epoch; in a seeds
stage one per finished run (each seed's: the stage reports their spread, so none is chosen); a run already holding its
model (a resumed search) keeps it. ``search --no-models`` logs none (storage-poor clusters).

What cannot be logged is said in one line, counted in the search's summary, and the search goes on: a checkpoint that
keeps no weights (``checkpoint: resume``/``none``, or an epoch a shared trial no longer keeps), IsoLayer's second
stage (its trained layer is not part of a transformers model), results on remote storage.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from istar_tune import tracking
from istar_tune.errors import TrainingError
from istar_tune.metrics import HOLDOUT_PREFIX, choosing_score, chosen_on, score
from istar_tune.search.tune.fused import member_index
from istar_tune.tasks import EXTRACTIVE_QA, REGRESSION, Task, get_task, is_shipped, task_from_facts
from istar_tune.tracking.storage import is_remote
from istar_tune.trial_config import TASK_DEFINITION_KEY
from istar_tune.trial_status import TrialStatus

log = logging.getLogger(__name__)

@dataclass
class LoggedModels:
    """What :func:`log_best_models` did: the models each label holds now, and the labels it could not log."""

    found: dict[str, str] = field(default_factory=dict)
    """Label (``model/task/method``, ``… seed N``) → ``models:/<id>``, logged now or before."""
    not_logged: list[str] = field(default_factory=list)
    """The labels whose model could not be logged (each said in its line)."""

    def line(self) -> str:
        """The summary's line; empty when nothing was to log."""
        if not self.not_logged:
            return f"MLflow models: {len(self.found)} logged" if self.found else ""
        return (f"MLflow models: {len(self.found)} logged, {len(self.not_logged)} not logged "
                f"({', '.join(self.not_logged)}: the lines above say why)")


def log_best_models(tracking_uri: str, name: str, results_root: str, simulated: bool,
                    say: Callable[[str], None], seeds: bool = False, groups: set[tuple] | None = None) -> LoggedModels:
    """Log each group's best checkpoint of search ``name`` (a ``seeds`` stage: each run's) as a model: of the groups
    this run planned, ``groups`` (``(model, task, method)``; a job array's other shards log theirs, from their own
    results folders), else of every group. A failure is said in one line and never fails the search."""
    logged = LoggedModels()
    try:
        _log_all(tracking_uri, name, results_root, simulated, say, seeds, logged, groups)
    except Exception as err:  # noqa: BLE001 — the trials are recorded either way
        log.debug("logging the models failed", exc_info=True)
        say(f"MLflow models: not logged ({type(err).__name__}: {one_line(err)})")
        logged.not_logged.append("every group")
    return logged


MAX_REASON = 300
"""Characters of an unexpected error shown in a model's line (cut at a word)."""


def one_line(err: BaseException) -> str:
    """An error's text on one line, cut at a word past :data:`MAX_REASON` characters."""
    text = " ".join(str(err).split())
    if len(text) <= MAX_REASON:
        return text
    return text[:MAX_REASON].rsplit(" ", 1)[0] + " …"


def _log_all(tracking_uri: str, name: str, results_root: str, simulated: bool, say: Callable[[str], None],
             seeds: bool, logged: LoggedModels, groups: set[tuple] | None) -> None:
    if simulated:
        return
    if is_remote(results_root):
        say(f"MLflow models: not logged (the results are on remote storage, {results_root}); the checkpoints stay "
            "there")
        logged.not_logged.append("every group")
        return
    client = tracking.client(tracking_uri)
    experiment_id = tracking.get_experiment(client, tracking_uri, name).experiment_id
    held = tracking.logged_models(client, experiment_id)
    for label, run in runs_to_log(tracking_uri, name, seeds):
        if groups is not None and run.group not in groups:
            continue
        if run.run_id in held:
            logged.found[label] = held[run.run_id]
            continue
        try:
            logged.found[label] = _log(client, experiment_id, run, Path(results_root), seeds)
        except (TrainingError, _NotLogged) as err:
            say(f"  MLflow model of {label}: not logged: {one_line(err)}")
            logged.not_logged.append(label)
        except Exception as err:  # noqa: BLE001 — the trials are recorded either way
            log.debug("logging the model failed", exc_info=True)
            say(f"  MLflow model of {label}: not logged ({type(err).__name__}: {one_line(err)})")
            logged.not_logged.append(label)
    if logged.found:
        each = "one per run: each seed's checkpoint" if seeds else "one per group: the best trial's checkpoint"
        say(f"MLflow models: {len(logged.found)} ({each}), e.g. {next(iter(logged.found.values()))}")


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
    recorded = client.get_run(run.run_id)
    trained_by = recorded.data.tags.get(tracking.TAG_TRAINED_BY) or run.trial_id
    epoch = int(run.metrics.get("epoch", run.config["epochs"]))
    member = member_index(run.trial_id) if trained_by != run.trial_id else None  # a fused trial's member
    state = scored_state(results_root, trained_by, epoch, member)
    task = trained_task(state, run)
    scored = scored_epoch(state)
    with tempfile.TemporaryDirectory(prefix="istar-model-") as folder:
        save_pipeline(state, task, Path(folder) / "model")
        group = f"{run.model}/{run.task}/{run.method}"
        model = client.create_logged_model(
            experiment_id, name=_model_name(run, seeds), source_run_id=run.run_id,
            params=dict(recorded.data.params),
            tags={tracking.TAG_GROUP: group, tracking.TAG_TRIAL_ID: run.trial_id, MODEL_EPOCH_TAG: str(scored)},
            model_type="python" if task.problem_type == EXTRACTIVE_QA else "transformers")
        try:
            client.log_model_artifacts(model.model_id, str(Path(folder) / "model"))
        except Exception:
            client.finalize_logged_model(model.model_id, "FAILED")
            raise
    client.finalize_logged_model(model.model_id, "READY")
    # The run's own record of its model: its page's "Logged models" and outputs.model_outputs name it (source_run_id
    # alone links the model to the run, not the run to the model).
    from mlflow.entities import LoggedModelOutput

    client.log_outputs(run.run_id, [LoggedModelOutput(model.model_id, scored)])
    _link_metrics(client, recorded, run, task, model.model_id, scored)
    return f"models:/{model.model_id}"


MODEL_EPOCH_TAG = "istar_tune.epoch"
"""A logged model's tag: the epoch its weights are of (the scored epoch; with held-out data the one it chose)."""


def trained_task(state: dict[str, Any], run: tracking.TrialRun) -> Task:
    """The task ``state`` was trained on, as it recorded it: a task of one's own from the definition the checkpoint
    holds (class names, text fields, problem type, metric, positive label, QA's unanswerable questions), a shipped one
    by its name; the head's size checked against the weights."""
    definition = state.get(TASK_DEFINITION_KEY)
    if definition is not None:
        task = task_from_facts(definition, source=f"the checkpoint of trial {run.trial_id}")
    elif is_shipped(state["hparams"].get("task") or run.task):
        task = get_task(state["hparams"].get("task") or run.task)
    else:
        raise _NotLogged(f"its checkpoint does not record the definition of task {run.task!r} (a checkpoint of an "
                         "older version): run the search again to log its model")
    if task.problem_type != EXTRACTIVE_QA:
        head = [v for k, v in state["model"].items() if k.endswith(".weight") and v.ndim == 2][-1]
        if head.shape[0] != task.num_labels:
            raise _NotLogged(f"its weights predict {head.shape[0]} outputs, and the task it recorded has "
                             f"{task.num_labels} ({', '.join(task.label_names) or task.problem_type}); the checkpoint "
                             "stays where it is")
    return task


def scored_epoch(state: dict[str, Any]) -> int:
    """The epoch whose weights ``state`` hands a model (the scored epoch; with held-out data the one it chose)."""
    records = [r for r in state.get("records") or [] if r.get("epoch") == state.get("epoch")]
    return int(records[-1].get("scored_epoch", state["epoch"])) if records else int(state["epoch"])


def _model_name(run: tracking.TrialRun, seeds: bool) -> str:
    name = f"{run.model}-{run.task}-{run.method}" + (f"-seed{run.config.get('seed')}" if seeds else "")
    return name.replace("/", "-")


def scored_state(results_root: Path, trial_id: str, epoch: int, member: int | None = None) -> dict[str, Any]:
    """The saved state of Ray trial ``trial_id`` at ``epoch``, its ``model`` the scored epoch's weights (a fused
    trial's ``member``: that member's state, in its folder of the trial's checkpoint)."""
    from istar_tune.training.state import read_state

    inside = "" if member is None else f"/m{member}"
    folders = sorted(results_root.glob(f"trainable_{trial_id}_*/checkpoint_*{inside}"), reverse=True)
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
    MLflow model in ``folder``: a transformers pipeline (text classification, a regression's scale folded in), or for
    extractive QA a model from code (:mod:`istar_tune.search.qa_pyfunc`: transformers 5 has no QA pipeline)."""
    import mlflow
    import torch
    import transformers

    from istar_tune.models import load_model, load_tokenizer
    from istar_tune.training.scale import SCALE_ATTRIBUTE, LabelScale, fold
    from istar_tune.training.state import LABEL_SCALE

    name = state["hparams"]["model"]
    model = load_model(name, task)
    model.load_state_dict(state["model"])
    if task.problem_type == REGRESSION:  # the weights predict z-scores: the model predicts in the data's scale
        if state.get(LABEL_SCALE) is None:
            raise _NotLogged("its checkpoint does not record the scores' scale (a checkpoint of an older version): "
                             "run the search again to log its model")
        scale = LabelScale(**state[LABEL_SCALE])
        fold(model, scale)
        setattr(model.config, SCALE_ATTRIBUTE, scale.as_config())
    model.eval()
    max_length = int(state.get("settings", {}).get("max_length") or 128)
    requirements = [f"torch=={torch.__version__.split('+')[0]}", f"transformers=={transformers.__version__}",
                    f"mlflow=={mlflow.__version__}"]
    # No model card or licence to find for a fine-tuned copy, no line for the QA model's example checked.
    quiet = [logging.getLogger(name) for name in ("mlflow.transformers", "mlflow.pyfunc")]
    levels, bars = [q.level for q in quiet], transformers.utils.logging.is_progress_bar_enabled()
    for q in quiet:
        q.setLevel(logging.ERROR)
    transformers.utils.logging.disable_progress_bar()
    try:
        if task.problem_type == EXTRACTIVE_QA:
            _save_qa(model, load_tokenizer(name), task, state, folder, requirements)
            return
        config = {"truncation": True, "max_length": max_length}
        if task.problem_type == REGRESSION:
            config["function_to_apply"] = "none"  # the score itself, not a probability
        mlflow.transformers.save_model({"model": model, "tokenizer": load_tokenizer(name)}, str(folder),
                                       task="text-classification", model_config=config,
                                       pip_requirements=requirements, signature=_pair_signature(task))
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)
        if bars:
            transformers.utils.logging.enable_progress_bar()


def _pair_signature(task):
    """A task of sentence pairs: rows of ``text`` and ``text_pair`` (MLflow's default signature for a classifier is
    one unnamed text, and its input check would drop the pair's second sentence without a word); else MLflow's."""
    if len(task.text_fields) < 2:
        return None
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    return ModelSignature(inputs=Schema([ColSpec("string", "text"), ColSpec("string", "text_pair")]),
                          outputs=Schema([ColSpec("string", "label"), ColSpec("double", "score")]))


QA_MODEL_CODE = Path(__file__).with_name("qa_pyfunc.py")
"""The extractive-QA model's code, saved with each QA model."""


def _save_qa(model, tokenizer, task, state: dict[str, Any], folder: Path, requirements: list[str]) -> None:
    """An extractive-QA model from code: the encoder and tokenizer as its artifact, the windows its trial was
    evaluated with (the recipe's, else ``max_length`` with a quarter's overlap) as its configuration."""
    import mlflow.pyfunc

    from istar_tune.config import RunSettings
    from istar_tune.recipes import RECIPES
    from istar_tune.training.data import MAX_ANSWER_TOKENS, squad_doc_stride

    settings = state.get("settings", {})
    recipe = RECIPES[settings.get("recipe") or RunSettings.recipe]
    window = recipe.squad_window or int(settings.get("max_length") or 128)
    config = {"max_length": window, "stride": recipe.squad_stride or squad_doc_stride(window),
              "max_answer_tokens": MAX_ANSWER_TOKENS, "unanswerable": task.unanswerable}
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    signature = ModelSignature(inputs=Schema([ColSpec("string", "question"), ColSpec("string", "context")]),
                               outputs=Schema([ColSpec("string")]))
    with tempfile.TemporaryDirectory(prefix="istar-qa-") as weights:
        model.save_pretrained(weights)
        tokenizer.save_pretrained(weights)
        mlflow.pyfunc.save_model(str(folder), python_model=str(QA_MODEL_CODE), artifacts={"model": weights},
                                 model_config=config, pip_requirements=requirements, signature=signature,
                                 input_example=[{"question": "Who wrote it?", "context": "Ada wrote it."}])


MODEL_METRIC = "model/{metric}"
"""The key under which a run logs a metric linked to its model (MLflow links a model's metrics through its run; under
the metric's own key it would add a second value to the run's per-epoch history): ``model/<metric>`` the dev value at
the model's epoch, ``model/holdout_<metric>`` the held-out value that chose it."""
CONTEXT = "mlflow.data.context"


def _link_metrics(client, recorded, run: tracking.TrialRun, task: Task, model_id: str, epoch: int) -> None:
    """The run's values at the model's epoch, logged as :data:`MODEL_METRIC` linked to the model and to the dataset
    each was measured on: the dev value (validation), and with held-out data the held-out value that chose it."""
    datasets = {next((t.value for t in d.tags if t.key == CONTEXT), ""): d.dataset
                for d in recorded.inputs.dataset_inputs}
    values = [(task.metric, score(run.metrics, task.metric), "evaluation")]
    if chosen_on(run.metrics, task.metric) == "holdout":
        values.append((HOLDOUT_PREFIX + task.metric, choosing_score(run.metrics, task.metric), "holdout"))
    for key, value, context in values:
        if value is None:
            continue
        dataset = datasets.get(context)
        client.log_metric(run.run_id, MODEL_METRIC.format(metric=key), value, step=epoch, model_id=model_id,
                          dataset_name=dataset.name if dataset else None,
                          dataset_digest=dataset.digest if dataset else None)
