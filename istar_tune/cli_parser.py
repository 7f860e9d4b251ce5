"""The command line's parser: each command, its flags and their help (``istar-tune COMMAND --help``); the flags of
``train`` are generated from the configuration dataclasses (:func:`istar_tune.reference.add_config_flags`). The
commands themselves are :mod:`istar_tune.cli`.
"""

from __future__ import annotations

import argparse

from istar_tune.config import Hyperparameters, RunSettings
from istar_tune.data import registry
from istar_tune.methods import PAPER_METHOD
from istar_tune.reference import add_config_flags
from istar_tune.tasks import PROBLEM_TYPES
from istar_tune.tracking.storage import DEFAULT_STORAGE, STORAGE_ENV


def _replayable() -> str:
    """The strategies ``replay`` knows: random search, TPE and every registered scheduler that stops trials (the
    shipped ones, conformal included, and those of installed plugins; a broken plugin leaves the shipped ones)."""
    from istar_tune.errors import ConfigError
    from istar_tune.search.schedulers import SCHEDULERS, stopping

    try:
        found = stopping()
    except ConfigError:
        found = tuple(name for name, s in SCHEDULERS.items() if s.build is not None)
    return ", ".join(["random", "tpe", *found])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="istar-tune",
        description="Hyperparameter search for fine-tuning transformer encoders with isotropy regularisers.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train_command(commands)
    _add_search_command(commands)
    _add_table_command(commands)
    _add_status_command(commands)
    _add_demo_command(commands)
    _add_plots_command(commands)
    _add_replay_command(commands)
    _add_export_command(commands)
    _add_analyze_command(commands)
    _add_calibrate_command(commands)
    _add_reference_command(commands)
    return parser


def one_file_formats() -> list[str]:
    """The formats a split given as one file on the command line may be in (not parallel files, nor a GLUE TSV,
    whose layout only a definition gives)."""
    return [name for name in registry.names() if not registry.get(name).parts and "glue" not in registry.get(name).keys]


def _add_train_command(commands) -> None:
    train = commands.add_parser("train", help="fine-tune one configuration (no Ray)",
                                description="Fine-tune one configuration and write metrics.json, config.yaml "
                                            "and the best checkpoint into --output-dir.")
    train.add_argument("--config", metavar="FILE.yaml", help="YAML of hyperparameters and settings (flags win)")
    files = train.add_argument_group("your own task's files (instead of --task; see docs/tasks.md)")
    files.add_argument("--train-file", metavar="FILE", help="training split: csv, tsv, json/jsonl or parquet")
    files.add_argument("--validation-file", metavar="FILE", help="validation split, in the same format")
    files.add_argument("--validation-split", metavar="SHARE", type=float, help="no validation file: the share of "
                       "the training file's rows (0.1) or their count (500) drawn as the validation split, "
                       "class-stratified")
    files.add_argument("--split-seed", metavar="N", type=int, help="the seed of --validation-split (default 0)")
    files.add_argument("--text-fields", metavar="A[,B]", help="the input field, or a pair (needed unless the files "
                                                            "hold one field besides the label, or only sentence1 "
                                                            "and sentence2)")
    files.add_argument("--label-field", metavar="NAME", help="the label field (default: label)")
    files.add_argument("--column-names", metavar="A,B,...", help="the columns of csv/tsv files without a header "
                                                                 "row, in order")
    files.add_argument("--separator", metavar="C", help="a delimited file's one-character separator (e.g. ';'); read "
                                                      "as csv, any extension")
    files.add_argument("--format", choices=one_file_formats(), help="the files' format (default: from the "
                                                                   "extension)")
    files.add_argument("--problem-type", choices=PROBLEM_TYPES, help="default: from the labels (numbers with "
                                                                     "decimals: regression, else classification)")
    add_config_flags(train, Hyperparameters, "hyperparameters")
    add_config_flags(train, RunSettings, "run settings")


def _add_search_command(commands) -> None:
    search = commands.add_parser("search", help="run a search space on Ray Tune, tracked in MLflow",
                                 description="Run every trial of a search space on a Ray cluster (or a local Ray "
                                             "instance) and record them in MLflow.")
    search.add_argument("space", metavar="SPACE.yaml", nargs="+",
                        help="search space file or shipped space name, e.g. search_spaces/smoke.yaml or paper_istar; "
                             "several run as one Ray Tune experiment (a seeds space re-running one of them starts "
                             "each group's seeds when that group has ended)")
    search.add_argument("--models", nargs="+", metavar="NAME", help="replace the space's models (comma or space "
                                                                    "separated)")
    search.add_argument("--tasks", nargs="+", metavar="NAME", help="replace the space's tasks (names, or task "
                                                                   "definition files)")
    search.add_argument("--methods", nargs="+", metavar="NAME", help="replace the space's methods")
    search.add_argument("--data-dir", help="folder in the GLUE layout (else the space's data_dir, else $GLUE_DIR, "
                                           "else the Hugging Face hub)")
    search.add_argument("--storage-path",
                        help="Ray results: a local folder, or a shared path/URI on multi-node clusters "
                             f"(default: ${STORAGE_ENV}, else {DEFAULT_STORAGE})")
    search.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///STORAGE/mlflow.db; use an "
                                               "http:// server on clusters)")
    search.add_argument("--name", help="search name: MLflow experiment and results folder (default: the space's); "
                                       "with several spaces, the results folder only (default: their names joined "
                                       "by +)")
    search.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS, else a local instance)")
    search.add_argument("--holdout", type=float, metavar="SHARE",
                        help="hold this share of the training data out in every trial (settings.holdout): it chooses "
                             "each trial's epoch, and a seeds stage with choose_by: holdout chooses configurations "
                             "by it (the fair comparison)")
    search.add_argument("--strategy-from", metavar="EXPERIMENT|FILE",
                        help="search and schedule as `replay` recommended for EXPERIMENT (its grid, in the same "
                             "tracking store), or as a YAML fragment of search/scheduler/concurrency keys says")
    search.add_argument("--resume", action="store_true", help="continue an interrupted search: finished trials "
                                                              "are kept, their MLflow runs reused")
    search.add_argument("--no-models", action="store_true",
                        help="do not log each group's best checkpoint as an MLflow model at the end (storage-poor "
                             "clusters: a BERT-base model is about 440 MB a group)")
    search.add_argument("--resume-if-started", action="store_true",
                        help="--resume when this search has started before, else start it (a batch job that may be "
                             "requeued: jobs/slurm/search.sbatch)")
    search.add_argument("--shard", metavar="K/N",
                        help="run the K-th of N shares of the searches' (model, task) pairs, dealt round-robin: a job "
                             "array's task (jobs/slurm/search.sbatch passes it under sbatch --array); the shards share "
                             "the MLflow experiments, each keeps a results folder of its own")
    search.add_argument("--accept-changed-space", action="store_true",
                        help="with --resume: go on although the space now plans other trials than the search started "
                             "with (the search keeps the grid it started with)")
    _add_planning_flags(search)
    search.add_argument("--simulate", action="store_true",
                        help="rehearse the search without training: trials wait for a modelled duration, write "
                             "checkpoints and report synthetic metrics; runs are tagged simulated")
    search.add_argument("--time-factor", type=float, default=1e-3,
                        help="with --simulate: seconds waited per modelled second of a trial (default: %(default)s)")
    search.add_argument("--checkpoint-bytes", type=int, default=65536,
                        help="with --simulate: bytes of a full-state checkpoint (default: %(default)s)")
    search.add_argument("--gpus", type=int, default=8,
                        help="with --simulate on a local Ray instance: logical GPUs it declares, so a GPU search "
                             "rehearses on a CPU-only machine (default: %(default)s)")


def _add_planning_flags(search: argparse.ArgumentParser) -> None:
    """The search command's flags for the dry run, the cost model and the machines' figures."""
    search.add_argument("--dry-run", action="store_true", help="print the configurations, trials and epochs per "
                                                               "model × task × method and the resources; run nothing")
    search.add_argument("--tokens-per-second", nargs="+", metavar="MODEL=RATE",
                        help="with --dry-run or --simulate: training tokens per second per model measured on one of "
                             "your GPUs (e.g. bert=52000); the dry run then estimates the search's GPU-hours")
    search.add_argument("--throughput", nargs="+", metavar="FILE",
                        help="with --dry-run or --simulate: files written by `istar-tune calibrate`, one per model; "
                             "the dry run then estimates GPU-hours at the space's packing and the recommended one")
    search.add_argument("--system-metrics-s", type=float, default=10.0, metavar="SECONDS",
                        help="seconds between samples of every node's CPU, memory and GPU load, logged to the search's "
                             "MLflow run (0: none; default: %(default)s)")
    search.add_argument("--cores-per-gpu", type=float, metavar="N",
                        help="with --dry-run: the CPU cores a node has per GPU, to say how many trials a GPU holds by "
                             "cores (each trial's step needs resources.cpu cores of its own) beside its memory")
    search.add_argument("--gpu-memory-gb", type=float, metavar="GIB",
                        help="memory of the cluster's GPUs: the preflight refuses a packing (resources.gpu below 1) "
                             "whose trials would not fit (default: what the GPU type Ray reports says)")


def _add_table_command(commands) -> None:
    table = commands.add_parser("table", help="export a table of a search's results from MLflow",
                                description="Build a table from the MLflow runs of a search.")
    _add_store_flags(table)
    table.add_argument("--kind", default="best", metavar="KIND",
                       help="best (per model × task × method), lambda-zeta (the paper's Table 2), seeds (Table 1: "
                            "mean ± std over seeds) or budget (expected validation performance: the best of n "
                            "configurations, n = 1 … all) (default: %(default)s)")
    table.add_argument("--format", default="md", metavar="FORMAT",
                       help="md, csv, latex, parquet, or yaml: with --kind best, each group's best configuration as "
                            "a `train --config` file (default: %(default)s)")
    table.add_argument("--output", metavar="FILE", help="write here instead of standard output (needed for parquet)")
    table.add_argument("--scope", default="last", metavar="SCOPE",
                       help="rank trials by the metric after their last epoch (last) or their best epoch "
                            "(best-epoch) (default: %(default)s)")
    table.add_argument("--against-paper", action="store_true", help="put the paper's published values beside ours")
    table.add_argument("--simulated", action="store_true", help="tabulate the runs of a rehearsal (search "
                                                                "--simulate); never mixed with real runs")
    table.add_argument("--stats", default="paper", metavar="STATS",
                       help="with --kind seeds: paper (mean ± SD, t-interval, † from Welch + Holm, as the paper), "
                            "robust (against Base, paired by seed: the paired t-interval and test with Holm, the "
                            "exact Wilcoxon test, the effect in seed SDs, resampling intervals only where their "
                            "measured coverage holds, the mean over tasks) or all (both tables, † from the paired "
                            "test) (default: %(default)s)")
    table.add_argument("--with-replacement", action="store_true",
                       help="with --kind budget: draw the n configurations with replacement, as Dodge et al. (2019) "
                            "do (default: without, as a random search of n runs them)")
    table.add_argument("--log", action="store_true",
                       help="with --kind seeds: write (or update) one aggregate run per model × task × method to "
                            "MLflow, its seed runs nested under it (a seeds stage writes them when it ends)")
    table.add_argument("--mix-exactness", action="store_true",
                       help="tabulate runs whose attn_implementation or matmul_precision differ (refused by default: "
                            "their numbers differ by those settings too)")
    table.add_argument("--models", nargs="+", metavar="NAME", help="rows to show (default: every model with runs)")
    table.add_argument("--tasks", nargs="+", metavar="NAME", help="tasks to show (default: every task with runs; "
                                                                  "with --against-paper, the paper's nine too)")
    table.add_argument("--methods", nargs="+", metavar="NAME", help="methods to show (default: every method with "
                                                                    "runs)")


def _add_replay_command(commands) -> None:
    replay = commands.add_parser("replay", help="what cheaper searches would have chosen, replayed on a finished grid",
                                 description="Replay random search, TPE, ASHA, Hyperband and median stopping on the "
                                             "per-epoch records of a finished grid (no training): how often each "
                                             "chose the grid's best configuration, and at what share of its cost.")
    _add_store_flags(replay)
    replay.add_argument("--replays", type=int, default=50, metavar="N",
                        help="replays per strategy and setting, each with its own seed (default: %(default)s)")
    replay.add_argument("--workers", type=int, default=4, metavar="N",
                        help="parallel workers the asynchronous schedulers see results from (default: %(default)s)")
    replay.add_argument("--processes", type=int, metavar="N",
                        help="replay side by side in N processes; the table is the same (default: one per core, one "
                             "for a grid under 200 configurations)")
    replay.add_argument("--seed", type=int, default=0, help="the replays' first seed (default: %(default)s)")
    replay.add_argument("--across-methods", action="store_true",
                        help="one choice per model × task among every method's configurations (default: per method)")
    replay.add_argument("--schedulers", nargs="+", metavar="NAME",
                        help=f"replay only these: {_replayable()} (default: all)")
    replay.add_argument("--noise-from", metavar="NAME", help="the seeds stage whose spread is the seed noise "
                                                            "(default: one whose best_of names the experiment)")
    replay.add_argument("--format", default="md", metavar="FORMAT", help="md, csv or parquet (default: %(default)s)")
    replay.add_argument("--output", metavar="FILE", help="write here instead of standard output (needed for parquet)")
    replay.add_argument("--simulated", action="store_true", help="replay a rehearsal's grid (search --simulate)")
    replay.add_argument("--no-mlflow", action="store_true", help="do not log the table to the search's MLflow run")


def _add_export_command(commands) -> None:
    export = commands.add_parser("export", help="a finished grid's learning curves as a public benchmark",
                                 description="Write every configuration's record after each epoch of a finished grid: "
                                             "a long table (curves: parquet or csv) or Syne Tune's blackbox "
                                             "repository files (synetune).")
    _add_store_flags(export)
    export.add_argument("--format", required=True, choices=("curves", "synetune"),
                        help="curves: one long table; synetune: a blackbox per model × method (needs syne-tune)")
    export.add_argument("--output", required=True, metavar="PATH",
                        help="curves: a .parquet or .csv file; synetune: a folder")
    export.add_argument("--simulated", action="store_true", help="export a rehearsal's grid (search --simulate)")


def _add_status_command(commands) -> None:
    status = commands.add_parser("status", help="how a search stands, per group, from MLflow alone",
                                 description="Trials running, pending, finished, stopped early, failed and "
                                             "interrupted per model × task × method, and the best so far.")
    _add_store_flags(status, positional=True)
    status.add_argument("--watch", type=float, default=0, metavar="SECONDS",
                        help="redraw every SECONDS until the search has ended (default: print once)")


def _add_demo_command(commands) -> None:
    demo = commands.add_parser("demo", help="Base against I-STAR on real SST-2 with MiniLM, end to end",
                               description="Run search_spaces/demo.yaml on a local Ray instance, tracked in MLflow "
                                           "under --storage-path, and print the results. Re-running reuses finished "
                                           "trials.")
    demo.add_argument("--data-dir", help="folder in the GLUE layout (else $GLUE_DIR, else the Hugging Face hub)")
    demo.add_argument("--storage-path", help=f"Ray results and the MLflow store (default: ${STORAGE_ENV}, else "
                                             f"{DEFAULT_STORAGE})")
    demo.add_argument("--smoke", action="store_true", help="the same search on 128 training and 128 dev examples "
                                                           "(about a minute)")
    demo.add_argument("--space", help="another search space to run instead of search_spaces/demo.yaml")
    demo.add_argument("--address", help="a Ray cluster to run on (default: a local instance)")


def _add_calibrate_command(commands) -> None:
    calibrate = commands.add_parser(
        "calibrate", help="measure which packing (trials a GPU) this machine holds best",
        description="Train the real training step with 1, 2, 4, 8 co-located processes on this machine (eager, and "
                    "compiled where torch.compile works) and print tokens per second per trial and in total, peak "
                    "memory and the packing to choose; write a throughput file for search --dry-run --throughput.")
    calibrate.add_argument("--model", required=True, help="model short name, hub id or local folder")
    calibrate.add_argument("--task", required=True, help="task name or definition file")
    calibrate.add_argument("--method", default=PAPER_METHOD, help="method whose loss trains (default: %(default)s)")
    calibrate.add_argument("--batch-size", type=int, default=32, help="per trial (default: %(default)s)")
    calibrate.add_argument("--max-length", type=int, default=128, help="tokens per input (default: %(default)s)")
    calibrate.add_argument("--packing", default="1,2,4,8", help="trials a GPU to measure (default: %(default)s)")
    calibrate.add_argument("--fuse", default="1", help="configurations a fused trial trains (search.fuse) to measure, "
                                                       "e.g. 1,4,8; a bundle runs eager attention, and so then does "
                                                       "every row (default: %(default)s)")
    calibrate.add_argument("--steps", type=int, default=20, help="timed training steps per trial (default: "
                                                                 "%(default)s)")
    calibrate.add_argument("--warmup", type=int, default=3, help="untimed steps first (default: %(default)s)")
    calibrate.add_argument("--compile", choices=("auto", "off", "only"), default="auto",
                           help="auto: eager and torch.compile on CUDA, eager on CPU; off: eager; only: compiled")
    calibrate.add_argument("--device", default="auto", help="auto, cuda or cpu (default: %(default)s)")
    calibrate.add_argument("--data-dir", help="folder in the GLUE layout (else $GLUE_DIR, else the hub)")
    calibrate.add_argument("--output", required=True, help="the throughput file to write (YAML)")


def _add_plots_command(commands) -> None:
    plots = commands.add_parser("plots", help="plot a search's results (IsoScore* against the metric per λ, "
                                              "metric per epoch)",
                                description="Write PNGs of a search and log them to its MLflow parent run.")
    _add_store_flags(plots)
    plots.add_argument("--output-dir", default="plots", help="folder for the PNGs (default: %(default)s)")
    plots.add_argument("--no-mlflow", action="store_true", help="do not log the PNGs to the search's parent run")


def _add_analyze_command(commands) -> None:
    analyze = commands.add_parser("analyze", help="isotropy of a trained model's layers on a task's dev data",
                                  description="Layer-wise IsoScore*, TwoNN intrinsic dimension of [CLS], EV_1..EV_3, "
                                              "average cosine similarity and mean activation of a checkpoint.")
    analyze.add_argument("checkpoint", help="an istar-tune train output folder, a model folder, or a search "
                                            "trial's checkpoint folder")
    analyze.add_argument("--task", help="the task, by name or definition file (default: the one the checkpoint was "
                                        "trained on)")
    analyze.add_argument("--data-dir", help="folder in the GLUE layout (default: the training run's, else "
                                            "$GLUE_DIR)")
    analyze.add_argument("--max-eval-samples", type=int,
                         help="use only the first N dev examples (default: the training run's, else all)")
    analyze.add_argument("--max-length", type=int, help="maximum tokens per input (default: the training run's)")
    analyze.add_argument("--output-dir", help="where analysis.json and the PNGs go (default: CHECKPOINT/analysis)")
    analyze.add_argument("--tracking-uri", help="log the results to MLflow at this URI")
    analyze.add_argument("--run-id", help="the MLflow run to log to (default: the search trial the checkpoint "
                                          "belongs to)")


def _add_reference_command(commands) -> None:
    commands.add_parser("reference", help="print the configuration reference (Markdown)")


def _add_store_flags(parser: argparse.ArgumentParser, positional: bool = False) -> None:
    if positional:  # `status NAME` or `status --experiment NAME`
        parser.add_argument("name", nargs="?", metavar="NAME", help="the search name (MLflow experiment)")
    parser.add_argument("--experiment", required=not positional, metavar="NAME",
                        help="the search name (MLflow experiment)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                                               "sqlite:///STORAGE/mlflow.db)")
    parser.add_argument("--storage-path", help="the search's storage path, for the default tracking URI (default: "
                                               f"${STORAGE_ENV}, else {DEFAULT_STORAGE})")
