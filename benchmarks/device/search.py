"""The device check's second call: a real search (Ray Tune + MLflow) on the GPU machine, against the same
configurations trained one by one.

    python -m benchmarks.device.search --out DIR --model PATH --data-dir DIR [--reference FILE]
                                       [--gpu 0.25] [--logical-gpus N] [--train-samples 512]

Four configurations (Base and I-STAR × two learning rates, one epoch of RTE, deterministic kernels) run as one grid
search, ``gpu: 0.25`` a trial (four trials on one GPU at once), MLflow on SQLite under ``DIR``. The reference is the
same four trained one by one without Ray (:func:`reference`; the first call's ``reference`` section writes it, and
``benchmarks/device/prepare.py`` keeps it on the warm machine for this call); without the file they are trained here
first. It writes ``DIR/device_search.json`` and ``.md``: the search's wall time, every run's numbers against its
reference (equal bit for bit, the machine's measurements aside), and the best table against the best of the
reference. Exit 1 when anything differs or failed.

On a CPU the suite rehearses it with ``--logical-gpus 1`` (Ray declares a GPU the trials share; they train on the CPU,
one thread each, as the reference does).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from .common import compare, model_source, table

NAME = "device-search"
CONFIGURATIONS = [{"method": method, "learning_rate": rate} for method in ("base", "istar") for rate in (2e-5, 5e-5)]
HYPERPARAMETERS = {"task": "rte", "epochs": 1, "batch_size": 32, "grad_accum": 1, "seed": 7}
METHOD_HYPERPARAMETERS = {"istar": {"lam": -1.0, "zeta": 0.2}}


def run_settings(data_dir: str, train_samples: int) -> dict[str, Any]:
    """The settings every configuration runs with, in the search and in the reference."""
    return {"data_dir": str(Path(data_dir).resolve()), "max_length": 128, "max_train_samples": train_samples,
            "max_eval_samples": 128, "deterministic": True, "shrinkage_tokens": 20_000, "save_checkpoint": False,
            "heartbeat_s": 0.0, "threads": 1}


def space_yaml(model: str, data_dir: str, train_samples: int, gpu: float) -> dict[str, Any]:
    settings = {k: v for k, v in run_settings(data_dir, train_samples).items()
                if k not in ("threads", "save_checkpoint", "heartbeat_s")}  # a trial's own: from resources, the search
    model = str(Path(model).resolve()) if Path(model).exists() else model  # a folder, or a short name / hub id
    return {"name": NAME, "models": [model], "tasks": [HYPERPARAMETERS["task"]],
            "methods": sorted({c["method"] for c in CONFIGURATIONS}),
            "hyperparameters": {**{k: v for k, v in HYPERPARAMETERS.items() if k != "task"},
                                "learning_rate": {"grid": sorted({c["learning_rate"] for c in CONFIGURATIONS})}},
            "method_hyperparameters": METHOD_HYPERPARAMETERS, "search": {"algorithm": "grid"},
            "resources": {"cpu": 1, "gpu": gpu}, "max_failures": 0, "settings": settings}


def key(method: str, learning_rate: float) -> str:
    return f"{method}@{learning_rate:g}"


def reference(model: str, data_dir: str, train_samples: int) -> dict[str, dict[str, Any]]:
    """The four configurations trained one by one, in this process: ``method@rate`` → the last epoch's record."""
    from istar_tune.config import Hyperparameters, RunSettings
    from istar_tune.training.loop import train

    found = {}
    for config in CONFIGURATIONS:
        began = time.monotonic()
        hp = Hyperparameters(model=model, **HYPERPARAMETERS, **config,
                             **METHOD_HYPERPARAMETERS.get(config["method"], {}))
        result = train(hp, RunSettings(progress=False, **run_settings(data_dir, train_samples)))
        found[key(**config)] = {**result.final, "wall_s": round(time.monotonic() - began, 2)}
        print(f"one by one: {key(**config)} accuracy {result.final['accuracy']} ({found[key(**config)]['wall_s']} s)")
    return found


def compare_runs(tracking_uri: str, expected: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every trial run's last values against its configuration's reference record."""
    from istar_tune.tracking import trial_runs

    rows = []
    runs = {key(r.method, float(r.config["learning_rate"])): r for r in trial_runs(tracking_uri, NAME)}
    for name, record in expected.items():
        run = runs.get(name)
        if run is None:
            rows.append({"configuration": name, "equal": False, "problem": "no trial run in MLflow"})
            continue
        found = compare(record, run.metrics)
        rows.append({"configuration": name, "status": run.status, **found,
                     "equal": found["equal"] and found["keys_compared"] > 0, "accuracy": run.metrics.get("accuracy")})
    return rows


def compare_best(tracking_uri: str, expected: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The best table's choice per method against the reference's best (the first of equal scores in grid order)."""
    from istar_tune.results.export import best_configurations

    chosen = best_configurations(tracking_uri, NAME)
    rows = []
    for method in sorted({c["method"] for c in CONFIGURATIONS}):
        candidates = [(expected[key(**c)]["accuracy"], key(**c)) for c in CONFIGURATIONS if c["method"] == method]
        best_score = max(score for score, _ in candidates)
        best_names = [name for score, name in candidates if score == best_score]
        found = next((v for group, v in chosen.items() if group.endswith(f"/{method}")), None)
        got = None if found is None else key(method, float(found["config"]["learning_rate"]))
        rows.append({"method": method, "reference_best": best_names, "search_best": got,
                     "reference_score": best_score, "search_score": None if found is None else found["score"],
                     "equal": got in best_names and found is not None and found["score"] == best_score})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.device.search", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for device_search.json and .md, and MLflow")
    parser.add_argument("--model", required=True, help="short name or model folder")
    parser.add_argument("--data-dir", required=True, help="a folder in the GLUE layout holding RTE")
    parser.add_argument("--reference", type=Path, default=None, help="the first call's one-by-one records")
    parser.add_argument("--gpu", type=float, default=0.25, help="a trial's GPU share (default: %(default)s)")
    parser.add_argument("--logical-gpus", type=int, default=None, help="a rehearsal: Ray declares this many GPUs")
    parser.add_argument("--train-samples", type=int, default=512, help="training examples (default: %(default)s)")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from istar_tune import load_search_space, run_search

    args.out.mkdir(parents=True, exist_ok=True)
    model = model_source(args.model)
    results: dict[str, Any] = {"configurations": len(CONFIGURATIONS), "gpu_per_trial": args.gpu}
    if args.reference is not None and args.reference.is_file():
        expected = json.loads(args.reference.read_text())
        results["reference"] = f"read from {args.reference}"
    else:
        print(f"no reference file{f' at {args.reference}' if args.reference else ''}: training the "
              f"{len(CONFIGURATIONS)} configurations one by one first", flush=True)
        expected = reference(model, args.data_dir, args.train_samples)
        results["reference"] = "trained here, one by one"
    space_file = args.out / "device-search.yaml"
    space_file.write_text(yaml.safe_dump(space_yaml(model, args.data_dir, args.train_samples, args.gpu)))
    tracking_uri = f"sqlite:///{(args.out / 'mlflow.db').resolve()}"
    if args.logical_gpus is not None:
        import ray

        ray.init(num_gpus=args.logical_gpus, num_cpus=max(os.cpu_count() or 1, 4), include_dashboard=False,
                 _node_ip_address="127.0.0.1")
    began = time.monotonic()
    try:
        run_search(load_search_space(space_file), storage_path=str(args.out / "runs"), tracking_uri=tracking_uri,
                   system_metrics_s=0)
    finally:
        import ray

        ray.shutdown()
    results.update(search_wall_s=round(time.monotonic() - began, 1), tracking_uri=tracking_uri,
                   one_by_one_wall_s=round(sum(r.get("wall_s", 0.0) for r in expected.values()), 1),
                   runs=compare_runs(tracking_uri, expected), best=compare_best(tracking_uri, expected))
    results["equal"] = all(r["equal"] for r in results["runs"] + results["best"])
    (args.out / "device_search.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (args.out / "device_search.md").write_text(summary_text(results))
    print((args.out / "device_search.md").read_text(), flush=True)
    return 0 if results["equal"] else 1


def summary_text(results: dict[str, Any]) -> str:
    lines = [f"# A real search on this machine: {results['configurations']} trials at gpu {results['gpu_per_trial']}",
             "", f"Search wall time {results['search_wall_s']} s; the same configurations one by one "
             f"{results['one_by_one_wall_s']} s ({results['reference']}). Every run and the best table equal to the "
             f"reference: **{results['equal']}**.", ""]
    runs = [{**r, "differing": ", ".join(r.get("differing", []))} for r in results["runs"]]
    best = [{**r, "reference_best": ", ".join(r["reference_best"])} for r in results["best"]]
    lines += table(runs, {"configuration": "configuration", "status": "status", "equal": "equal",
                                      "keys_compared": "keys compared", "differing": "differing",
                                      "largest_gap": "largest gap", "problem": "problem"})
    lines += table(best, {"method": "method", "reference_best": "reference best",
                                      "search_best": "search best", "equal": "equal"})
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
