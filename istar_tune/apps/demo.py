"""The one-command demo: ``search_spaces/demo.yaml`` on a local Ray instance, tracked under ``./istar-runs/``.

The real all-MiniLM-L6-v2 on real SST-2 (2,000 training examples, the full dev set), Base against I-STAR with
λ ∈ {−1, +1} (ζ = 0.2) over two learning rates. At the end it prints, from MLflow, the best configuration per
method, eval IsoScore* against accuracy per λ, and the command that opens the MLflow UI on these runs. Running it
again reuses finished trials. ``smoke=True`` runs the same search on 128 training and 128 dev examples. Interrupted
(Ctrl-C), it prints the search's summary and how to go on, no tables, and exits as ``search`` does (130).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from istar_tune import tracking
from istar_tune.errors import DataError
from istar_tune.markdown import markdown
from istar_tune.methods import label, uses_lambda
from istar_tune.metrics import best_scored, score
from istar_tune.results.tables import build_table, lambda_groups
from istar_tune.search.guard import results_exist
from istar_tune.search.outcome import disk_size, exit_code, folder_bytes
from istar_tune.search.run import run_search
from istar_tune.search.spaces.file import load_search_space, resolve_space
from istar_tune.tasks.data_folder import GLUE_DIR_ENV, hub_reachable, resolve_data_dir
from istar_tune.tracking.runs import trial_runs

DEMO_SPACE = "demo"  # the shipped search_spaces/demo.yaml
SMOKE_SETTINGS = {"max_train_samples": 128, "max_eval_samples": 128, "max_length": 32, "shrinkage_tokens": 5000}


@dataclass
class DemoReport:
    name: str
    tracking_uri: str
    best: pd.DataFrame
    by_lambda: pd.DataFrame
    failed: int
    storage_path: str = ""
    """Where the Ray results are (the trials' checkpoints)."""
    stopped: str = ""
    """The search's summary where it was interrupted (Ctrl-C, a signal, a systemic failure): then no tables."""
    exit_code: int = 0
    """The search's exit status (130 after Ctrl-C, as ``search`` exits); 0 when it ran to its end."""

    def text(self) -> str:
        if self.stopped:  # no result tables of a search that did not finish: its summary says how to go on
            return "\n" + self.stopped + "\n"
        ui = f"{Path(sys.executable).parent / 'mlflow'} ui --backend-store-uri {self.tracking_uri} --port 5000"
        return "\n".join([
            "", f"Best configuration per method ({self.name}, from MLflow):", markdown(self.best), "",
            "Eval IsoScore* (ζ = 0.2, all-layer token cloud) against accuracy per λ:", markdown(self.by_lambda), "",
            *READING, "",
            "Open the MLflow UI on these runs:", f"  {ui}",
            f"  then browse http://127.0.0.1:5000/#/experiments?{tracking.MODEL_TRAINING}",
            f"Ray results and checkpoints: {self.storage_path} ({disk_size(folder_bytes(self.storage_path) or 0)} on "
            "disk; delete it when done)", ""])


READING = (
    "How to read it: λ < 0 pushes the model's token space towards anisotropy (IsoScore* falls), λ > 0 towards",
    "isotropy (it rises); Base shows where fine-tuning alone leaves it. With MiniLM, one epoch of a small sample",
    "(63 optimizer steps at most, far fewer than the paper's runs) and |λ| = 1, the penalty can outweigh the task",
    "loss, so a λ whose accuracy falls towards chance says the weight is too large for this run, not that I-STAR",
    "hurts: the paper's gains for λ < 0 come from its grid (λ, ζ, learning rate, batch, epochs) on BERT-sized models",
    "with full training sets. The demo shows the mechanism and the records, not a verdict.",
)
"""What the demo's λ table means, printed beneath it."""


def lambda_table(tracking_uri: str, experiment: str) -> pd.DataFrame:
    """Per method and λ: trials, the best accuracy and its trial's eval IsoScore*, and the mean eval IsoScore*."""
    rows = []
    for (method, lam), group in lambda_groups(trial_runs(tracking_uri, experiment)).items():
        best = best_scored(group, lambda r: r.config, lambda r: score(r.metrics, "accuracy"))
        if best is None:
            continue
        rows.append({"method": label(method),
                     "lam": lam if uses_lambda(method) else None,
                     "trials": len(group), "best accuracy": score(best.metrics, "accuracy"),
                     "its eval IsoScore*": best.metrics.get("eval_isoscore_star"),
                     "mean eval IsoScore*": float(np.mean([r.metrics.get("eval_isoscore_star", np.nan)
                                                           for r in group]))})
    return pd.DataFrame(rows)


def run_demo(data_dir: str | None = None, storage_path: str = "istar-runs", smoke: bool = False,
             space_file: str | Path | None = None, address: str | None = None,
             write: Callable[[str], None] | None = None) -> DemoReport:
    space_file = resolve_space(space_file or DEMO_SPACE)
    if not space_file.is_file():
        raise DataError(f"{space_file} not found: run the demo from a clone of istar-tune, or give --space")
    if resolve_data_dir(data_dir) is None and not hub_reachable():
        raise DataError(f"no data: pass --data-dir DIR or set {GLUE_DIR_ENV} to a folder in the GLUE layout (the "
                        "Hugging Face hub is unreachable)")
    space = load_search_space(space_file)
    if smoke:
        space = replace(space, name=f"{space.name}-smoke", settings={**space.settings, **SMOKE_SETTINGS})
    summary = run_search(space, storage_path=storage_path, resume=results_exist(storage_path, space.name),
                         data_dir=data_dir, address=address, write=write)
    if summary.interrupted:
        return DemoReport(name=space.name, tracking_uri=summary.tracking_uri, best=pd.DataFrame(),
                          by_lambda=pd.DataFrame(), failed=len(summary.failed), storage_path=summary.storage_path,
                          stopped=summary.report(), exit_code=exit_code(summary) or 1)
    best = build_table(summary.tracking_uri, space.name, "best", tasks=list(space.tasks))
    best = best[["model", "task", "method", "score", "learning_rate", "lam", "zeta", "trials", "trial_id"]]
    return DemoReport(name=space.name, tracking_uri=summary.tracking_uri,
                      best=best.rename(columns={"score": "accuracy"}),
                      by_lambda=lambda_table(summary.tracking_uri, space.name), failed=len(summary.failed),
                      storage_path=summary.storage_path)
