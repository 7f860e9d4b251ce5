from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import datasets

from istar_tune.tasks import get_task
from istar_tune.tracking.datasets import dataset_inputs, describe


def test_each_split_is_described_with_its_fingerprint_source_schema_and_rows():
    files = {"train": "/data/SST-2/train.tsv", "validation": "/data/SST-2/dev.tsv"}
    task = replace(get_task("sst2"), files=files, hub=None, checksums={"train": "sha256:aa", "validation": "sha256:bb"})
    train = datasets.Dataset.from_dict({"input_ids": [[1, 2], [3]], "labels": [0, 1]})
    validation = datasets.Dataset.from_dict({"input_ids": [[4]], "labels": [1]})
    held = train.select([1])
    found = describe(task, SimpleNamespace(train=train, validation=validation, holdout=held))
    assert [(d["name"], d["context"], d["rows"]) for d in found] == [
        ("sst2/train", "training", 2), ("sst2/validation", "evaluation", 1), ("sst2/holdout", "holdout", 1)]
    assert found[0]["digest"] == train._fingerprint and found[2]["digest"] == held._fingerprint
    assert found[2]["source"] == "/data/SST-2/train.tsv" and found[2]["checksum"] == "sha256:aa"
    assert set(found[0]["columns"]) == {"input_ids", "labels"}
    json.dumps(found)  # plain data: it travels in a trial's report
    inputs = dataset_inputs(found)
    assert [i.dataset.name for i in inputs] == ["sst2/train", "sst2/validation", "sst2/holdout"]
    assert inputs[0].dataset.source_type == "local" and json.loads(inputs[0].dataset.profile) == {"num_rows": 2}
    assert [(t.key, t.value) for t in inputs[1].tags] == [("mlflow.data.context", "evaluation")]
    no_holdout = describe(task, SimpleNamespace(train=train, validation=validation, holdout=None))
    assert [d["context"] for d in no_holdout] == ["training", "evaluation"]


def test_one_split_logged_to_many_runs_from_many_threads_at_once_is_one_dataset(tmp_path):
    """A shared trial's configurations get the same splits from several writer threads at once."""
    import threading

    from istar_tune import tracking
    from istar_tune.tracking.datasets import log_inputs

    client = tracking.client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("shared")
    runs = [client.create_run(experiment).info.run_id for _ in range(8)]
    split = {"name": "sst2/train", "digest": "0123456789abcdef", "source": "/d/train.tsv", "checksum": "sha256:aa",
             "columns": {"labels": "int64"}, "rows": 3, "context": "training"}
    failures = []

    def log(run_id):
        try:
            log_inputs(client, run_id, [split])
        except Exception as err:  # noqa: BLE001 - collected: the assertion below names it
            failures.append(err)

    threads = [threading.Thread(target=log, args=(run_id,)) for run_id in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert all([i.dataset.digest for i in client.get_run(r).inputs.dataset_inputs] == ["0123456789abcdef"]
               for r in runs)
