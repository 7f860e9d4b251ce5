"""The paper's files as the GLUE layout ships them: every task parses, each file's quirks, malformed rows reported by
their line."""

from __future__ import annotations

import pytest

from istar_tune.data.reading import load_raw
from istar_tune.errors import ConfigError, DataError
from istar_tune.tasks import TASKS, get_task
from istar_tune.tasks.data_folder import resolve_data_dir

EXPECTED_LABELS = {"sst2": {0, 1}, "qnli": {0, 1}, "rte": {0, 1}, "mrpc": {0, 1}, "qqp": {0, 1}, "cola": {0, 1},
                   "sst5": {0, 1, 2, 3, 4}}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_parses_from_the_glue_layout(name, glue_tiny):
    task = get_task(name)
    raw = load_raw(task, glue_tiny)
    assert len(raw["train"]) >= 55 and len(raw["validation"]) >= 25
    if task.problem_type == "extractive_qa":
        row = raw["train"][0]
        assert row["context"][row["answers"]["answer_start"][0]:].startswith(row["answers"]["text"][0])
        return
    for field in task.text_fields:
        assert all(isinstance(t, str) and t for t in raw["train"][field])
    labels = raw["train"]["label"]
    if name == "stsb":
        assert all(0.0 <= x <= 5.0 for x in labels) and len(set(labels)) > 5
    else:
        assert set(labels) == EXPECTED_LABELS[name]


def test_file_quirks(glue_tiny):
    mrpc = load_raw(get_task("mrpc"), glue_tiny)["train"][0]  # header behind a byte-order mark
    assert mrpc["sentence1"].startswith("Amrozi accused his brother")
    assert mrpc["label"] == 1
    cola = load_raw(get_task("cola"), glue_tiny)["train"][0]  # no header: the first row is data
    assert cola["sentence"] == "Our friends won't buy this analysis, let alone the next one we propose."
    sst5 = load_raw(get_task("sst5"), glue_tiny)["train"][0]  # the tree root's label, the leaves' words
    assert sst5["label"] == 3 and sst5["sentence"].startswith("The Rock is destined to be the 21st Century 's new")


def test_subsets_take_the_first_rows(glue_tiny):
    raw = load_raw(get_task("rte"), glue_tiny, max_train_samples=10, max_eval_samples=3)
    full = load_raw(get_task("rte"), glue_tiny)
    assert len(raw["train"]) == 10 and len(raw["validation"]) == 3
    assert raw["train"]["sentence1"] == full["train"]["sentence1"][:10]


def test_glue_dir_environment_variable(glue_tiny, monkeypatch):
    monkeypatch.setenv("GLUE_DIR", str(glue_tiny))
    assert resolve_data_dir(None) == glue_tiny
    assert len(load_raw(get_task("sst2"))["train"]) == 64


def test_clear_errors_for_missing_and_malformed_files(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        resolve_data_dir(tmp_path / "nowhere")
    with pytest.raises(DataError, match=r"SST-2 files not found: .*train.tsv"):
        load_raw(get_task("sst2"), tmp_path)
    folder = tmp_path / "SST-2"
    folder.mkdir()
    (folder / "train.tsv").write_text("sentence\tlabel\ngood film\t1\nbad film\n")
    (folder / "dev.tsv").write_text("sentence\tlabel\nok\t1\n")
    with pytest.raises(DataError, match=r"train.tsv:3: expected 2 tab-separated columns, found 1"):
        load_raw(get_task("sst2"), tmp_path)
    (folder / "train.tsv").write_text("sentence\tlabel\ngood film\tmaybe\nbad film\t0\n")
    # The GLUE layout's rows take every format's checks: row 1 (the first after the header).
    with pytest.raises(ConfigError, match=r"train.tsv: rows 1: label 'maybe' is not one of negative, positive"):
        load_raw(get_task("sst2"), tmp_path)
    (folder / "train.tsv").write_text("text\tlabel\ngood film\t1\n")
    with pytest.raises(DataError, match="header lacks column"):
        load_raw(get_task("sst2"), tmp_path)
    squad = tmp_path / "SQuAD"
    squad.mkdir()
    (squad / "train-v1.1.json").write_text("{not json")
    (squad / "dev-v1.1.json").write_text("{}")
    with pytest.raises(DataError, match="not a SQuAD file"):
        load_raw(get_task("squad"), tmp_path)
