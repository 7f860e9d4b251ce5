"""Each strategy's replay against a hand-computed run of it: which trials stop where, what is chosen, what it cost.
The strategies' randomness (the order trials start in, the draws) is fixed by a stub generator."""

from __future__ import annotations

import numpy as np
import pytest

from istar_tune.replay import schedulers
from istar_tune.replay.curves import Curve


class Fixed:
    """A generator whose permutation, draws and integers are given."""

    def __init__(self, order=(), draws=(), integers=0):
        self.order, self.draws, self.value = list(order), list(draws), integers

    def permutation(self, n):
        return np.array(self.order or range(n))

    def choice(self, n, size=None, replace=True, p=None):
        return np.array(self.draws if self.draws else [0] * size)

    def integers(self, high):
        return self.value


def _curves(*values, seconds=(), failed=()):
    return [Curve({"method": "base", "learning_rate": 1e-5 * (i + 1), "epochs": 3 if i not in failed else 3},
                  tuple(v), failed=i in failed, epoch_seconds=seconds[i] if seconds else 1.0)
            for i, v in enumerate(values)]


ASHA_CURVES = ([0.5, 0.6, 0.7], [0.4, 0.9, 0.95], [0.6, 0.5, 0.55], [0.55, 0.65, 0.66])


def test_asha_on_one_worker_stops_at_each_rung_below_the_quantile_of_what_came_before():
    # Rungs at epochs 2 and 1 (grace 1, η 2, horizon 3). c0 sets both rungs and ends at 3; c1 0.4 < 0.5 stops at
    # rung 1; c2 passes rung 1 (0.6 >= median 0.45) and stops at rung 2 (0.5 < 0.6); c3 passes both (0.55 >= 0.5,
    # 0.65 >= 0.55). Ended: c0@3 0.7, c1@1 0.4, c2@2 0.5, c3@3 0.66: c0, not the grid's best c1 (0.95).
    choice = schedulers.asha(_curves(*ASHA_CURVES), Fixed(order=[0, 1, 2, 3]), grace=1, eta=2, workers=1)
    assert (choice.chosen, choice.epochs_trained, choice.seconds) == ((0, 3), 9, 9.0)


def test_asha_on_two_workers_sees_results_in_the_order_they_finish():
    # c0's epochs take 10 s, the others' 1 s: c1 sets the rungs (0.4, 0.9) and ends at 3; c2 stops at rung 2
    # (0.5 < 0.9); c3 passes rung 1 (0.55 >= median(0.4, 0.6)) and stops at rung 2 (0.65 < 0.7, the median of 0.9
    # and 0.5); c0's first epoch ends at 10 s: 0.5 < median(0.4, 0.6, 0.55) = 0.55, stopped.
    curves = _curves(*ASHA_CURVES, seconds=(10.0, 1.0, 1.0, 1.0))
    choice = schedulers.asha(curves, Fixed(order=[0, 1, 2, 3]), grace=1, eta=2, workers=2)
    assert (choice.chosen, choice.epochs_trained, choice.seconds) == ((1, 3), 8, 17.0)


def test_hyperband_brackets_come_from_the_draws_and_a_later_bracket_starts_at_a_later_rung():
    curves = _curves(*ASHA_CURVES)
    first = schedulers.asha(curves, Fixed(order=[0, 1, 2, 3], draws=[0, 0, 0, 0]), 1, 2, 1, brackets=3)
    assert first == schedulers.asha(curves, Fixed(order=[0, 1, 2, 3]), 1, 2, 1)  # bracket 0 is ASHA's
    last = schedulers.asha(curves, Fixed(order=[0, 1, 2, 3], draws=[1, 1, 1, 1]), 1, 2, 1, brackets=3)
    # Bracket 1's one rung is epoch 2: c0 sets it (0.6), c1 passes (0.9), c2 stops (0.5 < 0.75, the median of 0.6
    # and 0.9), c3 passes (0.65 >= 0.6): 3 + 3 + 2 + 3 epochs, and c1 (0.95) chosen.
    assert (last.chosen, last.epochs_trained) == ((1, 3), 11)


def test_median_stopping_compares_the_best_so_far_with_the_median_of_the_others_means():
    # Three others needed: c3 at epoch 1 sees 0.5, 0.7, 0.6 (median 0.6) > its 0.4, stopped; c4 sees 0.5, 0.7, 0.6,
    # 0.4 (median 0.55) > 0.3, stopped. Chosen: c1 (0.8), not the grid's best c4 (0.95).
    curves = [Curve({"method": "base", "learning_rate": 1e-5 * (i + 1), "epochs": 2}, v) for i, v in
              enumerate([(0.5, 0.6), (0.7, 0.8), (0.6, 0.65), (0.4, 0.9), (0.3, 0.95)])]
    choice = schedulers.median_stopping(curves, Fixed(order=[0, 1, 2, 3, 4]), grace=1, workers=1)
    assert (choice.chosen, choice.epochs_trained) == ((1, 2), 8)


def test_a_failed_trial_counts_its_epochs_and_results_but_is_never_chosen():
    curves = _curves([0.9], [0.4, 0.5, 0.6], [0.45, 0.5, 0.55], failed=(0,))
    choice = schedulers.asha(curves, Fixed(order=[0, 1, 2]), grace=1, eta=2, workers=1)
    # c0 reports 0.9 at epoch 1 and fails in epoch 2 (2 epochs trained); c1 then stops at rung 1 (0.4 < 0.9), c2 too
    assert (choice.chosen, choice.epochs_trained) == ((2, 1), 4)
    drawn = schedulers.random_search(curves, Fixed(draws=[0, 1]), k=2)
    assert (drawn.chosen, drawn.epochs_trained) == ((1, 3), 5)


def test_random_search_chooses_the_best_of_its_draws_and_a_whole_draw_is_the_grid():
    curves = _curves(*ASHA_CURVES)
    assert schedulers.random_search(curves, Fixed(draws=[2, 3]), k=2).chosen == (3, 3)
    whole = schedulers.random_search(curves, np.random.default_rng(0), k=4)
    assert (whole.chosen, whole.epochs_trained) == ((1, 3), 12)


def test_tpe_proposes_only_grid_points_and_the_same_seed_gives_the_same_choice():
    curves = [Curve({"method": m, "learning_rate": lr, "epochs": e, **({"lam": 1.0} if m == "istar" else {})},
                    tuple([0.5 + lr * 1e3 + (0.1 if m == "istar" else 0)] * e))
              for m in ("base", "istar") for lr in (1e-5, 3e-5) for e in (1, 2)]
    runs = [schedulers.tpe(curves, np.random.default_rng(seed), k=40) for seed in (1, 1, 2)]
    assert runs[0] == runs[1]
    assert all(r.chosen == (6, 1) for r in runs)  # istar lr 3e-5, 1 epoch: the best, fewest epochs
    assert runs[0].epochs_trained <= 80


class _Asked:
    """A trial that answers each question from ``answers`` and records what it was asked."""

    def __init__(self, answers: dict):
        self.answers, self.asked = answers, []

    def suggest_categorical(self, name, values):
        self.asked.append((name, list(values)))
        return self.answers[name]


def test_tpe_asks_the_method_then_its_own_values_and_no_further_once_the_grid_lacks_the_point():
    curves = [Curve({"method": m, "learning_rate": lr, "epochs": 1, **({"lam": lam} if m == "istar" else {})}, (0.5,))
              for m, lr, lam in [("base", 1e-5, None), ("base", 3e-5, None), ("istar", 1e-5, -1), ("istar", 1e-5, 1),
                                 ("istar", 3e-5, -1)]]  # istar lr 3e-5 λ 1 is missing
    proposals = schedulers._Proposals(curves)
    base = _Asked({"method": "base", "base.learning_rate": 3e-5})
    assert proposals.propose(base) == 1
    assert base.asked == [("method", ["base", "istar"]), ("base.learning_rate", [1e-5, 3e-5])]  # no λ for Base
    full = _Asked({"method": "istar", "istar.lam": 1, "istar.learning_rate": 1e-5})
    assert proposals.propose(full) == 3
    assert [name for name, _ in full.asked] == ["method", "istar.lam", "istar.learning_rate"]
    missing = _Asked({"method": "istar", "istar.lam": 1, "istar.learning_rate": 3e-5})
    assert proposals.propose(missing) is None
    plain = schedulers._Proposals([Curve({"learning_rate": lr, "epochs": 1}, (0.5,)) for lr in (1, 2)])
    alone = _Asked({"learning_rate": 2})
    assert plain.propose(alone) == 1 and alone.asked == [("learning_rate", [1, 2])]  # no method: plain names


@pytest.mark.parametrize("scheduler", ["asha", "median"])
def test_configurations_that_differ_only_in_epochs_are_trials_of_their_own(scheduler):
    # (lr, 1 epoch) is the first epoch of (lr, 3 epochs): both are trials; stopping the 3-epoch one after epoch 1
    # leaves the 1-epoch configuration's model.
    shared = [Curve({"method": "base", "learning_rate": 1e-5, "epochs": 3}, (0.9, 0.6, 0.5)),
              Curve({"method": "base", "learning_rate": 1e-5, "epochs": 1}, (0.9,)),
              Curve({"method": "base", "learning_rate": 3e-5, "epochs": 3}, (0.3, 0.4, 0.5))]
    run = (schedulers.asha(shared, Fixed(order=[0, 1, 2]), 1, 2, 1) if scheduler == "asha" else
           schedulers.median_stopping(shared, Fixed(order=[0, 1, 2]), 1, 1))
    assert shared[run.chosen[0]].at(run.chosen[1]) == shared[1].config


def test_a_trial_that_reaches_epoch_k_completes_the_k_epoch_configuration_on_its_way():
    # One family, epochs {1, 2, 3} shared: the longest runs, stopped by nobody; the 2-epoch configuration (0.9) is
    # the best, and the trial completed it on its way to 3 (0.6).
    curves = [Curve({"method": "base", "learning_rate": 1e-5, "epochs": 3}, (0.5, 0.9, 0.6))]
    alone = schedulers.asha(curves, Fixed(order=[0]), 1, 2, 1)
    on_way = schedulers.asha(curves, Fixed(order=[0]), 1, 2, 1, completes={0: [1, 2, 3]})
    assert alone.chosen == (0, 3) and on_way.chosen == (0, 2) and on_way.epochs_trained == 3


def _ray_asha(grace: int, eta: float, horizon: int):
    """Ray Tune's own ``ASHAScheduler`` as a replay's ``decide``: each trial added when it first reports, each result
    handed to ``on_trial_result``."""
    from types import SimpleNamespace

    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    scheduler = ASHAScheduler(time_attr="epoch", metric="objective", mode="max", max_t=horizon, grace_period=grace,
                              reduction_factor=eta, brackets=1)
    trials: dict[int, SimpleNamespace] = {}

    def decide(index: int, epoch: int, value: float) -> str:
        if index not in trials:
            trials[index] = SimpleNamespace(trial_id=f"t{index}", config={})
            scheduler.on_trial_add(None, trials[index])
        action = scheduler.on_trial_result(None, trials[index], {"epoch": epoch, "objective": value})
        return schedulers.STOP if action == TrialScheduler.STOP else schedulers.CONTINUE

    return decide


@pytest.mark.parametrize("eta", [2, 3, 4])
@pytest.mark.parametrize("workers", [1, 3])
def test_the_replays_asha_is_rays_asha_scheduler_driven_with_the_same_trial_orders(eta, workers):
    """Cross-check: the same curves, start order and worker timing; every stop decision and so the choice and its
    cost are the same as Ray's ASHAScheduler makes them (at 3 epochs too, where η 3 and 4 cut once)."""
    rng = np.random.default_rng(eta * 10 + workers)
    for horizon, curves, order in _random_grids(rng, horizons=(3, 5, 9), each=5):
        ours = schedulers.asha(curves, Fixed(order=order), grace=1, eta=eta, workers=workers)
        theirs = schedulers.run_workers(curves, order, workers, _ray_asha(1, eta, horizon))
        assert ours == theirs, (horizon, eta, workers, order)


def _random_grids(rng: np.random.Generator, horizons: tuple[int, ...], each: int):
    """``each`` random grids per horizon: (horizon, 4 to 12 curves of random scores and epoch times, a start
    order)."""
    for horizon in horizons:
        for _ in range(each):
            count = int(rng.integers(4, 13))
            values = rng.uniform(0.4, 0.9, size=(count, horizon)).round(3)
            curves = [Curve({"method": "base", "learning_rate": 1e-5 * (i + 1), "epochs": horizon},
                            tuple(float(v) for v in values[i]), epoch_seconds=float(rng.choice([1.0, 1.5, 2.0])))
                      for i in range(count)]
            yield horizon, curves, [int(i) for i in rng.permutation(count)]


class _Trial:
    """What Ray's schedulers read of a trial (hashable: they key their records by it)."""

    def __init__(self, trial_id: str, status: str = "RUNNING"):
        self.trial_id, self.status = trial_id, status


def _ray_median(grace: int, queue: dict):
    """Ray Tune's own ``MedianStoppingRule`` as a replay's ``decide``; the trials waiting for a worker (``queue``,
    kept by :func:`~istar_tune.replay.schedulers.run_workers`) are the live PENDING and PAUSED trials it asks for."""
    from types import SimpleNamespace

    from ray.tune.experiment import Trial
    from ray.tune.schedulers import MedianStoppingRule, TrialScheduler

    rule = MedianStoppingRule(time_attr="epoch", metric="objective", mode="max", grace_period=grace,
                              min_samples_required=3, hard_stop=True)
    trials: dict[int, _Trial] = {}

    def live():
        waiting = [(i, Trial.PENDING) for i in queue["pending"]] + [(i, Trial.PAUSED) for i in queue["paused"]]
        return [_Trial(f"t{i}", status) for i, status in waiting]

    controller = SimpleNamespace(get_live_trials=live)

    def decide(index: int, epoch: int, value: float) -> str:
        trial = trials.setdefault(index, _Trial(f"t{index}"))
        action = rule.on_trial_result(controller, trial, {"epoch": epoch, "objective": value})
        return {TrialScheduler.STOP: schedulers.STOP, TrialScheduler.PAUSE: schedulers.PAUSE}.get(
            action, schedulers.CONTINUE)

    return decide


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("grace", [1, 2])
def test_the_replays_median_stopping_is_rays_rule_pauses_included(grace, workers):
    """Cross-check: with too few trials to judge, Ray's rule pauses a trial while others wait for a worker; the
    replay does the same, so every stop, every pause and the choice match."""
    rng = np.random.default_rng(grace * 10 + workers)
    for horizon, curves, order in _random_grids(rng, horizons=(3, 5), each=6):
        ours = schedulers.median_stopping(curves, Fixed(order=order), grace, workers)
        queue: dict = {}
        theirs = schedulers.run_workers(curves, order, workers, _ray_median(grace, queue), queue=queue)
        assert ours == theirs, (horizon, grace, workers, order)


def test_conformal_stopping_is_replayed_by_driving_the_searchs_own_scheduler_object():
    """The replay builds the registered scheduler as a search's group does and tells it each result: 25 strong
    curves finish first and calibrate it, then each of 5 weak ones stops after its first epoch."""
    from istar_tune.search.schedulers import Rule
    from istar_tune.search.schedulers.conformal import CONFORMAL

    curves = _curves(*([(0.6, 0.7, 0.8)] * 25 + [(0.2, 0.25, 0.3)] * 5))
    rule = Rule("conformal", horizon=3, grace_period=1, alpha=0.2)
    choice = schedulers.driven(curves, Fixed(order=range(30)), lambda: CONFORMAL.build(rule), workers=1)
    assert choice.epochs_trained == 25 * 3 + 5 * 1 and choice.chosen[0] < 25
    unbounded = schedulers.driven(curves[21:], Fixed(order=range(9)), lambda: CONFORMAL.build(rule), workers=1)
    assert unbounded.epochs_trained == 9 * 3  # at most 8 finished curves bound nothing: every trial runs to its end
