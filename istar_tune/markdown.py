"""Markdown tables, one renderer for every table the package shows: the results tables, ``status``, the demo and
the search's own MLflow description."""

from __future__ import annotations

import math

import pandas as pd

MISSING = "—"
"""How a missing cell is shown."""


def markdown(table: pd.DataFrame) -> str:
    def cell(value) -> str:
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            return MISSING
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value).replace("|", "\\|")

    header = "| " + " | ".join(str(c) for c in table.columns) + " |"
    rule = "| " + " | ".join("---" for _ in table.columns) + " |"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([header, rule, *body])
