"""Where a small real search's CPU goes: the search's driver, Ray's own processes, the trial workers and, inside
those, their imports and their epochs.

    python benchmarks/bench_search_start.py [--data-dir DIR] [--trials 4] [--concurrency 2] [--epochs 3]

It runs ``istar-tune search`` on tiny-bert trials (SST-2, 640 examples: a second an epoch on one core, the searches
of the test suite's stop and fault tests) with a local Ray instance, samples every new process's CPU time every
0.1 s (psutil) and sorts the processes by kind; every Python process runs with ``PYTHONPROFILEIMPORTTIME``, so each
trial worker's import seconds are read back from its log in Ray's session folder, and the epochs' own seconds
(``epoch_time_s``) from MLflow. A process that ends between two samples loses at most its last 0.1 s.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRIAL_WORKERS = "trial workers"
KINDS = (("ray::ImplicitFunc", TRIAL_WORKERS), ("ray::IDLE", "idle workers (started with Ray)"),
         ("istar-tune", "search driver"), ("ray", "Ray's own processes"))
"""The first pattern a process's command line contains names its kind."""


def space_text(trials: int, concurrency: int, epochs: int) -> str:
    rates = ", ".join(f"{(i + 1) * 1e-3:.1e}" for i in range(trials))
    return (f"name: start\nmodels: [tiny-bert]\ntasks: [sst2]\nmethods: [base]\n"
            f"hyperparameters:\n  batch_size: 16\n  epochs: {epochs}\n  learning_rate: {{grid: [{rates}]}}\n"
            f"concurrency: {concurrency}\n"
            f"settings: {{max_length: 32, max_train_samples: 640, max_eval_samples: 64, shrinkage_tokens: 1000}}\n")


def kind_of(command: str) -> str:
    return next((kind for pattern, kind in KINDS if pattern in command), "other")


def sample(command: list[str], env: dict) -> tuple[float, dict, set[Path], subprocess.CompletedProcess]:
    """Run ``command``; (wall seconds, {pid: (kind, last CPU seconds)} of every process it started, the Ray session
    folders their command lines name, its result)."""
    import psutil

    before = {p.pid for p in psutil.process_iter()}
    seen: dict[int, tuple[str, float]] = {}
    sessions: set[Path] = set()
    began = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        driver = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env)
        while driver.poll() is None:
            for process in psutil.process_iter(["cmdline", "cpu_times"]):
                if process.pid in before or process.info["cpu_times"] is None:
                    continue
                cpu = process.info["cpu_times"].user + process.info["cpu_times"].system
                kind = seen.get(process.pid, ("", 0.0))[0]
                line = " ".join(process.info["cmdline"] or [])  # none once it has ended (a zombie): its kind stays
                if line and kind != TRIAL_WORKERS:  # and a worker named after its trial stays a trial worker
                    kind = kind_of(line)
                    sessions.update(Path(m) for m in re.findall(r"(/\S*/session_[\w-]+)", line))
                seen[process.pid] = (kind or "other", cpu)
            time.sleep(0.1)
        wall = time.monotonic() - began
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(command, driver.returncode, out.read(), err.read())
    return wall, seen, sessions, done


def imports_of(text: str) -> tuple[float, collections.Counter]:
    """The seconds of a process's imports (its ``-X importtime`` lines) and of each package it imported at the top.
    Only for a process that imports in one thread (a trial worker): imports in threads at once (the driver's) make
    the lines' own times negative."""
    total, packages = 0.0, collections.Counter()
    for line in text.splitlines():
        if not line.startswith("import time:") or "|" not in line or "self [us]" in line:
            continue
        own, cumulative, name = line[len("import time:"):].split("|")
        total += int(own) / 1e6
        if not name[1:].startswith(" "):
            packages[name.strip().split(".")[0]] += int(cumulative) / 1e6
    return total, packages


def worker_imports(session: Path) -> tuple[list[float], collections.Counter]:
    """Each trial worker's import seconds (from its log in Ray's session folder) and its packages' summed."""
    per_worker, packages = [], collections.Counter()
    for log in sorted((session / "logs").glob("worker-*.err")):
        text = log.read_text(errors="replace")
        if "istar_tune.training.loop" not in text:
            continue  # an idle worker, or one that ran no trial
        total, by_package = imports_of(text)
        per_worker.append(total)
        packages.update(by_package)
    return per_worker, packages


def epoch_seconds(storage: Path) -> float:
    from istar_tune import tracking
    from istar_tune.tracking.storage import default_tracking_uri

    client = tracking.client(default_tracking_uri(storage))
    experiment = client.get_experiment_by_name("start").experiment_id
    runs = tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial"})
    return sum(m.value for run in runs for m in client.get_metric_history(run.info.run_id, "epoch_time_s"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("GLUE_DIR", str(ROOT.parent / "shared" / "data" / "glue")))
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI",
                                                            "PYTHONDONTWRITEBYTECODE")}
    env.update(GLUE_DIR=args.data_dir, RAY_AUTH_MODE="disabled", PYTHONPROFILEIMPORTTIME="1", HF_HUB_OFFLINE="1",
               OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"))
    with tempfile.TemporaryDirectory() as tmp:
        space = Path(tmp) / "start.yaml"
        space.write_text(space_text(args.trials, args.concurrency, args.epochs))
        storage = Path(tmp) / "runs"
        command = [str(Path(sys.executable).parent / "istar-tune"), "search", str(space), "--storage-path",
                   str(storage)]
        wall, seen, sessions, done = sample(command, env)
        if done.returncode != 0:
            sys.exit(f"the search exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        if len(sessions) != 1 or not any(kind == TRIAL_WORKERS for kind, _ in seen.values()):
            sys.exit(f"expected one local Ray instance running trial workers; seen sessions {sorted(sessions)}")
        imports, packages = worker_imports(sessions.pop())
        epochs = epoch_seconds(storage)
    report(args, wall, seen, imports, packages, epochs)


def report(args, wall: float, seen: dict, imports: list[float], packages: collections.Counter, epochs: float) -> None:
    cpu, count = collections.Counter(), collections.Counter()
    for kind, seconds in seen.values():
        cpu[kind] += seconds
        count[kind] += 1
    total = sum(cpu.values())
    print(f"search of {args.trials} tiny-bert trials x {args.epochs} epochs, concurrency {args.concurrency}, "
          f"{os.cpu_count()} CPUs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}: "
          f"{wall:.1f} s wall, {total:.1f} CPU-s in the processes it started")
    for kind, seconds in cpu.most_common():
        print(f"  {kind:32} {seconds:6.1f} CPU-s ({seconds / total:4.0%}) in {count[kind]} processes")
    workers = cpu[TRIAL_WORKERS]
    print(f"  trial workers: {epochs:.1f} s in their epochs ({epochs / workers:.0%} of their CPU), "
          f"imports {sum(imports):.1f} s over {len(imports)} workers "
          f"({' / '.join(f'{s:.1f}' for s in imports)} s each)")
    print("  a trial worker's imports by package (seconds, mean): "
          + ", ".join(f"{name} {seconds / max(len(imports), 1):.1f}" for name, seconds in packages.most_common(4)))
    print(f"fixed cost of the search (all but the epochs): {total - epochs:.1f} CPU-s, "
          f"{(total - epochs) / total:.0%} of its CPU")


if __name__ == "__main__":
    main()
