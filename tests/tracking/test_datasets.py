from __future__ import annotations

import json
from types import SimpleNamespace

import datasets

from istar_tune.tasks import get_task
from istar_tune.tracking.datasets import dataset_inputs, describe


def test_each_split_is_described_with_its_fingerprint_source_schema_and_rows():
    files = {"train": "/data/SST-2/train.tsv", "validation": "/data/SST-2/dev.tsv"}
    task = SimpleNamespace(name=get_task("sst2").name, files=files, hub=None,
                           checksums={"train": "sha256:aa", "validation": "sha256:bb"})
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
