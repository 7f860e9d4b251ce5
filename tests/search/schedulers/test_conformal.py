"""Conformal early stopping: the margin's arithmetic by hand, its coverage on synthetic exchangeable curves, and the
scheduler's decisions as a search's group scheduler and the replay drive it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from istar_tune.search.schedulers import get_scheduler
from istar_tune.search.schedulers.conformal import CONFORMAL, ConformalStopping, margin, needed
from istar_tune.search.schedulers.scheduler import Rule


def test_the_margin_is_the_conformal_rank_of_the_residuals_or_infinite_with_too_few():
    residuals = [0.05, 0.01, 0.09, 0.03, 0.07, 0.02, 0.08, 0.04, 0.06]  # n = 9
    # α = 0.2: rank ⌈(9 + 1) · 0.8⌉ = 8, the 8th smallest of 0.01 … 0.09
    assert margin(residuals, 0.2) == 0.08
    # α = 0.1: rank ⌈10 · 0.9⌉ = 9, the largest; α = 0.05: rank ⌈10 · 0.95⌉ = 10 > 9: nothing bounds it
    assert margin(residuals, 0.1) == 0.09 and margin(residuals, 0.05) == math.inf
    assert margin([], 0.5) == math.inf and needed(0.1) == 9 and needed(0.05) == 19 and needed(0.2) == 4
    assert get_scheduler("conformal") is CONFORMAL and CONFORMAL.reads == ("grace_period", "alpha")
    assert CONFORMAL.describe(1, 3.0, 0.2) == "conformal (grace 1, α 0.2)"


def test_on_exchangeable_curves_a_final_score_exceeds_its_margin_at_most_alpha_of_the_time():
    """Coverage, the guarantee's own claim: 4,000 draws of 20 calibration curves and one new curve from the same
    distribution (heavy-tailed jumps after epoch 1); the new residual is above the margin in at most α of the draws
    (within 3 standard errors)."""
    rng = np.random.default_rng(0)
    alpha, draws, above = 0.2, 4000, 0
    for _ in range(draws):
        first = rng.uniform(0.5, 0.8, size=21)
        final = first + rng.standard_t(3, size=21) * 0.05 + 0.05
        residuals = (final - first).tolist()
        above += residuals[20] > margin(residuals[:20], alpha)
    assert above / draws <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / draws)
    assert above / draws >= alpha - 0.06  # and it is not vacuous: close to α from below, as split conformal is


def _trial(trial_id: str, epochs: int = 3) -> SimpleNamespace:
    return SimpleNamespace(trial_id=trial_id, config={"method": "base", "epochs": epochs})


def test_a_trial_is_stopped_once_enough_finished_curves_bound_its_epoch_and_never_before():
    rule = ConformalStopping(grace=1, horizon=3, alpha=0.2)  # α / 2 epochs = 0.1 each: 9 finished curves needed
    result = lambda epoch, value: {"training_iteration": epoch, "objective": value}  # noqa: E731
    for i in range(8):  # finished curves: 0.60 → 0.80 after epoch 1, residual 0.20 ± 0.01
        trial = _trial(f"f{i}")
        for epoch, value in enumerate((0.60, 0.70, 0.80 + 0.01 * (i % 3 - 1)), start=1):
            assert rule.on_trial_result(None, trial, result(epoch, value)) == "CONTINUE"
    weak = _trial("weak")
    assert rule.on_trial_result(None, weak, result(1, 0.30)) == "CONTINUE"  # 8 curves: the margin is infinite
    last = _trial("f8")
    for epoch, value in enumerate((0.60, 0.70, 0.80), start=1):
        rule.on_trial_result(None, last, result(epoch, value))
    assert rule.margins()[1] == pytest.approx(0.21) and rule.best == pytest.approx(0.81)
    assert rule.on_trial_result(None, weak, result(2, 0.55)) == "STOP"  # 0.55 + margin after 2 (0.11) < 0.81
    close = _trial("close")
    assert rule.on_trial_result(None, close, result(1, 0.65)) == "CONTINUE"  # 0.65 + 0.21 ≥ 0.81
    short = _trial("short", epochs=2)  # its curve does not reach the horizon the margins are of
    assert rule.on_trial_result(None, short, result(1, 0.10)) == "CONTINUE"
    built = CONFORMAL.build(Rule("conformal", horizon=5, grace_period=2, alpha=0.1))
    assert (built.grace, built.horizon, built.level) == (2, 5, pytest.approx(0.1 / 3))
