"""Every command the README and its pages show runs verbatim on this machine, page by page in the README's order, in a
fresh folder laid out as a clone with ../shared beside it and GLUE_DIR naming its GLUE copy (as an offline user sets
it); a command that cannot run here is listed in NOT_HERE with
the reason (a new command must be one or the other, or the tests fail). The pages run in GROUPS: the pages of a
group share one folder (a later page reads what an earlier one wrote), each group its own test file, so the test
workers run them side by side."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = ["README.md", *dict.fromkeys(re.findall(r"\]\(([\w/.-]+\.md)\)", README))]
"""The README and the pages it links to, in its order."""
GROUPS = {
    "first page": ["README.md"],
    "own tasks": ["docs/tasks.md"],
    "searching": ["docs/training.md", "docs/searching.md", "docs/robustness.md", "docs/cluster.md",
                  "docs/watching.md", "docs/tables-and-plots.md"],
    "library": ["docs/concepts.md", "docs/python-api.md"],
}
"""Pages run in one folder, in this order: `watching` and `tables-and-plots` read the searches of `searching` and
the run of `training`."""

NOT_HERE = {
    "make demo": "six MiniLM trials (about 6 minutes on 2 idle cores); `istar-tune demo --smoke` runs in "
                 "tests/apps/test_demo.py",
    "make test": "the test suite this test is part of",
    "minilm_sst2": "the first page's comparison: MiniLM on 2,000 SST-2 examples, 14 grid and 9 seed trials (about 90 "
                   "minutes on two cores; the page shows its measured output)",
    "--storage-path comparison": "reads the comparison above",
    "benchmarks/comparison/run.sh": "the first page's second comparison: MiniLM on 2,000 STS-B pairs, 6 grid and 10 "
                                    "seed trials (about 55 minutes on two cores; the page shows its measured output)",
    "paper_base paper_cosreg paper_istar paper_seeds --models bert": "the paper's protocol: GPU-days",
    "paper_figure3 paper_figure7 paper_figure8 --models bert": "the paper's figures: GPU-days",
    "--experiment paper-figure3": "reads the figure searches above",
    "--holdout 0.3 --storage-path fair-results": "the fair protocol's grids: GPU-days",
    "paper_seeds_fair --models bert --storage-path fair-results": "reads the fair protocol's grids",
    "ray up": "a cloud cluster", "ray dashboard": "a cloud cluster", "ray attach": "a cloud cluster",
    "jobs/submit.sh": "a cloud cluster (tests/jobs/test_submit.py submits the smoke search to a local head)",
    "make install": "the installation this suite runs in",
    "jobs/slurm/search.sbatch": "a Slurm cluster (tests/jobs/test_slurm.py submits the template to a one-node cluster "
                                "it starts, and checks these commands there with `sbatch --test-only` and a dry run)",
    "tail -f istar-tune-JOBID.out": "the log of a Slurm job above",
    "mlflow server --app-name basic-auth --backend-store-uri postgresql://mlflow@dbhost": (
        "a server on a cluster's network (tests/jobs/test_slurm.py starts one for a job array)"),
    "--tracking-uri http://HOST:5000": "reads the job array's server above",
    'mlflow.pyfunc.load_model("models:/MODEL_ID")': ("the model a search logged (tests/search/test_logged_models.py "
                                                     "runs this snippet as written, with a search's store and model)"),
    "--storage-path /shared/istar-runs": "reads the Slurm job's search above",
    "sky launch": "a cloud (tests/jobs/test_files.py checks the SkyPilot task file)",
    "sky jobs launch": "a cloud (tests/jobs/test_files.py checks the SkyPilot task file)",
    "mlflow ui": "a server that runs until stopped (tests/tracking/test_mlflow_ui.py starts one)",
    "--experiment paper-istar": "reads the paper's I-STAR grid (GPU-days)",
    "--experiment paper-seeds": "reads the paper's seeds stage (GPU-days)",
}


def commands(page: str) -> list[tuple[str, str]]:
    """(language, command) of a page in its order: each line of a bash block, each python block whole, and each YAML
    block that names its file on its first line (``# my-task/task.yaml``) as that file, written as shown."""
    found = []
    text = (ROOT / page).read_text(encoding="utf-8")
    for language, block in re.findall(r"```(bash|python|yaml)\n(.*?)```", text, re.S):
        if language == "python":
            found.append(("python", block))
        elif language == "yaml":
            if re.fullmatch(r"# [\w./-]+\.ya?ml", block.splitlines()[0]):
                found.append(("file", block))
        else:
            found += [("bash", line.strip()) for line in block.splitlines() if line.strip()]
    return found


def why_not(command: str) -> str | None:
    return next((why for pattern, why in NOT_HERE.items() if pattern in command), None)


@pytest.fixture
def run_group(tmp_path):
    """``run_group(name)``: a group's pages' commands in a fresh clone-like folder; returns (commands run, commands
    skipped, the folder)."""
    shared = ROOT.parent / "shared"
    if not shared.is_dir():
        pytest.skip("../shared is not beside the checkout")
    work = tmp_path / "clone"
    work.mkdir()
    for name in ("search_spaces", "jobs", "benchmarks", "docs"):
        (work / name).symlink_to(ROOT / name)
    (tmp_path / "shared").symlink_to(shared)
    env = {k: v for k, v in os.environ.items() if k not in ("GLUE_DIR", "MLFLOW_TRACKING_URI", "RAY_ADDRESS",
                                                            "ISTAR_TUNE_STORAGE_PATH", "PYTHONPATH")}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", HF_HUB_OFFLINE="1",
               RAY_AUTH_MODE="disabled", GLUE_DIR=str(tmp_path / "shared" / "data" / "glue"))  # as an offline user

    def run(group: str) -> tuple[list[str], list[str], Path]:
        ran, skipped = [], []
        for language, command in [c for page in GROUPS[group] for c in commands(page)]:
            if why_not(command):
                skipped.append(command)
                continue
            if language == "file":
                path = work / command.splitlines()[0][2:]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(command, encoding="utf-8")
                continue
            argv = [sys.executable, "-c", command] if language == "python" else ["bash", "-c", command]
            done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, (
                f"`{command}` exits {done.returncode}:\n{done.stdout[-2500:]}\n{done.stderr[-2500:]}")
            ran.append(command)
        return ran, skipped, work

    return run


@pytest.fixture(scope="session")
def docs_index():
    """The pages, their groups, and the reading of their commands, for the tests of the groups themselves."""
    from types import SimpleNamespace

    return SimpleNamespace(pages=PAGES, groups=GROUPS, commands=commands, why_not=why_not, not_here=NOT_HERE)
