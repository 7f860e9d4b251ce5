"""Every command the README and its pages show runs verbatim on this machine, in their order, in a fresh folder laid out
as a clone with ../shared beside it; a command that cannot run here is listed in NOT_HERE with the reason (a new
README command must be one or the other, or this test fails)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = [ROOT / "README.md", *dict.fromkeys(ROOT / link for link in re.findall(r"\]\(([\w/.-]+\.md)\)", README))]
DOCS = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)
"""The README and the pages it links to, in its order: their commands run in that order."""

NOT_HERE = {
    "make demo": "six MiniLM trials (about 6 minutes on 2 idle cores); `istar-tune demo --smoke` runs in "
                 "tests/apps/test_demo.py",
    "make test": "the test suite this test is part of",
    "paper_base paper_cosreg paper_istar paper_seeds --models bert": "the paper's protocol: GPU-days",
    "paper_figure3 paper_figure7 paper_figure8 --models bert": "the paper's figures: GPU-days",
    "--experiment paper-figure3": "reads the figure searches above",
    "--holdout 0.3 --storage-path fair-results": "the fair protocol's grids: GPU-days",
    "paper_seeds_fair --models bert --storage-path fair-results": "reads the fair protocol's grids",
    "ray up": "a cloud cluster", "ray dashboard": "a cloud cluster", "ray attach": "a cloud cluster",
    "jobs/submit.sh": "a cloud cluster (tests/test_jobs.py submits the smoke search to a local head)",
    "mlflow ui": "a server that runs until stopped (tests/tracking/test_mlflow_ui.py starts one)",
    "--experiment paper-istar": "reads the paper's I-STAR grid (GPU-days)",
    "--experiment paper-seeds": "reads the paper's seeds stage (GPU-days)",
}


def _commands() -> list[tuple[str, str]]:
    """(language, command) in the README's order: each line of a bash block, each python block whole, and each
    YAML block that names its file on its first line (``# my-task/task.yaml``) as that file, written as shown."""
    found = []
    for language, block in re.findall(r"```(bash|python|yaml)\n(.*?)```", DOCS, re.S):
        if language == "python":
            found.append(("python", block))
        elif language == "yaml":
            first = block.splitlines()[0]
            if re.fullmatch(r"# [\w./-]+\.ya?ml", first):
                found.append(("file", block))
        else:
            found += [("bash", line.strip()) for line in block.splitlines() if line.strip()]
    return found


def _why_not(command: str) -> str | None:
    return next((why for pattern, why in NOT_HERE.items() if pattern in command), None)


def test_every_readme_command_runs_verbatim_or_says_why_it_cannot(tmp_path):
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
               RAY_AUTH_MODE="disabled")
    ran, skipped = [], []
    for language, command in _commands():
        if _why_not(command):
            skipped.append(command)
            continue
        if language == "file":
            path = work / command.splitlines()[0][2:]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(command, encoding="utf-8")
            continue
        argv = [sys.executable, "-c", command] if language == "python" else ["bash", "-c", command]
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, \
            f"`{command}` exits {done.returncode}:\n{done.stdout[-2500:]}\n{done.stderr[-2500:]}"
        ran.append(command)
    assert len(ran) >= 15 and len(skipped) == len([c for lang, c in _commands() if lang != "file" and _why_not(c)])
    assert (work / "best-tiny-bert-rte-base.yaml").is_file() and (work / "runs" / "istar-sst2").is_dir()
    assert (work / "my-task" / "task.yaml").is_file() and (work / "runs" / "reviews-search").is_dir()
