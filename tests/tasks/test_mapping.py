"""A task as a mapping again: the resolved definition a trial carries rebuilds the same task anywhere, every key
the reading needs included; the facts a reader of MLflow needs, sizes included."""

from __future__ import annotations

from istar_tune.tasks import Task, task_from_mapping
from istar_tune.tasks.mapping import definition_mapping, facts, task_from_facts


def test_a_definition_rebuilds_the_same_task_with_its_mapping_drops_columns_and_unanswerable_questions(tmp_path):
    for name in ("train.csv", "dev.csv"):
        (tmp_path / name).write_text("1,a\n2,b\n")
    news = task_from_mapping({"name": "news", "train": "train.csv", "validation": "dev.csv",
                              "column_names": ["label", "text"], "drop_labels": ["-"],
                              "label_names": {1: "World", 2: "Sports"}}, tmp_path)
    assert news.label_names == ("World", "Sports") and news.label_values == ("1", "2") and not news.indexed_labels
    again = task_from_mapping(definition_mapping(news))
    assert again == news.__class__(**{**news.__dict__, "source": again.source})
    listed = task_from_mapping({"name": "l", "train": "train.csv", "validation": "dev.csv",
                                "label_names": ["neg", "pos"]}, tmp_path)
    assert listed.indexed_labels and definition_mapping(listed)["label_names"] == ["neg", "pos"]
    (tmp_path / "q.jsonl").write_text("")
    qa = task_from_mapping({"name": "q", "train": "q.jsonl", "validation": "q.jsonl", "problem_type": "extractive_qa",
                            "unanswerable": True}, tmp_path)
    assert definition_mapping(qa)["unanswerable"] is True and task_from_mapping(definition_mapping(qa)).unanswerable


def test_facts_carry_the_sizes_the_replays_cost_model_needs():
    task = Task("own", "Own", "classification", "accuracy", train_examples=640, eval_examples=64)
    read = task_from_facts(facts(task), "MLflow")
    assert (read.name, read.metric, read.train_examples, read.eval_examples) == ("own", "accuracy", 640, 64)
    unsized = task_from_facts(facts(Task("u", "U", "regression", "pearson")), "MLflow")
    assert "examples" not in facts(Task("u", "U", "regression", "pearson")) and unsized.train_examples == 0


def test_a_checkpoints_definition_rebuilds_the_head_without_its_files():
    # What a logged model needs of a task of one's own: its class names in label-id order (a mapping's values), its
    # text fields (a pair is two inputs), its scale and unanswerable questions; the files may have moved since.
    coded = task_from_facts({"name": "news", "problem_type": "classification", "metric": "accuracy",
                             "train": "/gone/train.csv", "validation": "/gone/dev.csv", "text_fields": ["text"],
                             "label_names": {1: "World", 2: "Sports"}}, "a checkpoint")
    assert (coded.label_names, coded.label_values, coded.num_labels) == (("World", "Sports"), ("1", "2"), 2)
    pairs = task_from_facts({"name": "sim", "problem_type": "regression", "metric": "pearson",
                             "text_fields": ["sentence1", "sentence2"], "score_range": [0, 5]}, "a checkpoint")
    assert pairs.text_fields == ("sentence1", "sentence2") and pairs.score_range == (0.0, 5.0)
    qa = task_from_facts({"name": "q", "problem_type": "extractive_qa", "metric": "f1", "unanswerable": True}, "x")
    assert qa.unanswerable and qa.label_names == ()
