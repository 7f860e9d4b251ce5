"""Reading a user's task: every format ``datasets`` reads, string and integer labels, each problem type, the hub, and
every problem of the data reported at once; a definition resolved (classes, sizes, checksums) and held to them."""

from __future__ import annotations

import hashlib
import re

import datasets
import numpy as np
import pytest
import yaml

from istar_tune.data.reading import load_raw, read_task, resolve
from istar_tune.errors import ConfigError, DataError
from istar_tune.models import load_tokenizer
from istar_tune.tasks import Task, get_task, task_from_mapping
from istar_tune.training.data import encode


def _task(files, **extra):
    return task_from_mapping({"name": "own", "train": str(files["train"]), "validation": str(files["validation"]),
                              **extra}, source="own.yaml")


@pytest.mark.parametrize("fmt", ["csv", "tsv", "json", "jsonl", "parquet"])
@pytest.mark.parametrize("string_labels", [False, True])
def test_every_format_with_string_or_integer_labels(own_data, glue_tiny, fmt, string_labels):
    files = own_data("sst2", fmt, string_labels)
    resolved, raw = read_task(_task(files))
    expected = ("negative", "positive") if string_labels else ("0", "1")
    assert resolved.label_names == expected and resolved.text_fields == ("text",)
    assert (resolved.train_examples, resolved.eval_examples) == (64, 32)
    digest = hashlib.sha256(files["train"].read_bytes()).hexdigest()
    assert resolved.checksums["train"] == f"sha256:{digest}"
    shipped = load_raw(get_task("sst2"), glue_tiny)  # the same rows, the same classes as the GLUE file
    assert raw["train"]["label"] == shipped["train"]["label"]
    assert [t.strip() for t in raw["train"]["text"]] == [t.strip() for t in shipped["train"]["sentence"]]


def test_given_class_names_map_names_and_indices(own_data):
    files = own_data("sst2", "csv", string_labels=True)
    resolved, raw = read_task(_task(files, label_names=["positive", "negative"]))
    assert resolved.label_names == ("positive", "negative")
    words = [row["label"] for row in datasets.load_dataset("csv", data_files=str(files["train"]), split="train")]
    assert raw["train"]["label"] == [0 if w == "positive" else 1 for w in words]


def test_a_pair_is_named_unless_it_is_sentence1_and_sentence2(own_data):
    files = own_data("rte", "jsonl")
    with pytest.raises(ConfigError) as err:  # run_glue.py would take the first two fields that are not the label
        read_task(_task(files))
    assert "the data has 2 fields (premise, hypothesis): name the input with text_fields" in str(err.value)
    resolved, raw = read_task(_task(files, text_fields=["premise", "hypothesis"]))
    assert resolved.text_fields == ("premise", "hypothesis")
    assert resolved.label_names == ("entailment", "not_entailment")
    swapped, _ = read_task(_task(files, text_fields=["hypothesis", "premise"]))
    assert swapped.text_fields == ("hypothesis", "premise")
    tokenizer = load_tokenizer("tiny-bert")
    encoded = encode(resolved, raw, tokenizer, max_length=32)
    assert encoded.labels.tolist() == raw["validation"]["label"] and len(encoded.train) == 64
    stsb = read_task(_task(own_data("stsb", "csv"), problem_type="regression"))[0]
    assert stsb.text_fields == ("sentence1", "sentence2")  # the pair GLUE names: taken without being named


def _write(folder, name, header, rows):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def _files(tmp_path, header, train, dev, suffix="csv"):
    return {"train": _write(tmp_path, f"train.{suffix}", header, train),
            "validation": _write(tmp_path, f"dev.{suffix}", header, dev)}


def test_a_second_label_column_is_never_taken_as_input_unless_named(tmp_path):
    questions = [f"question number {i}?" for i in range(12)]
    fine = ["DESC:def", "NUM:count", "LOC:city", "HUM:ind"]
    rows = [f"{q},{'DESC NUM LOC HUM'.split()[i % 4]},{fine[i % 4]}" for i, q in enumerate(questions)]
    files = _files(tmp_path, "text,label,fine", rows, rows[:4])
    with pytest.raises(ConfigError) as err:
        read_task(_task(files))
    (line,) = err.value.problems
    assert "2 fields (text, fine)" in line and "text_fields" in line and "--text-fields" in line
    resolved, raw = read_task(_task(files, text_fields=["text"]))
    assert resolved.text_fields == ("text",) and raw["train"].column_names == ["text", "label"]
    alone = _files(tmp_path / "alone", "fine,label", [f"{fine[i % 4]},{'DESC NUM LOC HUM'.split()[i % 4]}"
                                                      for i in range(20)], ["DESC:def,DESC"])
    with pytest.raises(ConfigError, match="field 'fine' decides the label .*unless named with text_fields"):
        read_task(_task(alone))  # the one field besides the label, but its values give the label away
    assert read_task(_task(alone, text_fields=["fine"]))[0].text_fields == ("fine",)  # named: the user's choice


def test_the_problem_type_comes_from_the_labels_and_is_stated(tmp_path):
    scores = _files(tmp_path / "s", "text,label", [f"pair {i},{i % 5 + 0.2 * (i % 3)}" for i in range(20)],
                    ["a,1.4", "b,3"])
    task = _task(scores)
    assert task.infer_problem_type and not task.resolved
    resolved, raw = read_task(task)
    assert (resolved.problem_type, resolved.metric, resolved.num_labels) == ("regression", "pearson", 1)
    assert raw["validation"]["label"] == [1.4, 3.0] and resolved.observed_scores == (0.0, 4.4)
    assert resolved.describe() == ("task own: input text; label label; regression (labels are numbers with decimals; "
                                   "if they are classes, say problem_type: classification), scores 0 to 4.4 (trained "
                                   "as z-scores); 20 train / 2 validation examples")
    many = _files(tmp_path / "m", "text,label", [f"t {i},{i}" for i in range(30)], ["a,3", "b,4"])
    resolved = read_task(_task(many))[0]
    assert resolved.problem_type == "classification" and resolved.num_labels == 30
    assert "30 distinct: if they are scores, say problem_type: regression" in resolved.describe()
    assert read_task(_task(many, problem_type="regression"))[0].metric == "pearson"
    stated = _task(scores, metric="accuracy")  # a classification metric states the type: decimals are never classes
    assert not stated.infer_problem_type
    with pytest.raises(ConfigError, match=r"as a quantity \(a decimal point\).*problem_type: regression.*label_names"):
        read_task(stated)


@pytest.mark.parametrize(("header", "train", "dev", "message"), [
    # a 1 is not read as the index of class 2
    ("text,label", ["a,0", "b,2", "c,0"], ["d,1"], "label '1' is not one of 0, 2 \\(the training split never"),
    ("text,label", ["a,neg", "b,pos", "c,0", "d,1"], ["e,pos"], "labels mix numbers \\(0, 1\\) and words"),
    ("text,label", ["a,yes", "b,yes"], ["c,yes"], "every training label is 'yes': a classifier needs two classes"),
])
def test_labels_that_would_be_read_silently_wrong_are_refused(tmp_path, header, train, dev, message):
    with pytest.raises(ConfigError) as err:
        read_task(_task(_files(tmp_path, header, train, dev)))
    assert any(re.search(message, p) for p in err.value.problems), err.value.problems


def test_numeric_class_names_are_names_never_indices(tmp_path):
    files = _files(tmp_path, "text,label", ["a,1", "b,5", "c,0"], ["d,1"])
    with pytest.raises(ConfigError, match="rows 3: label '0' is not one of 1, 2, 3, 4, 5$"):
        read_task(_task(files, label_names=[1, 2, 3, 4, 5]))  # not class '1' by its index
    words = _files(tmp_path / "w", "text,label", ["a,0", "b,1"], ["c,1"])  # word names: 0/1 are their indices
    assert read_task(_task(words, label_names=["neg", "pos"]))[1]["validation"]["label"] == [1]


def test_yes_no_values_are_not_scores(tmp_path):
    files = {"train": _write(tmp_path, "train.jsonl", '{"text": "a", "label": true}',
                             ['{"text": "b", "label": false}']),
             "validation": _write(tmp_path, "dev.jsonl", '{"text": "c", "label": true}', [])}
    with pytest.raises(ConfigError, match="train.jsonl: rows 1, 2: scores True, False are yes/no values, not numbers"):
        read_task(_task(files, problem_type="regression"))  # not 1.0 and 0.0
    assert read_task(_task(files))[0].label_names == ("False", "True")  # unsaid: yes/no are two classes


@pytest.mark.parametrize("metric", ["pearson", "spearman"])
def test_regression_reads_scores(own_data, glue_tiny, metric):
    resolved, raw = read_task(_task(own_data("stsb", "csv"), problem_type="regression", metric=metric))
    assert resolved.label_names == () and resolved.num_labels == 1
    shipped = load_raw(get_task("stsb"), glue_tiny)
    np.testing.assert_allclose(raw["train"]["label"], shipped["train"]["label"])


def test_extractive_qa_from_flattened_json_lines_and_from_squads_own_layout(own_data, glue_tiny):
    task = _task(own_data("squad", "jsonl"), problem_type="extractive_qa")
    resolved, raw = read_task(task)
    shipped = load_raw(get_task("squad"), glue_tiny)
    assert raw["validation"]["answers"] == shipped["validation"]["answers"]
    assert raw["train"]["id"] == shipped["train"]["id"] and resolved.eval_examples == 25
    squad_layout = task_from_mapping({"name": "qa", "problem_type": "extractive_qa", "format": "squad",
                                      "train": str(glue_tiny / "SQuAD" / "train-v1.1.json"),
                                      "validation": str(glue_tiny / "SQuAD" / "dev-v1.1.json")})
    assert read_task(squad_layout)[1]["train"]["question"] == shipped["train"]["question"]


def test_every_problem_of_the_data_at_once(own_data, tmp_path):
    files = own_data("sst2", "csv", string_labels=True)
    with pytest.raises(ConfigError) as err:
        read_task(_task(files, label_field="sentiment", text_fields=["body"]))
    assert len(err.value.problems) == 2  # both splits
    assert "no field 'body', 'sentiment' (its fields: text, label)" in err.value.problems[0]
    dev = files["validation"].read_text().splitlines()
    files["validation"].write_text("\n".join([dev[0], "fine,neutral", *dev[1:], "great,"]) + "\n")
    with pytest.raises(ConfigError) as err:
        read_task(_task(files, label_names=["negative", "positive"]))
    assert "dev.csv: rows 1: label 'neutral' is not one of negative, positive" in str(err.value)
    assert "dev.csv: rows 34: '' is not a label" in str(err.value)  # an empty cell: no label, not a class
    files["validation"].write_text("\n".join([dev[0], "fine,neutral", *dev[1:]]) + "\n")
    with pytest.raises(ConfigError, match="rows 1: label 'neutral' is not one of negative, positive \\(the training "
                                          "split never shows it\\)"):
        read_task(_task(files))
    empty = tmp_path / "empty.csv"
    empty.write_text("text,label\n")
    with pytest.raises(ConfigError, match="the validation split is empty"):
        read_task(_task({"train": files["train"], "validation": empty}))


def test_scores_that_are_not_numbers_and_a_binary_metric_of_three_classes(own_data, tmp_path):
    files = own_data("stsb", "csv")
    lines = files["train"].read_text().splitlines()
    files["train"].write_text("\n".join([lines[0], *lines[1:3], "a,b,high", *lines[3:]]) + "\n")
    with pytest.raises(ConfigError, match="rows 3: score 'high' is not a number"):
        read_task(_task(files, problem_type="regression"))
    three = own_data("sst2", "csv", folder=tmp_path / "three")
    text = three["train"].read_text()
    three["train"].write_text(text + "so so,2\n")
    three["validation"].write_text(three["validation"].read_text() + "so so,2\n")
    with pytest.raises(ConfigError, match="f1 is binary F1, but the training split has 3 classes .*use f1_macro"):
        read_task(_task(three, metric="f1", positive_label=1))


def test_a_file_changed_since_the_definition_was_resolved_is_refused(own_data):
    files = own_data("sst2", "csv")
    resolved = resolve(_task(files))
    again = task_from_mapping(yaml.safe_load(yaml.safe_dump(
        {"name": "own", "train": str(files["train"]), "validation": str(files["validation"]),
         "checksums": resolved.checksums})))
    assert read_task(again)[0].checksums == resolved.checksums
    files["train"].write_text(files["train"].read_text() + "one more,1\n")
    with pytest.raises(ConfigError, match="train file .*: changed since the task was resolved"):
        read_task(again)


def test_limits_take_the_first_rows_after_the_whole_split_is_checked(own_data):
    files = own_data("sst2", "parquet")
    resolved, raw = read_task(_task(files), max_train_samples=5, max_eval_samples=3)
    assert (len(raw["train"]), len(raw["validation"])) == (5, 3)
    assert (resolved.train_examples, resolved.eval_examples) == (64, 32)


def test_a_file_that_cannot_be_read_names_the_line_the_byte_and_the_way_out(tmp_path):
    latin = {split: tmp_path / f"{split}.csv" for split in ("train", "validation")}
    for path in latin.values():
        path.write_bytes("text,label\ngood,1\ncafé crème,0\n".encode("latin-1"))
    with pytest.raises(DataError, match="train.csv: not a readable csv file: line 3: byte 0xe9 cannot be decoded as "
                                        "utf-8 .*encoding: latin-1"):
        read_task(_task(latin))
    assert read_task(_task(latin, encoding="latin-1"))[1]["train"]["text"] == ["good", "café crème"]
    tabs = _files(tmp_path / "tabs", "text\tlabel", ["good\t1", "bad\t0"], ["fine\t1"])
    with pytest.raises(DataError, match="its header 'text\\\\tlabel' holds tabs, not commas: .* give format: tsv"):
        read_task(_task(tabs))
    wide = _files(tmp_path / "wide", "text,label", ["good,1", "a,b,c,d,0"], ["fine,1"])
    with pytest.raises(DataError, match="wide/train.csv: rows 2: 5 fields where the header has 2: a ',' inside a cell "
                                        "that is not quoted\\? quote that cell"):
        read_task(_task(wide))
    with pytest.raises(ConfigError, match="encoding: 'klingon' is not an encoding Python knows"):
        _task(latin, encoding="klingon")


def test_extractive_qa_answers_are_checked_against_their_contexts_and_ids(own_data):
    import json

    files = own_data("squad", "jsonl")
    rows = [json.loads(line) for line in files["train"].read_text().splitlines()]
    rows[1]["answers"]["answer_start"] = [s + 3 for s in rows[1]["answers"]["answer_start"]]  # shifted
    # an answer past the context's end
    rows[2]["answers"]["answer_start"] = [len(rows[2]["context"]) + 10 for _ in rows[2]["answers"]["text"]]
    rows[3]["answers"] = {"text": ["words nowhere in the context"], "answer_start": [0]}
    rows[4]["id"] = rows[0]["id"]
    files["train"].write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    dev = [json.loads(line) for line in files["validation"].read_text().splitlines()]
    dev[0]["answers"] = {"text": [], "answer_start": []}  # unanswerable: SQuAD v2, not a problem
    dev[1]["id"] = None
    files["validation"].write_text("\n".join(json.dumps(r) for r in dev) + "\n")
    with pytest.raises(ConfigError) as err:
        read_task(_task(files, problem_type="extractive_qa"))
    problems = err.value.problems
    assert any("train.jsonl: rows 2, 3, 4: answers: the context does not hold the answer text" in p for p in problems)
    assert any(f"train.jsonl: ids {rows[0]['id']} repeat" in p for p in problems)
    assert any("dev.jsonl: rows 2: no id" in p for p in problems) and len(problems) == 3
    dev[1]["id"] = "fresh"
    files["validation"].write_text("\n".join(json.dumps(r) for r in dev) + "\n")
    clean = own_data("squad", "jsonl", folder=files["train"].parent.parent / "clean")
    clean["validation"].write_text(files["validation"].read_text())
    assert read_task(_task(clean, problem_type="extractive_qa"))[0].unanswerable


def test_a_definitions_sizes_must_be_the_datas(own_data):
    files = own_data("sst2", "csv")
    with pytest.raises(ConfigError, match="examples: train 1,000, but the data holds 64: leave examples out"):
        read_task(_task(files, examples={"train": 1000, "validation": 32}))
    assert read_task(_task(files, examples={"train": 64, "validation": 32}))[0].train_examples == 64


def test_a_positive_label_the_training_split_never_shows_is_refused(own_data):
    files = own_data("sst2", "csv", string_labels=True)
    with pytest.raises(ConfigError, match="positive_label 'good' is not a class of the training split "
                                          r"\(negative, positive\)"):
        read_task(_task(files, metric="f1", positive_label="good"))
    task, _ = read_task(_task(files, metric="f1", positive_label="negative"))
    assert task.positive_index == 0


def test_a_giant_text_cell_is_refused_before_any_trial_holds_it(own_data, monkeypatch):
    from istar_tune.data import checking

    files = own_data("sst2", "csv")
    lines = files["train"].read_text().splitlines()
    files["train"].write_text("\n".join([lines[0], *lines[1:4], "x" * 2_000 + ",1", *lines[4:]]) + "\n")
    monkeypatch.setattr(checking, "MAX_CELL_CHARS", 1_000)  # a 200 MB cell, scaled down
    with pytest.raises(ConfigError, match=r"row 4: text field 'text' holds 2,000 characters, over 1,000 a cell"):
        read_task(_task(files))


def test_integer_codes_past_two_to_the_53_stay_apart_and_keep_their_names(tmp_path):
    # Read through a float, 9007199254740993 and ...995 both became 9007199254740992 (then 994): one class named by
    # a code no row holds. An integer is read as an integer.
    big = 2**53
    files = _files(tmp_path, "text,label", [f"a,{big + 1}", f"b,{big + 3}", f"c,{big + 1}"], [f"d,{big + 3}"])
    task, splits = read_task(_task(files))
    assert task.label_names == (str(big + 1), str(big + 3))
    assert splits["train"]["label"] == [0, 1, 0] and splits["validation"]["label"] == [1]
    mapped = read_task(_task(files, label_names={big + 1: "odd", big + 3: "odder"}))[0]
    assert mapped.label_names == ("odd", "odder") and mapped.label_values == (str(big + 1), str(big + 3))


@pytest.mark.parametrize(("spelled", "named"), [("positive\u200b", "U+200B ZERO WIDTH SPACE"),
                                                ('"""positive"""', "printable ASCII only"),
                                                ("posi\u0074ive".replace("t", "\uff54"), "U+FF54 FULLWIDTH")])
def test_two_spellings_of_one_class_in_a_file_are_refused_naming_what_differs(tmp_path, spelled, named):
    # Compared only in whitespace and case, they trained as two classes; under the rule's normal form they meet.
    files = _files(tmp_path, "text,label", ["a,positive", f"b,{spelled}", "c,negative"], ["d,positive"])
    with pytest.raises(ConfigError) as err:
        read_task(_task(files))
    assert any("are one name once normalised" in p and named in p for p in err.value.problems), err.value.problems


@pytest.mark.parametrize(("labels", "written"), [
    (['"3,5"', '"4,0"', '"2,5"'], "a decimal comma"), (["70%", "85%", "40%"], "a percent sign"),
    (["3.5 stars", "4 stars", "2.5 stars"], "a decimal point; a number beside a word"),
    (['"3,5"', "4", '"2,5"'], "a decimal comma"), (['"12,50 €"', '"3,00 €"', '"7,10 €"'], "a currency sign ('€')"),
    (["$12.50", "$3.00", "$7.10"], "a currency sign ('$')"), (["21.0°C", "19.5°C", "18.0°C"], "a degree sign"),
    (["4★", "5★", "3★"], "a star ('★')"), (["٣", "٤", "٥"], "digits of another script"),
    (["−3", "−1", "2"], "a typographic minus"), (["1/2", "3/4", "1/4"], "a fraction")])
def test_numbers_that_are_not_bare_numbers_are_never_classes(tmp_path, labels, written):
    # Read as "parses as a float or it is a class", these scores trained a classifier with a class per spelling.
    files = _files(tmp_path, "text,label", [f"{t},{label}" for t, label in zip("abc", labels)], [f"d,{labels[0]}"])
    with pytest.raises(ConfigError) as err:
        read_task(_task(files))
    assert any(f"as a quantity ({written}" in p and "problem_type: regression" in p and "label_names" in p
               for p in err.value.problems), err.value.problems
    names = [label.strip('"') for label in labels]  # declared, they are the classes they name
    assert read_task(_task(files, label_names=names))[0].label_names == tuple(names)


def test_a_score_written_with_a_decimal_comma_says_so():
    from istar_tune.tasks.labels import label_value

    scores = Task("s", "S", "regression", "pearson")
    with pytest.raises(DataError, match=r"score '3,5' is not a number .*written with a decimal comma .*: write bare"):
        label_value(scores, "3,5", "train.csv row 2")


def test_a_header_read_as_data_is_refused_in_every_way_it_arrives(tmp_path):
    # Two exports concatenated: the header again mid-file trained a class named 'label'.
    files = _files(tmp_path, "text,label", ["a fine film,pos", "text,label", "a dull one,neg"], ["d,pos"])
    with pytest.raises(ConfigError) as err:
        read_task(_task(files))
    assert any("rows 2: the row holds the fields' own names (text, label): a header read as data" in p
               for p in err.value.problems), err.value.problems
    # column_names given for a file whose first row is a header of other names: its label is the label's name.
    headed = _files(tmp_path / "h", "sentence,label", ["a fine film,pos", "a dull one,neg"], ["d,pos"])
    with pytest.raises(ConfigError) as err:
        read_task(_task(headed, column_names=["text", "label"]))
    assert any("rows 1: the row holds the fields' own names" in p for p in err.value.problems), err.value.problems
    plain = _files(tmp_path / "p", "text,label", ["dull,neg", "fine,pos"], ["d,pos"])  # one-word texts are text
    assert read_task(_task(plain))[0].label_names == ("neg", "pos")


def test_what_a_limit_leaves_is_checked_again(tmp_path):
    rows = [f"first {i},neg" for i in range(5)] + [f"then {i},pos" for i in range(5)]
    files = _files(tmp_path, "text,label", rows, ["c,pos", "d,neg"])
    with pytest.raises(ConfigError) as err:  # a "2-class" model trained on one class before
        read_task(_task(files), max_train_samples=3)
    assert err.value.problems == [f"{files['train']}: the first 3 rows (max_train_samples 3): every training label is "
                                  "'neg': a classifier needs two classes or more: is the file sorted by label? "
                                  "shuffle it, or raise that limit"]
    assert len(read_task(_task(files), max_train_samples=6)[1]["train"]) == 6
    assert len(load_raw(_task(files), max_train_samples=3, trains=False)["train"]) == 3  # nothing trains on it
    scores = _files(tmp_path / "s", "text,label", ["a,1.5", "b,2.5"], ["c,3.5", "d,3.5", "e,1.0"])
    with pytest.raises(ConfigError, match="the first 2 rows \\(max_eval_samples 2\\): every validation score is 3.5: "
                                          "pearson is undefined on a constant"):
        read_task(_task(scores, problem_type="regression"), max_eval_samples=2)


def test_a_cut_shows_the_classes_and_rows_it_keeps(tmp_path):
    # A file sorted by class, cut to its first rows: the task line showed the whole file's counts and classes.
    rows = [f"t {i},{label}" for label in ("alarm", "balance", "card") for i in range(5)]
    task, splits = read_task(_task(_files(tmp_path, "text,label", rows, rows[:3] + rows[-3:])),
                             max_train_samples=8, max_eval_samples=4)
    assert len(splits["train"]) == 8 and task.class_counts == (5, 3, 0)
    line = task.describe()
    assert "3 classes: alarm (5), balance (3), card (0)" in line, line
    assert "8 train / 4 validation examples (the first rows of 15 / 6: max_train_samples 8, max_eval_samples 4)" in line


def test_the_search_preflight_reads_each_task_with_the_trials_cuts(tmp_path):
    from istar_tune.search.preflight import resolve_data

    rows = [f"t {i},{label}" for i in range(6) for label in ("neg", "pos")]
    task = _task(_files(tmp_path, "text,label", rows, rows))
    seen: list = []
    resolved, problems = resolve_data([task], None, limits=(4, 2), seen=seen)
    assert not problems and (resolved[0].train_examples, resolved[0].eval_examples) == (12, 12)  # the whole files
    assert "4 train / 2 validation examples (the first rows of 12 / 12" in seen[0].describe()
    _, problems = resolve_data([task], None, limits=(1, None))  # a cut that leaves one class: said before any trial
    assert any("every training label is 'neg'" in p and "max_train_samples 1" in p for p in problems), problems


def test_validation_rows_that_are_training_rows_too_are_counted_in_the_task_line(tmp_path):
    rows = [f"sentence {i},{'ab'[i % 2]}" for i in range(8)]
    task, _ = read_task(_task(_files(tmp_path, "text,label", rows, rows[:3] + ["unseen,a"])))
    assert task.leaked == 3 and "validation rows whose input is also a training row's: 3" in task.describe()
    clean, _ = read_task(_task(_files(tmp_path / "clean", "text,label", rows, ["unseen,a", "other,b"])))
    assert clean.leaked == 0 and "also a training row's" not in clean.describe()


def test_a_save_to_disk_folder_and_an_arrow_file_are_named_with_the_way_to_files(tmp_path):
    import datasets

    data = datasets.Dataset.from_dict({"text": ["a", "b"], "label": [0, 1]})
    data.save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(ConfigError, match="is a folder saved by datasets' save_to_disk, not a file: .*to_parquet"):
        read_task(task_from_mapping({"name": "own", "train": "saved", "validation": "saved", "format": "parquet"},
                                    tmp_path))
    arrow = next((tmp_path / "saved").glob("*.arrow"))
    (tmp_path / "train.csv").write_bytes(b"ARROW1\x00\x00" + arrow.read_bytes()[8:])  # a feather file named .csv
    (tmp_path / "dev.csv").write_text("text,label\na,0\n")
    with pytest.raises(DataError, match="an Arrow \\(feather\\) file, not a csv file"):
        read_task(task_from_mapping({"name": "own", "train": "train.csv", "validation": "dev.csv"}, tmp_path))


def _part(path, rows, header="text,label"):
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def test_a_split_in_parts_is_read_in_order_joined_and_checksummed_by_part(tmp_path):
    first = _part(tmp_path / "train-1.csv", [f"first {i},{'ab'[i % 2]}" for i in range(6)])
    second = _part(tmp_path / "train-2.csv", [f"second {i},{'abc'[i % 3]}" for i in range(6)])
    _part(tmp_path / "dev.csv", ["one,a", "two,b", "three,c"])
    definition = {"name": "own", "train": "train-*.csv", "validation": "dev.csv"}
    resolved, raw = read_task(task_from_mapping(definition, tmp_path, source="own.yaml"))
    assert raw["train"]["text"] == [f"first {i}" for i in range(6)] + [f"second {i}" for i in range(6)]
    assert resolved.label_names == ("a", "b", "c") and resolved.class_counts == (5, 5, 2)
    # Each part is in the split's checksum: a changed second part is a changed split.
    second.write_text(second.read_text() + "second 6,a\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="train file .*train-1.csv \\+ .*train-2.csv.*: changed since the task"):
        read_task(resolved)
    assert first.exists()


def test_a_problem_in_a_split_in_parts_names_every_part_and_how_rows_are_counted(tmp_path):
    _part(tmp_path / "a.csv", ["x,a", "y,b"])
    _part(tmp_path / "b.csv", ["z,a", ",b"])
    _part(tmp_path / "dev.csv", ["one,a", "two,b"])
    task = task_from_mapping({"name": "own", "train": ["a.csv", "b.csv"], "validation": "dev.csv"}, tmp_path,
                             source="own.yaml")
    with pytest.raises(ConfigError) as caught:
        read_task(task)
    said = str(caught.value)
    assert "a.csv + " in said
    assert "b.csv (rows counted across the 2 files, in this order): rows 4: text field 'text' is empty" in said


def test_parts_whose_headers_or_fields_differ_are_refused_naming_the_part(tmp_path):
    _part(tmp_path / "a.csv", ["x,a", "y,b"])
    _part(tmp_path / "b.csv", ["z,a", "w,b"], header="sentence,label")
    _part(tmp_path / "dev.csv", ["one,a", "two,b"])
    task = task_from_mapping({"name": "own", "train": ["a.csv", "b.csv"], "validation": "dev.csv"}, tmp_path,
                             source="own.yaml")
    with pytest.raises(ConfigError, match="b.csv and .*dev.csv name their columns differently \\(sentence, label "
                                          "against text, label\\)"):
        read_task(task)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["x", "y"], "label": ["a", "b"]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"text": ["z", "w"], "label": ["a", "b"], "score": [1, 2]}), tmp_path / "b.parquet")
    pq.write_table(pa.table({"text": ["one", "two"], "label": ["a", "b"]}), tmp_path / "dev.parquet")
    task = task_from_mapping({"name": "own", "train": "*[ab].parquet", "validation": "dev.parquet"}, tmp_path,
                             source="own.yaml")
    with pytest.raises(DataError, match="b.parquet: fields text, label, score, but .*a.parquet has text, label: a "
                                        "split's files hold the same fields"):
        read_task(task)
    pq.write_table(pa.table({"text": ["z", "w"], "label": [1, 2]}), tmp_path / "b.parquet")
    with pytest.raises(DataError, match="a split's files read their fields as different kinds \\(.*a.parquet: text "
                                        "Value\\('string'\\), label Value\\('string'\\); .*b.parquet: .*label "
                                        "Value\\('int64'\\)"):
        read_task(task)
    pq.write_table(pa.table({"text": ["z", "w"], "label": ["b", "a"]}), tmp_path / "b.parquet")
    assert read_task(task)[1]["train"]["label"] == [0, 1, 1, 0]
