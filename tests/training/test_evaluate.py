"""Evaluation: the task metric and the token cloud's IsoScore, IsoScore* against Σ_S with eval_zeta, and the
held-out metric that chooses the scored epoch."""

from __future__ import annotations

import torch

from istar_tune.training.evaluate import evaluate, evaluate_holdout
from istar_tune.training.run import prepare
from istar_tune.training.sigma import estimate_shrinkage


def test_evaluation_measures_the_task_and_the_token_cloud(make_hparams, make_settings):
    run = prepare(make_hparams(task="rte"), make_settings(max_eval_samples=24, eval_zeta=0.4))
    plain = evaluate(run, None)
    assert set(plain) == {"accuracy", "eval_isoscore"} and 0.0 <= plain["accuracy"] <= 1.0
    sigma = estimate_shrinkage(run)
    shrunk = evaluate(run, sigma)
    assert shrunk["eval_zeta"] == 0.4 and 0.0 <= shrunk["eval_isoscore_star"] <= 1.0
    assert shrunk["accuracy"] == plain["accuracy"] and shrunk["eval_isoscore"] == plain["eval_isoscore"]
    identity = evaluate(run, torch.eye(sigma.shape[0]))
    assert identity["eval_isoscore_star"] != shrunk["eval_isoscore_star"]  # Σ_S, not the identity, is the target


def test_the_held_out_metric_is_measured_on_held_out_training_examples(make_hparams, make_settings):
    run = prepare(make_hparams(task="rte"), make_settings(holdout=0.25))
    measured = evaluate_holdout(run)
    assert set(measured) == {"holdout_accuracy"} and 0.0 <= measured["holdout_accuracy"] <= 1.0
    assert len(run.data.holdout) > 0
