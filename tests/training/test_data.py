from __future__ import annotations

import math

import numpy as np
import pytest

from istar_tune.errors import DataError
from istar_tune.metrics import squad_scores
from istar_tune.models import load_tokenizer
from istar_tune.tasks import TASKS, get_task
from istar_tune.training import data as data_module
from istar_tune.training.data import encode, load_raw, resolve_data_dir, squad_predictions, squad_references

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


def test_no_data_dir_and_no_hub_names_both_options(monkeypatch):
    monkeypatch.delenv("GLUE_DIR", raising=False)

    def unreachable(*args, **kwargs):
        raise ConnectionError("hub unreachable")

    monkeypatch.setattr(data_module.datasets, "load_dataset", unreachable)
    with pytest.raises(DataError, match="pass --data-dir DIR or set GLUE_DIR"):
        load_raw(get_task("sst2"))


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
    (folder / "train.tsv").write_text("sentence\tlabel\ngood film\tmaybe\n")
    with pytest.raises(DataError, match=r"train.tsv:2: label 'maybe' is not one of negative, positive"):
        load_raw(get_task("sst2"), tmp_path)
    (folder / "train.tsv").write_text("text\tlabel\ngood film\t1\n")
    with pytest.raises(DataError, match="header lacks column"):
        load_raw(get_task("sst2"), tmp_path)
    squad = tmp_path / "SQuAD"
    squad.mkdir()
    (squad / "train-v1.1.json").write_text("{not json")
    (squad / "dev-v1.1.json").write_text("{}")
    with pytest.raises(DataError, match="not a SQuAD v1.1 file"):
        load_raw(get_task("squad"), tmp_path)


def test_classification_encoding_keeps_labels_and_truncates(glue_tiny):
    task = get_task("rte")
    tokenizer = load_tokenizer("tiny-bert")
    encoded = encode(task, load_raw(task, glue_tiny), tokenizer, max_length=16)
    assert max(len(ids) for ids in encoded.train["input_ids"]) == 16
    np.testing.assert_array_equal(encoded.labels, load_raw(task, glue_tiny)["validation"]["label"])


def test_squad_windows_and_post_processing_recover_gold_answers(glue_tiny):
    task = get_task("squad")
    tokenizer = load_tokenizer("tiny-bert")
    raw = load_raw(task, glue_tiny)
    encoded = encode(task, raw, tokenizer, max_length=48)
    assert len(encoded.validation) > len(raw["validation"])  # long contexts are split into windows
    # Training labels point at the answer's tokens in windows that hold it, at [CLS] (0) in the others.
    answers = {a.lower().replace(" ", "") for row in raw["train"] for a in row["answers"]["text"]}
    labelled = [f for f in encoded.train if f["start_positions"] > 0]
    assert 0 < len(labelled) < len(encoded.train)
    for feature in labelled:
        span = tokenizer.decode(feature["input_ids"][feature["start_positions"]:feature["end_positions"] + 1])
        span = span.lower().replace(" ", "")
        assert any(answer in span or span in answer for answer in answers)  # "gold" lies inside token "golden"
    # Logits that peak on each gold answer's tokens give back the gold text: EM = F1 = 100.
    n, length = len(encoded.validation), max(len(x) for x in encoded.validation["input_ids"])
    start, end = np.full((n, length), -10.0), np.full((n, length), -10.0)
    gold = {}
    for row in raw["validation"]:
        first = row["answers"]["answer_start"][0]
        gold[row["id"]] = (first, first + len(row["answers"]["text"][0]))
    for i, (qid, offsets) in enumerate(zip(encoded.eval_example_ids, encoded.eval_offsets)):
        char_start, char_end = gold[qid]
        for k, span in enumerate(offsets):
            if span is not None and span[0] <= char_start < span[1]:
                start[i, k] = 10.0
            if span is not None and span[0] < char_end <= span[1]:
                end[i, k] = 10.0
    predictions, references = squad_predictions(encoded, start, end), squad_references(encoded)
    assert set(predictions) == set(references)
    for qid, truths in references.items():
        # Exact, or the token containing a sub-token answer ("5" inside the token "50").
        assert predictions[qid] == truths[0] or (truths[0] in predictions[qid] and len(predictions[qid].split()) == 1)
    assert squad_scores(predictions, references)["exact_match"] > 90


def test_a_holdout_is_a_seeded_random_share_of_the_whole_training_set(glue_tiny):
    from istar_tune.errors import ConfigError
    from istar_tune.training.data import hold_out

    task = get_task("sst2")
    tokenizer = load_tokenizer("tiny-bert")
    data = encode(task, load_raw(task, glue_tiny), tokenizer, 48)
    first, again, other = (hold_out(data, 0.3, seed) for seed in (1, 1, 2))
    n = len(data.train)
    assert len(first.holdout) == math.ceil(0.3 * n) and len(first.train) + len(first.holdout) == n
    rows = [tuple(r["input_ids"]) for r in data.train]
    held = [rows.index(tuple(r["input_ids"])) for r in first.holdout]
    assert held == [rows.index(tuple(r["input_ids"])) for r in again.holdout]  # the same seed: the same split
    assert held != [rows.index(tuple(r["input_ids"])) for r in other.holdout]
    assert max(held) > n // 2 and min(held) < n // 2  # drawn from the whole file, not its head or tail
    assert first.validation is data.validation
    squad = get_task("squad")
    with pytest.raises(ConfigError, match="sentence-level"):
        hold_out(encode(squad, load_raw(squad, glue_tiny), tokenizer, 64), 0.3, 1)
