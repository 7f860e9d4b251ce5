"""jobs/skypilot/search.yaml under SkyPilot's own launch-time checks: SkyPilot installed in an environment of its own
(SkyPilot 0.14.1 asks for click < 8.2, which the project's environment cannot hold), the task file read by SkyPilot's
schema and ``Task.from_yaml_config`` with each documented launch's ``--env`` and ``--secret`` values, and its
secrets resolved as a launch resolves them: every documented launch is accepted, and one without the token is
refused by SkyPilot before anything starts. No cloud is reached: nothing is launched."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from istar_tune.testing import built_tools, tool_pins

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "jobs" / "skypilot" / "search.yaml"
SKYPILOT = tool_pins("skypilot")[0]
"""The SkyPilot the task file is written for (docs/cluster.md says which)."""

CHECK = """\
import json, sys
import yaml
import sky
from sky import execution
from sky.utils import common_utils, schemas

path, launches = sys.argv[1], json.loads(sys.argv[2])
common_utils.validate_schema(yaml.safe_load(open(path)), schemas.get_task_schema(), "Invalid task YAML: ")
out = {}
for name, (envs, secrets) in launches.items():
    try:
        task = sky.Task.from_yaml_config(yaml.safe_load(open(path)), env_overrides=list(envs.items()),
                                         secrets_overrides=list(secrets.items()))
        with sky.Dag() as dag:
            dag.add(task)
        execution._resolve_managed_secrets(dag)  # what sky launch does with the secrets before anything starts
        out[name] = {"envs": task.envs, "secrets": sorted(task.secrets), "num_nodes": task.num_nodes}
    except Exception as err:
        out[name] = {"refused": f"{type(err).__name__}: {err}"}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def skypilot(tmp_path_factory) -> Path:
    """The python of a virtual environment holding SkyPilot: ``make tool-envs``'s, else one built here from the
    package registry."""
    if (built := built_tools()) is not None:
        return built / "bin" / "python"
    folder = tmp_path_factory.mktemp("skypilot-venv")
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    python = folder / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "--quiet", SKYPILOT], capture_output=True,
                               text=True, timeout=900)
    if installed.returncode != 0:
        why = f"{SKYPILOT} did not install from the package registry: {installed.stderr.strip()[-500:]}"
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)
    return python


def _documented_launches() -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """Each `sky launch` / `sky jobs launch` of docs/cluster.md's SkyPilot section: its --env and --secret values."""
    section = (ROOT / "docs" / "cluster.md").read_text().split("## On SkyPilot")[1].split("\n## ")[0]
    launches = {}
    for line in section.splitlines():
        if not line.startswith(("sky launch", "sky jobs launch")):
            continue
        argv, envs, secrets = shlex.split(line.split("  #")[0]), {}, {}
        for flag, value in zip(argv, argv[1:]):
            if flag in ("--env", "--secret"):
                name, _, given = value.partition("=")
                (envs if flag == "--env" else secrets)[name] = given
        launches[line] = (envs, secrets)
    return launches


def test_every_documented_launch_passes_skypilots_own_checks_and_one_without_the_token_is_refused(skypilot):
    launches = _documented_launches()
    assert len(launches) == 2
    without = next(iter(launches.values()))[0]
    asked = {**launches, "without --secret": (without, {})}
    checked = subprocess.run([str(skypilot), "-c", CHECK, str(TASK), json.dumps(asked)], capture_output=True,
                             text=True, timeout=300)
    assert checked.returncode == 0, checked.stderr[-3000:]
    found = json.loads(checked.stdout.strip().splitlines()[-1])
    for line in launches:
        assert "refused" not in found[line], (line, found[line])
        assert found[line]["secrets"] == ["RAY_AUTH_TOKEN"] and found[line]["num_nodes"] == 2
        assert found[line]["envs"]["SPACES"] == "paper_istar"
    refused = found["without --secret"]["refused"]
    assert refused.startswith("RuntimeError: No value available for secret(s): RAY_AUTH_TOKEN"), refused
