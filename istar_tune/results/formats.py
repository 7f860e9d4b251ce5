"""Writing a table: Markdown, CSV, LaTeX or Parquet. CSV and Parquet take a table's typed form where it has one
(``attrs["typed"]``: numbers in their own columns, not formatted cells), Parquet with the caption in its schema
metadata (``caption``); LaTeX escapes every cell and writes our
symbols (±, λ, †, …) as LaTeX does.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd

from istar_tune.errors import ConfigError
from istar_tune.markdown import markdown

FORMATS = ("md", "csv", "latex", "parquet")


def render(table: pd.DataFrame, fmt: str, output: str | Path | None = None, caption: str = "") -> str | None:
    """The table as text (md, csv, latex), or written to ``output`` (required for parquet, optional otherwise)."""
    if output is not None and Path(output).is_dir():
        raise ConfigError(f"--output {str(output)!r} is a folder: name a file, e.g. {str(Path(output) / 'table.md')!r}")
    if output is not None and not Path(output).parent.is_dir():
        raise ConfigError(f"--output {str(output)!r}: the folder {str(Path(output).parent)!r} does not exist; "
                          "create it or write elsewhere")
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt in ("csv", "parquet") and "typed" in table.attrs:
        table = table.attrs["typed"]  # numbers in typed columns, not the formatted cells
    if fmt == "parquet":
        if output is None:
            raise ConfigError("parquet is binary: give --output FILE.parquet")
        import pyarrow as pa
        import pyarrow.parquet as pq

        arrow = pa.Table.from_pandas(table, preserve_index=False)
        if caption:  # what the numbers are and how they were chosen travels with them
            arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}), b"caption": caption.encode()})
        pq.write_table(arrow, str(output))
        return None
    if fmt == "csv":
        buffer = io.StringIO()
        table.to_csv(buffer, index=False)
        text = buffer.getvalue()
    elif fmt == "latex":
        text = latex(table, caption)
    else:
        text = markdown(table) + (f"\n\n{caption}\n" if caption else "\n")
    if output is not None:
        Path(output).write_text(text, encoding="utf-8")
        return None
    return text


LATEX_SYMBOLS = {"±": r"$\pm$", "λ": r"$\lambda$", "ζ": r"$\zeta$", "α": r"$\alpha$", "†": r"$^\dagger$",
                 "—": "---", "Δ": r"$\Delta$", "→": r"$\rightarrow$", "×": r"$\times$", "−": "-", "≥": r"$\geq$",
                 "*": r"$^*$", "…": r"\ldots{}"}
"""Characters of our cells that LaTeX's default fonts lack, as LaTeX writes them."""


def latex_text(value) -> str:
    """A cell or caption as LaTeX source: its special characters escaped, its symbols as LaTeX writes them,
    Markdown's backticks dropped."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "---"
    text = _float(value) if isinstance(value, float) else str(value).replace("`", "")
    special = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
    text = "".join(special.get(c, c) for c in text)
    return "".join(LATEX_SYMBOLS.get(c, c) for c in text)


def latex(table: pd.DataFrame, caption: str = "") -> str:
    """A ``tabular`` (in a ``table`` with the caption) whose every cell is escaped by :func:`latex_text`."""
    header = " & ".join(latex_text(c) for c in table.columns) + r" \\"
    body = [" & ".join(latex_text(v) for v in row) + r" \\" for row in table.itertuples(index=False)]
    lines = [r"\begin{tabular}{" + "l" * len(table.columns) + "}", r"\toprule", header, r"\midrule", *body,
             r"\bottomrule", r"\end{tabular}"]
    if caption:
        lines = [r"\begin{table}", *lines, r"\caption{" + latex_text(caption) + "}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _float(value: float) -> str:
    return f"{value:.4g}"
