"""Parquet files: read by the builder; a split with no rows said to be empty."""

from __future__ import annotations

import pytest

from istar_tune.data.reading import read_task
from istar_tune.errors import ConfigError


def test_an_empty_parquet_split_is_said_to_be_empty(tmp_path, file_task):
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = {"train": tmp_path / "train.parquet", "validation": tmp_path / "dev.parquet"}
    pq.write_table(pa.table({"text": ["a", "b"], "label": [0, 1]}), files["train"])
    pq.write_table(pa.table({"text": pa.array([], pa.string()), "label": pa.array([], pa.int64())}),
                   files["validation"])
    with pytest.raises(ConfigError) as err:  # "ArrowInvalid: BatchSize must be greater than 0" before
        read_task(file_task(files))
    assert err.value.problems == [f"{files['validation']}: the validation split is empty: give at least one example"]


def test_a_parquet_split_keeps_its_columns_and_labels(tmp_path, file_task):
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = {"train": tmp_path / "train.parquet", "validation": tmp_path / "dev.parquet"}
    pq.write_table(pa.table({"text": ["a", "b", "c"], "label": ["neg", "pos", "neg"]}), files["train"])
    pq.write_table(pa.table({"text": ["d"], "label": ["pos"]}), files["validation"])
    task, splits = read_task(file_task(files))
    assert task.label_names == ("neg", "pos") and splits["train"]["label"] == [0, 1, 0]
