"""A hub data set: its own split and column names, and a hub out of reach said with the offline way out."""

from __future__ import annotations

import datasets
import pytest

from istar_tune.data import reading
from istar_tune.data.reading import load_raw, read_task
from istar_tune.errors import DataError
from istar_tune.tasks import get_task, task_from_mapping


def test_a_hub_data_set_with_its_own_split_and_column_names(monkeypatch):
    hub = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"txt": ["a", "b", "c"], "y": [0, 1, 1]}),
                                "test": datasets.Dataset.from_dict({"txt": ["d"], "y": [1]})})
    asked = []
    monkeypatch.setattr(reading.datasets, "load_dataset", lambda *args: asked.append(args) or hub)
    task = task_from_mapping({"name": "h", "hub": {"path": "me/data", "name": "cfg", "validation_split": "test",
                                                   "columns": {"txt": "text"}}, "label_field": "y"})
    resolved, raw = read_task(task)
    assert asked == [("me/data", "cfg")] and raw["validation"]["text"] == ["d"]
    assert resolved.label_names == ("0", "1") and resolved.train_examples == 3 and resolved.checksums == {}
    monkeypatch.setattr(reading.datasets, "load_dataset", lambda *args: hub)
    with pytest.raises(DataError, match="has no split 'validation' .*set hub.validation_split"):
        read_task(task_from_mapping({"name": "h2", "hub": "me/data", "label_field": "y"}))


def test_no_data_folder_and_no_hub_names_both_options(monkeypatch):
    monkeypatch.delenv("GLUE_DIR", raising=False)

    def unreachable(*args, **kwargs):
        raise ConnectionError("hub unreachable")

    monkeypatch.setattr(reading.datasets, "load_dataset", unreachable)
    with pytest.raises(DataError, match="pass --data-dir DIR or set GLUE_DIR"):
        load_raw(get_task("sst2"))
