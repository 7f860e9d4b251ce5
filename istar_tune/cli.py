"""``istar-tune``: a thin command line over the library.

Each command maps to one library function. Errors print one line and exit with code 2 (``--debug`` shows the
traceback).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from istar_tune.config import Hyperparameters, RunSettings, split_config
from istar_tune.errors import ConfigError, IstarTuneError
from istar_tune.reference import add_config_flags, collect_config, configuration_reference
from istar_tune.results.export import export_best
from istar_tune.results.formats import render
from istar_tune.results.plots import write_plots
from istar_tune.results.status import watch_status
from istar_tune.results.tables import CAPTIONS, build_table
from istar_tune.search.cluster import loopback_only
from istar_tune.search.outcome import exit_code
from istar_tune.search.plan import dry_run_report, plan
from istar_tune.search.preflight import check_data, run_checks
from istar_tune.search.run import run_searches
from istar_tune.search.spaces.cost import Throughput
from istar_tune.search.spaces.file import load_search_space
from istar_tune.search.tune.simulate import Simulation
from istar_tune.tasks import task_reference
from istar_tune.tracking.storage import DEFAULT_STORAGE, STORAGE_ENV, storage_root, tracking_uri


def cmd_reference(args: argparse.Namespace) -> int:
    print(configuration_reference(), end="")
    return 0


# ------------------------------------------------------------------------------------------------ commands


def cmd_train(args: argparse.Namespace) -> int:
    from istar_tune.training.loop import train
    from istar_tune.training.state import METRICS_FILE

    values = collect_config(args, args.config)
    values["task"] = _train_task(args, values)
    hparams, settings = split_config(values, source=args.config or "command line")
    reporter = _PrintReporter()
    result = train(hparams, settings, reporter)
    best = result.best
    summary = ", ".join(f"{k} {_fmt(best[k])}" for k in _headline_keys(best))
    print(f"best epoch {result.best_epoch}: {summary}")
    if settings.output_dir:
        print(f"wrote {Path(settings.output_dir) / METRICS_FILE}")
    if result.second_stage is not None:
        print("second stage: " + json.dumps(dataclasses.asdict(result.second_stage), default=float))
    return 0


def _train_task(args: argparse.Namespace, values: dict[str, Any]) -> str:
    """The name of the task ``train`` runs, its definition registered: a shipped task, a definition file (from the
    flag: relative to here; from --config: to the config's folder), a definition inline in --config, or the files of
    --train-file/--validation-file (named by --task, else ``custom``)."""
    task = values.get("task", Hyperparameters.task)
    if args.train_file or args.validation_file:
        if not (args.train_file and args.validation_file):
            raise ConfigError("--train-file and --validation-file go together: give both files")
        definition = {"name": task if args.task else "custom", "train": args.train_file,
                      "validation": args.validation_file, "label_field": args.label_field or "label",
                      **({"text_fields": _names([args.text_fields])} if args.text_fields else {})}
        return task_reference(definition, Path.cwd(), source="--train-file/--validation-file").name
    base = Path.cwd() if args.task or not args.config else Path(args.config).resolve().parent
    return task_reference(task, base, source=str(args.config or "--task")).name


class _PrintReporter:
    wants_checkpoint = False

    def __call__(self, record: dict[str, Any], checkpoint_dir) -> None:
        print(f"epoch {record['epoch']}: " + ", ".join(f"{k} {_fmt(record[k])}" for k in _headline_keys(record)),
              flush=True)


HEADLINE = ("accuracy", "mcc", "f1_macro", "pearson", "spearman", "f1", "exact_match", "eval_isoscore_star",
            "eval_isoscore", "train_loss", "penalty", "epoch_time_s")


def _headline_keys(record: dict[str, Any]) -> list[str]:
    return [k for k in HEADLINE if k in record]


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _names(values: list[str] | None) -> list[str] | None:
    """``--models a,b c`` → [a, b, c]."""
    if not values:
        return None
    return [name for value in values for name in value.split(",") if name]


def _throughput(values: list[str] | None, space) -> Throughput | None:
    """``--tokens-per-second bert=52000 ...`` → the measured throughput for the dry run's GPU-hours."""
    return Throughput.parse(_names(values), space.models, space.run_settings().max_length) if values else None


def cmd_search(args: argparse.Namespace) -> int:
    spaces = [load_search_space(path).narrow(_names(args.models), _names(args.tasks), _names(args.methods))
              for path in args.space]
    if args.name and len(spaces) == 1:
        spaces = [replace(spaces[0], name=args.name)]
    if args.holdout is not None:
        spaces = [replace(space, settings={**space.settings, "holdout": args.holdout}) for space in spaces]
        spaces[0].run_settings()  # the share checked before anything starts
    if args.dry_run:
        for space in spaces:  # a task definition's sizes and classes come from its data
            run_checks([("tasks", lambda s=space: check_data(list(s.tasks), args.data_dir, definitions_only=True))])
        names = [s.name for s in spaces]
        reports = []
        for index, space in enumerate(spaces):
            tracking_uri = None
            if space.stage == "seeds":  # the configurations to re-run, when the searches they come from exist
                candidate = _tracking_uri(args)
                store = Path(candidate[len("sqlite:///"):]) if candidate.startswith("sqlite:///") else None
                tracking_uri = candidate if store is None or store.is_file() else None
            measured = _throughput(args.tokens_per_second, space)
            reports.append(dry_run_report(space, plan(space, tracking_uri, dry_run=True,
                                                      chained=dict(zip(names[:index], spaces[:index]))), measured))
        print("\n\n".join(reports))
        return 0
    simulation = None
    if args.simulate:
        simulation = Simulation(time_factor=args.time_factor, checkpoint_bytes=args.checkpoint_bytes, gpus=args.gpus)
    summaries = run_searches(spaces, storage_path=args.storage_path, tracking_uri=args.tracking_uri,
                             name=args.name, address=args.address, resume=args.resume, data_dir=args.data_dir,
                             simulation=simulation, accept_changed_space=args.accept_changed_space)
    for summary in summaries:
        print(summary.report())
    return max(exit_code(summary) for summary in summaries)


def _tracking_uri(args: argparse.Namespace) -> str:
    """``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else the store under ``--storage-path``."""
    return tracking_uri(args.tracking_uri, args.storage_path)


def cmd_table(args: argparse.Namespace) -> int:
    if args.format == "yaml" and args.kind == "best":  # the best configurations as files
        print(export_best(_tracking_uri(args), args.experiment, args.output, args.simulated, _names(args.models),
                          _names(args.tasks), _names(args.methods)))
        return 0
    table = build_table(_tracking_uri(args), args.experiment, kind=args.kind, scope=args.scope,
                        models=_names(args.models), tasks=_names(args.tasks), methods=_names(args.methods),
                        against_paper=args.against_paper, simulated=args.simulated)
    text = render(table, args.format, args.output, caption=table.attrs.get("caption", CAPTIONS[args.kind]))
    if text is not None:
        print(text, end="")
    else:
        print(f"wrote {args.output}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    experiment = args.experiment or args.name
    if not experiment or (args.name and args.experiment and args.name != args.experiment):
        raise ConfigError("status: name one search, as `status NAME` or `status --experiment NAME`")
    watch_status(_tracking_uri(args), experiment, args.watch, redraw=sys.stdout.isatty())
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from istar_tune.apps.demo import run_demo

    report = run_demo(data_dir=args.data_dir, storage_path=args.storage_path, smoke=args.smoke, space_file=args.space,
                      address=args.address)
    print(report.text())
    return 1 if report.failed else 0


def cmd_plots(args: argparse.Namespace) -> int:
    for path in write_plots(_tracking_uri(args), args.experiment, args.output_dir, log_to_mlflow=not args.no_mlflow):
        print(f"wrote {path}")
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from istar_tune.apps.analyze import analyze, log_to_mlflow, report, write_outputs

    output = Path(args.output_dir or Path(args.checkpoint) / "analysis")
    result = analyze(args.checkpoint, task=args.task, data_dir=args.data_dir, max_eval_samples=args.max_eval_samples,
                     max_length=args.max_length)
    files = write_outputs(result, output)
    print(f"{report(result)}\nwrote {output}")
    if args.tracking_uri:
        run_id = log_to_mlflow(result, files, args.tracking_uri, args.run_id, args.checkpoint)
        print(f"logged to MLflow run {run_id}" if run_id else "no MLflow run found for this checkpoint")
    return 0


# ------------------------------------------------------------------------------------------------- parser


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
    _add_analyze_command(commands)
    _add_reference_command(commands)
    return parser


def _add_train_command(commands) -> None:
    train = commands.add_parser("train", help="fine-tune one configuration (no Ray)",
                                description="Fine-tune one configuration and write metrics.json, config.yaml "
                                            "and the best checkpoint into --output-dir.")
    train.add_argument("--config", metavar="FILE.yaml", help="YAML of hyperparameters and settings (flags win)")
    files = train.add_argument_group("your own task's files (instead of --task; see docs/tasks.md)")
    files.add_argument("--train-file", metavar="FILE", help="training split: csv, tsv, json/jsonl or parquet")
    files.add_argument("--validation-file", metavar="FILE", help="validation split, in the same format")
    files.add_argument("--text-fields", metavar="A[,B]", help="the input field, or a pair (default: sentence1 and "
                                                            "sentence2 if present, else the first fields that are not "
                                                            "the label, as run_glue.py)")
    files.add_argument("--label-field", metavar="NAME", help="the label field (default: label)")
    add_config_flags(train, Hyperparameters, "hyperparameters")
    add_config_flags(train, RunSettings, "run settings")
    train.set_defaults(handler=cmd_train)


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
    search.add_argument("--resume", action="store_true", help="continue an interrupted search: finished trials "
                                                              "are kept, their MLflow runs reused")
    search.add_argument("--accept-changed-space", action="store_true",
                        help="with --resume: go on although the space now plans other trials than the search started "
                             "with (the search keeps the grid it started with)")
    search.add_argument("--dry-run", action="store_true", help="print the configurations, trials and epochs per "
                                                               "model × task × method and the resources; run nothing")
    search.add_argument("--tokens-per-second", nargs="+", metavar="MODEL=RATE",
                        help="with --dry-run: training tokens per second per model measured on one of your GPUs "
                             "(e.g. bert=52000); the dry run then estimates the search's GPU-hours")
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
    search.set_defaults(handler=cmd_search)


def _add_table_command(commands) -> None:
    table = commands.add_parser("table", help="export a table of a search's results from MLflow",
                                description="Build a table from the MLflow runs of a search.")
    _add_store_flags(table)
    table.add_argument("--kind", default="best", metavar="KIND",
                       help="best (per model × task × method), lambda-zeta (the paper's Table 2) or seeds (Table 1: "
                            "mean ± std over seeds) (default: %(default)s)")
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
    table.add_argument("--models", nargs="+", metavar="NAME", help="rows to show (default: every model with runs)")
    table.add_argument("--tasks", nargs="+", metavar="NAME", help="tasks to show (default: every task with runs; "
                                                                  "with --against-paper, the paper's nine too)")
    table.add_argument("--methods", nargs="+", metavar="NAME", help="methods to show (default: every method with "
                                                                    "runs)")
    table.set_defaults(handler=cmd_table)


def _add_status_command(commands) -> None:
    status = commands.add_parser("status", help="how a search stands, per group, from MLflow alone",
                                 description="Trials running, pending, finished, stopped early, failed and "
                                             "interrupted per model × task × method, and the best so far.")
    _add_store_flags(status, positional=True)
    status.add_argument("--watch", type=float, default=0, metavar="SECONDS",
                        help="redraw every SECONDS until the search has ended (default: print once)")
    status.set_defaults(handler=cmd_status)


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
    demo.set_defaults(handler=cmd_demo)


def _add_plots_command(commands) -> None:
    plots = commands.add_parser("plots", help="plot a search's results (IsoScore* against the metric per λ, "
                                              "metric per epoch)",
                                description="Write PNGs of a search and log them to its MLflow parent run.")
    _add_store_flags(plots)
    plots.add_argument("--output-dir", default="plots", help="folder for the PNGs (default: %(default)s)")
    plots.add_argument("--no-mlflow", action="store_true", help="do not log the PNGs to the search's parent run")
    plots.set_defaults(handler=cmd_plots)


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
    analyze.add_argument("--max-eval-samples", type=int, help="use only the first N dev examples")
    analyze.add_argument("--max-length", type=int, help="maximum tokens per input (default: the training run's)")
    analyze.add_argument("--output-dir", help="where analysis.json and the PNGs go (default: CHECKPOINT/analysis)")
    analyze.add_argument("--tracking-uri", help="log the results to MLflow at this URI")
    analyze.add_argument("--run-id", help="the MLflow run to log to (default: the search trial the checkpoint "
                                          "belongs to)")
    analyze.set_defaults(handler=cmd_analyze)


def _add_reference_command(commands) -> None:
    reference = commands.add_parser("reference", help="print the configuration reference (Markdown)")
    reference.set_defaults(handler=cmd_reference)


def _add_store_flags(parser: argparse.ArgumentParser, positional: bool = False) -> None:
    if positional:  # `status NAME` or `status --experiment NAME`
        parser.add_argument("name", nargs="?", metavar="NAME", help="the search name (MLflow experiment)")
    parser.add_argument("--experiment", required=not positional, metavar="NAME",
                        help="the search name (MLflow experiment)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                                               "sqlite:///STORAGE/mlflow.db)")
    parser.add_argument("--storage-path", help="the search's storage path, for the default tracking URI (default: "
                                               f"${STORAGE_ENV}, else {DEFAULT_STORAGE})")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "command", None) in ("search", "demo") and not (args.address or os.environ.get("RAY_ADDRESS")):
        loopback_only()  # before Ray is imported: a local instance listens on 127.0.0.1 only
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.debug:  # MLflow's INFO lines (creating its tables, ...) only with --debug; read when it is imported
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        if hasattr(args, "storage_path"):  # flag, then environment, then the default (istar_tune.tracking.storage)
            args.storage_path = storage_root(args.storage_path)
        return args.handler(args)
    except IstarTuneError as err:
        if args.debug:
            raise
        print(f"istar-tune: error: {err}", file=sys.stderr)
        return 2
    except Terminated:
        print("istar-tune: terminated; continue with --resume", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("istar-tune: interrupted; continue with --resume", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


class Terminated(KeyboardInterrupt):
    """SIGTERM, stopping a command as Ctrl-C does (runs marked KILLED, exit code 143)."""


def _terminated(signum, frame):
    raise Terminated()


if __name__ == "__main__":
    sys.exit(main())
