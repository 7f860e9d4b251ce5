"""The paper's protocol at cluster scale, rehearsed: every trial of paper_base, paper_cosreg, paper_istar and
paper_seeds, simulated (no training), on a multi-node Ray cluster with logical GPUs, tracked by an MLflow server
over PostgreSQL.

    python benchmarks/bench_paper_scale.py [--models bert] [--nodes 4] [--gpus-per-node 8] [--time-factor 0.004]

Everything but the GPU work is real: Ray nodes on 127.0.0.1 (``ray.cluster_utils.Cluster``) scheduling each
trial's ``resources: {cpu: 4, gpu: 1}``, Tune with a checkpoint every epoch, the MLflow logger writing to
``mlflow server`` over a PostgreSQL server (both started and stopped here), and the tables read back from it.
Each trial waits for its modelled duration × the time factor (``istar_tune/search/tune/simulate.py``). The four
stages run as one experiment (``run_searches``: each group's seeds start when that group's grid has ended), then the
seeds stage once more on its own (``seeds_alone``: its configurations read back from MLflow); ``--separate`` runs the
stages one search after another instead.

Grid configurations that differ only in ``epochs`` share one trial (``search.share_epochs``, on by default under the
paper's recipe): it also prints the configurations (one MLflow run each), the Tune trials that trained them, the epochs
trained against those of the unshared protocol and the simulated GPU-hours with and without sharing.

It prints per stage and in total: configurations, trials, wall time, the theoretical minimum makespan (the larger of
total GPU-seconds / GPUs and the longest dependency chain), their ratio, GPU utilisation, driver CPU seconds per trial,
MLflow logging latency p50/p99, peak driver memory, storage bytes, MLflow child runs (one per configuration expected),
and whether every cell of ``table --kind best``, ``--kind lambda-zeta`` and ``--kind seeds`` equals the
landscape's known optimum. Its last line is one JSON object of these figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("paper_base", "paper_cosreg", "paper_istar", "paper_seeds")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100.0 * (len(ordered) - 1))))]


class LineLog:
    """Appends progress lines to a file (picklable, as Tune stores callbacks with the experiment)."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __call__(self, line: str) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(f"{time.strftime('%H:%M:%S')} {line}\n")


class MemorySampler(threading.Thread):
    """Peak resident memory of this (the driver's) process, sampled every half second."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = 0
        self.running = True

    def run(self):
        import psutil

        me = psutil.Process()
        while self.running:
            self.peak = max(self.peak, me.memory_info().rss)
            time.sleep(0.5)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def trial_configs(outcomes: list) -> list[dict]:
    """The configurations of the Tune trials behind a search's outcomes (one per configuration): a shared trial's
    configurations merged back into the trial that trained them."""
    from istar_tune.trial_config import SHARED_EPOCHS_KEY

    shared: dict[str, list[dict]] = {}
    alone = []
    for outcome in outcomes:
        if outcome.trained_by:
            shared.setdefault(outcome.trained_by, []).append(outcome.config)
        else:
            alone.append(outcome.config)
    merged = [{**max(configs, key=lambda c: c["epochs"]), SHARED_EPOCHS_KEY: sorted(c["epochs"] for c in configs)}
              for configs in shared.values()]
    return alone + merged


def stage_minimum(durations: list[float], gpus: int) -> float:
    """The theoretical minimum makespan of independent trials on ``gpus`` GPUs."""
    return max(sum(durations) / gpus, max(durations, default=0.0))


def check_tables(tracking_uri: str, models: list[str], tasks: list[str] | None, seed: int,
                 noise: float) -> dict[str, bool]:
    """Whether every cell of the three tables equals the landscape's known optimum."""
    from istar_tune.results.tables import build_table
    from istar_tune.search.tune.simulate import expected_score, optimum
    from istar_tune.tasks import get_task

    exact = {}
    keys = ("learning_rate", "batch_size", "epochs", "lam", "zeta")
    best_ok = True
    for experiment in ("paper-base", "paper-cosreg", "paper-istar"):
        table = build_table(tracking_uri, experiment, "best", models=models, tasks=tasks, simulated=True)
        for row in table.itertuples():
            want = optimum(row.model, row.task, row.method, seed)
            got = {k: getattr(row, k) for k in keys if k in want}
            same = all(abs(float(got[k]) - float(want[k])) < 1e-12 for k in want)
            if not same:
                print(f"  best: {row.model}/{row.task}/{row.method}: got {got}, optimum {want}")
            best_ok &= same
    exact["best"] = best_ok

    table = build_table(tracking_uri, "paper-istar", "lambda-zeta", models=models, tasks=tasks, simulated=True)
    lz_ok = True
    for row in table.to_dict("records"):
        for task_name, cell in row.items():
            if task_name in ("model", "average") or not isinstance(cell, str) or "|" not in cell:
                continue
            task = next(t for t in ("sst2", "qnli", "rte", "mrpc", "qqp", "cola", "stsb", "sst5", "squad")
                        if get_task(t).display_name == task_name)
            want = optimum(row["model"], task, "istar", seed)
            expected = f"{want['lam']:g} | {want['zeta']:g}"
            if cell.split(" (")[0].strip() != expected:
                print(f"  lambda-zeta: {row['model']}/{task}: got {cell!r}, optimum {expected!r}")
                lz_ok = False
    exact["lambda_zeta"] = lz_ok

    table = build_table(tracking_uri, "paper-seeds", "seeds", models=models, tasks=tasks, simulated=True)
    labels = {"Base": "base", "CosReg": "cosreg", "I-STAR": "istar"}
    seeds_ok = True
    for row in table.to_dict("records"):
        method = labels[row["method"]]
        for task_name, cell in row.items():
            if task_name in ("model", "method"):
                continue
            task = next(t for t in ("sst2", "qnli", "rte", "mrpc", "qqp", "cola", "stsb", "sst5", "squad")
                        if get_task(t).display_name == task_name)
            config = {"model": row["model"], "task": task, "method": method,
                      **optimum(row["model"], task, method, seed)}
            expected = 100.0 * expected_score(config, seed)
            match = re.match(r"\s*(-?[\d.]+) ±", cell)
            if match is None or abs(float(match.group(1)) - expected) > 100.0 * noise + 0.006:
                print(f"  seeds: {row['model']}/{task}/{method}: got {cell!r}, optimum {expected:.2f}")
                seeds_ok = False
    exact["seeds"] = seeds_ok
    return exact


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bert", "albert", "distilbert"])
    parser.add_argument("--tasks", nargs="+", default=None, help="a subset of the nine tasks (default: all)")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--time-factor", type=float, default=0.004,
                        help="seconds waited per modelled second of a trial (default: %(default)s)")
    parser.add_argument("--checkpoint-bytes", type=int, default=65536)
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    parser.add_argument("--separate", action="store_true",
                        help="run the stages one search after another (default: the four as one experiment, each "
                             "group's seeds starting when its grid has ended)")
    parser.add_argument("--seeds-time-factor", type=float, default=None,
                        help="time factor of the seeds stage re-run on its own after the others (default: "
                             "--time-factor)")
    parser.add_argument("--max-pending", type=int, default=None,
                        help="TUNE_MAX_PENDING_TRIALS_PG (default: the search's choice)")
    parser.add_argument("--log", default=None, help="file for the progress lines (default: a temporary file)")
    return parser.parse_args()


def start_cluster(args):
    """``args.nodes`` Ray nodes on 127.0.0.1 of ``args.gpus_per_node`` logical GPUs and 4 CPUs each, connected to."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4 * args.gpus_per_node,
                                                            "num_gpus": args.gpus_per_node})
    for _ in range(args.nodes - 1):
        cluster.add_node(num_cpus=4 * args.gpus_per_node, num_gpus=args.gpus_per_node)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    return cluster


class Rehearsal:
    """The stages' searches on one cluster and MLflow server, and what each of them measured."""

    def __init__(self, args, spaces: list, cluster, tracking_uri: str, storage: Path, log: LineLog):
        self.args, self.spaces, self.cluster, self.tracking_uri = args, spaces, cluster, tracking_uri
        self.storage, self.log, self.gpus = storage, log, args.nodes * args.gpus_per_node
        self.stages: dict[str, dict] = {}
        self.durations_of: dict[str, list[float]] = {}
        self.latencies: list[float] = []
        self.phases: list[dict] = []
        self.seeds_alone: dict = {}
        self.wall = self.cpu = 0.0

    def search(self, spaces: list, simulation) -> list:
        from istar_tune.search.run import run_searches

        return run_searches(spaces, storage_path=self.storage, tracking_uri=self.tracking_uri,
                            address=self.cluster.address, simulation=simulation, write=self.log)

    def run(self, simulation) -> None:
        """The stages as one experiment (or one search each with ``--separate``), then the seeds stage alone."""
        stage_of = {space.name: stage for stage, space in zip(self.args.stages, self.spaces)}
        for batch in [[space] for space in self.spaces] if self.args.separate else [self.spaces]:
            cpu_before, began, began_unix = time.process_time(), time.monotonic(), time.time()
            summaries = self.search(batch, simulation)
            wall = time.monotonic() - began
            self.wall += wall
            self.cpu += time.process_time() - cpu_before
            self.phases.append({k: round(v, 1) for k, v in summaries[0].phases_s.items()})
            for space, summary in zip(batch, summaries):
                self.record(stage_of[space.name], summary, began_unix, wall)
            print(f"run of {', '.join(s.name for s in batch)}: {wall:.1f} s; phases {self.phases[-1]}", flush=True)
        if "paper_seeds" in self.args.stages and not self.args.separate:
            self.seeds_alone_run()

    def record(self, stage: str, summary, began_unix: float, wall: float) -> None:
        from istar_tune.config import trial_epochs
        from istar_tune.search.spaces.cost import trial_seconds

        outcomes = [t for g in summary.groups for t in g.trials]
        trained = trial_configs(outcomes)
        durations = self.durations_of[stage] = [trial_seconds(c) * self.args.time_factor for c in trained]
        ended = max((t.ended_at for t in outcomes if t.ended_at), default=began_unix) - began_unix
        self.stages[stage] = {
            "configurations": len(outcomes), "trials": len(trained),
            "trained_epochs": sum(trial_epochs(c) for c in trained),
            "unshared_epochs": sum(trial_epochs(t.config) for t in outcomes),
            "gpu_hours": round(sum(durations) / self.args.time_factor / 3600, 1),
            "unshared_gpu_hours": round(sum(trial_seconds(t.config) for t in outcomes) / 3600, 1),
            "failed": len(summary.failed), "last_trial_ended_s": round(ended, 1),
            "min_makespan_s": round(stage_minimum(durations, self.gpus), 1),
            "mlflow_log_p50_ms": round(percentile(summary.mlflow_latencies_ms, 50), 1),
            "mlflow_log_p99_ms": round(percentile(summary.mlflow_latencies_ms, 99), 1)}
        if self.args.separate:
            self.stages[stage].update(wall_s=round(wall, 1), ratio=round(wall / stage_minimum(durations, self.gpus), 3))
        self.latencies += summary.mlflow_latencies_ms
        print(f"{stage}: {json.dumps(self.stages[stage])}", flush=True)

    def seeds_alone_run(self) -> None:
        """The seeds stage on its own, as a user re-running it would (its configurations read from MLflow)."""
        from istar_tune.search.spaces.cost import trial_seconds
        from istar_tune.search.tune.simulate import Simulation

        space = replace(next(s for s in self.spaces if s.stage == "seeds"), name="paper-seeds-alone")
        alone = Simulation(time_factor=self.args.seeds_time_factor or self.args.time_factor,
                           checkpoint_bytes=self.args.checkpoint_bytes)
        began = time.monotonic()
        summary = self.search([space], alone)[0]
        wall = time.monotonic() - began
        durations = [trial_seconds(c) * alone.time_factor
                     for c in trial_configs([t for g in summary.groups for t in g.trials])]
        minimum = stage_minimum(durations, self.gpus)
        self.seeds_alone = {"trials": len(durations), "wall_s": round(wall, 1), "min_makespan_s": round(minimum, 1),
                            "ratio": round(wall / minimum, 3), "time_factor": alone.time_factor,
                            "phases_s": {k: round(v, 1) for k, v in summary.phases_s.items()}}
        print(f"paper_seeds alone: {json.dumps(self.seeds_alone)}", flush=True)

    def minimum_makespan(self) -> float:
        """The larger of all GPU-seconds over the GPUs and the longest grid trial followed by the longest seed."""
        every = [d for durations in self.durations_of.values() for d in durations]
        seeds_longest = max(self.durations_of.get("paper_seeds", []), default=0.0)
        grid_longest = max((d for stage, durations in self.durations_of.items() if stage != "paper_seeds"
                            for d in durations), default=0.0)
        return max(sum(every) / self.gpus, grid_longest + seeds_longest)


def mlflow_trial_runs(tracking_uri: str) -> tuple[int, list[str]]:
    """The trial runs in the four experiments, and their Tune trial ids."""
    from istar_tune import tracking

    client = tracking.client(tracking_uri)
    runs, trial_ids = 0, []
    for experiment in ("paper-base", "paper-cosreg", "paper-istar", "paper-seeds"):
        found = client.get_experiment_by_name(experiment)
        if found is None:
            continue
        children = tracking.find_runs(client, found.experiment_id, **{tracking.TAG_ROLE: "trial"})
        runs += len(children)
        trial_ids += [r.data.tags.get(tracking.TAG_TRIAL_ID) for r in children]
    return runs, trial_ids


def figures_of(rehearsal: Rehearsal, runs: int, trial_ids: list[str], exact: dict, workers: int, peak_rss: int,
               storage: Path) -> dict:
    """The run's figures, in total and per stage (the last line printed)."""
    args, stages, latencies = rehearsal.args, rehearsal.stages, rehearsal.latencies
    trials = sum(s["trials"] for s in stages.values())
    total = {key: sum(s[key] for s in stages.values()) for key in ("configurations", "trained_epochs",
                                                                   "unshared_epochs", "failed")}
    minimum = rehearsal.minimum_makespan()
    every = sum(d for durations in rehearsal.durations_of.values() for d in durations)
    return {
        "configurations": total["configurations"], "trials": trials, "mlflow_runs": runs,
        "trained_epochs": total["trained_epochs"], "unshared_epochs": total["unshared_epochs"],
        "epochs_ratio": round(total["trained_epochs"] / max(total["unshared_epochs"], 1), 3),
        "gpu_hours": round(sum(s["gpu_hours"] for s in stages.values()), 1),
        "unshared_gpu_hours": round(sum(s["unshared_gpu_hours"] for s in stages.values()), 1),
        "duplicate_trial_ids": len(trial_ids) - len(set(trial_ids)),
        "tables_exact": bool(exact) and all(exact.values()), "tables": exact,
        "makespan_s": round(rehearsal.wall, 1), "min_makespan_s": round(minimum, 1),
        "ratio": round(rehearsal.wall / minimum, 3),
        "seeds_ratio": rehearsal.seeds_alone.get("ratio", stages.get("paper_seeds", {}).get("ratio")),
        "seeds_alone": rehearsal.seeds_alone, "mode": "separate" if args.separate else "one experiment",
        "phases_s": rehearsal.phases, "worker_processes_started": workers,
        "max_pending_trials": os.environ.get("TUNE_MAX_PENDING_TRIALS_PG", "per search"),
        "utilisation": round(every / (rehearsal.gpus * rehearsal.wall), 3),
        "driver_cpu_s_per_trial": round(rehearsal.cpu / max(trials, 1), 4),
        "mlflow_log_p50_ms": round(percentile(latencies, 50), 1),
        "mlflow_log_p99_ms": round(percentile(latencies, 99), 1),
        "peak_driver_rss_mb": round(peak_rss / 2**20, 1), "storage_bytes": folder_bytes(storage),
        "time_factor": args.time_factor, "gpus": rehearsal.gpus, "failed": total["failed"], "stages": stages,
        "mlflow_log_mean_ms": round(statistics.fmean(latencies), 1) if latencies else None,
    }


def main() -> None:
    args = options()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers and the cluster on a kill too
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if args.max_pending:
        os.environ["TUNE_MAX_PENDING_TRIALS_PG"] = str(args.max_pending)
    from istar_tune.search.cluster import loopback_only

    loopback_only()
    import ray

    from istar_tune.search.spaces.file import load_search_space
    from istar_tune.search.tune.simulate import Simulation
    from istar_tune.testing import MlflowServer, PostgresServer

    simulation = Simulation(time_factor=args.time_factor, checkpoint_bytes=args.checkpoint_bytes)
    tmp = Path(tempfile.mkdtemp(prefix="istar-scale-"))
    storage, log_file = tmp / "storage", Path(args.log) if args.log else tmp / "progress.log"
    print(f"rehearsal: models {', '.join(args.models)}; {args.nodes} nodes × {args.gpus_per_node} GPUs; "
          f"time factor {args.time_factor}; progress in {log_file}", flush=True)
    sampler = MemorySampler()
    sampler.start()
    spaces = [load_search_space(ROOT / "search_spaces" / f"{stage}.yaml").narrow(models=args.models, tasks=args.tasks)
              for stage in args.stages]
    with PostgresServer() as postgres, MlflowServer(backend=postgres.url, workers=2) as server:
        cluster = start_cluster(args)
        print(f"cluster: {len(ray.nodes())} nodes, {ray.cluster_resources().get('GPU', 0):.0f} GPUs; MLflow "
              f"{server.uri} over {postgres.url}", flush=True)
        session = Path(ray._private.worker._global_node.get_session_dir_path())
        rehearsal = Rehearsal(args, spaces, cluster, server.uri, storage, LineLog(log_file))
        try:
            rehearsal.run(simulation)
        finally:
            # Worker processes Ray started (one log each): trial actors, including any started and then discarded.
            workers = len(list((session / "logs").glob("python-core-worker-*.log")))
            ray.shutdown()
            cluster.shutdown()
        runs, trial_ids = mlflow_trial_runs(server.uri)
        exact = (check_tables(server.uri, args.models, args.tasks, simulation.seed, simulation.noise)
                 if set(args.stages) == set(STAGES) else {})
    sampler.running = False
    peak_rss = max(sampler.peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    figures = figures_of(rehearsal, runs, trial_ids, exact, workers, peak_rss, storage)
    print(json.dumps(figures), flush=True)
    sys.exit(0 if figures["failed"] == 0 and figures["mlflow_runs"] == figures["configurations"] else 1)


if __name__ == "__main__":
    main()
