"""The first page's comparison in the MLflow UI: after ``run.sh``, the seeds stage's runs page, rendered by headless
Chromium from an MLflow server over the comparison's store, holds one aggregate run per method with its seed runs
folded under it; the page is checked and its picture written beside the docs' others.

    python benchmarks/comparison/ui.py [STORE] [PICTURE]

(defaults: ./comparison and docs/mlflow-aggregates.png). Prints what it found; exits non-zero if the page does not
show it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from istar_tune import tracking
from istar_tune.testing import MlflowServer

EXPERIMENT = "minilm-sst2-seeds"
VIEW = "workflowType=machine_learning"


def render(browser: str, url: str, picture: Path | None = None) -> str:
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1900,900",
             "--virtual-time-budget=20000"]
    if picture is not None:
        subprocess.run([*flags, f"--screenshot={picture}", url], capture_output=True, timeout=120)
    return subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout


def main(argv: list[str]) -> int:
    store = Path(argv[0] if argv else "comparison").resolve()
    picture = Path(argv[1] if len(argv) > 1 else "docs/mlflow-aggregates.png").resolve()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("headless Chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    with MlflowServer(backend=f"sqlite:///{store / 'mlflow.db'}") as server:
        client = tracking.client(server.uri)
        experiment = client.get_experiment_by_name(EXPERIMENT).experiment_id
        aggregates = [r.info.run_name for r in tracking.find_runs(client, experiment,
                                                                 **{tracking.TAG_ROLE: "aggregate"})]
        seeds = [r.info.run_name for r in tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial"})]
        page = render(browser, f"{server.uri}/#/experiments/{experiment}/runs?{VIEW}", picture)
    shown = [name for name in aggregates if name in page]
    unfolded = [name for name in seeds if f">{name}<" in page]
    print(f"{len(aggregates)} aggregate run(s), {len(shown)} shown as rows: {', '.join(sorted(shown))}; "
          f"{len(seeds)} seed runs, {len(unfolded)} shown unfolded; picture: {picture}")
    return 0 if aggregates and len(shown) == len(aggregates) and not unfolded else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
