"""What every text format shares: a file's text with an undecodable byte named by its line, and a binary file (an
Excel workbook saved as ``.csv``, parquet, gzip) refused before a text parser reads it as rows."""

from __future__ import annotations

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
    """Where a file first fails to decode: ``line 51: byte 0xf0 ...`` ("" if it decodes)."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode(encoding)
            except UnicodeDecodeError as err:
                return f"line {number}: byte 0x{line[err.start:err.start + 1].hex()} cannot be decoded as {encoding}"
    return ""


MAGIC = ((b"PK\x03\x04", "an Excel workbook (.xlsx) or a zip archive", "save it as CSV (in Excel: Save As, CSV UTF-8), "
          "or unzip it"),
         (b"\xd0\xcf\x11\xe0", "an Excel 97-2003 workbook (.xls)", "save it as CSV (in Excel: Save As, CSV UTF-8)"),
         (b"PAR1", "a parquet file", "name it .parquet, or give format: parquet"),
         (b"\x1f\x8b", "a gzip-compressed file", "decompress it (gunzip)"))
"""A file's first bytes that say it is not text, what it is, and the way out."""


def refuse_binary(path: Path, format_name: str) -> None:
    """A binary file under a text format's name refused, saying what it is."""
    with open(path, "rb") as handle:
        head = handle.read(8)
    for magic, what, fix in MAGIC:
        if head.startswith(magic):
            raise DataError(f"{path}: {what}, not a {format_name} file: {fix}")
