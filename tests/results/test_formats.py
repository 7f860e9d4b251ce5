from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
import pytest

from istar_tune.errors import ConfigError
from istar_tune.results.formats import latex, latex_text, markdown, render


def test_latex_escapes_every_special_character_and_writes_our_symbols_as_latex_does():
    assert latex_text("93.00 ± 0.16 [92.80, 93.20] * †") == r"93.00 $\pm$ 0.16 [92.80, 93.20] $^*$ $^\dagger$"
    assert (latex_text("tiny_bert 50% & `choose_by: holdout` λ | ζ — Δ") ==
            r"tiny\_bert 50\% \& choose\_by: holdout $\lambda$ | $\zeta$ --- $\Delta$")
    assert latex_text(None) == "---" and latex_text(float("nan")) == "---" and latex_text(0.00012345) == "0.0001234"
    table = pd.DataFrame({"model_name": ["bert"], "RTE": ["62.53 ± 0.70 †"]})
    text = latex(table, caption="Mean ± std; † I-STAR > Base")
    assert r"model\_name & RTE \\" in text and r"bert & 62.53 $\pm$ 0.70 $^\dagger$ \\" in text
    assert r"\caption{Mean $\pm$ std; $^\dagger$ I-STAR > Base}" in text
    assert not set(text) & set("±†λζ—")


def test_csv_and_parquet_take_a_tables_typed_form(tmp_path):
    shown = pd.DataFrame({"model": ["bert"], "RTE": ["62.53 ± 0.70"]})
    shown.attrs["typed"] = pd.DataFrame({"model": ["bert"], "task": ["rte"], "value": [62.53], "std": [0.7]})
    assert render(shown, "csv") == "model,task,value,std\nbert,rte,62.53,0.7\n"
    render(shown, "parquet", tmp_path / "t.parquet")
    assert pq.read_table(tmp_path / "t.parquet").column("value").to_pylist() == [62.53]
    assert "62.53 ± 0.70" in markdown(shown)  # people read the formatted cells
    with pytest.raises(ConfigError, match="give --output"):
        render(shown, "parquet")
    with pytest.raises(ConfigError, match="unknown format 'xlsx'"):
        render(shown, "xlsx")
