from __future__ import annotations

from types import SimpleNamespace

from ray.tune.schedulers import MedianStoppingRule, TrialScheduler

from istar_tune.search.schedulers.median import MEDIAN, MIN_SAMPLES
from istar_tune.search.schedulers.scheduler import Rule


class Trial:
    def __init__(self, trial_id):
        self.trial_id, self.status = trial_id, "RUNNING"


class Controller:
    def __init__(self, waiting):
        self.waiting = waiting

    def get_live_trials(self):
        return [SimpleNamespace(status="PENDING")] * self.waiting


def test_median_stopping_is_rays_hard_stop_from_the_grace_period_on():
    rule = MEDIAN.build(Rule("median", horizon=5, grace_period=2))
    assert isinstance(rule, MedianStoppingRule) and MEDIAN.pauses and MEDIAN.reads == ("grace_period",)
    assert rule._grace_period == 2 and rule._min_samples_required == MIN_SAMPLES == 3 and rule._hard_stop
    trials = [Trial(str(i)) for i in range(5)]
    for trial in trials:
        rule.on_trial_add(None, trial)
    result = lambda epoch, value: {"training_iteration": epoch, "objective": value}  # noqa: E731
    assert rule.on_trial_result(Controller(1), trials[0], result(1, 0.1)) == TrialScheduler.CONTINUE  # in grace
    # at epoch 2 with nobody to compare against: it yields its worker to a waiting trial, or goes on
    assert rule.on_trial_result(Controller(1), trials[0], result(2, 0.1)) == TrialScheduler.PAUSE
    assert rule.on_trial_result(Controller(0), trials[1], result(2, 0.9)) == TrialScheduler.CONTINUE
    for trial in trials[2:4]:
        rule.on_trial_result(Controller(0), trial, result(2, 0.8))
    assert rule.on_trial_result(Controller(0), trials[4], result(2, 0.2)) == TrialScheduler.STOP
