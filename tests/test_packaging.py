"""The built wheel: an installed copy (not this checkout) ships the search spaces and runs from any folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _checkout(target: Path) -> Path:
    """The tracked files and those git does not ignore, copied: a wheel built here never takes a stale ``build/lib``
    of the working folder (which would hide a package folder left out of pyproject.toml)."""
    import shutil

    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    for name in listed:
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    return target


def test_an_installed_wheel_lists_and_plans_the_shipped_spaces_from_any_folder(tmp_path):
    source = _checkout(tmp_path / "source")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("istar_tune-*.whl"))
    site = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
                                str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The wheel's package first on the path; its dependencies come from this environment.
    env = {**os.environ, "PYTHONPATH": str(site)}
    planned = subprocess.run([sys.executable, "-m", "istar_tune", "search", "paper_istar", "--models", "bert",
                              "--tasks", "rte", "--dry-run"], capture_output=True, text=True, env=env,
                             cwd=elsewhere, timeout=120)
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert str(site / "istar_tune" / "search_spaces" / "paper_istar.yaml") in planned.stdout  # the installed copy
    assert "total 648 configurations in 216 trials, 1 group" in planned.stdout
    # Every module of the package is in the wheel (a package folder left out of pyproject.toml is caught here).
    shipped = {p.relative_to(site).as_posix() for p in (site / "istar_tune").rglob("*.py")}
    here = {p.relative_to(ROOT).as_posix() for p in (ROOT / "istar_tune").rglob("*.py")}
    assert sorted(here - shipped) == []
