"""The replay's ASHA against Syne Tune's own simulator on the exported grid: the same curves, grace period, η, workers
and trial orders (the replay's own: replay r seeded by (seed, r)), per model × method group.

    python -m benchmarks.bench_synetune --storage-path comparison --experiment minilm-sst2 [--replays 50]
                                        [--workers 4] [--grace 1] [--eta 2]

Run from the repository's root with Syne Tune importable (``pip install --no-deps --target DIR syne-tune==0.16.0
fastparquet==2026.9.0 cramjam==2.14.0``, then ``PYTHONPATH=DIR``). It exports the grid as ``istar-tune export
--format synetune`` does and, per group, prints for the replay's ASHA (Ray's rule, through Ray's object) and for Syne
Tune's ASHA simulated on the export (``UserBlackboxBackend``, its trials the grid's in the same orders): the share of
replays that chose the grid's choice and the epochs trained as a share of the grid's trials'; and in how many replays
Syne Tune's per-trial epochs equal the replay's worker model driven by Syne Tune's rung rule (:class:`SyneTuneRung`).
Its last line is one JSON object of these figures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import tempfile
from pathlib import Path

import numpy as np


class SyneTuneRung:
    """Syne Tune's ASHA rule (``syne_tune.optimizer.schedulers.asha``), written out as a replay's ``decide``: at a
    rung, a trial's score is ranked among those recorded there before it and its own (the share strictly better); it
    stops when that share exceeds 1/η; at the horizon every trial stops. Ray's rule, which the search and the replay
    run, stops a trial below the linear (1 − 1/η) quantile of the scores recorded before it."""

    def __init__(self, grace: int, eta: float, horizon: int):
        count = int(math.log(horizon / grace) / math.log(eta) + 1)
        self.eta, self.horizon = eta, horizon
        self.rungs: list[tuple[float, dict[int, float]]] = [(grace * eta**k, {}) for k in reversed(range(count))]
        self.trained: dict[int, int] = {}

    def __call__(self, index: int, epoch: int, value: float) -> str:
        from istar_tune.replay.schedulers import CONTINUE, STOP

        self.trained[index] = epoch
        if epoch >= self.horizon:
            return STOP
        for milestone, recorded in self.rungs:
            if epoch < milestone or index in recorded:
                continue
            better = sum(1 for other in recorded.values() if other > value)
            recorded[index] = value
            return STOP if better / len(recorded) > 1 / self.eta else CONTINUE
        return CONTINUE


def simulate(folder: str, task: str, metric: str, workers: int, grace: int, eta: float,
             orders: list[list[dict]]) -> list[list[int]]:
    """Syne Tune's ASHA simulated on the blackbox in ``folder`` once per order (each a list of configurations, by the
    hyperparameters that tell the grid's trials apart), its trials those configurations at the largest epochs in that
    order and no others: each trial's last epoch, in the order's order."""
    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
    from syne_tune.blackbox_repository.blackbox_tabular import deserialize
    from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend
    from syne_tune.config_space import choice
    from syne_tune.experiments import load_experiment
    from syne_tune.optimizer.baselines import ASHA
    from syne_tune.optimizer.scheduler import TrialSuggestion

    class InOrder(ASHA):
        def __init__(self, points: list[dict], **kwargs):
            super().__init__(**kwargs)
            self.points = list(points)

        def suggest(self):
            return TrialSuggestion.start_suggestion(self.points.pop(0)) if self.points else None

    box = deserialize(folder)[task]
    horizon = int(box.fidelity_values.max())
    arms = [r for r in box.hyperparameters.to_dict("records") if r["epochs"] == horizon]
    space = {k: choice(sorted({r[k] for r in arms})) for k in arms[0]}

    def arm(key: dict) -> dict:
        return next(r for r in arms if all(r[k] == v for k, v in key.items()))

    found = []
    for order in orders:
        scheduler = InOrder([arm(key) for key in order], config_space=space, metric=metric, do_minimize=False,
                            time_attr="epoch", max_t=horizon, grace_period=grace, reduction_factor=eta)
        tuner = Tuner(trial_backend=UserBlackboxBackend(blackbox=box, elapsed_time_attr="elapsed_s"),
                      scheduler=scheduler, stop_criterion=StoppingCriterion(max_num_trials_finished=len(order)),
                      n_workers=workers, sleep_time=0, callbacks=[SimulatorCallback()], save_tuner=False,
                      print_update_interval=1e9, results_update_interval=1e9)
        with contextlib.redirect_stdout(io.StringIO()):  # Syne Tune prints each trial's table as it goes
            tuner.run()
            results = load_experiment(tuner.name).results
        found.append([int(group["epoch"].max()) for _, group in sorted(results.groupby("trial_id"))])
    return found


def telling_apart(curves: list) -> list[str]:
    """The hyperparameters whose values differ between ``curves`` (``epochs`` aside)."""
    keys = sorted({k for c in curves for k in c.config if k != "epochs"})
    return [k for k in keys if len({repr(c.config.get(k)) for c in curves}) > 1]


def compare_group(unit, folder: Path, args) -> dict:
    """One group's figures: the replay's ASHA and Syne Tune's on the same orders."""
    from istar_tune.replay import schedulers
    from istar_tune.replay.curves import arms
    from istar_tune.search.schedulers import Rule
    from istar_tune.search.schedulers.asha import ASHA

    found = arms(unit.curves)
    indices = list(found)
    curves = [unit.curves[i] for i in indices]
    completes = {j: found[i] for j, i in enumerate(indices)}
    horizon = max(c.epochs for c in curves)
    keys = telling_apart(curves)
    rule = Rule("asha", horizon, args.grace, args.eta)
    ours, theirs, same = [], [], 0
    orders = [[int(i) for i in np.random.default_rng([args.seed, r]).permutation(len(curves))]
              for r in range(args.replays)]
    simulated = simulate(str(folder / f"{unit.model}-{unit.method}"), unit.task, "held_out_score"
                         if curves[0].dev is not None else "dev_score", args.workers, args.grace, args.eta,
                         [[{k: curves[i].config[k] for k in keys} for i in order] for order in orders])
    for r, (order, epochs) in enumerate(zip(orders, simulated, strict=True)):
        ours.append(schedulers.driven(curves, np.random.default_rng([args.seed, r]), lambda: ASHA.build(rule),
                                      args.workers, completes=completes))
        last = dict(zip(order, epochs, strict=True))
        theirs.append(schedulers.run_workers(curves, order, args.workers, lambda i, e, v, last=last: (
            schedulers.STOP if e >= last[i] else schedulers.CONTINUE), completes))
        rung = SyneTuneRung(args.grace, args.eta, horizon)
        schedulers.run_workers(curves, order, args.workers, rung)
        same += [rung.trained[i] for i in order] == epochs
    trained = sum(c.epochs for c in curves)

    def figures(choices) -> dict:
        best = unit.model_of(unit.best)
        return {"chose_the_grids_choice": round(float(np.mean([
                    unit.model_of((indices[c.chosen[0]], c.chosen[1])) == best for c in choices])), 3),
                "epochs_share": round(float(np.mean([c.epochs_trained for c in choices])) / trained, 3)}

    return {"group": f"{unit.model}/{unit.task}/{unit.method}", "trials": len(curves), "replay": figures(ours),
            "syne_tune": figures(theirs), "syne_tune_equals_replay_with_its_rule": f"{same}/{len(orders)}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", required=True)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--grace", type=int, default=1)
    parser.add_argument("--eta", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from istar_tune.replay.export import export_grid
    from istar_tune.replay.reading import read_grid
    from istar_tune.tracking.storage import default_tracking_uri

    uri = default_tracking_uri(args.storage_path)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-synetune-") as folder:
        print(export_grid(uri, args.experiment, "synetune", folder), flush=True)
        for unit in read_grid(uri, args.experiment):
            rows.append(compare_group(unit, Path(folder), args))
            print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"grace": args.grace, "eta": args.eta, "workers": args.workers, "replays": args.replays,
                      "groups": rows}))


if __name__ == "__main__":
    main()
