"""A replay's row per strategy and setting, and the one recommendation line."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from istar_tune.replay.curves import Choice, Curve, Unit
from istar_tune.replay.summary import (
    COLUMNS,
    Z_95,
    advice,
    recommendation,
    replay_table,
    replays_to_decide,
    settings_for,
    summary_row,
    wilson,
)


def _unit(noise=None, dev=False):
    values = [(0.5, 0.6, 0.7), (0.4, 0.9, 0.95), (0.6, 0.5, 0.55), (0.55, 0.65, 0.66)]
    curves = [Curve({"method": "base", "learning_rate": 1e-5 * (i + 1), "epochs": 3}, v,
                    dev=tuple(x - 0.1 for x in v) if dev else None, epoch_seconds=60.0) for i, v in enumerate(values)]
    return Unit("m", "t", "base", curves, grid_epochs=12, grid_seconds=720.0, noise=noise)


def test_a_row_counts_choices_regrets_and_cost_over_the_replays():
    unit = _unit(noise=0.3, dev=True)
    picks = iter([0, 1, 1, 3, 1])  # a "strategy" that trains one configuration to its end: c0, c1, c1, c3
    choices = [Choice((next(picks), 3), 3, 180.0) for _ in range(4)]
    row = summary_row(unit, "fixed", "one", 4, choices)
    assert row["chose_best"] == 0.5 and row["within_noise"] == 1.0  # regrets 0.25, 0, 0, 0.29: all within 0.3
    assert row["mean_regret"] == pytest.approx((0.25 + 0.29) / 4) and row["worst_regret"] == pytest.approx(0.29)
    assert row["mean_dev_regret"] == pytest.approx((0.25 + 0.29) / 4)  # the dev curves sit 0.1 lower
    assert row["epochs_share"] == 0.25 and row["gpu_hours"] == 0.05 and row["gpu_hours_share"] == 0.25
    assert math.isnan(summary_row(_unit(), "fixed", "one", 1, choices[:1])["within_noise"])  # no seeds stage: unknown


def test_the_default_settings_and_a_table_of_them():
    unit = _unit()
    names = [(s.scheduler, s.setting) for s in settings_for(unit, workers=2)]
    # At 3 epochs every grace below 3 has a rung inside the grid: η 3 and 4 cut once, as cheaper settings.
    assert names == [("random", "k=1"), ("random", "k=2"), ("tpe", "k=1"),
                     *[("asha", f"grace={g} eta={eta} workers=2") for g in (1, 2) for eta in (2, 3, 4)],
                     ("hyperband", "grace=1 eta=2 workers=2"), ("hyperband", "grace=1 eta=3 workers=2"),
                     ("median", "grace=1 workers=2"), ("median", "grace=2 workers=2"),
                     *[("conformal", f"grace={g} alpha={a} workers=2") for g in (1, 2) for a in (0.1, 0.2)]]
    table = replay_table([unit], replays=3, workers=2, schedulers_asked=("random", "median"))
    assert list(table.columns) == COLUMNS and set(table.scheduler) == {"random", "median"}
    again = replay_table([unit], replays=3, workers=2, schedulers_asked=("random", "median"))
    assert table.equals(again)  # seeded


def test_replays_in_several_processes_give_the_same_table_and_say_each_group_once():
    units = [_unit(noise=0.3), _unit(dev=True)]
    said = []
    alone = replay_table(units, replays=5, workers=2, processes=1)
    side_by_side = replay_table(units, replays=5, workers=2, processes=2, progress=said.append)
    pd.testing.assert_frame_equal(alone, side_by_side)
    assert len(said) == 2 and all(line.startswith("replayed m/t/base: 4 configurations") for line in said)
    assert (alone.replays == 5).all() and len(alone) == 2 * len(settings_for(units[0], workers=2))


def _rows(*rows):
    return pd.DataFrame([dict(zip(["scheduler", "setting", "model", "task", "method", "chose_best", "within_noise",
                                   "epochs_share", "grid_epochs"], (*r, 10) if len(r) == 8 else r)) for r in rows])


def test_the_recommendation_is_the_cheapest_setting_that_reached_the_target_in_every_group():
    nan = math.nan
    table = _rows(("asha", "a", "m", "t1", "base", 1.0, nan, 0.4), ("asha", "a", "m", "t2", "base", 0.9, nan, 0.4),
                  ("random", "k=2", "m", "t1", "base", 0.96, nan, 0.5),
                  ("random", "k=2", "m", "t2", "base", 0.97, nan, 0.5),
                  ("median", "g", "m", "t1", "base", 1.0, nan, 1.0), ("median", "g", "m", "t2", "base", 1.0, nan, 1.0))
    assert recommendation(table) == ("recommendation: random k=2: chose the best in 96% of the replays (the lowest of "
                                     "any group), for 50% of the grid's epochs")
    noisy = table.assign(within_noise=[1.0, 0.95, 0.9, 0.9, 1.0, 1.0])  # asha within noise in both groups
    assert recommendation(noisy).startswith("recommendation: asha a: chose the best or one within its seed noise")
    costly = table[table.scheduler == "median"]  # as dear as the grid itself
    assert recommendation(costly).startswith("recommendation: keep the grid: no cheaper setting chose the best")


def test_shares_carry_wilson_intervals_and_the_recommendation_says_how_sure_it_is():
    assert wilson(1.0, 50) == (pytest.approx(50 / (50 + Z_95 ** 2)), 1.0)  # 50 of 50: [0.929, 1]
    low, high = wilson(0.5, 100)
    assert low == pytest.approx(0.4038, abs=1e-4) and high == pytest.approx(0.5962, abs=1e-4)
    assert replays_to_decide(0.95) == 73 and wilson(1.0, 73)[0] >= 0.95 > wilson(1.0, 72)[0]
    nan = math.nan
    table = _rows(("asha", "a", "m", "t1", "base", 1.0, nan, 0.4), ("asha", "a", "m", "t2", "base", 1.0, nan, 0.4),
                  ("median", "g", "m", "t1", "base", 1.0, nan, 1.0), ("median", "g", "m", "t2", "base", 1.0, nan, 1.0))
    undecided = recommendation(table.assign(replays=50))
    assert undecided.startswith("recommendation: undecided: asha a chose the best in 100% of the replays")
    assert "95 % interval from 93%, 50 replays" in undecided and "--replays 73" in undecided
    assert recommendation(table.assign(replays=100)).startswith("recommendation: asha a: chose the best in 100%")
    # A setting replayed in one group only is never named by "keep the grid".
    partial = _rows(("hyperband", "h", "m", "t1", "base", 0.9, nan, 0.3), ("median", "g", "m", "t1", "base", 0.5,
                    nan, 1.0), ("median", "g", "m", "t2", "base", 0.6, nan, 1.0))
    assert "the most reliable, median g" in recommendation(partial.assign(replays=50))


def test_the_share_of_the_grids_epochs_pools_the_groups_and_the_exact_choice_is_said_beside_the_noise():
    nan = math.nan
    table = _rows(("asha", "a", "m", "t1", "base", 1.0, nan, 0.5, 10), ("asha", "a", "m", "t2", "base", 1.0, nan, 1.0,
                                                                            30),
                  ("median", "g", "m", "t1", "base", 1.0, nan, 1.0, 10),
                  ("median", "g", "m", "t2", "base", 1.0, nan, 1.0, 30))
    assert advice(table).share == pytest.approx((5 + 30) / 40)  # not the mean of the shares, 0.75
    assert recommendation(table).endswith("for 88% of the grid's epochs")
    noisy = table.assign(chose_best=[0.28, 1.0, 1.0, 1.0], within_noise=[1.0, 1.0, 1.0, 1.0])
    assert ("chose the best or one within its seed noise in 100% of the replays (the lowest of any group; the grid's "
            "own choice in 28%, judged on the first)") in recommendation(noisy)


def test_the_conformal_rule_fitted_on_a_grid_states_its_margins_and_its_guarantee():
    from istar_tune.replay.summary import conformal_bounds

    finals = [0.80 + 0.01 * i for i in range(10)]  # residuals after epoch 1: 0.20 … 0.29; after epoch 2: 0.10 … 0.19
    curves = [Curve({"method": "base", "learning_rate": 1e-5 * (i + 1), "epochs": 3}, (0.6, 0.7, f))
              for i, f in enumerate(finals)]
    unit = Unit("m", "t", "base", curves, grid_epochs=30, grid_seconds=30.0)
    lines = conformal_bounds([unit], alpha=0.2)
    # α 0.2 over 2 epochs: 0.1 each; rank ⌈11 · 0.9⌉ = 10 of 10: the largest residual
    assert lines[0] == ("conformal rule for m/t/base (α 0.2, 10 curves to epoch 3): stop a trial whose score so far "
                        "plus its margin (after epoch 1 +0.2900, after epoch 2 +0.1900) is below the best finished "
                        "score")
    assert lines[1].startswith("Guarantee (α = 0.2): for a trial whose curve is exchangeable")
    assert "1 − α/R at each of the R epochs" in lines[1] and "it does not promise that at most α" in lines[1]
    assert "the chance that the rule stops it although" not in lines[1]  # the conditional sentence is gone
    few = conformal_bounds([Unit("m", "t", "base", curves[:5], grid_epochs=15, grid_seconds=15.0)], alpha=0.2)
    assert "after epoch 1 +inf" in few[0] and few[0].endswith("it needs 9 to bound an epoch: it stops nothing")


class _StopBelow:
    """A scheduler of one's own: after epoch 2, a trial below 0.8 stops."""

    def on_trial_add(self, tune_controller, trial):
        pass

    def on_trial_result(self, tune_controller, trial, result):
        return "STOP" if result["training_iteration"] == 2 and result["objective"] < 0.8 else "CONTINUE"


def test_a_scheduler_of_ones_own_is_replayed_by_driving_its_object_and_can_be_recommended():
    from istar_tune.replay.fragment import advised_fragment
    from istar_tune.search import schedulers

    saved = dict(schedulers.SCHEDULERS)
    try:
        schedulers.register(schedulers.Scheduler(name="below", summary="stop below 0.8 after epoch 2",
                                                 build=lambda rule: _StopBelow()))
        unit = _unit()  # the best, c1, reads 0.9 after epoch 2; every other is below 0.8 there
        assert ("below", "workers=2") in [(s.scheduler, s.setting) for s in settings_for(unit, workers=2)]
        table = replay_table([unit], replays=80, workers=2, schedulers_asked=("below",))
        row = table.iloc[0]
        assert (row.scheduler, row.chose_best, row.epochs_share) == ("below", 1.0, (3 + 2 + 2 + 2) / 12)
        found = advice(table)
        assert (found.kind, found.scheduler) == ("setting", "below")
        assert advised_fragment(found) == {"search": {"algorithm": "grid", "num_samples": 1},
                                           "scheduler": {"type": "below"}, "concurrency": 2}
    finally:
        schedulers.SCHEDULERS.clear()
        schedulers.SCHEDULERS.update(saved)


BEFORE_DRIVING = {
    ("asha", "grace=1 eta=2 workers=4"): (0.13333333333333333, 0.03025, 0.5733333333333334),
    ("asha", "grace=1 eta=3 workers=4"): (0.13333333333333333, 0.03916999999999999, 0.5280555555555556),
    ("asha", "grace=1 eta=4 workers=4"): (0.03333333333333333, 0.05481999999999997, 0.5019444444444444),
    ("asha", "grace=2 eta=2 workers=4"): (0.36666666666666664, 0.020380000000000002, 0.8127777777777777),
    ("asha", "grace=2 eta=3 workers=4"): (0.1, 0.030403333333333334, 0.7980555555555555),
    ("asha", "grace=2 eta=4 workers=4"): (0.1, 0.030243333333333334, 0.7691666666666667),
    ("median", "grace=1 workers=4"): (0.03333333333333333, 0.041459999999999976, 0.6247222222222223),
    ("median", "grace=2 workers=4"): (0.4, 0.02358, 0.8658333333333333),
}
"""(chose_best, mean_regret, epochs_share) of each ASHA and median stopping row on :func:`_fixed_unit`, 30 replays,
as the replay gave them on 2026-11-29 when it ran its own implementations of the two rules (commit e9153df)."""


def _fixed_unit():
    """36 I-STAR configurations (4 learning rates × 3 λ × 2, 3 and 5 epochs) with seeded random curves."""
    rng = np.random.default_rng(7)
    curves = []
    for lr in (1e-5, 2e-5, 3e-5, 5e-5):
        for lam in (-1.0, 0.5, 1.0):
            for epochs in (2, 3, 5):
                values = rng.uniform(0.5, 0.9, size=epochs).round(4)
                curves.append(Curve({"method": "istar", "learning_rate": lr, "lam": lam, "epochs": epochs},
                                    tuple(float(x) for x in values), epoch_seconds=float(rng.choice([1.0, 1.5, 2.0]))))
    return Unit("tiny", "rte", "istar", curves, grid_epochs=sum(c.epochs for c in curves),
                grid_seconds=sum(c.epochs * c.epoch_seconds for c in curves), noise=0.01)


def test_driving_rays_schedulers_gives_the_figures_the_replays_own_implementations_gave():
    table = replay_table([_fixed_unit()], replays=30, processes=1, schedulers_asked=("asha", "median"))
    found = {(r.scheduler, r.setting): (r.chose_best, r.mean_regret, r.epochs_share) for r in table.itertuples()}
    assert found.keys() == BEFORE_DRIVING.keys()
    for key, figures in BEFORE_DRIVING.items():
        assert found[key] == pytest.approx(figures, rel=1e-12, abs=1e-15), key
