"""What a trial trained and was scored on, as MLflow's dataset inputs: per split (train, validation, and the held-out
share of the training data), a metadata-only dataset named ``<task>/<split>`` whose digest is the tokenised split's
fingerprint (``datasets``' own, from the data, the tokenizer and the tokenising code: two runs with one digest saw
the same tokens), its source (the data file, or the hub data set), its schema (the columns as the model takes them)
and its row count, tagged with its context (``training``, ``evaluation``, ``holdout``), so MLflow's UI shows and
filters runs by them. The trial describes its splits (:func:`describe`, plain data that travels in its first
report); the driver's writer logs them (:func:`dataset_inputs`)."""

from __future__ import annotations

import json
import threading
from typing import Any

CONTEXTS = {"train": "training", "validation": "evaluation", "holdout": "holdout"}
"""Split → MLflow's ``mlflow.data.context`` of it."""
MAX_DIGEST = 36
"""MLflow keeps a dataset's digest in 36 characters."""
_LOGGING = threading.Lock()
"""One ``log_inputs`` at a time in this process: MLflow's SQL store looks a dataset up before it inserts it, so two
writer threads logging the same split to two runs (a shared trial's configurations) at once both insert it, and one
fails on the store's unique constraint."""


def describe(task, data) -> list[dict[str, Any]]:
    """Each split of ``data`` (a trial's :class:`~istar_tune.training.data.EncodedData` of ``task``) as plain data."""
    found = []
    for split in CONTEXTS:
        table = getattr(data, split, None)
        if table is None:
            continue
        file_split = "train" if split == "holdout" else split  # the held-out share comes from the training file
        source = task.split_source(file_split) or (f"hub:{task.hub.path}" if getattr(task, "hub", None) else task.name)
        found.append({"name": f"{task.name}/{split}", "digest": str(table._fingerprint)[:MAX_DIGEST],
                      "source": str(source), "checksum": task.checksums.get(file_split, ""),
                      "columns": {name: str(feature) for name, feature in table.features.items()},
                      "rows": len(table), "context": CONTEXTS[split]})
    return found


def dataset_inputs(described: list[dict[str, Any]]) -> list:
    """MLflow's ``DatasetInput`` of each split :func:`describe` gave."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    found = []
    for d in described:
        hub = d["source"].startswith("hub:")
        dataset = Dataset(name=d["name"], digest=d["digest"], source_type="hugging_face" if hub else "local",
                          source=json.dumps({"uri": d["source"], "checksum": d["checksum"]}),
                          schema=json.dumps({"columns": d["columns"]}), profile=json.dumps({"num_rows": d["rows"]}))
        found.append(DatasetInput(dataset, tags=[InputTag("mlflow.data.context", d["context"])]))
    return found


def log_inputs(mlflow_client, run_id: str, described: list[dict[str, Any]]) -> None:
    """Log :func:`describe`'s splits to ``run_id`` as its dataset inputs (one call at a time in this process)."""
    with _LOGGING:
        mlflow_client.log_inputs(run_id, datasets=dataset_inputs(described))
