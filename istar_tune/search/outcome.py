"""How a search ended, from Tune's results: each trial's status (finished, stopped early, failed,
interrupted), each group's best trial (:func:`istar_tune.metrics.best_scored`), the summary printed at the end and the
command's exit code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from istar_tune import tracking
from istar_tune.config import group_key
from istar_tune.methods import get_method
from istar_tune.metrics import best_scored
from istar_tune.search.plan import PlannedGroup, base_config
from istar_tune.search.spaces.space import Group
from istar_tune.search.stopping import way_on
from istar_tune.search.tune.fused import ERROR, member_index, member_last
from istar_tune.search.tune.trainable import configuration_results, dev_values
from istar_tune.trial_config import SEARCH_KEY, members, trial_group
from istar_tune.trial_status import TrialStatus

# ---------------------------------------------------------------------------------------------- running


@dataclass
class TrialOutcome:
    trial_id: str
    status: str  # finished | stopped_early | failed | interrupted
    config: dict[str, Any]
    value: float | None
    epochs: int
    error: str = ""
    ended_at: float | None = None
    """Unix time of its last report."""
    trained_by: str = ""
    """The shared trial that completed this configuration on its way (empty: its own trial)."""
    dev_value: float | None = None
    """With held-out data (``value`` is then the held-out value that chose): the dev value beside it."""


@dataclass
class GroupOutcome:
    group: Group
    metric: str
    trials: list[TrialOutcome]
    best: TrialOutcome | None

    def count(self, status: str) -> int:
        return sum(t.status == status for t in self.trials)


@dataclass
class SearchSummary:
    name: str
    storage_path: str
    tracking_uri: str
    groups: list[GroupOutcome]
    planned_trials: int = 0
    interrupted: str = ""
    """Why the search stopped before every trial ended (empty when it ran to the end)."""
    signal_number: int = 0
    """The signal that stopped it (SIGINT, SIGTERM), if one did."""
    systemic: bool = False
    """A failure no retry can fix stopped it (``interrupted`` names the cause)."""
    mlflow_latencies_ms: list[float] = field(default_factory=list)
    mlflow_errors: list[str] = field(default_factory=list)
    phases_s: dict[str, float] = field(default_factory=dict)
    """Wall seconds of the search's phases: ``setup`` (checks, planning, MLflow experiment and parent run),
    ``fit`` (Tune running every trial) and ``flush`` (MLflow writes still queued when the last trial ended)."""
    disk_bytes: int | None = None
    """What the results folder holds on disk at the end (``None``: remote storage, not measured)."""
    checkpoint: str = ""
    """The search's ``settings.checkpoint``: what its finished trials kept (the last line says it)."""
    time_factor: float = 0.0
    """A rehearsal's seconds waited per modelled second of a trial (``--time-factor``); 0 when trials trained."""
    models: str = ""
    """The MLflow models' line: how many were logged and which could not be (empty: none to log)."""

    @property
    def failed(self) -> list[tuple[Group, TrialOutcome]]:
        return [(g.group, t) for g in self.groups for t in g.trials if t.status == TrialStatus.FAILED]

    def report(self) -> str:
        total = sum(len(g.trials) for g in self.groups)
        finished = sum(g.count(TrialStatus.FINISHED) for g in self.groups)
        stopped = sum(g.count(TrialStatus.STOPPED_EARLY) for g in self.groups)
        unfinished = sum(g.count(TrialStatus.INTERRUPTED) for g in self.groups)
        shared = {t.trained_by for g in self.groups for t in g.trials if t.trained_by}
        if shared:
            trials = len(shared) + sum(not t.trained_by for g in self.groups for t in g.trials)
            fused = any(member_index(t.trial_id) is not None for g in self.groups for t in g.trials)
            how = "fused" if fused else "epoch prefixes shared"
            label = f"{total} configurations in {trials} trial{'s' if trials != 1 else ''} ({how})"
        else:
            label = f"{total} trial{'s' if total != 1 else ''}"
        if self.interrupted and self.planned_trials:  # one count throughout: of the trials planned
            label = f"{total} of {self.planned_trials} {'configurations' if shared else 'trials'} started"
        lines = [f"search {self.name}: {label}, {finished} finished, {stopped} stopped early, "
                 f"{len(self.failed)} failed" + (f", {unfinished} interrupted" if unfinished else "")]
        if self.interrupted:
            left = self.planned_trials - finished - stopped - len(self.failed)
            label, then = (("STOPPED", way_on(self.interrupted)) if self.systemic
                           else ("INTERRUPTED", "continue with --resume"))
            unit = "configurations" if shared else "trials"
            lines.append(f"{label} ({self.interrupted}): {left} of {self.planned_trials} {unit} did not finish; {then}")
        for outcome in self.groups:
            best = outcome.best
            if best is None:
                lines.append(f"  {outcome.group.key}: no finished trial")
                continue
            method = get_method(outcome.group.method)
            keys = [*_SHOWN, *(("lam",) if method.uses_lambda else ()), *(("zeta",) if method.uses_zeta else ()),
                    *(_SECOND_STAGE_SHOWN if method.second_stage else ())]
            shown = {k: best.config[k] for k in keys if k in best.config}
            value = (f"held-out {outcome.metric} {best.value:.4f} (dev {best.dev_value:.4f}, which chose nothing)"
                     if best.dev_value is not None else
                     f"dev {outcome.metric} {best.value:.4f} (no data held out: the dev set chose it)")
            lines.append(f"  {outcome.group.key}: best {value} with "
                         + ", ".join(f"{k}={v}" for k, v in shown.items()) + f" (trial {best.trial_id})")
        if self.time_factor and self.phases_s.get("fit"):
            fit, modelled = self.phases_s["fit"], self.phases_s["fit"] / self.time_factor
            span = f"{modelled / 3600:.1f} hours" if modelled >= 5400 else f"{modelled / 60:.0f} minutes"
            lines.append(f"rehearsal: Tune ran the experiment's trials in {fit:.1f} s at time factor "
                         f"{self.time_factor:g}: a makespan of about {span} on the rehearsed cluster (an upper bound: "
                         "Ray's own overheads are scaled with it)")
        for group, trial in self.failed:
            lines.append(f"  FAILED {group.key} trial {trial.trial_id}: {trial.error}")
        if self.mlflow_errors:
            lines.append(f"  MLflow writes lost: {self.mlflow_errors[-1]}")
        if self.models:
            lines.append(self.models)
        on_disk = f" ({disk_size(self.disk_bytes)} on disk)" if self.disk_bytes is not None else ""
        kept = {"resume": ": finished trials kept their records, not their models (settings.checkpoint: weights "
                          "keeps them)",
                "none": ": no checkpoints (settings.checkpoint: weights keeps finished trials' models)"}
        lines.append(f"MLflow: {self.tracking_uri} (experiment {self.name}); Ray results: {self.storage_path}{on_disk}"
                     + kept.get(self.checkpoint, ""))
        return "\n".join(lines)


_SHOWN = ("learning_rate", "batch_size", "epochs", "seed")
_SECOND_STAGE_SHOWN = ("alpha", "isolayer_learning_rate")


def expected_trials(names: list[str], planned: dict[str, list[PlannedGroup]],
                     outcomes: dict[str, list[GroupOutcome]]) -> int:
    """Trials that run when every trial ends: the planned ones, less the seeds of groups that wait for a group
    which ended without a scored trial."""
    best = {trial_group(base_config(p, n)): o.best for n in names for p, o in zip(planned[n], outcomes[n])}
    return sum(p.trials for n in names for p in planned[n] if not p.after or best.get(p.after) is not None)


def every_trial_ended(names: list[str], planned: dict[str, list[PlannedGroup]],
                      outcomes: dict[str, list[GroupOutcome]]) -> bool:
    """Whether every trial expected to run (:func:`expected_trials`) ended without being interrupted."""
    ended = sum(len(g.trials) - g.count(TrialStatus.INTERRUPTED) for n in names for g in outcomes[n])
    return ended >= expected_trials(names, planned, outcomes)


def group_outcomes(planned: list[PlannedGroup], results: list, statuses: dict[str, str], search: str,
                   stopped: bool = False) -> list[GroupOutcome]:
    """Each planned group's trials among ``results`` (Tune's, of every search in the experiment) of ``search``.
    ``stopped``: the search was stopped before its end, so a trial that ended early without its scheduler stopping
    it was interrupted."""
    from ray.tune.experiment import Trial

    from istar_tune.search.stopping import systemic_cause
    from istar_tune.search.tune.scheduler import STOPPED_EARLY

    by_group: dict[str, list[TrialOutcome]] = {}
    for result in results:
        config = dict(result.config or {})
        if config.get(SEARCH_KEY, search) != search:
            continue
        metrics = result.metrics or {}
        trial_id = str(metrics.get("trial_id", Path(result.path or "?").name))
        ended = metrics.get("timestamp")
        devs = dev_values(config, metrics)
        for cid, configuration, value, epochs, passed in configuration_results(trial_id, config, metrics):
            trained_by = trial_id if cid != trial_id else ""
            member = member_index(cid) if trained_by else None  # a fused trial's member: its own error and dev values
            own = member_last(metrics, member) if member is not None else {}
            failed = own.get(ERROR, "") if not passed else ""
            if failed:
                outcome = TrialOutcome(cid, TrialStatus.FAILED, configuration, value, epochs, failed, ended)
            elif result.error is not None and not passed:
                error = tracking.error_summary(str(result.error), type(result.error).__name__)
                # A machine's failure (a full disk, a vanished folder) says nothing of the configuration.
                status = TrialStatus.INTERRUPTED if systemic_cause(str(result.error)) else TrialStatus.FAILED
                outcome = TrialOutcome(cid, status, configuration, value, epochs, error, ended)
            elif statuses.get(trial_id, Trial.TERMINATED) != Trial.TERMINATED and not passed:
                outcome = TrialOutcome(cid, TrialStatus.INTERRUPTED, configuration, value, epochs, ended_at=ended)
            else:
                by_scheduler = not stopped or trial_id in STOPPED_EARLY
                outcome = TrialOutcome(cid, tracking.ended_status(configuration, epochs, by_scheduler), configuration,
                                       value, epochs, ended_at=ended)
            outcome.trained_by = trained_by
            devs_of = devs if member is None else dev_values(members(config)[member], own)
            outcome.dev_value = devs_of.get(int(configuration.get("epochs", 0) or 0))
            by_group.setdefault(group_key(config), []).append(outcome)
    outcomes = []
    for item in planned:
        group = item.group
        trials = by_group.get(group_key(base_config(item)), [])
        best = best_scored([t for t in trials if t.status in tracking.COUNTED_STATUSES], lambda t: t.config,
                           lambda t: t.value)
        outcomes.append(GroupOutcome(group=group, metric=group.task_object.metric, trials=trials, best=best))
    return outcomes


def exit_code(summary: SearchSummary) -> int:
    """0; 1 when a trial failed for good or a systemic failure stopped the search; 128 + the signal that stopped it
    (130 for Ctrl-C, 143 for SIGTERM); 130 when it stopped early otherwise."""
    if summary.signal_number:
        return 128 + summary.signal_number
    if summary.interrupted:
        return 1 if summary.systemic else 130
    return 1 if summary.failed else 0


def disk_size(size: int) -> str:
    """A number of bytes as people read it: 187 MB, 1.3 GB, 12 kB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} B"


def folder_bytes(folder: str) -> int | None:
    """The bytes of every file under a local ``folder`` (``None`` when it is not a local folder)."""
    root = Path(folder)
    if not root.is_dir():
        return None
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink())
