"""Seconds per trial of the search machinery itself: no-op trials through `run_search` on a local Ray instance.

    python benchmarks/bench_ray_overhead.py [--trials 100] [--cpu-per-trial 0.25]

Each trial reports one epoch and returns, so the time measured is Ray Tune's scheduling, the trial actors,
checkpoint-free reporting, and the MLflow logging of every trial (parent run, child runs, params, metrics, status).
The figure printed is wall time of the whole search divided by the number of trials.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def noop_trainable(config, settings, **_) -> None:
    from ray import tune

    tune.report({"epoch": 1, "accuracy": float(config["learning_rate"]), "objective": float(config["learning_rate"])})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--cpu-per-trial", type=float, default=0.25)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")

    from istar_tune.search.run import run_search
    from istar_tune.search.spaces.file import load_search_space
    from istar_tune.tracking.runs import trial_runs

    with tempfile.TemporaryDirectory() as tmp:
        rates = ", ".join(f"{1e-5 * (i + 1):.6g}" for i in range(args.trials))
        space_file = Path(tmp) / "noop.yaml"
        space_file.write_text(
            f"name: overhead\nmodels: [tiny-bert]\ntasks: [sst2]\nmethods: [base]\nhyperparameters:\n"
            f"  epochs: 1\n  learning_rate: {{grid: [{rates}]}}\nresources: {{cpu: {args.cpu_per_trial}}}\n")
        space = load_search_space(space_file)
        import ray

        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        start = time.perf_counter()
        summary = run_search(space, storage_path=Path(tmp) / "runs", write=lambda _: None,
                             trainable_fn=noop_trainable)
        elapsed = time.perf_counter() - start
        ray.shutdown()
        finished = sum(len(g.trials) for g in summary.groups)
        logged = len(trial_runs(summary.tracking_uri, "overhead"))
    print(f"{finished} no-op trials ({logged} MLflow child runs), {args.cpu_per_trial:g} CPU each, "
          f"{os.cpu_count()} CPUs: {elapsed:.1f} s in all, {elapsed / finished:.3f} s per trial")


if __name__ == "__main__":
    main()
