"""What every text format shares: a file's text with an undecodable byte named by its line, and a binary file (an
Excel workbook saved as ``.csv``, parquet, gzip) refused before a text parser reads it as rows."""

from __future__ import annotations

import re
from pathlib import Path

from istar_tune.errors import DataError


def read_text(path: Path, encoding: str = "utf-8") -> str:
    """A data file's text; a file that does not decode is reported with its line and the offending byte."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        name = "UTF-8" if encoding.lower().startswith("utf-8") else encoding
        raise DataError(f"{path}:{line}: not {name} text (byte 0x{raw[err.start]:02x} at offset {err.start}); "
                        f"save the file as {name}") from None


def undecodable(path: Path, encoding: str) -> str:
    """Where a file first fails to decode, and what to do: ``line 51: byte 0xf0 ... : give its encoding``; a file
    that holds UTF-8 characters elsewhere is said to mix encodings (another encoding would misread those: ``é`` as
    ``Ã©``); "" if it decodes."""
    raw = Path(path).read_bytes()
    try:
        raw.decode(encoding)
        return ""
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        where = f"line {line}: byte 0x{raw[err.start:err.start + 1].hex()} cannot be decoded as {encoding}"
    utf8 = encoding.lower().replace("-", "") in ("utf8", "utf8sig")
    if utf8 and _holds_utf8(raw):
        return (f"{where}, while other lines hold UTF-8 characters: the file mixes encodings; re-save those lines as "
                "UTF-8 (no single encoding reads it right: latin-1 would turn its UTF-8 'é' into 'Ã©')")
    return (f"{where} (the file is not {encoding}: give its encoding in the task's definition, e.g. encoding: "
            "latin-1)")


def _holds_utf8(raw: bytes) -> bool:
    """Whether a file holds a well-formed multi-byte UTF-8 character (a lead byte and its continuation bytes)."""
    return re.search(rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}", raw) is not None


MAGIC = ((b"PK\x03\x04", "an Excel workbook (.xlsx) or a zip archive", "save it as CSV (in Excel: Save As, CSV UTF-8), "
          "or unzip it"),
         (b"\xd0\xcf\x11\xe0", "an Excel 97-2003 workbook (.xls)", "save it as CSV (in Excel: Save As, CSV UTF-8)"),
         (b"PAR1", "a parquet file", "name it .parquet, or give format: parquet"),
         (b"\x1f\x8b", "a gzip-compressed file", "decompress it (gunzip)"),
         (b"BZh", "a bzip2-compressed file", "decompress it (bunzip2)"),
         (b"\xfd7zXZ\x00", "an xz-compressed file", "decompress it (unxz)"),
         (b"\x28\xb5\x2f\xfd", "a zstd-compressed file", "decompress it (unzstd)"),
         (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive", "extract it"),
         (b"ARROW1", "an Arrow (feather) file", "convert it: pyarrow.feather.read_table(path).to_pandas()"
          ".to_parquet('train.parquet'), then give format: parquet"))
"""A file's first bytes that say it is not text, what it is, and the way out."""


UTF16 = (b"\xff\xfe", b"\xfe\xff")
"""The byte-order marks of UTF-16 text (Excel's "Unicode Text" export)."""


def refuse_binary(path: Path, format_name: str, encoding: str = "utf-8") -> None:
    """A binary file under a text format's name refused, saying what it is; UTF-16 text read as UTF-8 named as such."""
    with open(path, "rb") as handle:
        head = handle.read(8)
    for magic, what, fix in MAGIC:
        if head.startswith(magic):
            raise DataError(f"{path}: {what}, not a {format_name} file: {fix}")
    if head.startswith(UTF16) and not encoding.lower().replace("-", "").startswith("utf16"):
        raise DataError(f"{path}: UTF-16 text (it begins with a UTF-16 byte-order mark), read as {encoding}: give "
                        "encoding: utf-16 in the task's definition, or save it as UTF-8")
