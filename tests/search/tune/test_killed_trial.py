"""A trial's worker killed by a signal before its first report (as the OOM killer or a segfault ends it): its FAILED
run still carries what it read (its dataset inputs) and where (its node tag), from the record the trial wrote in
storage as it read its data, not from an error Ray would have to unpickle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from istar_tune import tracking
from istar_tune.search.tune.checkpoints import READ_RECORD

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def _trial_workers(root: int) -> list[int]:
    import psutil

    return [p.pid for p in psutil.Process(root).children(recursive=True)
            if (p.cmdline() or [""])[0].startswith("ray::ImplicitFunc")]


def test_a_trial_killed_before_its_first_report_keeps_its_inputs_and_node(glue, tmp_path, space_yaml):
    space = tmp_path / "killed.yaml"
    # SST-2's first 4,000 sentences: an epoch of seconds, so the signal comes after the read and before the report.
    space.write_text(space_yaml(name="killed", max_failures=0, resources={"cpu": 1},
                                settings={"data_dir": str(glue), "max_train_samples": 4000}))
    storage = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "GLUE_DIR")}
    env.update(RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1")
    search = subprocess.Popen([str(BIN / "istar-tune"), "search", str(space), "--storage-path", str(storage)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while not list(storage.glob(f"killed/*/{READ_RECORD}")):  # the trial has read its data
            assert time.monotonic() < deadline and search.poll() is None, "the trial never recorded its data"
            time.sleep(0.05)
        workers = _trial_workers(search.pid)
        assert len(workers) == 1, workers
        os.kill(workers[0], signal.SIGKILL)
        out, _ = search.communicate(timeout=300)
    finally:
        if search.poll() is None:
            search.kill()
            search.wait()
    assert search.returncode != 0 and "1 failed" in out, out[-3000:]
    uri = f"sqlite:///{storage / 'mlflow.db'}"
    client = tracking.client(uri)
    [run] = tracking.trial_runs(uri, "killed")
    recorded = client.get_run(run.run_id)
    assert recorded.info.status == "FAILED" and run.status == "failed"
    assert not client.get_metric_history(run.run_id, "accuracy")  # killed before its first report
    inputs = {(d.dataset.name, [t.value for t in d.tags if t.key == "mlflow.data.context"][0])
              for d in recorded.inputs.dataset_inputs}
    assert inputs == {("sst2/train", "training"), ("sst2/validation", "evaluation")}, inputs
    assert len(recorded.data.tags.get(tracking.TAG_NODE, "")) == 56  # a Ray node id: 28 bytes, hex
