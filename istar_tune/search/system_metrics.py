"""The machines' load while a search runs, on each search's own MLflow run: MLflow's system metrics (CPU and memory,
GPU utilisation and memory where NVML answers, disk and network), sampled every ``interval_s`` on every node of the
cluster, each node's under ``system/<node>/`` (its address and the start of its Ray node id). The driver samples its
own node; every other node runs a zero-CPU Ray actor that does the same (it must reach the tracking store: a
tracking server, or a sqlite file on a shared file system)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

log = logging.getLogger(__name__)
DEFAULT_INTERVAL_S = 10.0


def node_name(node: dict) -> str:
    """``<address>-<first 6 characters of the Ray node id>``: short, and the same node as a trial's node tag."""
    return f"{node.get('NodeManagerAddress', 'node')}-{node['NodeID'][:6]}"


def _monitor(run_id: str, tracking_uri: str, interval_s: float, node: str):
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    # What fails it is a store that cannot be written (the search stops and says so itself) or a run ended before it:
    # MLflow's own lines of that hold the whole SQL batch (hundreds of values). Shown with --debug only.
    logging.getLogger("mlflow.system_metrics").setLevel(logging.DEBUG if log.isEnabledFor(logging.DEBUG)
                                                        else logging.CRITICAL)
    return SystemMetricsMonitor(run_id, sampling_interval=interval_s, node_id=node, tracking_uri=tracking_uri)


class _NodeMonitors:
    """The monitors of one node (a Ray actor on the nodes the driver is not on)."""

    def __init__(self, run_ids: list[str], tracking_uri: str, interval_s: float, node: str):
        self.monitors = [_monitor(run_id, tracking_uri, interval_s, node) for run_id in run_ids]
        for monitor in self.monitors:
            monitor.start()

    def stop(self) -> None:
        for monitor in self.monitors:
            monitor.finish()


@contextlib.contextmanager
def monitoring(tracking_uri: str, run_ids: list[str], interval_s: float | None) -> Iterator[None]:
    """System metrics of every node on ``run_ids`` while the block runs (none with ``interval_s`` 0 or ``None``)."""
    if not interval_s or not run_ids:
        yield
        return
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    local = _NodeMonitors(run_ids, tracking_uri, interval_s, next((node_name(n) for n in nodes
                                                                   if n["NodeID"] == here), "driver"))
    actor = ray.remote(num_cpus=0)(_NodeMonitors)
    remote = [actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
        run_ids, tracking_uri, interval_s, node_name(n)) for n in nodes if n["NodeID"] != here]
    try:
        yield
    finally:
        local.stop()
        for handle in remote:
            try:
                ray.get(handle.stop.remote(), timeout=30)
                ray.kill(handle)
            except Exception:  # noqa: BLE001 - a node gone with the search: nothing of its left to stop
                log.debug("a node's system-metrics monitor could not be stopped", exc_info=True)
