"""Each strategy's replay against a hand-computed run of it: which trials stop where, what is chosen, what it cost.
The strategies' randomness (the order trials start in, the draws) is fixed by a stub generator. The early-stopping
schedulers are replayed by driving the objects a search builds (Ray's, for ASHA, Hyperband and median stopping); an
independent implementation of their rules, written here from Ray's documentation, checks them on random grids."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from istar_tune.replay import schedulers
from istar_tune.replay.curves import Choice, Curve
from istar_tune.search.schedulers import Rule
from istar_tune.search.schedulers.asha import ASHA
from istar_tune.search.schedulers.hyperband import HYPERBAND
from istar_tune.search.schedulers.median import MEDIAN


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


def _driven(scheduler, curves, rng, workers, grace=1, eta=3.0, completes=None):
    """The replay of a registered ``scheduler`` on ``curves``: the object a search's group builds, driven."""
    rule = Rule(scheduler.name, max(c.epochs for c in curves), grace, eta)
    return schedulers.driven(curves, rng, lambda: scheduler.build(rule), workers, completes=completes)


def test_asha_on_one_worker_stops_at_each_rung_below_the_quantile_of_what_came_before():
    # Rungs at epochs 2 and 1 (grace 1, η 2, horizon 3). c0 sets both rungs and ends at 3; c1 0.4 < 0.5 stops at
    # rung 1; c2 passes rung 1 (0.6 >= median 0.45) and stops at rung 2 (0.5 < 0.6); c3 passes both (0.55 >= 0.5,
    # 0.65 >= 0.55). Ended: c0@3 0.7, c1@1 0.4, c2@2 0.5, c3@3 0.66: c0, not the grid's best c1 (0.95).
    choice = _driven(ASHA, _curves(*ASHA_CURVES), Fixed(order=[0, 1, 2, 3]), 1, grace=1, eta=2)
    assert (choice.chosen, choice.epochs_trained, choice.seconds) == ((0, 3), 9, 9.0)


def test_asha_on_two_workers_sees_results_in_the_order_they_finish():
    # c0's epochs take 10 s, the others' 1 s: c1 sets the rungs (0.4, 0.9) and ends at 3; c2 stops at rung 2
    # (0.5 < 0.9); c3 passes rung 1 (0.55 >= median(0.4, 0.6)) and stops at rung 2 (0.65 < 0.7, the median of 0.9
    # and 0.5); c0's first epoch ends at 10 s: 0.5 < median(0.4, 0.6, 0.55) = 0.55, stopped.
    curves = _curves(*ASHA_CURVES, seconds=(10.0, 1.0, 1.0, 1.0))
    choice = _driven(ASHA, curves, Fixed(order=[0, 1, 2, 3]), 2, grace=1, eta=2)
    assert (choice.chosen, choice.epochs_trained, choice.seconds) == ((1, 3), 8, 17.0)


def test_hyperband_brackets_come_from_the_draws_and_a_later_bracket_starts_at_a_later_rung():
    # Ray's asynchronous Hyperband draws each trial's bracket from numpy's global generator, which the replay seeds
    # from its own: seed 0 draws bracket 0 for all four trials, seed 149 bracket 1 (found by trying seeds).
    curves = _curves(*ASHA_CURVES)
    first = _driven(HYPERBAND, curves, Fixed(order=[0, 1, 2, 3], integers=0), 1, grace=1, eta=2)
    assert first == _driven(ASHA, curves, Fixed(order=[0, 1, 2, 3]), 1, grace=1, eta=2)  # bracket 0 is ASHA's
    last = _driven(HYPERBAND, curves, Fixed(order=[0, 1, 2, 3], integers=149), 1, grace=1, eta=2)
    # Bracket 1's one rung is epoch 2: c0 sets it (0.6), c1 passes (0.9), c2 stops (0.5 < 0.75, the median of 0.6
    # and 0.9), c3 passes (0.65 >= 0.6): 3 + 3 + 2 + 3 epochs, and c1 (0.95) chosen.
    assert (last.chosen, last.epochs_trained) == ((1, 3), 11)


def test_median_stopping_compares_the_best_so_far_with_the_median_of_the_others_means():
    # Three others needed: c3 at epoch 1 sees 0.5, 0.7, 0.6 (median 0.6) > its 0.4, stopped; c4 sees 0.5, 0.7, 0.6,
    # 0.4 (median 0.55) > 0.3, stopped. Chosen: c1 (0.8), not the grid's best c4 (0.95).
    curves = [Curve({"method": "base", "learning_rate": 1e-5 * (i + 1), "epochs": 2}, v) for i, v in
              enumerate([(0.5, 0.6), (0.7, 0.8), (0.6, 0.65), (0.4, 0.9), (0.3, 0.95)])]
    choice = _driven(MEDIAN, curves, Fixed(order=[0, 1, 2, 3, 4]), 1, grace=1)
    assert (choice.chosen, choice.epochs_trained) == ((1, 2), 8)


def test_a_failed_trial_counts_its_epochs_and_results_but_is_never_chosen():
    curves = _curves([0.9], [0.4, 0.5, 0.6], [0.45, 0.5, 0.55], failed=(0,))
    choice = _driven(ASHA, curves, Fixed(order=[0, 1, 2]), 1, grace=1, eta=2)
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


@pytest.mark.parametrize("scheduler", [ASHA, MEDIAN], ids=["asha", "median"])
def test_configurations_that_differ_only_in_epochs_are_trials_of_their_own(scheduler):
    # (lr, 1 epoch) is the first epoch of (lr, 3 epochs): both are trials; stopping the 3-epoch one after epoch 1
    # leaves the 1-epoch configuration's model.
    shared = [Curve({"method": "base", "learning_rate": 1e-5, "epochs": 3}, (0.9, 0.6, 0.5)),
              Curve({"method": "base", "learning_rate": 1e-5, "epochs": 1}, (0.9,)),
              Curve({"method": "base", "learning_rate": 3e-5, "epochs": 3}, (0.3, 0.4, 0.5))]
    run = _driven(scheduler, shared, Fixed(order=[0, 1, 2]), 1, grace=1, eta=2)
    assert shared[run.chosen[0]].at(run.chosen[1]) == shared[1].config


def test_a_trial_that_reaches_epoch_k_completes_the_k_epoch_configuration_on_its_way():
    # One family, epochs {1, 2, 3} shared: the longest runs, stopped by nobody; the 2-epoch configuration (0.9) is
    # the best, and the trial completed it on its way to 3 (0.6).
    curves = [Curve({"method": "base", "learning_rate": 1e-5, "epochs": 3}, (0.5, 0.9, 0.6))]
    alone = _driven(ASHA, curves, Fixed(order=[0]), 1, grace=1, eta=2)
    on_way = _driven(ASHA, curves, Fixed(order=[0]), 1, grace=1, eta=2, completes={0: [1, 2, 3]})
    assert alone.chosen == (0, 3) and on_way.chosen == (0, 2) and on_way.epochs_trained == 3


# ------------------------------------------------------------------ an independent implementation, to check against


class _Bracket:
    """One bracket of asynchronous successive halving (Ray's ``_Bracket``): rungs at ``grace · η^(k + s)`` epochs
    below the horizon; a trial reaching a rung goes on if its score is at least the ``1 - 1/η`` quantile (numpy's
    linear one, NaNs left out) of the scores recorded there before it."""

    def __init__(self, grace: int, horizon: int, eta: float, s: int) -> None:
        count = int(np.log(horizon / grace) / np.log(eta) - s + 1)
        self.quantile = 1 - 1 / eta
        # Per rung: its epoch, the trials recorded there, their finite scores sorted.
        self.rungs: list[tuple[float, set[int], list[float]]] = [(grace * eta ** (k + s), set(), [])
                                                                 for k in reversed(range(count))]

    def on_result(self, index: int, epoch: int, value: float) -> str:
        for milestone, recorded, scores in self.rungs:
            if epoch < milestone or index in recorded:
                continue
            cutoff = _quantile(scores, self.quantile) if scores else None
            recorded.add(index)
            if not math.isnan(value):
                bisect.insort(scores, value)
            return schedulers.STOP if cutoff is not None and value < cutoff else schedulers.CONTINUE
        return schedulers.CONTINUE


def _quantile(ordered: list[float], q: float) -> float:
    """numpy's linear quantile of sorted values (its interpolation, to the last bit)."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    a, b, t = ordered[low], ordered[high], position - low
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def _reference_asha(curves: Sequence[Curve], rng: np.random.Generator, grace: int, eta: float, workers: int,
         brackets: int = 1, completes: Mapping[int, Sequence[int]] | None = None) -> Choice:
    """Asynchronous successive halving (``brackets`` > 1: asynchronous Hyperband, each trial drawn into a bracket
    with Ray's weights) over every configuration in a random order, the horizon the largest ``epochs``."""
    horizon = max(c.epochs for c in curves)
    grace = min(grace, horizon)
    count = max(1, min(brackets, int(np.log(horizon / grace) / np.log(eta)) + 1))
    built = [_Bracket(grace, horizon, eta, s) for s in range(count)]
    sizes = np.array([len(b.rungs) for b in built])
    weights = np.e ** (sizes - sizes.max())
    order = [int(i) for i in rng.permutation(len(curves))]
    draws = rng.choice(len(built), size=len(curves), p=weights / weights.sum())
    bracket_of = {index: built[int(draw)] for index, draw in zip(order, draws)}

    def decide(index: int, epoch: int, value: float) -> str:
        if epoch >= horizon:
            return schedulers.STOP
        return bracket_of[index].on_result(index, epoch, value)

    return schedulers.run_workers(curves, order, workers, decide, completes)


def _reference_median(curves: Sequence[Curve], rng: np.random.Generator, grace: int, workers: int,
                    min_samples: int = 3, completes: Mapping[int, Sequence[int]] | None = None) -> Choice:
    """Ray's median stopping rule with a hard stop: from epoch ``grace`` on, a trial whose best score so far is below
    the median of the other trials' mean scores over epochs ``grace..t`` (trials that reached epoch t) stops; with
    fewer than ``min_samples`` such trials it pauses while other trials wait to start or go on (yielding its worker,
    as Ray's rule does), else it goes on."""
    queue: dict = {}
    sums: dict[int, float] = {}
    best: dict[int, float] = {}
    means_at: dict[int, list[float]] = {}  # epoch t → the sorted finite means over grace..t of trials that reached t

    def decide(index: int, epoch: int, value: float) -> str:
        best[index] = value if epoch == 1 else max(best[index], value)  # max() as Ray's: a NaN stays where it is
        if epoch < grace:
            return schedulers.CONTINUE
        sums[index] = sums.get(index, 0.0) + value
        others = means_at.setdefault(epoch, [])
        if len(others) >= min_samples:
            middle = len(others) // 2
            median = others[middle] if len(others) % 2 else (others[middle - 1] + others[middle]) / 2
            action = schedulers.STOP if median > best[index] else schedulers.CONTINUE
        else:  # too few to judge: Ray's rule yields the worker when a trial waits for one
            action = schedulers.PAUSE if queue["pending"] or queue["paused"] else schedulers.CONTINUE
        mean = sums[index] / (epoch - grace + 1)
        if math.isfinite(mean):
            bisect.insort(others, mean)
        return action

    order = [int(i) for i in rng.permutation(len(curves))]
    return schedulers.run_workers(curves, order, workers, decide, completes, queue)



@pytest.mark.parametrize("eta", [2, 3, 4])
@pytest.mark.parametrize("workers", [1, 3])
def test_the_replays_asha_equals_an_independent_implementation_with_the_same_trial_orders(eta, workers):
    """Cross-check: the same curves, start order and worker timing; every stop decision and so the choice and its
    cost are the same as the rule written out here makes them (at 3 epochs too, where η 3 and 4 cut once)."""
    rng = np.random.default_rng(eta * 10 + workers)
    for horizon, curves, order in _random_grids(rng, horizons=(3, 5, 9), each=5):
        ours = _driven(ASHA, curves, Fixed(order=order), workers, grace=1, eta=eta)
        reference = _reference_asha(curves, Fixed(order=order), grace=1, eta=eta, workers=workers)
        assert ours == reference, (horizon, eta, workers, order)


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


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("grace", [1, 2])
def test_the_replays_median_stopping_equals_an_independent_implementation_pauses_included(grace, workers):
    """Cross-check: with too few trials to judge, Ray's rule pauses a trial while others wait for a worker; the
    rule written out here does the same, so every stop, every pause and the choice match."""
    rng = np.random.default_rng(grace * 10 + workers)
    for horizon, curves, order in _random_grids(rng, horizons=(3, 5), each=6):
        ours = _driven(MEDIAN, curves, Fixed(order=order), workers, grace=grace)
        reference = _reference_median(curves, Fixed(order=order), grace, workers)
        assert ours == reference, (horizon, grace, workers, order)


def test_the_quantile_is_numpys_to_the_last_bit():
    rng = np.random.default_rng(1)
    for n in range(1, 40):
        values = sorted(rng.normal(size=n).tolist())
        for eta in (2, 3, 4):
            assert _quantile(values, 1 - 1 / eta) == np.percentile(values, (1 - 1 / eta) * 100)


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
