"""The one Markdown table renderer."""

from __future__ import annotations

import math

import pandas as pd

from istar_tune.markdown import MISSING, markdown


def test_cells_are_escaped_missing_values_marked_and_floats_short():
    table = pd.DataFrame([{"group": "a|b", "score": 0.123456, "n": 3, "x": None},
                          {"group": "c", "score": math.nan, "n": 4, "x": pd.NA}])
    assert markdown(table).splitlines() == [
        "| group | score | n | x |", "| --- | --- | --- | --- |",
        f"| a\\|b | 0.1235 | 3 | {MISSING} |", f"| c | {MISSING} | 4 | {MISSING} |"]
