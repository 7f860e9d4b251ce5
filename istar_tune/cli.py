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

from istar_tune.cli_parser import build_parser
from istar_tune.config import Hyperparameters, split_config
from istar_tune.errors import ConfigError, IstarTuneError, repeated
from istar_tune.methods import refuse_unused
from istar_tune.reference import collect_config, configuration_reference
from istar_tune.results.aggregates import log_seed_aggregates
from istar_tune.results.export import export_best
from istar_tune.results.formats import render
from istar_tune.results.plots import write_plots
from istar_tune.results.status import watch_status
from istar_tune.results.tables import CAPTIONS, build_table
from istar_tune.search.cluster import loopback_only
from istar_tune.search.dry_run import dry_run
from istar_tune.search.outcome import exit_code
from istar_tune.search.preflight import check_data, check_models, run_checks
from istar_tune.search.run import run_searches
from istar_tune.search.shard import describe as describe_shard
from istar_tune.search.shard import parse_shard, take_shard
from istar_tune.search.spaces.cost import Throughput, packing_of
from istar_tune.search.spaces.file import load_search_space
from istar_tune.search.spaces.strategy import read_strategy
from istar_tune.search.stopping import Terminated
from istar_tune.search.tune.simulate import Simulation
from istar_tune.tasks import Task, task_of
from istar_tune.tracking.storage import storage_root, tracking_uri


def cmd_reference(args: argparse.Namespace) -> int:
    print(configuration_reference(), end="")
    return 0


# ------------------------------------------------------------------------------------------------ commands


def cmd_train(args: argparse.Namespace) -> int:
    from istar_tune.training.loop import train
    from istar_tune.training.state import METRICS_FILE

    values = collect_config(args, args.config)
    source = args.config or "command line"
    try:  # a value the method would drop, reported with every other problem
        refuse_unused(str(values.get("method", Hyperparameters.method)), values, source)
        unused = []
    except ConfigError as err:
        unused = err.problems
    task = _train_task(args, values)
    values["task"] = task.name
    try:
        hparams, settings = split_config(values, source=source)
    except ConfigError as err:
        raise ConfigError(err.problems + unused) from None
    if unused:
        raise ConfigError(unused)
    # The hub asked once, within seconds, where data or model would come from it (else its retries take a minute).
    run_checks([("data", lambda: check_data([task], settings.data_dir, read=False)),
                ("model", lambda: check_models([settings.init_checkpoint or hparams.model], at_hand=True))])
    reporter = _PrintReporter()
    result = train(hparams, settings, reporter, task=task)
    best = result.best
    summary = ", ".join(f"{k} {_fmt(best[k])}" for k in _headline_keys(best))
    print(f"best epoch {result.best_epoch}: {summary}")
    if settings.output_dir:
        print(f"wrote {Path(settings.output_dir) / METRICS_FILE}")
    if result.second_stage is not None:
        print("second stage: " + json.dumps(dataclasses.asdict(result.second_stage), default=float))
    return 0


def _train_task(args: argparse.Namespace, values: dict[str, Any]) -> Task:
    """The task ``train`` runs: a shipped task, a definition file (from the
    flag: relative to here; from --config: to the config's folder), a definition inline in --config, or the files of
    --train-file/--validation-file (named by --task, else ``custom``)."""
    task = values.get("task", Hyperparameters.task)
    split = {"validation_split": args.validation_split} if args.validation_split is not None else {}
    split.update({"split_seed": args.split_seed} if args.split_seed is not None else {})
    if args.train_file or args.validation_file:
        if not args.train_file or not (args.validation_file or split):
            raise ConfigError("--train-file and --validation-file go together: give both files (or --train-file and "
                              "--validation-split SHARE)")
        definition = {"name": task if args.task else "custom", "train": args.train_file,
                      **({"validation": args.validation_file} if args.validation_file else {}), **split,
                      **({"label_field": args.label_field} if args.label_field else {}),
                      **({"problem_type": args.problem_type} if args.problem_type else {}),
                      **({"text_fields": _names([args.text_fields], "--text-fields")} if args.text_fields else {}),
                      **({"column_names": _names([args.column_names], "--column-names")} if args.column_names
                         else {}),
                      **({"separator": args.separator} if args.separator else {}),
                      **({"format": args.format} if args.format else {})}
        return task_of(definition, Path.cwd(), source="--train-file/--validation-file")
    given = [flag for flag, value in (("--text-fields", args.text_fields), ("--label-field", args.label_field),
                                      ("--problem-type", args.problem_type), ("--column-names", args.column_names),
                                      ("--separator", args.separator), ("--format", args.format),
                                      ("--validation-split", args.validation_split), ("--split-seed", args.split_seed))
             if value is not None and value is not False and value != ""]
    if given:
        raise ConfigError(f"{', '.join(given)} describe(s) the files of --train-file/--validation-file: give those "
                          "files, or say it in the task's definition (text_fields, label_field, problem_type, "
                          "separator, format)")
    base = Path.cwd() if args.task or not args.config else Path(args.config).resolve().parent
    return task_of(task, base, source=str(args.config or "--task"))


class _PrintReporter:
    wants_checkpoint = False

    @staticmethod
    def task_read(task) -> None:
        print(task.describe(), flush=True)

    def __call__(self, record: dict[str, Any], checkpoint_dir) -> None:
        print(f"epoch {record['epoch']}: " + ", ".join(f"{k} {_fmt(record[k])}" for k in _headline_keys(record)),
              flush=True)


HEADLINE = ("accuracy", "mcc", "f1_macro", "pearson", "spearman", "f1", "exact_match", "eval_isoscore_star",
            "eval_isoscore", "train_loss", "penalty", "epoch_time_s")


def _headline_keys(record: dict[str, Any]) -> list[str]:
    return [k for k in HEADLINE if k in record]


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _names(values: list[str] | None, flag: str = "") -> list[str] | None:
    """``--models a,b c`` → [a, b, c]; a flag given that names nothing (``--models ''``), or a name twice, is
    refused (it would be read as "no narrowing", or run twice)."""
    if values is None:
        return None
    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    if not names:
        raise ConfigError(f"{flag} {' '.join(values)!r} names nothing: give one or more names, separated by commas "
                          "or spaces, or leave the flag out")
    twice = repeated(names)
    if twice:
        raise ConfigError(f"{flag} lists {', '.join(twice)} more than once: name each once")
    return names


def _throughput(args: argparse.Namespace, space) -> Throughput | None:
    """``--tokens-per-second bert=52000 ...`` or ``--throughput FILE ...`` (calibrate's) → the measured throughput
    at the space's packing, for the dry run's GPU-hours and the rehearsal's pace."""
    if args.tokens_per_second and args.throughput:
        raise ConfigError("--tokens-per-second and --throughput both give the throughput: give one")
    max_length = space.run_settings().max_length
    if args.throughput:
        return Throughput.read(args.throughput, space.models, max_length, packing_of(space.gpu))
    if not args.tokens_per_second:
        return None
    rates = Throughput.parse(_names(args.tokens_per_second, "--tokens-per-second"), space.models, max_length)
    return rates.at(packing_of(space.gpu))


def cmd_search(args: argparse.Namespace) -> int:
    strategy = read_strategy(args.strategy_from, _tracking_uri(args)) if args.strategy_from else None
    spaces = [load_search_space(path, strategy).narrow(_names(args.models, "--models"), _names(args.tasks, "--tasks"),
                                                 _names(args.methods, "--methods"))
              for path in args.space]
    if strategy is not None and any(space.stage == "seeds" for space in spaces):
        raise ConfigError("--strategy-from sets how a search searches; a seeds stage re-runs chosen configurations: "
                          "drop --strategy-from for it")
    if args.name and len(spaces) == 1:
        spaces = [replace(spaces[0], name=args.name)]
    if args.holdout is not None:
        spaces = [replace(space, settings={**space.settings, "holdout": args.holdout}) for space in spaces]
        spaces[0].run_settings()  # the share checked before anything starts
    if args.cores_per_gpu is not None and not args.cores_per_gpu > 0:
        raise ConfigError(f"--cores-per-gpu must be a positive number of cores, got {args.cores_per_gpu:g}")
    if args.gpu_memory_gb is not None and not args.gpu_memory_gb > 0:
        raise ConfigError(f"--gpu-memory-gb must be a positive number of GiB (e.g. 80 for an H100), got "
                          f"{args.gpu_memory_gb:g}")
    shard = parse_shard(args.shard) if args.shard else None
    if args.dry_run:
        if shard is not None:
            spaces = [space for space in take_shard(spaces, shard) if space is not None]
            print(describe_shard(spaces, shard), end="\n\n")
        print("\n\n".join(dry_run(spaces, _tracking_uri(args), args.data_dir, args.gpu_memory_gb,
                                  lambda space: _throughput(args, space), args.cores_per_gpu)))
        return 0
    simulation = None
    if args.simulate:
        simulation = Simulation(time_factor=args.time_factor, checkpoint_bytes=args.checkpoint_bytes, gpus=args.gpus,
                                throughput=_throughput(args, spaces[0]))
    elif args.throughput or args.tokens_per_second:
        raise ConfigError("--throughput and --tokens-per-second go with --dry-run or --simulate: a real search "
                          "measures its own time")
    summaries = run_searches(spaces, storage_path=args.storage_path, tracking_uri=args.tracking_uri,
                             name=args.name, address=args.address, resume=args.resume,
                             resume_if_started=args.resume_if_started, data_dir=args.data_dir,
                             simulation=simulation, accept_changed_space=args.accept_changed_space,
                             gpu_memory_gb=args.gpu_memory_gb, system_metrics_s=args.system_metrics_s,
                             log_models=not args.no_models, shard=shard)
    for summary in summaries:
        print(summary.report())
    # A seeds stage's aggregates (not a study's: its seeds differ in the value it varies, which `plots` draws), found
    # by name: a shard runs only the spaces it holds pairs of.
    stages = {space.name: space for space in spaces if space.stage == "seeds" and space.vary is None}
    for summary in summaries:
        if summary.name in stages and not summary.interrupted:
            ran = {(g.group.model, g.group.task, g.group.method) for g in summary.groups}
            print(_aggregates(summary.tracking_uri, summary.name, simulation is not None, ran))
    return max(exit_code(summary) for summary in summaries)


def _aggregates(uri: str, name: str, simulated: bool, ran: set[tuple[str, str, str]]) -> str:
    """A seeds stage's aggregate runs of the groups it ran, written at its end, in a line; a failure said, never
    failing the search."""
    try:
        written = log_seed_aggregates(uri, name, simulated, only=ran)
    except Exception as err:  # noqa: BLE001 - the seed runs are recorded either way; `table --kind seeds --log` again
        return (f"MLflow: the seeds' aggregate runs were not written ({type(err).__name__}: {err}); write them with "
                f"istar-tune table --experiment {name} --kind seeds --log")
    return f"MLflow: {len(written)} aggregate run(s) in {name}, one per model × task × method, its seed runs nested"


def _tracking_uri(args: argparse.Namespace) -> str:
    """``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else the store under ``--storage-path``."""
    return tracking_uri(args.tracking_uri, args.storage_path)


def cmd_table(args: argparse.Namespace) -> int:
    if args.stats == "all" and args.output:
        raise ConfigError("--stats all prints two tables; write each to a file of its own with --stats paper and "
                          "--stats robust")
    if args.log and args.kind != "seeds":
        raise ConfigError(f"--log writes a seeds stage's aggregate runs: it goes with --kind seeds, not {args.kind}")
    if args.format == "yaml" and args.kind == "best":  # the best configurations as files
        print(export_best(_tracking_uri(args), args.experiment, args.output, args.simulated,
                          _names(args.models, "--models"), _names(args.tasks, "--tasks"),
                          _names(args.methods, "--methods")))
        return 0
    table = build_table(_tracking_uri(args), args.experiment, kind=args.kind, scope=args.scope,
                        models=_names(args.models, "--models"), tasks=_names(args.tasks, "--tasks"),
                        methods=_names(args.methods, "--methods"),
                        against_paper=args.against_paper, simulated=args.simulated,
                        mix_exactness=args.mix_exactness, stats=args.stats,
                        with_replacement=args.with_replacement)
    shown = [table, *([table.attrs["robust"]] if "robust" in table.attrs else [])]  # --stats all: both tables
    if args.output is None and args.format == "md" and len(table.attrs.get("power", ())):
        shown.append(table.attrs["power"])  # what the seeds can show, under the seeds tables
    for index, each in enumerate(shown):
        text = render(each, args.format, args.output, caption=each.attrs.get("caption", CAPTIONS[args.kind]))
        print(text if text is not None else f"wrote {args.output}\n", end="\n" if index < len(shown) - 1 else "")
    if args.log:
        written = log_seed_aggregates(_tracking_uri(args), args.experiment, args.simulated)
        print(f"MLflow: {len(written)} aggregate run(s) in experiment {args.experiment}, each seed run nested under "
              "its group's", file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from istar_tune.replay.export import export_grid

    print(export_grid(_tracking_uri(args), args.experiment, args.format, args.output, args.simulated))
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from istar_tune.replay.run import CAPTION, replay_experiment

    if args.format not in ("md", "csv", "parquet"):
        raise ConfigError(f"replay: unknown format {args.format!r}: choose md, csv or parquet")
    result = replay_experiment(_tracking_uri(args), args.experiment, args.replays, args.workers, args.seed,
                               args.across_methods, args.simulated, args.noise_from,
                               tuple(args.schedulers) if args.schedulers else None, not args.no_mlflow,
                               progress=lambda line: print(line, file=sys.stderr), processes=args.processes)
    text = render(result.table, args.format, args.output, caption=CAPTION)
    print(text if text is not None else f"wrote {args.output}", end="" if text is not None else "\n")
    for line in result.bounds:
        print(line)
    print(f"{result.recommendation} (replayed in {result.seconds:.0f} s)")
    if result.strategy is not None and not args.no_mlflow:
        print(f"to search with it: istar-tune search SPACE --strategy-from {args.experiment} (same --storage-path "
              "or --tracking-uri)")
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
    return report.exit_code or (1 if report.failed else 0)


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


def cmd_calibrate(args: argparse.Namespace) -> int:
    from istar_tune.apps.calibrate import calibrate
    from istar_tune.apps.calibrate_options import calibration_job, compile_modes, parse_fuses, parse_packings

    job = calibration_job(args.model, args.task, args.method, args.batch_size, args.max_length, args.steps,
                          args.warmup, args.data_dir or os.environ.get("GLUE_DIR"), args.device)
    calibrate(job, parse_packings(args.packing), compile_modes(args.compile, args.device), args.output,
              fuses=parse_fuses(args.fuse))
    return 0


# ------------------------------------------------------------------------------------------------- parser


QUIET_TRIALS = {"RAY_COLOR_PREFIX": "0", "RAY_DEDUP_LOGS": "0", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                "RAY_LOGGER_LEVEL": "warning"}
"""The environment of a search's trials without ``--debug``: their lines plain, each once, no progress bars, and no
Ray notices below warnings (such as Tune's "Restored on ... from checkpoint" when a trial resumes)."""

HANDLERS = {"train": cmd_train, "search": cmd_search, "table": cmd_table, "status": cmd_status, "demo": cmd_demo,
            "plots": cmd_plots, "replay": cmd_replay, "export": cmd_export, "analyze": cmd_analyze,
            "calibrate": cmd_calibrate, "reference": cmd_reference}
"""Each command's function (the parser, :mod:`istar_tune.cli_parser`, names the command)."""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "command", None) in ("search", "demo") and not (args.address or os.environ.get("RAY_ADDRESS")):
        loopback_only()  # before Ray is imported: a local instance listens on 127.0.0.1 only
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.debug:  # MLflow's INFO lines (creating its tables, ...) only with --debug; read when it is imported
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
        if args.command in ("search", "demo"):  # trials' lines via Ray: plain, once, no bars (jobs/: on each node)
            for key, value in QUIET_TRIALS.items():
                os.environ.setdefault(key, value)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        if hasattr(args, "storage_path"):  # flag, then environment, then the default (istar_tune.tracking.storage)
            args.storage_path = storage_root(args.storage_path)
        return HANDLERS[args.command](args)
    except IstarTuneError as err:
        if args.debug:
            raise
        print(f"istar-tune: error: {err}", file=sys.stderr)
        return 2
    except Terminated as err:  # the text, where the command gave one, says what was kept and how to go on
        print(f"istar-tune: {str(err) or 'terminated; continue with --resume'}", file=sys.stderr)
        return 143
    except KeyboardInterrupt as err:
        print(f"istar-tune: {str(err) or 'interrupted; continue with --resume'}", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminated(signum, frame):
    raise Terminated()


if __name__ == "__main__":
    sys.exit(main())
