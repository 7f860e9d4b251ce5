"""Delimited files: every row's field count against its names, the header read as the file writes it (a BOM, quoted
cells, another separator)."""

from __future__ import annotations

import pytest

from istar_tune.data.delimited import header, read_delimited
from istar_tune.data.reading import read_task
from istar_tune.errors import DataError


@pytest.mark.parametrize(("suffix", "header", "rows", "said"), [
    ("tsv", "text\tlabel", ['"a\tb"\t1', "c\t0"], "rows 1: 3 fields where the header has 2: a tab inside a cell? a "
                                                  "tsv file is read unquoted"),   # an index column shifted them
    ("csv", "text,label", ["a,1", "b, c,0", "d,1", "e"], "rows 2, 4: 1 or 3 fields where the header has 2: a ',' "
                                                         "inside a cell that is not quoted? quote that cell"),
    ("csv", "text,label", ["a, b,1", "c, d,0"], "rows 1, 2: 3 fields where the header has 2"),  # pandas: an index
])
def test_a_row_whose_field_count_differs_from_its_names_is_refused(tmp_path, suffix, header, rows, said, split_files,
                                                                   file_task):
    with pytest.raises(DataError) as err:
        read_task(file_task(split_files(tmp_path, header, rows, rows, suffix)))
    assert said in str(err.value) and str(err.value).startswith(str(tmp_path / f"train.{suffix}"))
    headerless = split_files(tmp_path / "bare", "a,1", ["b,0", "c,d,1"], ["e,1"])
    with pytest.raises(DataError, match="rows 3: 3 fields where the column_names give 2"):
        read_task(file_task(headerless, column_names=["text", "label"]))


def test_the_header_is_read_as_the_file_writes_it(tmp_path, split_files, file_task):
    files = split_files(tmp_path, '\ufeff"the text";label', ["a;1", "b;0"], ["c;1"])
    task = file_task(files, separator=";")
    assert header(task, files["train"]) == ["the text", "label"]
    tsv = split_files(tmp_path / "t", '"quoted"\tlabel', ["a\t1"], ["c\t1"], "tsv")
    assert header(file_task(tsv), tsv["train"]) == ['"quoted"', "label"]  # a tsv file is read unquoted
    assert read_task(task)[0].label_names == ("0", "1")


def test_a_cell_is_the_text_written_and_a_quote_never_closed_is_one_line(tmp_path, split_files, file_task):
    files = split_files(tmp_path, "text,code,label", ["NA,007,1e3", '"a, quoted ""cell""",,2', "nan,1.50,1000"],
                   ["x,1,2"])
    task = file_task(files, text_fields=["text"])
    assert read_delimited(task, files["train"]) == {"text": ["NA", 'a, quoted "cell"', "nan"],
                                                    "code": ["007", "", "1.50"], "label": ["1e3", "2", "1000"]}
    resolved, splits = read_task(task)  # never nulls; the label rule reads the numbers: 1e3 and 1000 are one class
    assert resolved.label_names == ("2", "1000") and splits["train"]["label"] == [1, 0, 1]
    for row, line in (('"never closed,1', 3), ('"said" twice,1', 2)):  # the csv module's line: after the header
        broken = split_files(tmp_path / f"b{line}", "text,label", [row, "b,0"], ["c,1"])
        with pytest.raises(DataError, match=rf"train.csv: not a readable csv file: line {line}: .*a quote inside a "
                                            r"quoted cell, or one never closed\?"):
            read_task(file_task(broken))
    headed = split_files(tmp_path / "h", '"text"x,label', ["a,1"], ["c,1"])  # the header itself: one line too
    with pytest.raises(DataError, match="line 1: ',' expected after"):
        read_task(file_task(headed))


def test_an_excel_export_with_every_cell_quoted_after_a_byte_order_mark_is_read(tmp_path, split_files, file_task):
    # Refused as "no field 'text' (its fields: "text", label)": the BOM made the first quote literal.
    rows = ['"good film","pos"', '"bad film","neg"']
    files = split_files(tmp_path, '\ufeff"text","label"', rows, rows)
    task, splits = read_task(file_task(files))
    assert task.label_names == ("neg", "pos") and splits["train"]["text"] == ["good film", "bad film"]


def test_excels_separator_line_is_read_as_the_separator_it_names(tmp_path, split_files, file_task):
    rows = ['"good; film";pos', "bad, film;neg"]
    files = split_files(tmp_path, "sep=;\ntext;label", rows, rows)
    task, splits = read_task(file_task(files))
    assert splits["train"]["text"] == ["good; film", "bad, film"] and task.label_names == ("neg", "pos")
    with pytest.raises(DataError, match="names the separator ';', but the definition gives separator: '|'"):
        read_task(file_task(files, separator="|"))


def test_a_semicolon_file_failing_on_a_quote_is_told_its_separator(tmp_path, split_files, file_task):
    files = split_files(tmp_path, "text;label", ['"say "hi"";pos', "b;neg"], ["c;pos"])
    with pytest.raises(DataError, match="its header holds ';' and no ',': a ';'-separated file\\? give separator: ';'"):
        read_task(file_task(files))


def test_a_lone_carriage_return_in_a_cell_is_named_as_such(tmp_path, split_files, file_task):
    files = split_files(tmp_path, "text,label", ["good\rfilm,pos", "bad film,neg"], ["fine,pos"])
    with pytest.raises(DataError, match="line 2: a carriage return .* alone inside a cell ends the row there"):
        read_task(file_task(files))
