"""The search's progress lines (:class:`ProgressPrinter`) and each Tune trial's last status (:class:`TrialStatuses`),
both Tune callbacks that run in the Ray driver."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from ray.tune import Callback

from istar_tune import tracking
from istar_tune.config import trial_epochs
from istar_tune.console import say
from istar_tune.metrics import HOLDOUT_PREFIX, score
from istar_tune.search.stopping import systemic_cause
from istar_tune.search.tune.fused import member_ended, member_view
from istar_tune.trial_config import FUSED_KEY, members, trial_task


class ProgressPrinter(Callback):
    """A line when a trial starts (naming its configuration), per reported epoch in small searches, and when it
    ends, each with the configuration's words (:func:`istar_tune.tracking.run_name`); picklable. Within a long
    epoch the trial itself prints a heartbeat (:meth:`istar_tune.search.tune.reporter.TuneReporter.heartbeat`)."""

    EPOCH_LINES_UP_TO = 64
    """Searches with more trials than this print only started and finished trials."""

    def __init__(self, total: int, write: Callable[[str], None] | None = None):
        self.total = total
        self.done = 0
        self.write = write or say
        self.counted = False

    def on_step_begin(self, iteration, trials, **info):
        """Once: a resumed search's count goes on from the trials that ended before it (Tune restored them ended)."""
        if not self.counted:
            self.counted = True
            self.done = sum(t.status in ("TERMINATED", "ERROR") for t in trials)

    def on_trial_start(self, iteration, trials, trial, **info):
        again = " again" if "epoch" in (trial.last_result or {}) else ""
        self.write(f"  trial {trial.trial_id} started{again}: {named(trial.config)}")

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if self.total > self.EPOCH_LINES_UP_TO or "epoch" not in result:
            return
        metric = trial_task(trial.config).metric
        runs = [(trial.trial_id, trial.config, result)] if not trial.config.get(FUSED_KEY) else [
            (f"{trial.trial_id}-m{i}", config, view) for i, config in enumerate(members(trial.config))
            if (view := member_view(result, i)) is not None and "epoch" in view]
        for run_id, config, values in runs:  # a fused trial: each member that reported the epoch
            self.write(f"  trial {run_id} epoch {values.get('epoch')}/{trial_epochs(config)}: {metric} "
                       f"{values.get(metric, float('nan')):.4f} ({values.get('epoch_time_s', 0):.0f} s) — "
                       f"{tracking.run_name(config)}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        config: dict[str, Any] = trial.config
        shown = outcome(trial.last_result or {}, trial_task(config).metric)
        shown = f"{shown} — " if shown else ""
        if config.get(FUSED_KEY):
            failed = sum(bool(member_ended(trial.last_result, i)[2]) for i in range(len(members(config))))
            shown = f"{failed} of its members failed — " if failed else ""
        self.write(f"[{self.done}/{self.total}] trial {trial.trial_id} done: {shown}{named(config)}")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.done += 1
        error = tracking.trial_error_text(trial)
        said = f"INTERRUPTED ({cause})" if (cause := systemic_cause(error)) else f"FAILED: {error}"
        self.write(f"[{self.done}/{self.total}] trial {trial.trial_id} {said} — {named(trial.config)}")

    def on_trial_recover(self, iteration, trials, trial, **info):
        """A retry says nothing, except where the machine failed: the search stops there, and this says where."""
        if cause := systemic_cause(tracking.trial_error_text(trial)):
            self.done += 1
            self.write(f"[{self.done}/{self.total}] trial {trial.trial_id} INTERRUPTED ({cause}) — "
                       f"{tracking.run_name(trial.config)}")


def outcome(result: dict[str, Any], metric: str) -> str:
    """What chose a finished trial's model, first, as the tables read it (:func:`istar_tune.metrics.choosing_score`):
    ``held-out accuracy 0.7649 (dev 0.7603) at epoch 2`` where it held data out, else ``accuracy 0.7603``."""
    held, dev = score(result, HOLDOUT_PREFIX + metric), score(result, metric)
    if isinstance(held, float):
        epoch = result.get("scored_epoch", result.get("epoch"))
        scored = f" (dev {dev:.4f})" if isinstance(dev, float) else ""
        return f"held-out {metric} {held:.4f}{scored}" + (f" at epoch {epoch}" if epoch is not None else "")
    return f"{metric} {dev:.4f}" if isinstance(dev, float) else ""


def named(config: dict[str, Any]) -> str:
    """A trial's configuration in words (:func:`istar_tune.tracking.run_name`); a fused trial's, each member's."""
    if not config.get(FUSED_KEY):
        return tracking.run_name(config)
    return f"{len(members(config))} fused: " + "; ".join(tracking.run_name(c) for c in members(config))


class TrialStatuses(Callback):
    """Each Tune trial's last status (``TERMINATED``, ``ERROR``, ...), for the summary: a trial's results alone do
    not say how it ended. Kept as Tune reports trials ending, and whole when the experiment ends."""

    def __init__(self) -> None:
        self.statuses: dict[str, str] = {}
        self.trials: list = []

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        self.statuses[trial.trial_id] = trial.status

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        self.statuses[trial.trial_id] = trial.status

    def on_experiment_end(self, trials: list, **info) -> None:
        self.statuses.update({t.trial_id: t.status for t in trials})
        self.trials = list(trials)

    def results(self) -> list[SimpleNamespace]:
        """Each trial of the ended experiment as Tune's ``ResultGrid`` gives it (config, metrics, path, error), read
        leniently: for when Tune cannot read its own results back (an error file a full disk cut short)."""
        return [SimpleNamespace(config=t.config, metrics={"trial_id": t.trial_id, **(t.last_result or {})},
                                path=getattr(t, "path", None),
                                error=RuntimeError(tracking.trial_error_text(t)) if t.status == "ERROR" else None)
                for t in self.trials]
