"""JSON and JSON Lines parsed once, by one parser: lines split at \\n only, a guard that never lets a builder coerce,
and every shape that could be two things refused in one line that names it."""

from __future__ import annotations

import json

import pytest

from istar_tune.data.json_rows import json_rows
from istar_tune.data.reading import read_task
from istar_tune.errors import ConfigError, DataError
from istar_tune.tasks import task_from_mapping


def _task(tmp_path, train: str, dev: str, suffix: str = "jsonl", **extra):
    files = {}
    for split, text in (("train", train), ("validation", dev)):
        files[split] = tmp_path / f"{split}.{suffix}"
        files[split].write_text(text, encoding="utf-8")
    return task_from_mapping({"name": "own", "train": str(files["train"]), "validation": str(files["validation"]),
                              **extra}, source="own.yaml")


def _lines(rows) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_a_line_separator_inside_a_string_does_not_split_a_row_and_placeholders_stay_refused(tmp_path, separator):
    rows = [{"text": f"first{separator}second {i}", "label": i % 2} for i in range(6)] + [{"text": "z", "label": "-"}]
    with pytest.raises(ConfigError) as err:  # datasets' builder split these rows and read the '-' as class 0
        read_task(_task(tmp_path, _lines(rows), _lines(rows[:2])))
    assert err.value.problems == [f"{tmp_path / 'train.jsonl'}: rows 7: '-' is not a label: fix those rows, or drop "
                                  "them with drop_labels: ['-'] in the task's definition"]
    resolved, raw = read_task(_task(tmp_path, _lines(rows), _lines(rows[:2]), drop_labels=["-"]))
    assert raw["train"]["text"][:2] == [f"first{separator}second 0", f"first{separator}second 1"]
    assert raw["train"]["label"] == [0, 1, 0, 1, 0, 1] and resolved.dropped == (1, 0)


@pytest.mark.parametrize(("text", "said"), [
    ('{"text": "a", "label": 0},\n{"text": "b", "label": 1},\n',
     "line 1: not a JSON object: Extra data at column 26 (a trailing comma: JSON Lines holds one object a line"),
    ('[{"text": "a", "label": 0},\n {"text": "b", "label": 1},\n]\n',
     "line 3 column 1: Expecting value (a trailing comma before the closing bracket)"),
    ('{"text": ["a", "b"], "label": [0, 1]}', "a mapping of columns ('text', 'label', each a list), not rows"),
    ('{"version": 2, "data": [{"text": "a", "label": 0}]}', "the rows sit under the key 'data'"),
    ('{"text": "a", "label": 0}\n[1, 2]\n', "line 2 holds a list, not an object"),
    ('[{"text": "a", "label": 0}, "b"]', "rows 2 of the list hold text, not objects"),
])
def test_a_shape_that_is_not_rows_is_refused_naming_it(tmp_path, text, said):
    path = tmp_path / "train.jsonl"
    path.write_text(text)
    with pytest.raises(DataError) as err:
        json_rows(path, "utf-8")
    assert said in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(str(path))


def test_rows_as_a_list_as_lines_and_as_one_object(tmp_path):
    rows = [{"text": "a\u2028b", "label": 0}, {"text": "c", "label": 1}]
    for text in (json.dumps(rows), _lines(rows), "\ufeff" + _lines(rows).replace("\n", "\r\n") + "\n\n"):
        (tmp_path / "f.json").write_text(text)
        assert json_rows(tmp_path / "f.json", "utf-8") == rows
    (tmp_path / "f.json").write_text(json.dumps(rows[0]))
    assert json_rows(tmp_path / "f.json", "utf-8") == rows[:1]


def test_a_file_that_does_not_decode_names_its_line_and_byte(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_bytes(b'{"text": "a", "label": 0}\n{"text": "caf\xe9", "label": 1}\n')
    with pytest.raises(DataError, match="line 2: byte 0xe9 cannot be decoded as utf-8 .*encoding: latin-1"):
        json_rows(path, "utf-8")


def test_pandas_default_to_json_layout_is_named_with_the_call_that_writes_rows(tmp_path):
    columns = {"text": {"0": "good", "1": "bad"}, "label": {"0": "pos", "1": "neg"}}  # DataFrame.to_json(path)
    with pytest.raises(DataError, match=r"pandas' to_json layout \(orient='columns'.*orient='records', lines=True"):
        read_task(_task(tmp_path, json.dumps(columns), json.dumps(columns), suffix="json"))


def test_a_multi_label_file_is_refused_saying_only_that(tmp_path):
    # The refusal added "drop_labels [] drops every row", which nobody had written.
    rows = _lines([{"text": f"t{i}", "label": ["a", "b"]} for i in range(3)])
    with pytest.raises(ConfigError) as err:
        read_task(_task(tmp_path, rows, rows))
    assert err.value.problems and all("multi-label classification is not supported" in p and "drop_labels" not in p
                                      for p in err.value.problems), err.value.problems
