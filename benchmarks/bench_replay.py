"""The replay of the paper's BERT protocol, rehearsed: the grids of paper_base, paper_cosreg and paper_istar and the
seeds stage that re-ran their choices (``--simulate``: Ray schedules every trial, MLflow records every epoch, a
synthetic landscape stands in for training), then ``replay`` of each grid with the default settings and replays.

    python benchmarks/bench_replay.py [--models bert] [--tasks rte] [--replays 50] [--time-factor 0.0005]
                                      [--processes N]

With every task (the default) the grids and seeds hold 6,453 configurations. It prints, per model × task, the seconds
the replay took (its share of reading the three grids from MLflow, and its units' replays), the configurations, the
recommendation per grid, and whether every unit's grid choice is the landscape's known optimum (the ``best`` table's);
its last line is one JSON object of these figures. The rehearsal itself is not timed (bench_paper_scale.py is)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ("paper_base", "paper_cosreg", "paper_istar")


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["bert"])
    parser.add_argument("--tasks", nargs="+", default=None, help="a subset of the nine tasks (default: all)")
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--time-factor", type=float, default=0.0005)
    parser.add_argument("--gpus", type=int, default=32, help="logical GPUs of the local Ray instance")
    parser.add_argument("--processes", type=int, default=None,
                        help="the replay's processes (default: replay's own, a process per core for a large grid)")
    return parser.parse_args()


def main() -> None:
    args = options()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")

    import pandas as pd

    from istar_tune.replay.reading import read_grid
    from istar_tune.replay.summary import recommendation, replay_table
    from istar_tune.results.tables import build_table
    from istar_tune.search.run import run_searches
    from istar_tune.search.spaces.file import load_search_space
    from istar_tune.search.tune.simulate import Simulation

    with tempfile.TemporaryDirectory(prefix="bench-replay-") as folder:
        spaces = [load_search_space(ROOT / "search_spaces" / f"{name}.yaml").narrow(models=args.models,
                                                                                    tasks=args.tasks)
                  for name in (*GRIDS, "paper_seeds")]
        began = time.monotonic()
        summaries = run_searches(spaces, storage_path=Path(folder) / "runs", write=lambda _: None,
                                 simulation=Simulation(time_factor=args.time_factor, gpus=args.gpus))
        rehearsal_s = time.monotonic() - began
        uri = summaries[0].tracking_uri
        configurations = sum(len(g.trials) for s in summaries for g in s.groups)
        per_task: dict[tuple[str, str], dict] = {}
        lines = []
        for space in spaces[:len(GRIDS)]:
            began = time.monotonic()
            units = read_grid(uri, space.name, simulated=True)
            read_s = time.monotonic() - began
            best = build_table(uri, space.name, "best", simulated=True)
            rows = []
            for unit in units:
                began = time.monotonic()
                rows.append(replay_table([unit], replays=args.replays, processes=args.processes))
                cell = per_task.setdefault((unit.model, unit.task), {"seconds": 0.0, "configurations": 0,
                                                                     "optimum": True})
                cell["seconds"] += time.monotonic() - began + read_s / len(units)
                cell["configurations"] += len(unit.curves)
                row = best[(best.task == unit.task) & (best.method == unit.method)].iloc[0]
                chosen = unit.model_of(unit.best)
                cell["optimum"] &= (chosen["learning_rate"], chosen["epochs"]) == (row.learning_rate, row.epochs)
            lines.append(f"{space.name}: {recommendation(pd.concat(rows))}")
        print(f"rehearsal: {configurations} configurations in {rehearsal_s:.0f} s (not part of the replay)")
        print("model  task   configurations  replay seconds  grid choice = the table's")
        for (model, task), cell in sorted(per_task.items()):
            print(f"{model:6s} {task:6s} {cell['configurations']:>14} {cell['seconds']:>15.1f}  {cell['optimum']}")
        print("\n".join(lines))
        print(json.dumps({"configurations": configurations, "replays": args.replays,
                          "seconds_per_model_task": {f"{m}/{t}": round(c["seconds"], 1)
                                                     for (m, t), c in sorted(per_task.items())},
                          "max_seconds": round(max(c["seconds"] for c in per_task.values()), 1),
                          "grid_choice_is_the_tables": all(c["optimum"] for c in per_task.values())}))
    sys.exit(0)


if __name__ == "__main__":
    main()
