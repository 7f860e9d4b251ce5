"""The Ray cluster a search runs on, and what Tune sets once per experiment.

:func:`connect` joins a cluster (``--address``/``$RAY_ADDRESS``) or starts a local instance on 127.0.0.1;
:func:`tune_environment` sets the experiment-wide Tune settings a search at cluster scale needs (snapshot period,
pending trials, per-trial loggers), each left alone where the user set it; :func:`run_config` is the experiment's
storage, retries and checkpoint policy.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import threading
from collections.abc import Iterator

from istar_tune import tracking
from istar_tune.errors import ClusterError, ConfigError
from istar_tune.search.spaces.cost import packing_of
from istar_tune.search.spaces.space import SearchSpace

_USER_PENDING = os.environ.get("TUNE_MAX_PENDING_TRIALS_PG")
_USER_CHECKPOINT_S = os.environ.get("TUNE_GLOBAL_CHECKPOINT_S")


def tune_environment(total_trials: int, space: SearchSpace) -> None:
    """Tune's experiment-wide settings for a search of ``total_trials`` (read from the environment when Tune
    starts, so set per search: one process may run several, as the benchmark does). Call after :func:`connect`."""
    import ray

    # Snapshot the experiment state every second in small searches, so a trial that finished just before the driver
    # died is not run again on --resume; in large ones, Ray's adaptive period keeps snapshots under 5% of the time
    # (a re-run trial still gets one MLflow run: it is found by its trial id).
    if _USER_CHECKPOINT_S is None:
        os.environ["TUNE_GLOBAL_CHECKPOINT_S"] = "1" if total_trials <= 500 else "auto"
    # Every epoch checkpoints by design; Ray's warning about frequent snapshots would repeat all search long.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: no tables; our progress lines instead
    # Ray's default per-trial loggers add a CSV file and a TensorBoard writer thread per trial on the driver; MLflow
    # holds the record, so only result.json (read by Ray's ExperimentAnalysis) is kept.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    # Ctrl-C and SIGTERM are the search's to handle (stopping.py): it records why and then asks Tune to end the run
    # (SIGUSR1); with Tune's own SIGINT handler the search could not tell an interrupted trial from a finished one.
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    # Tune lets a custom searcher keep only one trial pending; with as many pending as the cluster has slots, a
    # finished trial's worker is handed the next trial at once (actor reuse) and a new GPU node is never idle.
    if _USER_PENDING is None:
        os.environ["TUNE_MAX_PENDING_TRIALS_PG"] = str(max(8, slots(ray.cluster_resources(), space)))


def slots(cluster: dict[str, float], space: SearchSpace) -> int:
    """How many trials of ``space`` the cluster's resources hold at once."""
    fits = [cluster.get(name, 0.0) / amount for name, amount in (("CPU", space.cpu), ("GPU", space.gpu)) if amount]
    return int(min(fits, default=1.0))


def connect(address: str | None, rehearse: tuple[int, SearchSpace] | None = None) -> None:
    """Join the cluster at ``address`` (or ``$RAY_ADDRESS``; ``auto`` finds a running one), else start a local Ray
    instance bound to 127.0.0.1, never one found through Ray's temporary files. ``rehearse`` (GPUs, space): the
    local instance declares that many logical GPUs and the CPUs their trials ask for (a rehearsal)."""
    import ray

    if ray.is_initialized():
        return
    cluster = address or os.environ.get("RAY_ADDRESS") or None
    if cluster is None and (nodes := slurm_nodes()) > 1:
        raise ClusterError(f"this Slurm job has {nodes} nodes but no --address or RAY_ADDRESS: the search would start "
                           "its own Ray instance and train on this node alone; submit it with jobs/slurm/search.sbatch "
                           "(Ray on every node of the job), give a running Ray cluster's head address, or run the "
                           "search in a one-node job (--nodes=1)")
    if cluster is None:
        loopback_only()
        cluster = "local"
        # Ray enables token authentication for a new local instance and says so on every start: keep it, quietly.
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    else:
        check_reachable(cluster, "--address" if address else "RAY_ADDRESS")
    local = {}
    if cluster == "local" and rehearse is not None:
        gpus, space = rehearse
        at_once = gpus * packing_of(space.gpu)  # trials at once: a GPU each, or `packing` a GPU
        local = {"num_gpus": gpus, "num_cpus": max(os.cpu_count() or 1, math.ceil(space.cpu * at_once))}
    # SIGTERM to the driver's whole process group (docker stop, timeout, systemd, a batch scheduler) must reach the
    # driver alone, which ends the search honestly; a local instance's processes would die of it first and take the
    # trials with them. Processes inherit a blocked signal, so the instance starts with SIGTERM blocked.
    with _sigterm_blocked(cluster == "local"), _private_files(cluster == "local"):
        try:
            ray.init(address=cluster, include_dashboard=False, log_to_driver=True, logging_level=logging.WARNING,
                     **local)
        except Exception as err:  # noqa: BLE001 — Ray raises a bare Exception when its processes start too slowly
            if cluster != "local" or not _timed_out(err):
                raise
            raise ClusterError(f"the local Ray instance did not start within Ray's {RAY_START_WAIT_S} s (its words: "
                               f"{' '.join(str(err).split())[:160]}); the machine may be overloaded: run it again, "
                               "or when it is busy, give --address of a running cluster") from None
    if cluster == "local":
        _ends_without_waiting(ray._private.worker._global_node)


def slurm_nodes() -> int:
    """The nodes of the Slurm job this process runs in (``SLURM_JOB_NUM_NODES``, or ``SLURM_NNODES``); 0 outside
    one."""
    value = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or "0"
    return int(value) if value.isdigit() else 0


def slurm_job() -> str:
    """The Slurm job this process runs in and its requeues so far (``"4127, requeued 1 time"``); empty outside
    one."""
    job = os.environ.get("SLURM_JOB_ID", "")
    if not job:
        return ""
    count = os.environ.get("SLURM_RESTART_COUNT", "0")
    count = int(count) if count.isdigit() else 0
    return f"{job}, requeued {count} time{'' if count == 1 else 's'}"


RAY_START_WAIT_S = 30
"""How long Ray waits for a new local instance's processes (its raylet start wait) before it gives up."""


def _timed_out(err: BaseException) -> bool:
    text = str(err).lower()
    return isinstance(err, TimeoutError) or "timed out" in text or "timeout" in text


def _ends_without_waiting(node) -> None:
    """A local instance's processes have SIGTERM blocked, so Ray's graceful end (SIGTERM, then a second's wait per
    process before it kills) would only wait: ``ray.shutdown`` and the exit hook kill them at once instead."""
    if node is None or not hasattr(node, "kill_all_processes"):
        return
    kill = node.kill_all_processes
    node.kill_all_processes = lambda *args, **kwargs: kill(*args, **{**kwargs, "allow_graceful": False})


@contextlib.contextmanager
def _private_files(private: bool) -> Iterator[None]:
    """A local instance's files made readable by their owner alone (umask 077 while it starts; its processes inherit
    it): Ray writes the token a new local instance asks for to ``~/.ray/auth_token`` with the process's umask, so under
    the usual 022 any user of a shared machine could read it and run code on the search's Ray (measured: -rw-r--r--).
    A token file already there is made 0600 too."""
    if not private:
        yield
        return
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)
        token = os.path.expanduser(os.path.join("~", ".ray", "auth_token"))
        with contextlib.suppress(OSError):
            if os.stat(token).st_uid == os.getuid():
                os.chmod(token, 0o600)


@contextlib.contextmanager
def _sigterm_blocked(block: bool) -> Iterator[None]:
    """SIGTERM blocked in this thread while the body starts processes (they inherit it; this thread does not keep it:
    a SIGTERM that arrives meanwhile is delivered when it ends, to the handler the process had before the body, which
    is put back first: ``ray.init`` installs one that aborts the process)."""
    if not block or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    handler = signal.getsignal(signal.SIGTERM)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        if handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def check_reachable(address: str, source: str, timeout_s: float = 5.0) -> None:
    """A cluster address (``host:port``, ``ray://host:port`` or ``http://host:port``) that accepts a connection
    within ``timeout_s``; one line naming it otherwise (Ray itself would retry for minutes)."""
    import socket
    from urllib.parse import urlsplit

    if address in ("auto", "local"):
        return
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or port is None:
        raise ConfigError(f"{source} {address!r} is not a cluster address: give host:port (e.g. 10.0.0.5:6379), "
                          "ray://host:10001, or auto")
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as connection:
            answer = _http2_answer(connection) if parts.scheme in ("tcp", "ray") else None
    except OSError as err:
        raise ConfigError(f"cannot reach the Ray cluster at {address} ({source}) within {timeout_s:g} s: "
                          f"{err.strerror or err}; start the cluster, fix {source}, or unset it to run on a local "
                          "Ray instance") from None
    if answer is not None and not (len(answer) >= 9 and answer[3] == _SETTINGS):
        heard = f"it answered {answer[:40]!r}" if answer else "it answered nothing"
        raise ConfigError(f"{source} {address!r} is not a Ray cluster: something listens there, but not Ray's gRPC "
                          f"({heard}); give the head's GCS address (host:6379 by default) or ray://host:10001")


_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""HTTP/2's connection preface and an empty SETTINGS frame: what a gRPC client (Ray's) sends first."""
_SETTINGS = 4
"""The frame type of HTTP/2 SETTINGS: a gRPC server (Ray's GCS or client server) answers the preface with one."""


def _http2_answer(connection, timeout_s: float = 3.0) -> bytes:
    """What the server at ``connection`` answers to the start of a gRPC connection (empty: nothing in time)."""

    connection.settimeout(timeout_s)
    try:
        connection.sendall(_PREFACE)
        return connection.recv(64)
    except (TimeoutError, ConnectionError):
        return b""


def loopback_only() -> None:
    """Make a Ray instance started from this process listen on 127.0.0.1 only.

    Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` when it is imported (``ray._private.ray_constants``) and its
    processes read it when they start: the CLI sets it before importing Ray; when Ray is already imported, its
    constant is set too."""
    import sys

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False


def replace_callbacks(tuner, callbacks) -> None:
    """Give a restored experiment this run's callbacks (this tracking URI, progress printer and stopper). Ray
    restores the pickled ones otherwise, which also work (they find their MLflow runs by trial id) except that a
    systemic failure would not stop the search early, so a Ray version without this private attribute loses no
    record."""
    local = getattr(tuner, "_local_tuner", None)
    if local is not None and hasattr(local, "get_run_config"):
        local.get_run_config().callbacks = callbacks


def run_config(space: SearchSpace, name: str, storage: str, callbacks):
    from ray import tune

    # Tune keeps every checkpoint it is told of; the trial itself prunes all but its newest (checkpoints.py):
    # a Tune limit would force a snapshot of every trial's state per checkpoint, which stalls large searches.
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, callbacks=callbacks,
                          failure_config=tune.FailureConfig(max_failures=space.max_failures),
                          checkpoint_config=tune.CheckpointConfig(num_to_keep=None))


def trial_dirname(trial) -> str:
    """A trial's results folder: its id and its configuration's words with the exact values (Ray's default
    rounds them: 5e-05 became 0.0001), e.g. ``trainable_a1b2c_00003_istar_lam=-1_zeta=0.2_lr=1e-4_bs=32_ep=3_s42``."""
    words = tracking.configuration_words(trial.config)
    for symbol, name in (("λ", "lam"), ("ζ", "zeta"), ("α", "alpha"), (" ", "_")):
        words = words.replace(symbol, name)
    return f"trainable_{trial.trial_id}_{words}"[:200]
