"""Several trials per GPU, rehearsed: the paper's protocol (paper_base, paper_cosreg, paper_istar and paper_seeds as
one experiment) on a local Ray instance of logical GPUs, once with one trial a GPU (``gpu: 1``) and once with
``--packing`` trials a GPU (``gpu: 1/packing``), in one run.

    python -m benchmarks.bench_packing [--models bert] [--tasks rte] [--gpus 8] [--packing 4] [--time-factor 0.05]
                                       [--throughput FILE | --gain 2.0]

Each simulated trial waits for the time the cost model gives it at the rate of its packing (``--throughput``: the
file ``istar-tune calibrate`` writes on the GPU you will use; without it, ``--gain``: an ASSUMED total throughput of
``packing`` co-located trials, in multiples of one trial alone, on the cost model's assumed single-trial rates — not a
measurement). Everything else is real: Ray schedules each trial's share of a GPU, Tune checkpoints every epoch,
MLflow (SQLite) records every configuration, and the tables are read back from it.

It prints per packing: configurations, trials, the wall time of Tune's run, the modelled minimum makespan (the larger
of GPU-seconds / GPUs and the longest grid-then-seeds chain), their ratio, the makespan on the rehearsed cluster
(wall ÷ time factor) and whether every cell of ``table --kind best``, ``--kind lambda-zeta`` and ``--kind seeds``
equals the landscape's known optimum; then the packed / unpacked makespan ratios, measured and modelled. Its last
line is one JSON object of these figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.bench_paper_scale import STAGES, check_tables, trial_configs

ROOT = Path(__file__).resolve().parents[1]


def assumed_throughput(models: list[str], packing: int, gain: float, max_length: int):
    """A stated assumption in calibrate's form: one trial alone at the cost model's rate for batch 32, ``packing``
    trials together at ``gain`` times that in total."""
    from istar_tune.search.spaces.cost import Throughput, throughput

    solo = {m: throughput(m, 32) * max_length for m in models}
    return Throughput(dict(solo), max_length, per_packing={m: {1: r, packing: r * gain / packing}
                                                           for m, r in solo.items()},
                      recommended={m: packing for m in models})


def rehearse(spaces: list, packing: int, rates, args, folder: Path) -> dict:
    """The experiment at ``packing`` trials a GPU: its measured and modelled makespans and the tables' exactness."""
    from istar_tune.config import trial_epochs
    from istar_tune.search.run import run_searches
    from istar_tune.search.spaces.cost import trial_seconds
    from istar_tune.search.tune.simulate import Simulation

    share = 1.0 / packing
    spaces = [replace(space, gpu=share) for space in spaces]
    simulation = Simulation(time_factor=args.time_factor, checkpoint_bytes=4096, gpus=args.gpus, throughput=rates)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    began = time.monotonic()
    summaries = run_searches(spaces, storage_path=folder / "runs", tracking_uri=uri, simulation=simulation,
                             write=lambda line: None)
    wall = time.monotonic() - began
    at_packing = rates.at(packing)
    seconds: dict[str, list[float]] = {}
    configurations = 0
    for space, summary in zip(spaces, summaries):
        outcomes = [t for g in summary.groups for t in g.trials]
        configurations += len(outcomes)
        seconds[space.stage] = [trial_seconds(c, measured=at_packing) for c in trial_configs(outcomes)]
    trials = sum(len(stage) for stage in seconds.values())
    gpu_seconds = sum(s * share for stage in seconds.values() for s in stage)
    seeds = max(seconds.pop("seeds", []), default=0.0)
    chain = max((s for stage in seconds.values() for s in stage), default=0.0) + seeds
    minimum = max(gpu_seconds / args.gpus, chain)
    fit = summaries[0].phases_s.get("fit", wall)
    exact = check_tables(uri, args.models, args.tasks, simulation.seed, simulation.noise)
    return {"packing": packing, "resources_gpu": round(share, 4), "configurations": configurations,
            "trials": trials,
            "epochs": sum(trial_epochs(t.config) for s in summaries for g in s.groups for t in g.trials),
            "failed": sum(len(s.failed) for s in summaries), "fit_wall_s": round(fit, 1),
            "modelled_min_s": round(minimum * args.time_factor, 1),
            "ratio": round(fit / (minimum * args.time_factor), 3),
            "makespan_h": round(fit / args.time_factor / 3600, 2), "min_makespan_h": round(minimum / 3600, 2),
            "gpu_hours": round(gpu_seconds / 3600, 2), "tables_exact": all(exact.values()), "tables": exact}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bert"])
    parser.add_argument("--tasks", nargs="+", default=["rte"])
    parser.add_argument("--gpus", type=int, default=8, help="logical GPUs of the local Ray instance")
    parser.add_argument("--packing", type=int, default=4, help="trials a GPU in the packed run")
    parser.add_argument("--time-factor", type=float, default=0.05)
    parser.add_argument("--throughput", nargs="+", default=None, help="calibrate's files, one per model")
    parser.add_argument("--gain", type=float, default=2.0,
                        help="without --throughput: the ASSUMED total throughput of `packing` trials on one GPU, in "
                             "multiples of one trial alone (default: %(default)s)")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from istar_tune.search.cluster import loopback_only

    loopback_only()
    import ray

    from istar_tune.search.spaces.cost import Throughput
    from istar_tune.search.spaces.file import load_search_space

    spaces = [load_search_space(ROOT / "search_spaces" / f"{stage}.yaml").narrow(models=args.models,
                                                                               tasks=args.tasks)
              for stage in STAGES]
    max_length = spaces[0].run_settings().max_length
    if args.throughput:
        rates, source = Throughput.read(args.throughput, tuple(args.models), max_length), "measured (calibrate files)"
    else:
        rates = assumed_throughput(args.models, args.packing, args.gain, max_length)
        source = f"ASSUMED: {args.packing} trials a GPU give {args.gain:g}× one trial's tokens/s in total"
    cpus = math.ceil(max(s.cpu for s in spaces) * args.gpus * args.packing)
    print(f"packing rehearsal: {', '.join(args.models)} on {', '.join(args.tasks)}; {args.gpus} logical GPUs; "
          f"time factor {args.time_factor:g}; rates {source}", flush=True)
    ray.init(address="local", num_cpus=cpus, num_gpus=args.gpus, include_dashboard=False, logging_level="ERROR",
             log_to_driver=False)
    runs = []
    try:
        for packing in (1, args.packing):
            with tempfile.TemporaryDirectory(prefix=f"istar-packing-{packing}-") as folder:
                runs.append(rehearse(spaces, packing, rates, args, Path(folder)))
            print(json.dumps(runs[-1]), flush=True)
    finally:
        ray.shutdown()
    alone, packed = runs
    figures = {"runs": runs, "rates": source, "gpus": args.gpus, "time_factor": args.time_factor,
               "makespan_ratio_measured": round(packed["fit_wall_s"] / alone["fit_wall_s"], 3),
               "makespan_ratio_modelled": round(packed["modelled_min_s"] / alone["modelled_min_s"], 3)}
    print(f"packed / alone makespan: {figures['makespan_ratio_measured']} measured, "
          f"{figures['makespan_ratio_modelled']} modelled; tables exact: "
          f"{alone['tables_exact'] and packed['tables_exact']}", flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
