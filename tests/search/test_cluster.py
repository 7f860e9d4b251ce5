"""The cluster a search runs on: trial slots, a loopback-only local instance, Tune's settings left to the user."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import ray

from istar_tune.search import cluster
from istar_tune.search.spaces.space import SearchSpace

ROOT = Path(__file__).resolve().parents[2]


def _space(**resources) -> SearchSpace:
    return SearchSpace(path="s.yaml", name="s", models=("bert",), tasks=("rte",), methods=("base",), **resources)


def test_slots_are_what_the_scarcest_resource_holds():
    assert cluster.slots({"CPU": 16.0, "GPU": 4.0}, _space(cpu=2.0, gpu=1.0)) == 4
    assert cluster.slots({"CPU": 16.0, "GPU": 4.0}, _space(cpu=2.0, gpu=0.5)) == 8
    assert cluster.slots({"CPU": 3.0}, _space(cpu=1.0)) == 3


def test_a_local_instance_listens_on_loopback_only(monkeypatch):
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    cluster.loopback_only()
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"


def test_tune_settings_follow_the_search_unless_the_user_set_them(monkeypatch):
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 64.0, "GPU": 16.0})
    for name in ("TUNE_GLOBAL_CHECKPOINT_S", "TUNE_MAX_PENDING_TRIALS_PG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cluster, "_USER_PENDING", None)
    monkeypatch.setattr(cluster, "_USER_CHECKPOINT_S", None)
    cluster.tune_environment(100, _space(cpu=1.0, gpu=1.0))
    assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "1" and os.environ["TUNE_MAX_PENDING_TRIALS_PG"] == "16"
    cluster.tune_environment(5000, _space(cpu=1.0, gpu=1.0))
    assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "auto"
    monkeypatch.setattr(cluster, "_USER_PENDING", "3")
    monkeypatch.setenv("TUNE_MAX_PENDING_TRIALS_PG", "3")
    cluster.tune_environment(100, _space(cpu=1.0, gpu=1.0))
    assert os.environ["TUNE_MAX_PENDING_TRIALS_PG"] == "3"


def test_the_run_config_keeps_every_checkpoint_and_retries_as_the_space_says(tmp_path):
    config = cluster.run_config(_space(max_failures=3), "s", str(tmp_path), [])
    assert config.failure_config.max_failures == 3 and config.checkpoint_config.num_to_keep is None
    assert config.name == "s" and config.storage_path == str(tmp_path)


def test_processes_started_while_sigterm_is_blocked_inherit_it_and_the_drivers_handler_is_put_back():
    import signal
    import subprocess
    import time

    from istar_tune.search.cluster import _sigterm_blocked

    def ours(number, frame):
        pass

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        with _sigterm_blocked(True):
            child = subprocess.Popen(["sleep", "30"])
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as ray.init puts its own handler in
        blocked = next(line for line in open(f"/proc/{child.pid}/status") if line.startswith("SigBlk:"))
        assert int(blocked.split()[1], 16) & (1 << (signal.SIGTERM - 1))  # a group SIGTERM does not reach it
        child.terminate()
        time.sleep(0.3)
        assert child.poll() is None  # SIGTERM is pending there, not acted on
        child.kill()
        child.wait()
        assert signal.getsignal(signal.SIGTERM) is ours  # the driver's handler, back before SIGTERM is unblocked
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_local_instance_that_does_not_start_in_time_is_said_in_one_line(monkeypatch):
    """Under load Ray gives up on its own processes with a bare Exception and a traceback: said as what it is."""
    import ray

    from istar_tune.errors import ClusterError
    from istar_tune.search import cluster

    def too_slow(**_):
        raise Exception("The current node timed out during startup. This could happen because some of the raylet "
                        "failed to startup or the GCS has become overloaded.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", too_slow)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ClusterError, match=r"the local Ray instance did not start within Ray's 30 s .*run it again"):
        cluster.connect(None)
    monkeypatch.setattr(ray, "init", lambda **_: (_ for _ in ()).throw(ValueError("another failure")))
    with pytest.raises(ValueError, match="another failure"):  # not a time-out: Ray's own error, untouched
        cluster.connect(None)


def test_a_search_in_a_slurm_job_of_several_nodes_without_an_address_is_refused_in_one_line(monkeypatch, capsys,
                                                                                          glue_tiny, tmp_path):
    import ray

    from istar_tune.cli import main
    from istar_tune.errors import ClusterError

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "4")
    assert cluster.slurm_nodes() == 4
    if not ray.is_initialized():  # a library caller's own Ray instance is theirs to choose
        with pytest.raises(ClusterError, match="this Slurm job has 4 nodes but no --address or RAY_ADDRESS: the "
                                               "search would start its own Ray instance and train on this node alone"):
            cluster.connect(None)
        assert main(["search", "smoke", "--data-dir", str(glue_tiny), "--storage-path", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "this Slurm job has 4 nodes but no --address" in err
        assert "submit it with jobs/slurm/search.sbatch" in err and (ROOT / "jobs/slurm/search.sbatch").is_file()
        assert not (tmp_path / "smoke").exists()  # refused before anything was written
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    assert cluster.slurm_nodes() == 1
    monkeypatch.delenv("SLURM_JOB_NUM_NODES")
    monkeypatch.setenv("SLURM_NNODES", "2")
    assert cluster.slurm_nodes() == 2


@pytest.mark.parametrize("had_one", [False, True])
def test_a_local_instances_token_is_readable_by_its_owner_alone(tmp_path, had_one):
    # Ray wrote ~/.ray/auth_token with the process's umask: -rw-r--r-- under 022, readable by every user of the node.
    import stat
    import subprocess
    import sys

    token = tmp_path / ".ray" / "auth_token"
    if had_one:  # a token an earlier Ray left world-readable
        token.parent.mkdir()
        token.write_text("ab" * 32)
        token.chmod(0o644)
    script = ("import os, ray; os.umask(0o022)\n"
              "from istar_tune.search.cluster import connect\n"
              "connect(None)\nray.shutdown()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN",
                                                            "RAY_AUTH_TOKEN_PATH")}
    done = subprocess.run([sys.executable, "-c", script], env={**env, "HOME": str(tmp_path)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
