"""The MLflow store: the tags istar-tune writes and the trial statuses, the store checks (scheme,
reachability, existence), experiments and parent runs, the plan tag, and paged queries by tag.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from istar_tune.config import trial_epochs
from istar_tune.errors import ConfigError
from istar_tune.tracking.storage import unwritable
from istar_tune.tracking.template import start_from_template
from istar_tune.trial_status import COUNTED, RECORDED, TrialStatus

TAG_ROLE = "istar_tune.role"  # "search" for the parent run, "trial" for a child
TAG_SEARCH = "istar_tune.search"
TAG_TRIAL_ID = "istar_tune.trial_id"  # the Ray trial's id, or `<id>-e<k>` for a configuration a shared trial completes
TAG_REPLAY = "istar_tune.replay"  # a grid's search run: what `replay` recommends for the next one
TASKS_FOLDER = "tasks"
"""A search run's artifact folder holding each task of one's own as a definition file."""
TAG_STRATEGY = "istar_tune.strategy"  # a grid's search run: the recommended strategy as a space fragment (JSON)
TAG_TRAINED_BY = "istar_tune.trained_by"  # a shared trial's configuration: the Ray trial that trained it
TAG_GROUP = "istar_tune.group"
TAG_STATUS = "istar_tune.status"  # one of STATUSES
TAG_ERROR = "istar_tune.error"
TAG_SPACE = "istar_tune.search_space"
TAG_COMMIT = "istar_tune.git_commit"
TAG_STAGE = "istar_tune.stage"  # search | seeds
TAG_CHOSEN = "istar_tune.chosen"  # a trial run the search chose as its group's best: "yes (epoch N)"
TAG_CHOSEN_BY = "istar_tune.chosen_by"  # a seeds stage: what chose its configurations (dev | holdout)
TAG_NODE = "istar_tune.node_id"  # the Ray node that ran the trial (its last attempt)
TAG_PARENT = "mlflow.parentRunId"
TAG_SEARCH_RUN = "istar_tune.search_run_id"  # a trial run: its search's run (not MLflow's parent tag, which the UI
# folds its children under, so a search's runs would hide behind one collapsed row)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TAG_SIMULATED = "istar_tune.simulated"  # "true" on the runs of a rehearsal (``--simulate``)
TAG_RESTORED_FROM = "istar_tune.restored_from"
TAG_TASK = "istar_tune.task"  # a trial run of a task that is not shipped: its facts (JSON; tasks.definition.facts)
TAG_TASK_FILES = "istar_tune.task_files"  # on the parent run, `.<task>`: the files and checksums its trials read
TAG_PLAN = "istar_tune.plan"  # on the parent run: trials planned per group (JSON), for `istar-tune status`
SEED_AGGREGATES = ("seeds_mean", "seeds_std", "seeds_n", "seeds_ci_low", "seeds_ci_high", "vs_base_difference",
                   "vs_base_significant")
"""The metrics of a seeds stage's aggregate run (a group's seeds: their mean, spread and interval, the difference
from Base); the seeds' view shows them as columns."""
TAG_SLURM_JOB = "istar_tune.slurm_job"  # on the parent run, in a Slurm job: its id and requeues so far
TAG_SHARD = "istar_tune.shard"  # on a job array's shard's parent run: `K/N` (search.shard)
NOTE_TAG = "mlflow.note.content"  # what MLflow shows as a run's or an experiment's description
MODEL_TRAINING = "workflowType=machine_learning"
"""The MLflow UI's model-training mode, in an address: every link istar-tune writes carries it (MLflow 3.17 opens
an experiment, and a comparison, in its GenAI mode otherwise, whatever the experiment's ``mlflow.experimentKind``)."""
STATUSES = RECORDED
"""A trial's status (its ``istar_tune.status`` tag): running, or how it ended."""
COUNTED_STATUSES = COUNTED
"""The statuses whose score counts (tables, plots, ``status``, the best trial of a group)."""


def ended_status(config: dict[str, Any], last_epoch: int, by_scheduler: bool = True) -> TrialStatus:
    """How a trial that ended without an error ended: ``finished`` when it reported the last epoch its configuration
    trains (:func:`istar_tune.config.trial_epochs`); before that, ``stopped_early`` when its scheduler stopped it
    (``by_scheduler``), else ``interrupted`` (the search was stopped)."""
    if last_epoch >= trial_epochs(config):
        return TrialStatus.FINISHED
    return TrialStatus.STOPPED_EARLY if by_scheduler else TrialStatus.INTERRUPTED


MAX_TAG_CHARS = 7000
PAGE_SIZE = 5000

log = logging.getLogger(__name__)

# Before MLflow is imported (it reads these once): no "View run" lines per terminated run of a tracking server
# (thousands in a large search), and no usage telemetry wrapped around every client call (measurable driver time
# at thousands of trials). Both can be set otherwise in the environment.
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def prepare_store(tracking_uri: str) -> None:
    """Create a new sqlite store's tables once, under a file lock, so searches starting together on a new store do
    not race MLflow's schema creation: a copy of the empty store this MLflow version built before
    (:mod:`istar_tune.tracking.template`), else MLflow's own build."""
    if not tracking_uri.startswith("sqlite:///"):
        return
    import fcntl

    path = Path(tracking_uri[len("sqlite:///"):])
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(store_lock(path), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            start_from_template(path)
            _open(tracking_uri)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def store_lock(path: Path) -> Path:
    """The lock file of a sqlite store's creation: in the temporary folder, named by the store's absolute path (as
    MLflow locks its own schema creation), never beside the store (a relative ``sqlite:///mlflow.db`` would leave one
    in whatever folder the search ran from)."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"istar-tune-store-{digest}.lock"


_WRITE_SLOTS: dict[str, threading.BoundedSemaphore] = {}
_WRITE_SLOTS_LOCK = threading.Lock()


def writes_at_once() -> int:
    """Writes at once to one database-backed store from one process, over all its writers: MLflow's SQLAlchemy store
    takes a second pooled connection inside some calls (``log_batch``), so writers whose threads each held one and
    waited for another would wait for ever (the searches of one experiment have a writer each). A third of the pool
    (MLflow's ``MLFLOW_SQLALCHEMYSTORE_POOL_SIZE`` + ``MAX_OVERFLOW``, SQLAlchemy's 5 + 10 by default) is theirs,
    two connections a write; the rest is left to the driver's own reads."""
    pool = int(os.environ.get("MLFLOW_SQLALCHEMYSTORE_POOL_SIZE") or 5)
    overflow = int(os.environ.get("MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW") or 10)
    return max(1, (pool + overflow) // 3)


@contextlib.contextmanager
def write_slot(tracking_uri: str) -> Iterator[None]:
    """Held while a writer thread writes to ``tracking_uri`` (:func:`writes_at_once` at a time for a database; a
    tracking server, reached over HTTP, takes any number)."""
    if tracking_uri.startswith(("http://", "https://", "databricks")):
        yield
        return
    with _WRITE_SLOTS_LOCK:
        slot = _WRITE_SLOTS.setdefault(tracking_uri, threading.BoundedSemaphore(writes_at_once()))
    with slot:
        yield


def _open(tracking_uri: str) -> None:
    """Open a sqlite store (MLflow creates or upgrades its tables), one line when it cannot."""
    try:
        client(tracking_uri).search_experiments(max_results=1)
    except Exception as err:  # a file that is not a database, or one whose tables were left half-created
        seen = (str(err).strip().splitlines() or [""])[0][:200]
        if "database is locked" in str(err):  # busy, not broken: moving it away would hide every run it holds
            raise ConfigError(f"tracking store {tracking_uri}: another process holds it locked ({seen}): wait for "
                              "that process (a search, an MLflow UI writing to it: `fuser "
                              f"{_sqlite_path(tracking_uri)}` names it) and run this again; the store itself is not "
                              "damaged") from err
        raise ConfigError(f"tracking store {tracking_uri}: MLflow cannot open it ({type(err).__name__}: {seen}); "
                          "it is another kind of file or a store whose creation was cut short: move it away or give "
                          "another --tracking-uri") from err


def _sqlite_path(tracking_uri: str) -> str:
    return tracking_uri.split("sqlite:///", 1)[-1]


PLAN_TOTAL = "*"
"""The key of a plan tag that holds only the total (the groups did not fit in a tag)."""


def encode_plan(plan: dict[str, int]) -> str:
    """Trials planned per group as a tag value (the total alone when the groups would not fit in a tag)."""
    import json

    text = json.dumps(plan, separators=(",", ":"))
    return text if len(text) <= MAX_TAG_CHARS else json.dumps({PLAN_TOTAL: sum(plan.values())})


def decode_plan(text: str | None) -> dict[str, int] | None:
    """A plan tag's groups; ``None`` when there is no tag or it holds only the total."""
    import json

    plan = json.loads(text) if text else None
    return None if plan is None or PLAN_TOTAL in plan else plan


def record_plan(mlflow_client, parent_run_id: str, plan: dict[str, int]) -> None:
    """Tag the parent run with the trials planned per group: this run's groups, merged with those an earlier run
    into the same experiment planned (a search run again for other models keeps every group it ever planned, so
    :func:`planned_groups` may rely on it)."""
    earlier_text = mlflow_client.get_run(parent_run_id).data.tags.get(TAG_PLAN)
    earlier = decode_plan(earlier_text)
    if earlier_text and earlier is None:  # the earlier plan kept only its total: the groups stay unknown
        merged_text = encode_plan({PLAN_TOTAL: 0, **plan})
    else:
        merged_text = encode_plan({**(earlier or {}), **plan})
    mlflow_client.set_tag(parent_run_id, TAG_PLAN, merged_text)


def planned_groups(mlflow_client, experiment_id: str) -> set[str] | None:
    """``model/task/method`` of every group the experiment's searches planned (their parent runs' plan tags);
    ``None`` when that is unknown (no parent run, or a plan that kept only its total)."""
    parents = find_runs(mlflow_client, experiment_id, **{TAG_ROLE: "search"})
    groups: set[str] = set()
    for parent in parents:
        plan = decode_plan(parent.data.tags.get(TAG_PLAN))
        if plan is None:
            return None
        groups |= set(plan)
    return groups if parents else None


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def client(tracking_uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


SCHEMES = ("sqlite:///", "http://", "https://", "postgresql://", "mysql://", "databricks")
"""Tracking URI schemes istar-tune accepts."""


def check_reachable(tracking_uri: str) -> None:
    """Fail with one clear line for an unknown scheme or a tracking server that does not answer in 5 s (MLflow
    itself retries an unreachable server for minutes)."""
    if tracking_uri.startswith("sqlite:") and not tracking_uri.startswith("sqlite:///"):
        raise ConfigError(f"tracking URI {tracking_uri!r}: a sqlite store is named by three slashes and its file's "
                          "path: sqlite:///mlflow.db (relative) or sqlite:////abs/path/mlflow.db")
    if not tracking_uri.startswith(SCHEMES):
        raise ConfigError(f"tracking URI {tracking_uri!r}: unknown scheme; use one of "
                          f"{', '.join(s.rstrip(':/') for s in SCHEMES)} (e.g. sqlite:///path/mlflow.db or "
                          "http://host:5000)")
    if tracking_uri.startswith(("http://", "https://")):
        import urllib.request

        try:
            urllib.request.urlopen(tracking_uri.rstrip("/") + "/health", timeout=5)
        except OSError as err:
            raise ConfigError(f"cannot reach the MLflow server at {tracking_uri} ({getattr(err, 'reason', err)}): "
                              "start it or fix --tracking-uri / MLFLOW_TRACKING_URI") from None


def check_writable(tracking_uri: str, timeout_s: float = 5.0) -> None:
    """Fail with one clear line, within seconds, when a search could not write to the store: a sqlite file that is a
    folder, read-only or in a folder that cannot be made; a database server that does not answer (MLflow itself
    retries for minutes); a tracking server that refuses to create (and delete) a probe experiment."""
    from istar_tune.errors import ConfigError

    if tracking_uri.startswith("sqlite:///"):
        problem = _sqlite_problem(Path(tracking_uri[len("sqlite:///"):]))
        if problem:
            raise ConfigError(f"tracking URI {tracking_uri}: {problem}")
    elif tracking_uri.startswith(("postgresql", "mysql")):
        import socket
        from urllib.parse import urlsplit

        parts = urlsplit(tracking_uri)
        port = parts.port or (5432 if tracking_uri.startswith("postgresql") else 3306)
        try:
            socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout_s).close()
        except OSError as err:
            raise ConfigError(f"cannot reach the database of tracking URI {parts.scheme}://{parts.hostname}:{port} "
                              f"({err}): start it or fix --tracking-uri / MLFLOW_TRACKING_URI") from None
    elif tracking_uri.startswith(("http://", "https://")):
        _probe_server(tracking_uri)


def _sqlite_problem(path: Path) -> str:
    if path.is_dir():
        return f"{path} is a folder, not a database file; name a file such as {path / 'mlflow.db'}"
    problem = unwritable(path) or (unwritable(path.parent) if path.exists() else "")
    return f"{problem}, so {path} cannot be written" if problem else _not_sqlite(path)


def _not_sqlite(path: Path) -> str:
    """What is wrong with a file named as a sqlite store that is another kind of file (empty when nothing)."""
    if path.is_file() and path.stat().st_size:
        with open(path, "rb") as file:
            if file.read(16) != SQLITE_HEADER:
                return f"{path} is not a SQLite database (another kind of file): name a new file or an MLflow store"
    return ""


SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""


def _probe_server(tracking_uri: str) -> None:
    """Create and delete a probe experiment: a server that answers but refuses writes fails here, not in every
    trial."""
    import uuid

    from istar_tune.errors import ConfigError

    mlflow_client = client(tracking_uri)
    try:
        probe = mlflow_client.create_experiment(f"istar-tune-preflight-{uuid.uuid4().hex[:12]}")
        mlflow_client.delete_experiment(probe)
    except Exception as err:  # noqa: BLE001 - any refusal is the user's to fix; say which
        first = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
        raise ConfigError(f"the MLflow server at {tracking_uri} refuses writes ({first}): check its permissions "
                          "or credentials (MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD)") from None


def check_store(tracking_uri: str) -> None:
    """As :func:`check_reachable`, and a local sqlite store to read from must exist (MLflow would create an empty
    one)."""
    check_reachable(tracking_uri)
    if tracking_uri.startswith("sqlite:///") and not Path(tracking_uri[len("sqlite:///"):]).is_file():
        raise ConfigError(f"no MLflow store at {tracking_uri}: run a search first, or give --tracking-uri of an "
                          "existing store")
    if tracking_uri.startswith("sqlite:///"):
        problem = _not_sqlite(Path(tracking_uri[len("sqlite:///"):]))
        if problem:
            raise ConfigError(f"tracking URI {tracking_uri}: {problem}")
        _open(tracking_uri)


def ensure_experiment(mlflow_client, name: str, artifact_root: str | None = None) -> str:
    experiment = mlflow_client.get_experiment_by_name(name)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            mlflow_client.restore_experiment(experiment.experiment_id)
        return experiment.experiment_id
    location = None
    if artifact_root:
        location = (Path(artifact_root) / name).resolve().as_uri()
    # MLflow 3's UI opens an experiment of unknown kind on its GenAI traces page; ours are training runs.
    from mlflow.exceptions import MlflowException

    try:
        return mlflow_client.create_experiment(name, artifact_location=location,
                                               tags={EXPERIMENT_KIND_TAG: "custom_model_development"})
    except MlflowException as err:  # created since the look above: a job array's shards start at once
        created = mlflow_client.get_experiment_by_name(name) if err.error_code == "RESOURCE_ALREADY_EXISTS" else None
        if created is None:
            raise
        return created.experiment_id


def quote(value: str) -> str:
    """``value`` as a string literal of an MLflow filter. MLflow strips the quotes without unescaping, so a value
    holding both quote characters cannot be written; such names are refused when a search is named."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise ValueError(f"{value!r} holds both quote characters and cannot be matched in an MLflow filter")


def find_runs(mlflow_client, experiment_id: str, **tags: str) -> list:
    """Every run of the experiment whose tags equal ``tags``, read page by page (no cap on the count)."""
    query = " and ".join(f"tags.`{k}` = {quote(v)}" for k, v in tags.items())
    runs, token = [], None
    while True:
        page = mlflow_client.search_runs([experiment_id], filter_string=query, max_results=PAGE_SIZE,
                                         page_token=token)
        runs.extend(page)
        token = getattr(page, "token", None)
        if not token:
            return runs


def parent_run(mlflow_client, experiment_id: str, search_name: str, tags: dict[str, str],
               shard: str | None = None) -> str:
    """The search's parent run: the existing one when resuming, else a new one. A job array's ``shard`` (``K/N``)
    has a parent run of its own in the experiment the shards share."""
    existing = [run for run in find_runs(mlflow_client, experiment_id, **{TAG_ROLE: "search"})
                if run.data.tags.get(TAG_SHARD) == shard]
    if existing:
        run_id = existing[0].info.run_id
        if existing[0].info.status != "RUNNING":
            mlflow_client.update_run(run_id, status="RUNNING")
        return run_id
    own = {TAG_SHARD: shard} if shard else {}
    run = mlflow_client.create_run(experiment_id, run_name=f"{search_name} (shard {shard})" if shard else search_name,
                                   tags={TAG_ROLE: "search", TAG_SEARCH: search_name, **own, **tags})
    return run.info.run_id
