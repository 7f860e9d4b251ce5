"""With held-out data the dev set chooses nothing: a real TPE search with ASHA early stopping on tiny-bert, run once
with the task's dev set and once with every dev label flipped (a poisoned dev set), makes the same proposals, stops
the same trials and chooses the same configuration; the objective MLflow records for each trial is its held-out
value, and the best table picks the held-out best."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent / "istar-tune"


def _search(root: Path, space_yaml, dev: str) -> tuple[str, list]:
    (root / "task.yaml").write_text(f"name: reviews\ntrain: data/train.csv\nvalidation: data/{dev}\n")
    (root / "space.yaml").write_text(space_yaml(
        name="held", tasks=["task.yaml"],
        hyperparameters={"epochs": 3, "learning_rate": {"loguniform": [1.0e-4, 3.0e-3]}},
        search={"algorithm": "tpe", "num_samples": 4, "seed": 3}, concurrency=1,
        scheduler={"type": "asha", "grace_period": 1, "reduction_factor": 2},
        settings={"holdout": 0.3, "eval_batch_size": 32, "shrinkage_tokens": None}))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "GLUE_DIR")}
    env = {**env, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([str(BIN), "search", "space.yaml", "--storage-path", f"runs-{dev}"], cwd=root,
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    from istar_tune import tracking
    from istar_tune.tracking.storage import tracking_uri

    uri = tracking_uri(None, str(root / f"runs-{dev}"))
    runs = sorted(tracking.trial_runs(uri, "held"), key=lambda r: r.config["learning_rate"])
    return uri, runs


def test_a_poisoned_dev_set_changes_no_proposal_no_stop_and_no_choice(glue, tmp_path, space_yaml):
    (tmp_path / "data").mkdir()
    for split, name, rows in (("train", "train", 400), ("dev", "dev", 96)):
        table = pd.read_csv(glue / "SST-2" / f"{name}.tsv", sep="\t", quoting=3).head(rows)
        table.to_csv(tmp_path / "data" / f"{split}.csv", index=False)
    dev = pd.read_csv(tmp_path / "data" / "dev.csv")
    dev["label"] = 1 - dev["label"]  # every dev label wrong: a search that read it would choose otherwise
    dev.to_csv(tmp_path / "data" / "poisoned.csv", index=False)
    clean_uri, clean = _search(tmp_path, space_yaml, "dev.csv")
    poisoned_uri, poisoned = _search(tmp_path, space_yaml, "poisoned.csv")

    def seen(runs):  # what the searcher proposed, where the scheduler stopped it, and what chose
        return [(r.config["learning_rate"], r.status, r.metrics["objective"]) for r in runs]

    assert len(clean) == 4 and seen(clean) == seen(poisoned)
    assert len({r.metrics["objective"] for r in clean}) > 1  # the held-out values tell the trials apart
    for run in clean + poisoned:  # the objective is the held-out value; the dev value is beside it
        assert run.metrics["objective"] == run.metrics["scored_holdout_accuracy"]
        assert run.metrics["dev_objective"] == run.metrics["scored_accuracy"]
    assert [r.metrics["scored_accuracy"] for r in clean] != [r.metrics["scored_accuracy"] for r in poisoned]

    from istar_tune import tracking

    client = tracking.client(clean_uri)  # every trial run names what it trained and was scored on
    for run in clean:
        inputs = client.get_run(run.run_id).inputs.dataset_inputs
        contexts = {i.dataset.name: next(t.value for t in i.tags if t.key == "mlflow.data.context") for i in inputs}
        assert contexts == {"reviews/train": "training", "reviews/validation": "evaluation",
                            "reviews/holdout": "holdout"}
        assert all(len(i.dataset.digest) == 16 for i in inputs)  # the tokenised split's fingerprint
    digests = {tuple(sorted((i.dataset.name, i.dataset.digest) for i in client.get_run(r.run_id).inputs.dataset_inputs))
               for r in clean}
    assert len(digests) == 1  # one data set, one tokenizer: the same digests in every trial

    from istar_tune.results.tables import build_table

    best = [build_table(uri, "held", "best").iloc[0] for uri in (clean_uri, poisoned_uri)]
    assert best[0].learning_rate == best[1].learning_rate and best[0].held_out == best[1].held_out
    assert best[0].held_out == max(r.metrics["objective"] for r in clean)
