"""A grid searched as fused trials against the same grid unfused: wall time, Tune trials (trial processes) and the
``best`` table each gives.

    python -m benchmarks.bench_fused_search [--data-dir "$GLUE_DIR"] [--model tiny-bert] [--task sst2]
                                            [--rates 1e-3,2e-3,3e-3] [--epochs 2] [--train-samples 640]
                                            [--fuse 4] [--cpus 2] [--space search_spaces/minilm_sst2.yaml]

The grid is Base and I-STAR (λ = −1, ζ = 0.2) × the learning rates, or with ``--space`` a search space file as it is
(the first page's: ``search_spaces/minilm_sst2.yaml``; ``--train-samples`` then replaces its ``max_train_samples``
only where given), eager attention (what fusing needs; the unfused grid runs it too, so only the fusing differs),
each search in its own results folder and MLflow store, both on one local Ray instance of ``--cpus`` CPUs (one CPU
a trial, or the space's ``resources.cpu``). The unfused search runs first, then the fused one; each
prints its summary. Printed: each search's wall time (from the search's start to its summary, Ray's start left out),
its configurations and Tune trials, the ratio of the wall times, and whether the two ``best`` tables (trial ids left
out) are equal, with both tables.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import yaml


def _space(folder: Path, args, fuse: int) -> Path:
    name = f"grid-fuse{fuse}"
    if args.space:  # the file as it is, fused or not, eager attention on both sides
        space = yaml.safe_load(Path(args.space).read_text("utf-8"))
        space.update(name=name, search={**space.get("search", {}), "fuse": fuse})
        space["settings"] = {**space.get("settings", {}), "attn_implementation": "eager",
                             **({"max_train_samples": args.train_samples} if args.train_samples else {})}
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(space, sort_keys=False), "utf-8")
        return path
    space = {"name": name, "models": [args.model], "tasks": [args.task], "methods": ["base", "istar"],
             "hyperparameters": {"batch_size": 16, "epochs": args.epochs,
                                 "learning_rate": {"grid": [float(r) for r in args.rates.split(",")]}},
             "method_hyperparameters": {"istar": {"lam": -1.0, "zeta": 0.2}},
             "search": {"algorithm": "grid", "fuse": fuse}, "resources": {"cpu": 1},
             "settings": {"max_train_samples": args.train_samples, "max_eval_samples": 64, "max_length": 64,
                          "attn_implementation": "eager", "checkpoint": "resume", "shrinkage_tokens": 1000}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False), "utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("GLUE_DIR", "../shared/data/glue"))
    parser.add_argument("--model", default="tiny-bert")
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--rates", default="1e-3,2e-3,3e-3")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-samples", type=int, default=None, help="default: 640, or the --space file's")
    parser.add_argument("--space", help="a search space file searched as it is (its grid, settings and resources)")
    parser.add_argument("--fuse", type=int, default=4)
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args(argv)
    if not args.space and args.train_samples is None:
        args.train_samples = 640

    import ray

    from istar_tune.markdown import markdown
    from istar_tune.results.tables import build_table
    from istar_tune.search.run import run_search
    from istar_tune.search.spaces.file import load_search_space

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local instance on 127.0.0.1, for this process only
    ray.init(num_cpus=args.cpus, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    rows, tables = [], []
    with tempfile.TemporaryDirectory(prefix="bench-fused-search-") as tmp:
        for fuse in (1, args.fuse):
            space = load_search_space(_space(Path(tmp), args, fuse))
            began = time.perf_counter()
            summary = run_search(space, storage_path=Path(tmp) / f"runs{fuse}", data_dir=args.data_dir)
            seconds = time.perf_counter() - began
            configurations = sum(len(g.trials) for g in summary.groups)
            trials = len({t.trained_by or t.trial_id for g in summary.groups for t in g.trials})
            rows.append((fuse, seconds, configurations, trials, len(summary.failed)))
            tables.append(build_table(summary.tracking_uri, space.name, "best", tasks=list(space.tasks))
                          .drop(columns=["trial_id"]))
    ray.shutdown()
    what = (f"{args.space} as it is" if args.space else
            f"{args.model} × {args.task}: Base and I-STAR × learning rates {args.rates}, {args.epochs} epochs")
    print(f"\n{what}, {args.train_samples or 'its'} training examples, eager attention, {args.cpus} CPUs")
    print("| fuse | wall s | configurations | Tune trials | failed |\n| ---: | ---: | ---: | ---: | ---: |")
    for fuse, seconds, configurations, trials, failed in rows:
        print(f"| {fuse} | {seconds:.0f} | {configurations} | {trials} | {failed} |")
    print(f"fused ÷ unfused wall time: {rows[1][1] / rows[0][1]:.2f}; trials {rows[1][3]} against {rows[0][3]}")
    same = tables[0].to_dict("records") == tables[1].to_dict("records")
    print(f"best tables equal: {same}")
    for fuse, table in zip((1, args.fuse), tables):
        print(f"\nbest, fuse {fuse}:\n{markdown(table)}")


if __name__ == "__main__":
    main()
