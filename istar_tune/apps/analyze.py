"""Analysis of a trained model's representation space on a task's validation data.

Per hidden layer: IsoScore* of the token cloud of the whole validation set (ζ = 0: with n ≫ d no shrinkage is
needed; the paper's Figure 6) and the TwoNN intrinsic dimension of the [CLS] embeddings (Figure 5); of the last
layer: EV_1..EV_3, the average cosine similarity of its tokens, and the mean activation per dimension (Figure 4); of
the sentence embedding the task head reads: IsoScore and EV_1..EV_3 (IsoLayer's Table 3), after IsoLayer's trained
layer when the checkpoint holds one. Written as ``analysis.json`` and PNGs, and to MLflow when the checkpoint belongs
to a run.

A checkpoint is an ``istar-tune train`` output folder (its ``best-checkpoint`` is analysed: the scored epoch's model,
with IsoLayer's layer where that epoch is of its second stage; task and data options come from its ``config.yaml``),
a ``from_pretrained`` folder, or a search trial's checkpoint (``trainer_state.pt``: the scored epoch's weights once
the trial ended, the latest epoch's while it runs).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from istar_tune import tracking
from istar_tune.data.reading import load_raw
from istar_tune.errors import ConfigError
from istar_tune.isotropy import (
    cosine_similarity_from_sum,
    explained_variance,
    explained_variance_from_cov,
    isoscore,
    isoscore_star_from_cov,
    twonn_intrinsic_dimension,
)
from istar_tune.models import hidden_size, load_model, load_tokenizer
from istar_tune.results.plots import pyplot
from istar_tune.shrinkage import StreamingCovariance
from istar_tune.tasks import EXTRACTIVE_QA, Task, get_task, task_from_mapping, task_of
from istar_tune.training.data import encode
from istar_tune.training.forward import forward_pass
from istar_tune.training.isolayer import IsoLayerHook
from istar_tune.training.run import quiet_libraries
from istar_tune.training.state import (
    BEST_CHECKPOINT,
    CONFIG_FILE,
    ISOLAYER_FILE,
    STATE_FILE,
    load_data,
)
from istar_tune.trial_config import TASK_DEFINITION_KEY


@dataclass
class Source:
    model_dir: Path | None
    state_file: Path | None
    hparams: dict[str, Any]
    settings: dict[str, Any]
    isolayer: dict[str, torch.Tensor] | None = None
    """IsoLayer's trained layer (a state dict), when the checkpoint holds one."""
    task_definition: dict[str, Any] | None = None
    """The definition of the task it was trained on, when that task is not shipped."""


def resolve_checkpoint(path: str | Path) -> Source:
    path = Path(path).expanduser()
    if not path.exists():
        raise ConfigError(f"checkpoint {str(path)!r} does not exist: give an istar-tune train output folder, a "
                          "model folder or a search trial's checkpoint folder")
    if (path / CONFIG_FILE).is_file() and (path / BEST_CHECKPOINT).is_dir():
        config = yaml.safe_load((path / CONFIG_FILE).read_text())
        layer_file = path / BEST_CHECKPOINT / ISOLAYER_FILE
        layer = load_data(layer_file) if layer_file.is_file() else None
        return Source(path / BEST_CHECKPOINT, None, config["hyperparameters"], config["settings"], layer,
                      config.get(TASK_DEFINITION_KEY))
    if (path / STATE_FILE).is_file():
        state = load_data(path / STATE_FILE)
        if "model" not in state:
            raise ConfigError(f"{path / STATE_FILE} keeps only the trial's records (checkpoint: resume): analyse a "
                              "checkpoint of a run with checkpoint: weights or state")
        # The trial's own data folder and max length: saved with the state (older states: its folder's config.yaml).
        settings = state.get("settings") or _trial_config(path.parent)
        return Source(None, path / STATE_FILE, state["hparams"], settings, state.get("isolayer"),
                      state.get(TASK_DEFINITION_KEY))
    if (path / "config.json").is_file():
        return Source(path, None, {}, {})
    raise ConfigError(f"{path} holds no model: expected config.yaml + best-checkpoint/ (istar-tune train), "
                      "config.json (a model folder) or trainer_state.pt (a search trial's checkpoint)")


def _trial_config(folder: Path) -> dict[str, Any]:
    """A search trial folder's resolved configuration (``config.yaml`` beside its checkpoints), or nothing."""
    path = folder / CONFIG_FILE
    loaded = yaml.safe_load(path.read_text()) if path.is_file() else None
    return loaded if isinstance(loaded, dict) else {}


def _load(source: Source, task: Task):
    if source.model_dir is not None:
        return load_model(str(source.model_dir), task), load_tokenizer(str(source.model_dir))
    model = load_model(source.hparams["model"], task)
    state = load_data(source.state_file)
    model.load_state_dict(state["model"])
    return model, load_tokenizer(source.hparams["model"])


def _sentence_hook(model, source: Source):
    """A hook on the head's input (IsoLayer's trained layer where the checkpoint holds one, else the identity);
    ``None`` for a model without a linear head."""
    try:
        hook = IsoLayerHook(model)
    except ConfigError:
        return None
    if source.isolayer is not None:
        hook.layer.load_state_dict(source.isolayer)
    return hook


def _task(source: Source, task: str | None, checkpoint) -> Task:
    """``--task`` (a name or a definition file), else the task the checkpoint was trained on (its own definition when
    that task is not shipped)."""
    if task is not None:
        return task_of(task, Path.cwd(), source="--task")
    if source.task_definition:
        return task_from_mapping(source.task_definition, source=f"{checkpoint}")
    if source.hparams.get("task") is None:
        raise ConfigError(f"{checkpoint} does not say which task it was trained on: give --task")
    return get_task(source.hparams["task"])


@torch.no_grad()
def analyze(checkpoint: str | Path, task: str | None = None, data_dir: str | None = None,
            max_eval_samples: int | None = None, max_length: int | None = None, batch_size: int = 64,
            output_dir: str | Path | None = None) -> dict[str, Any]:
    from transformers import DataCollatorWithPadding

    quiet_libraries(True)
    source = resolve_checkpoint(checkpoint)
    the_task = _task(source, task, checkpoint)
    if the_task.problem_type == EXTRACTIVE_QA:
        raise ConfigError(f"analyze works on sentence-level tasks (a [CLS] embedding per example), not extractive QA "
                          f"(task {the_task.name} is one): analyse a classification or regression task's model")
    data_dir = data_dir or source.settings.get("data_dir")
    max_length = max_length or source.settings.get("max_length") or 128
    max_eval_samples = max_eval_samples or source.settings.get("max_eval_samples")
    model, tokenizer = _load(source, the_task)
    hook = _sentence_hook(model, source)
    raw = load_raw(the_task, data_dir, max_train_samples=1, max_eval_samples=max_eval_samples, trains=False)
    data = encode(the_task, raw, tokenizer, max_length)
    loader = torch.utils.data.DataLoader(data.validation, batch_size=batch_size,
                                         collate_fn=DataCollatorWithPadding(tokenizer))
    d = hidden_size(model)
    layers: list[StreamingCovariance] = []
    cls: list[list[torch.Tensor]] = []
    unit_sum, token_count = torch.zeros(d, dtype=torch.float64), 0
    sentences: list[torch.Tensor] = []
    for batch, outputs in forward_pass(model, loader, "cpu"):
        hidden = outputs.hidden_states[1:]  # L × (B, T, d)
        if not layers:
            layers = [StreamingCovariance(d, budget=2**62) for _ in hidden]
            cls = [[] for _ in hidden]
        mask = batch["attention_mask"]
        for i, states in enumerate(hidden):
            layers[i].update(states, mask)
            cls[i].append(states[:, 0].double())  # (B, d)
        if hook is not None:
            sentences.append(hook.embeddings.detach().double())  # (B, d) what the head reads
        tokens = hidden[-1][mask.bool()].double()  # (M, d) real last-layer tokens
        unit_sum += torch.nn.functional.normalize(tokens, dim=1).sum(dim=0)
        token_count += tokens.shape[0]
    result = {
        "checkpoint": str(checkpoint), "task": the_task.name, "eval_examples": len(data.validation),
        "data_dir": str(data_dir) if data_dir else None, "max_length": max_length,
        "layer_isoscore_star": [float(isoscore_star_from_cov(est.covariance())) for est in layers],
        "cls_intrinsic_dimension": [twonn_intrinsic_dimension(torch.cat(c)) for c in cls],
        "last_layer_explained_variance": [float(v) for v in explained_variance_from_cov(layers[-1].covariance(), 3)],
        "last_layer_avg_cosine_similarity": float(cosine_similarity_from_sum(unit_sum, token_count)),
        "last_layer_mean_activation": [float(v) for v in layers[-1].mean()],
    }
    if sentences:
        embeddings = torch.cat(sentences)
        result.update(isolayer=source.isolayer is not None, sentence_isoscore=float(isoscore(embeddings)),
                      sentence_explained_variance=[float(v) for v in explained_variance(embeddings, 3)])
    if output_dir is not None:
        write_outputs(result, Path(output_dir))
    return result


def report(result: dict[str, Any]) -> str:
    """What ``istar-tune analyze`` prints: IsoScore* and the [CLS] intrinsic dimension per layer, the last layer's
    EV_1..EV_3 and average cosine similarity."""
    lines = ["layer  IsoScore*  [CLS] intrinsic dimension"]
    for layer, (iso, dim) in enumerate(zip(result["layer_isoscore_star"], result["cls_intrinsic_dimension"]), 1):
        lines.append(f"{layer:>5}  {iso:9.4f}  {dim:9.2f}")
    ev = ", ".join(f"{v:.3f}" for v in result["last_layer_explained_variance"])
    lines.append(f"last layer: EV_1..EV_3 {ev}; average cosine similarity "
                 f"{result['last_layer_avg_cosine_similarity']:.4f}")
    return "\n".join(lines)


def write_outputs(result: dict[str, Any], output: Path) -> list[Path]:
    output.mkdir(parents=True, exist_ok=True)
    (output / "analysis.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    plt = pyplot()
    figures = [
        ("layer-isoscore.png", "IsoScore* of the token cloud per layer", "layer", "IsoScore*",
         result["layer_isoscore_star"]),
        ("cls-intrinsic-dimension.png", "TwoNN intrinsic dimension of [CLS] per layer", "layer",
         "intrinsic dimension", result["cls_intrinsic_dimension"]),
        ("mean-activation.png", "Mean activation per dimension, last layer", "dimension", "mean activation",
         result["last_layer_mean_activation"]),
    ]
    written = []
    for name, title, xlabel, ylabel, values in figures:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        xs = range(1, len(values) + 1) if xlabel == "layer" else range(len(values))
        (ax.bar if xlabel == "dimension" else ax.plot)(list(xs), values, **({"marker": "o"} if xlabel == "layer"
                                                                            else {"width": 1.0}))
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(output / name, dpi=120)
        plt.close(fig)
        written.append(output / name)
    return [output / "analysis.json", *written]


def trial_id_of(checkpoint: str | Path) -> str | None:
    """The Ray trial id of a search trial's checkpoint folder (``.../trainable_<id>_<n>_.../checkpoint_...``); a
    fused trial's member's folder (``.../checkpoint_.../m<i>``) names that member's run (``<id>_<n>-m<i>``)."""
    parts = Path(checkpoint).resolve().parts
    member = f"-{parts[-1]}" if re.fullmatch(r"m\d+", parts[-1]) and parts[-2].startswith("checkpoint_") else ""
    for part in parts[::-1]:
        if part.startswith("trainable_"):
            pieces = part.split("_")
            if len(pieces) >= 3:
                return f"{pieces[1]}_{pieces[2]}{member}"
    return None


def log_to_mlflow(result: dict[str, Any], files: list[Path], tracking_uri: str, run_id: str | None,
                  checkpoint: str | Path) -> str | None:
    """Log to ``run_id``, or to the run of the search trial the checkpoint belongs to; returns the run id used."""
    from mlflow.entities import Metric


    tracking.check_store(tracking_uri)
    client = tracking.client(tracking_uri)
    if run_id is None:
        trial_id = trial_id_of(checkpoint)
        if trial_id is None:
            return None
        experiments = [e.experiment_id for e in client.search_experiments()]
        found = [r for e in experiments for r in tracking.find_runs(client, e, **{tracking.TAG_TRIAL_ID: trial_id})]
        if not found:  # a shared trial (or a fused trial's shared member): its weights are those of the longest
            trainer = trial_id.partition("-m")[0]  # configuration it completed
            found = sorted((r for e in experiments
                            for r in tracking.find_runs(client, e, **{tracking.TAG_TRAINED_BY: trainer})
                            if r.data.tags.get(tracking.TAG_TRIAL_ID, "").startswith(f"{trial_id}-e")),
                           key=lambda r: -int(r.data.params.get("epochs", 0)))
        if not found:
            return None
        run_id = found[0].info.run_id
    metrics = [Metric("analysis_layer_isoscore_star", v, 0, i + 1) for i, v in enumerate(result["layer_isoscore_star"])]
    metrics += [Metric("analysis_cls_intrinsic_dimension", v, 0, i + 1)
                for i, v in enumerate(result["cls_intrinsic_dimension"])]
    metrics.append(Metric("analysis_avg_cosine_similarity", result["last_layer_avg_cosine_similarity"], 0, 0))
    if "sentence_isoscore" in result:
        metrics.append(Metric("analysis_sentence_isoscore", result["sentence_isoscore"], 0, 0))
        metrics += [Metric(f"analysis_sentence_ev{k + 1}", v, 0, 0)
                    for k, v in enumerate(result["sentence_explained_variance"])]
    client.log_batch(run_id, metrics=metrics)
    for path in files:
        client.log_artifact(run_id, str(path), artifact_path="analysis")
    return run_id
