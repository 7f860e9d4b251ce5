"""The contract every registered strategy keeps (each backend with no scheduler, each scheduler over a grid): it is
planned, the dry run names it, a short simulated search runs every configuration once under it, its state saves and
restores mid-search, it shares epoch prefixes where it claims to (a grid's backend; every scheduler over a grid:
a stopped shared trial completes the configurations it reached), and a scheduler stops a trial far below its
group's finished ones (one that never stops anything is not early stopping)."""

from __future__ import annotations

import tempfile
from types import SimpleNamespace

import pytest

from istar_tune import tracking
from istar_tune.search import backends, schedulers
from istar_tune.search.dry_run import dry_run_report
from istar_tune.search.plan import base_config, group_plans, plan
from istar_tune.search.run import run_searches
from istar_tune.search.spaces.file import load_search_space
from istar_tune.search.tune.scheduler import GroupScheduler
from istar_tune.search.tune.searcher import GroupSearcher
from istar_tune.search.tune.simulate import Simulation
from istar_tune.trial_config import trial_group

pytestmark = pytest.mark.slow
SPACE = """\
name: {name}
models: [bert]
tasks: [rte]
methods: [base]
hyperparameters:
{domains}
search: {{algorithm: {algorithm}, num_samples: {samples}, seed: 0}}
scheduler: {{type: {scheduler}, grace_period: 1, reduction_factor: 2}}
resources: {{cpu: 1}}
settings: {{recipe: paper, checkpoint: resume}}
"""
GRID = "  epochs: {grid: [1, 2, 3]}\n  batch_size: {grid: [16, 32, 64]}\n  learning_rate: 3.0e-5"
CHOICES = "  epochs: 3\n  batch_size: {choice: [16, 32, 64]}\n  learning_rate: {loguniform: [1.0e-5, 1.0e-4]}"
RANGES = "  epochs: 3\n  weight_decay: {uniform: [0.0, 0.1]}\n  learning_rate: {loguniform: [1.0e-5, 1.0e-4]}"
STRATEGIES = ([("backend", name) for name in backends.registered()] +
              [("scheduler", name) for name in schedulers.registered() if name != "none"])


def _space(tmp_path, role: str, name: str):
    backend = backends.get_backend(name if role == "backend" else "grid")
    domains = GRID if backend.searches("grid") else CHOICES if backend.searches("choice") else RANGES
    text = SPACE.format(name=f"contract-{name}", algorithm=backend.name, domains=domains,
                        scheduler=name if role == "scheduler" else "none", samples=1 if backend.enumerates else 4)
    (tmp_path / f"{name}.yaml").write_text(text)
    return load_search_space(tmp_path / f"{name}.yaml")


@pytest.mark.parametrize(("role", "name"), STRATEGIES, ids=[f"{r}-{n}" for r, n in STRATEGIES])
def test_every_registered_strategy_plans_dry_runs_searches_restores_and_shares(role, name, tmp_path, local_ray):
    space = _space(tmp_path, role, name)
    planned = plan(space, simulated=True)
    configurations, trials = sum(p.trials for p in planned), sum(p.trainings for p in planned)
    shares = backends.get_backend(space.algorithm).enumerates
    assert (configurations, trials) == ((9, 3) if shares else (4, 4))  # 3 batch sizes × 3 epochs in 3 shared trials
    report = dry_run_report(space, planned)
    assert f"algorithm {space.algorithm} (" in report and f"scheduler {space.scheduler}" in report
    _saves_and_restores(space, planned)
    if role == "scheduler":
        _stops_a_weak_trial(space, planned)
    summary, = run_searches([space], storage_path=tmp_path / "runs", write=lambda _: None,
                            simulation=Simulation(time_factor=0.0005))
    runs = tracking.trial_runs(summary.tracking_uri, space.name, simulated=True)
    assert not summary.failed and len(runs) <= configurations
    assert all(r.status in ("finished", "stopped_early") for r in runs)
    if shares:  # a configuration has a run where its shared trial reached its epochs
        trained = {(r.config["batch_size"], r.config["epochs"]) for r in runs}
        assert len(trained) == len(runs) and all((size, 1) in trained for size, _ in trained)
        assert {size for size, _ in trained} == {16, 32, 64}
    else:
        assert len(runs) == configurations


def _saves_and_restores(space, planned) -> None:
    """Two trials handed out and a result told, the searcher and scheduler saved; restored ones hand out what the
    first ones would, under the same rules."""
    key = trial_group(base_config(planned[0]))
    rules = {key: space.stopping_rule(planned[0].group.max_epochs, "objective")}
    first, scheduler = GroupSearcher(group_plans(space, planned), seed=space.seed), GroupScheduler(rules)
    handed = [first.suggest(str(i)) for i in range(2)]
    assert all(isinstance(config, dict) for config in handed)
    first.on_trial_complete("0", {"objective": 0.5, "training_iteration": 1})
    with tempfile.TemporaryDirectory() as folder:
        first.save(f"{folder}/searcher.pkl")
        scheduler.save(f"{folder}/scheduler.pkl")
        restored = GroupSearcher(group_plans(space, planned), seed=space.seed)
        restored.restore(f"{folder}/searcher.pkl")
        again = GroupScheduler()
        again.restore(f"{folder}/scheduler.pkl")
    assert [restored.suggest(str(i)) for i in range(2, 4)] == [first.suggest(str(i)) for i in range(2, 4)]
    assert again.rules == scheduler.rules == ({key: rules[key]} if space.scheduler != "none" else {})


class _Trial(SimpleNamespace):
    __hash__ = object.__hash__


def _stops_a_weak_trial(space, planned) -> None:
    """Twenty trials at 0.9 after every epoch run to their end, then six at 0.1 report their first two epochs, with
    nothing waiting to start: the group's scheduler stops at least one of the six before its last epoch (a rule that
    calibrates on finished trials, as conformal stopping does, has twenty)."""
    config = {**base_config(planned[0]), "epochs": 3}
    scheduler = GroupScheduler({trial_group(config): space.stopping_rule(3, "objective")})
    controller = SimpleNamespace(get_live_trials=lambda: [], search_alg=None)
    good = [_Trial(trial_id=f"good{i}", config=config, status="RUNNING") for i in range(20)]
    weak = [_Trial(trial_id=f"weak{i}", config=config, status="RUNNING") for i in range(6)]
    for trial in good + weak:
        scheduler.on_trial_add(controller, trial)
    for trial in good:
        for epoch in (1, 2, 3):
            scheduler.on_trial_result(controller, trial, {"training_iteration": epoch, "objective": 0.9})
        scheduler.on_trial_complete(controller, trial, {"training_iteration": 3, "objective": 0.9})
    decisions = {}
    for epoch in (1, 2):
        for trial in weak:
            if decisions.get(trial.trial_id) != "STOP":
                result = {"training_iteration": epoch, "objective": 0.1}
                decisions[trial.trial_id] = scheduler.on_trial_result(controller, trial, result)
    assert "STOP" in decisions.values(), f"{space.scheduler} stopped no weak trial: {decisions}"
