"""Evaluation after an epoch: the task metric(s) on the validation set, the IsoScore and IsoScore*
(towards Σ_S with ``eval_zeta``) of its all-layer token cloud, and, with ``holdout``, the task metric on the held-out
training examples that chooses the scored epoch.
"""

from __future__ import annotations

import numpy as np
import torch

from istar_tune.isotropy import isoscore_star_from_cov
from istar_tune.metrics import HOLDOUT_PREFIX, classification_metrics, squad_scores, squad_v2_scores
from istar_tune.models import (
    hidden_size,
)
from istar_tune.shrinkage import StreamingCovariance
from istar_tune.tasks import EXTRACTIVE_QA
from istar_tune.training.data import squad_predictions, squad_references
from istar_tune.training.forward import forward_pass
from istar_tune.training.run import Run
from istar_tune.training.sigma import token_cloud


@torch.no_grad()
def evaluate(run: Run, shrinkage_cov: torch.Tensor | None) -> dict[str, float]:
    """Task metric(s) on the validation set, and IsoScore (ζ = 0) and IsoScore* (``eval_zeta`` towards Σ_S) of
    the all-layer token cloud of the whole validation set."""
    from tqdm.auto import tqdm

    cloud = StreamingCovariance(hidden_size(run.model), budget=2**62)
    outputs_by_key: dict[str, list[np.ndarray]] = {}
    loader = run.loader(run.data.validation, run.settings.eval_batch_size)
    bar = tqdm(loader, desc="evaluating", disable=not run.settings.progress, leave=False, unit="batch")
    for batch, outputs in forward_pass(run.model, bar, run.device, run.autocast):
        points, mask = token_cloud(run, outputs.hidden_states, batch["attention_mask"])  # (L·B·T, d), (L·B·T,)
        cloud.update(points, mask)
        keys = ("start_logits", "end_logits") if run.task.problem_type == EXTRACTIVE_QA else ("logits",)
        for key in keys:
            outputs_by_key.setdefault(key, []).extend(getattr(outputs, key).float().cpu().numpy())
    if run.task.problem_type == EXTRACTIVE_QA:
        predictions, no_answer = squad_predictions(run.data, outputs_by_key["start_logits"],
                                                   outputs_by_key["end_logits"], run.task.unanswerable)
        metrics = (squad_v2_scores(predictions, squad_references(run.data), no_answer) if run.task.unanswerable
                   else squad_scores(predictions, squad_references(run.data)))
    else:
        metrics = classification_metrics(run.task, np.stack(outputs_by_key["logits"]), run.data.labels)
    eval_cov = cloud.covariance(torch.float64)
    metrics["eval_isoscore"] = float(isoscore_star_from_cov(eval_cov))
    if shrinkage_cov is not None:
        zeta = run.settings.eval_zeta
        shrunk = (1 - zeta) * eval_cov + zeta * shrinkage_cov.to(eval_cov)
        metrics["eval_isoscore_star"] = float(isoscore_star_from_cov(shrunk))
        metrics["eval_zeta"] = zeta  # logged with the score, so plots and tables say which ζ it used
    return metrics


@torch.no_grad()
def evaluate_holdout(run: Run) -> dict[str, float]:
    """The task metric(s) on the held-out training examples (``holdout``) as ``holdout_<metric>``: what chooses the
    scored epoch. Logits only; through IsoLayer's layer when its hook is on."""
    loader = run.loader(run.data.holdout, run.settings.eval_batch_size)
    logits = [outputs.logits.float().cpu().numpy()
              for _, outputs in forward_pass(run.model, loader, run.device, run.autocast, hidden_states=False)]
    measured = classification_metrics(run.task, np.concatenate(logits), np.asarray(run.data.holdout["labels"]))
    return {HOLDOUT_PREFIX + k: v for k, v in measured.items()}
