"""The choice rule on curves: the tables' rule, with the epoch a trial ended at."""

from __future__ import annotations

import math

from istar_tune.replay.curves import Curve, Unit, arms, choose


def _curve(lr, values, epochs=None, **kwargs):
    return Curve({"method": "base", "learning_rate": lr, "epochs": epochs or len(values)}, tuple(values), **kwargs)


def test_the_best_model_wins_ties_go_to_fewer_epochs_and_failed_or_nan_trials_never_win():
    curves = [_curve(1e-5, [0.5, 0.7, 0.7]), _curve(3e-5, [0.6, 0.7]), _curve(5e-5, [0.9], epochs=3, failed=True),
              _curve(7e-5, [math.nan, math.nan])]
    assert choose(curves, [(0, 3), (1, 2), (2, 3), (3, 2)]) == (1, 2)  # 0.7 twice: 2 epochs before 3
    assert choose(curves, [(0, 2), (1, 2)]) == (0, 2)  # 0.7 and 0.7 at 2 epochs: then by the values (tie_order)
    assert choose(curves, [(2, 3), (3, 2)]) is None
    assert curves[2].score(1) == 0.9 and math.isnan(curves[2].score())  # it failed in epoch 2


def test_a_unit_knows_the_grids_choice_and_that_a_stopped_trial_left_a_shorter_configurations_model():
    unit = Unit("m", "t", "base", [_curve(1e-5, [0.8, 0.6, 0.5]), _curve(1e-5, [0.8], epochs=1),
                                   _curve(3e-5, [0.7, 0.75, 0.79])], grid_epochs=6, grid_seconds=6.0)
    assert unit.best == (1, 1) and unit.score_of(unit.best) == 0.8
    assert unit.is_best((0, 1))  # the 3-epoch trial stopped after epoch 1 left the 1-epoch configuration's model
    assert not unit.is_best((0, 3)) and not unit.is_best(None)
    assert unit.score_of((2, 2)) == 0.75 and math.isnan(unit.dev_score_of((2, 2)))


def test_configurations_sharing_a_prefix_run_as_the_longest_which_completes_the_others():
    shared = [_curve(1e-5, [0.5, 0.6, 0.7]), _curve(1e-5, [0.5]), _curve(1e-5, [0.5, 0.6]),
              _curve(3e-5, [0.4, 0.5, 0.55]), _curve(3e-5, [0.45])]  # lr 3e-5's 1-epoch run differs: no sharing
    assert arms(shared) == {0: [1, 2, 3], 3: [3], 4: [1]}
    assert arms([_curve(1e-5, [0.5, 0.6, 0.7]), _curve(1e-5, [0.5], failed=True, epochs=2)]) == {0: [3], 1: [2]}
