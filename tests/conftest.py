"""Fixtures shared by the whole suite: the shared data, a reference IsoScore*, MLflow stores and the runs the search's
logger would write into them."""

from __future__ import annotations

import collections
import math
import os
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Ray runs its workers at niceness 15: on a machine whose cores are busy with anything else the tests' trials would
# starve. Every Ray instance a test starts (local, `ray start`, a subprocess search) inherits normal priority.
os.environ.setdefault("RAY_worker_niceness", "0")
# `make test` runs two workers on a two-core machine: torch's default of a thread per core in each process (the
# workers and every train they start) leaves threads spin-waiting for cores the other process holds. Two MiniLM trains
# side by side took 148 s with torch's default threads and 82 s with one thread each. One thread a process, unless the
# variable is set; Ray's trial workers already get theirs from the trial's CPUs.
if "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"  # for every process a test starts
    torch.set_num_threads(1)  # and for this one, whose OpenMP read the variable when torch was imported

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FILE_SECONDS: collections.Counter = collections.Counter()
"""Each test file's seconds (setup, call and teardown of its tests), as the reports reach this process."""
FILE_TESTS: collections.Counter = collections.Counter()


def pytest_addoption(parser):
    parser.addoption("--file-durations", metavar="PATH", default=None,
                     help="write each test file's time (its tests' setup, call and teardown), slowest first, to PATH "
                          "as a markdown table (make test: test-durations.md)")


def pytest_runtest_logreport(report):
    file = report.nodeid.split("::", 1)[0]
    FILE_SECONDS[file] += report.duration
    FILE_TESTS[file] += report.when == "call"


def pytest_terminal_summary(terminalreporter, config):
    path = config.getoption("--file-durations")
    if not path or hasattr(config, "workerinput") or not FILE_SECONDS:  # a worker's reports reach the controller
        return
    total = sum(FILE_SECONDS.values())
    lines = ["| test file | seconds | share | tests |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| `{file}` | {seconds:,.1f} | {seconds / total:.1%} | {FILE_TESTS[file]} |"
              for file, seconds in FILE_SECONDS.most_common()]
    Path(path).write_text(f"Test files by time: {total:,.0f} s in all (summed over the workers).\n\n"
                          + "\n".join(lines) + "\n", encoding="utf-8")
    terminalreporter.write_line(f"each test file's time: {path}")


@pytest.fixture(autouse=True, scope="module")
def _no_ray_left_behind():
    """Each test file ends with no Ray instance in the test process, whatever its searches started (a search run in
    the process keeps its local instance for the next one, as a library user's would): the next file's checks that a
    bad input stops before Ray starts hold in any order."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def trial_config() -> dict:
    """A tiny-bert I-STAR trial's configuration as the search hands it to a trial (a fresh dict each test)."""
    return {"model": "tiny-bert", "task": "rte", "method": "istar", "learning_rate": 1e-3, "batch_size": 16,
            "epochs": 2, "lam": -1.0, "zeta": 0.2}


SPACE = {"name": "tiny", "models": ["tiny-bert"], "tasks": ["sst2"], "methods": ["base"],
         "hyperparameters": {"batch_size": 16, "epochs": 1, "learning_rate": {"grid": [1.0e-3]}},
         "settings": {"max_length": 32, "shrinkage_tokens": 1000}}
"""The search space most tests start from: tiny-bert, Base on SST-2, one epoch at batch 16, 32 tokens."""
MERGED = ("hyperparameters", "method_hyperparameters", "settings", "search", "scheduler", "resources")
"""Keys whose mappings ``space_yaml``'s overrides merge into the default's (a value ``None`` drops a key)."""


def _space_yaml(**overrides) -> str:
    import yaml

    space = {key: dict(value) if isinstance(value, dict) else value for key, value in SPACE.items()}
    for key, value in overrides.items():
        if key in MERGED and isinstance(value, dict):
            merged = {**space.get(key, {}), **value}
            space[key] = {k: v for k, v in merged.items() if v is not None}
        elif value is None:
            space.pop(key, None)
        else:
            space[key] = value
    return yaml.safe_dump(space, sort_keys=False)


@pytest.fixture(scope="session")
def space_yaml():
    """``space_yaml(**overrides)``: the text of :data:`SPACE` with ``overrides`` (a top-level key replaced; those of
    :data:`MERGED` merged key by key; ``None`` drops a key)."""
    return _space_yaml


@pytest.fixture(autouse=True, scope="session")
def _new_stores_from_a_migrated_copy(tmp_path_factory):
    """MLflow builds a new sqlite store by running every one of its schema migrations (4 s on an idle core, 10 s on
    a busy one), and the suite's searches and tables make over a hundred: in this process a new store starts as a
    copy of one MLflow built at the session's start (the same tables, at the same schema version). Searches run as
    subprocesses (the fault tests, the docs' commands) still build theirs as a user's does."""
    import shutil

    import sqlalchemy

    try:
        import mlflow.store.db.utils as db_utils
    except ImportError:
        yield None
        return
    build = getattr(db_utils, "_initialize_tables", None)
    if build is None:  # another MLflow: its stores are built as a user's are
        yield None
        return
    template = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    engine = sqlalchemy.create_engine(f"sqlite:///{template}")
    build(engine)
    engine.dispose()

    def from_template(engine) -> None:
        path = engine.url.database
        if engine.url.get_backend_name() != "sqlite" or not path or path == ":memory:" or Path(path).stat().st_size:
            build(engine)
            return
        engine.dispose()  # no connection holds the empty file while it is replaced
        shutil.copyfile(template, path)

    patch = pytest.MonkeyPatch()
    patch.setattr(db_utils, "_initialize_tables", from_template)
    yield template
    patch.undo()


@pytest.fixture(scope="session")
def migrated_store(_new_stores_from_a_migrated_copy):
    """``migrated_store(folder)``: ``folder/mlflow.db`` as a copy of the session's migrated store (made once), for a
    search the test runs as a subprocess with ``--storage-path folder`` (its store then exists, as after a first
    search)."""
    import shutil

    def make(folder: Path) -> None:
        if _new_stores_from_a_migrated_copy is None:
            return
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_new_stores_from_a_migrated_copy, folder / "mlflow.db")

    return make


def pytest_collection_modifyitems(config, items):
    """Files with end-to-end (``slow``) tests first, in their order, then the others: with ``-n 2 --dist loadfile
    --no-loadscope-reorder`` (``make test``) both workers start on the long files and the short ones fill the end, so
    neither waits long for the other (xdist's default order, most tests a file first, left the longest files last)."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: a file's tests keep their order


def _shared(folder: str) -> Path:
    path = SHARED / folder
    if not path.is_dir():
        pytest.fail(f"shared test data not found at {path}: clone the project beside ../shared")
    return path


@pytest.fixture(scope="session")
def glue_tiny() -> Path:
    """The small GLUE copy of ``../shared`` (fast tests)."""
    return _shared("glue-tiny")


GLUE_FIELDS = {"sst2": ("SST-2", {"sentence": "text"}), "rte": ("RTE", {"sentence1": "premise",
                                                                        "sentence2": "hypothesis"}),
               "stsb": ("STS-B", {"sentence1": "sentence1", "sentence2": "sentence2"})}
GLUE_LABELS = {"sst2": ("label", {"0": "negative", "1": "positive"}), "rte": ("label", {}), "stsb": ("score", {})}


def write_own_data(glue_tiny: Path, folder: Path, source: str = "sst2", fmt: str = "csv",
                   string_labels: bool = False) -> dict[str, Path]:
    """A user's data set made now from glue-tiny (never committed): ``source``'s splits with renamed fields and the
    label as ``label`` (SST-2's as words with ``string_labels``), written as ``fmt`` (csv, tsv, json, jsonl,
    parquet); SQuAD as flattened JSON Lines rows (id, question, context, answers). The files, by split."""
    import json

    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, name in (("train", "train"), ("validation", "dev")):
        if source == "squad":
            articles = json.loads((glue_tiny / "SQuAD" / f"{name}-v1.1.json").read_text())["data"]
            rows = [{"id": qa["id"], "question": qa["question"], "context": paragraph["context"],
                     "answers": {"text": [a["text"] for a in qa["answers"]],
                                 "answer_start": [a["answer_start"] for a in qa["answers"]]}}
                    for article in articles for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
        else:
            folder_name, renamed = GLUE_FIELDS[source]
            label_column, words = GLUE_LABELS[source]
            lines = (glue_tiny / folder_name / f"{name}.tsv").read_text(encoding="utf-8-sig").splitlines()
            header = lines[0].split("\t")
            rows = []
            for line in lines[1:]:
                values = dict(zip(header, line.split("\t")))
                row = {ours: values[theirs] for theirs, ours in renamed.items()}
                label = values[label_column]
                row["label"] = float(label) if source == "stsb" else (words.get(label, label) if string_labels
                                                                        else (int(label) if label.isdigit() else label))
                rows.append(row)
        frame = pd.DataFrame(rows)
        path = folder / f"{name}.{fmt}"
        if fmt in ("csv", "tsv"):
            frame.to_csv(path, sep="," if fmt == "csv" else "\t", index=False)
        elif fmt in ("json", "jsonl"):
            frame.to_json(path, orient="records", lines=fmt == "jsonl", force_ascii=False)
        else:
            frame.to_parquet(path, index=False)
        files[split] = path
    return files


USER_TASKS = {
    "words": ("sst2", "csv", True, "metric: accuracy\n"),
    "coded": ("sst2", "csv", False, "label_names: [negative, positive]\n"),
    "scores": ("stsb", "csv", False, "problem_type: regression\nmetric: pearson\n"),
    "answers": ("squad", "jsonl", False, "problem_type: extractive_qa\n"),
}
"""The tasks of one's own a feature that consumes a task is tested on (beside a shipped one): a csv with words as
labels; integer labels named by ``label_names``; regression scores; extractive QA. Kind → (glue-tiny source, format,
words as labels, the definition's own lines)."""


def write_user_tasks(glue_tiny: Path, folder: Path) -> dict[str, Path]:
    """Each task of :data:`USER_TASKS` as a user writes it: its data files and a definition ``<kind>.yaml`` naming
    them, in ``folder``; kind → the definition's path (its task is named ``my-<kind>``)."""
    found = {}
    for kind, (source, fmt, words, lines) in USER_TASKS.items():
        write_own_data(glue_tiny, folder / kind, source, fmt, string_labels=words)
        definition = folder / f"{kind}.yaml"
        definition.write_text(f"name: my-{kind}\ntrain: {kind}/train.{fmt}\nvalidation: {kind}/dev.{fmt}\n{lines}")
        found[kind] = definition
    return found


@pytest.fixture(scope="session")
def user_tasks():
    """:func:`write_user_tasks` itself: ``user_tasks(glue_tiny, folder)`` → kind → definition file."""
    return write_user_tasks


@pytest.fixture(scope="session")
def write_own():
    """:func:`write_own_data` itself, for fixtures of a wider scope than a test."""
    return write_own_data


@pytest.fixture
def own_data(glue_tiny, tmp_path):
    """``own_data(source, fmt, string_labels=False, folder=None)``: :func:`write_own_data` into the test's folder."""
    def make(source: str = "sst2", fmt: str = "csv", string_labels: bool = False, folder: Path | None = None):
        return write_own_data(glue_tiny, folder or tmp_path / f"{source}-{fmt}", source, fmt, string_labels)

    return make


@pytest.fixture(scope="session")
def glue() -> Path:
    """The full GLUE copy of ``../shared`` (the demo's data)."""
    return _shared("glue")


def _released_isoscore_star(points: torch.Tensor, shrinkage_cov: torch.Tensor | None, zeta: float) -> torch.Tensor:
    d = points.shape[1]
    cov = torch.cov(points.T)
    if zeta > 0:
        target = torch.eye(d, dtype=points.dtype) if shrinkage_cov is None else shrinkage_cov
        cov = (1 - zeta) * cov + zeta * target
    pcs = torch.linalg.svdvals(cov)
    normalised = pcs * math.sqrt(d) / torch.linalg.vector_norm(pcs)
    defect = torch.linalg.vector_norm(normalised - 1) / math.sqrt(2 * (d - math.sqrt(d)))
    return ((d - defect**2 * (d - math.sqrt(d))) ** 2 - d) / (d * (d - 1))


@pytest.fixture(scope="session")
def released_isoscore_star():
    """The released I-STAR formula, written out independently: svdvals of Σ_ζ and the paper's normalisation."""
    return _released_isoscore_star


@pytest.fixture
def mlflow_store(tmp_path):
    """An empty sqlite MLflow store with one experiment: (tracking URI, client, experiment id)."""
    from istar_tune import tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = client.create_experiment("exp", artifact_location=(tmp_path / "artifacts").as_uri())
    return uri, client, experiment


def _log_trial(client, experiment_id, trial_id, model, task, method, metric_values, status="finished", stage="search",
               **params):
    from mlflow.entities import Metric, Param

    from istar_tune import tracking
    from istar_tune.config import group_key

    config = {"model": model, "task": task, "method": method, "batch_size": 16, "epochs": len(
        next(iter(metric_values.values()))), "learning_rate": 3e-5, "seed": 42, **params}
    run = client.create_run(experiment_id, tags={tracking.TAG_ROLE: "trial", tracking.TAG_SEARCH: "s",
                                                 tracking.TAG_TRIAL_ID: trial_id, tracking.TAG_STATUS: status,
                                                 tracking.TAG_GROUP: group_key(config), tracking.TAG_STAGE: stage})
    client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in config.items()],
                     metrics=[Metric(k, v, 0, epoch + 1) for k, values in metric_values.items()
                              for epoch, v in enumerate(values)])
    client.set_terminated(run.info.run_id, "FAILED" if status == "failed" else "FINISHED")
    return run.info.run_id


@pytest.fixture(scope="session")
def log_trial():
    """Writes a child run shaped as the search's MLflow logger writes it: ``log_trial(client, experiment_id,
    trial_id, model, task, method, metric_values, status="finished", stage="search", **params)``, ``metric_values``
    mapping each
    metric to its per-epoch values; returns the run's id."""
    return _log_trial


def _group_run(client, experiment, trial_id, value, status="finished", task="rte", simulated=False):
    from mlflow.entities import Metric, Param

    from istar_tune import tracking

    tags = {tracking.TAG_ROLE: "trial", tracking.TAG_TRIAL_ID: trial_id, tracking.TAG_STATUS: status,
            tracking.TAG_GROUP: f"bert/{task}/istar"}
    if simulated:
        tags[tracking.TAG_SIMULATED] = "true"
    run = client.create_run(experiment, tags=tags)
    params = {"model": "bert", "task": task, "method": "istar", "learning_rate": 1e-5 * (1 + int(trial_id[1:]))}
    client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()],
                     metrics=[Metric("accuracy", value, 0, 1)] if value is not None else [])


@pytest.fixture(scope="session")
def group_run():
    """Writes one bert/TASK/istar trial run with one accuracy (or none): ``group_run(client, experiment, trial_id,
    value, status="finished", task="rte", simulated=False)``."""
    return _group_run


@pytest.fixture(scope="module")
def local_ray(request):
    """A local Ray instance on 127.0.0.1 for the module's tests: 4 logical CPUs, or the module's ``RAY_CPUS``. A
    module of real trials declares 2 (this machine's cores): each trial worker imports torch and transformers (about
    5 CPU-seconds), and 4 of them on 2 cores took twice the CPU and twice the time of 2 for the same 12 trials."""
    import ray

    patch = pytest.MonkeyPatch()
    patch.setenv("RAY_AUTH_MODE", "disabled")
    patch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray.init(address="local", num_cpus=getattr(request.module, "RAY_CPUS", 4), include_dashboard=False,
             logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()
    patch.undo()
