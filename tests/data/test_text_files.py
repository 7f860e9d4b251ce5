"""What every text format shares: a binary file under a text name said for what it is, a byte that does not decode
named by its line."""

from __future__ import annotations

import bz2
import gzip
import lzma

import pytest

from istar_tune.data.reading import read_task
from istar_tune.data.text_files import read_text, refuse_binary, undecodable
from istar_tune.errors import DataError


@pytest.mark.parametrize(("head", "said"), [
    (b"PK\x03\x04\x14\x00\x06\x00", "an Excel workbook (.xlsx) or a zip archive, not a csv file: save it as CSV"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an Excel 97-2003 workbook (.xls), not a csv file"),
    (b"PAR1\x15\x04\x15\x10", "a parquet file, not a csv file: name it .parquet, or give format: parquet"),
    (b"\x1f\x8b\x08\x00\x00\x00\x00\x00", "a gzip-compressed file, not a csv file: decompress it"),
])
def test_a_binary_file_under_a_text_name_says_what_it_is(tmp_path, head, said, split_files, file_task):
    files = split_files(tmp_path, "text,label", ["a,1", "b,0"], ["c,1"])
    files["train"].write_bytes(head + bytes(200))
    with pytest.raises(DataError) as err:  # "BadZipFile: File is not a zip file" for a workbook before
        read_task(file_task(files))
    assert str(err.value).startswith(f"{files['train']}: {said}")  # some go on with the fix


def test_a_byte_that_does_not_decode_is_named_by_its_line(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes("first line\nsecond caf\u00e9\n".encode("latin-1"))
    assert undecodable(path, "utf-8") == ("line 2: byte 0xe9 cannot be decoded as utf-8 (the file is not utf-8: give "
                                          "its encoding in the task's definition, e.g. encoding: latin-1)")
    assert undecodable(path, "latin-1") == ""
    with pytest.raises(DataError, match=r"t.txt:2: not UTF-8 text \(byte 0xe9 at offset 21\); save the file as UTF-8"):
        read_text(path)
    assert read_text(path, "latin-1").endswith("caf\u00e9\n")


def test_a_file_that_mixes_encodings_is_not_told_to_try_latin_1(tmp_path):
    # Following "encoding: latin-1" on such a file trained 'nÃ©gatif' beside 'négatif'.
    path = tmp_path / "mixed.csv"
    path.write_bytes("text,label\na,n\u00e9gatif\n".encode() + "b,n\u00e9gatif\n".encode("latin-1"))
    said = undecodable(path, "utf-8")
    assert said.startswith("line 3: byte 0xe9") and "mixes encodings" in said and "e.g. encoding: latin-1" not in said


@pytest.mark.parametrize(("data", "named"), [
    (bz2.compress(b"text,label\n"), "a bzip2-compressed file"), (lzma.compress(b"text,label\n"), "an xz-compressed"),
    ("text,label\n".encode("utf-16"), "UTF-16 text"),
    (gzip.compress(b"text,label\n", mtime=0), "a gzip-compressed file"),  # mtime 0: each xdist worker's ids alike
])
def test_a_compressed_or_utf16_file_is_named_as_such_never_told_latin_1(tmp_path, data, named):
    path = tmp_path / "train.csv"
    path.write_bytes(data)
    with pytest.raises(DataError) as err:
        refuse_binary(path, "csv")
    assert named in str(err.value) and "latin-1" not in str(err.value)
