"""The first page's comparison is what its commands printed: the outputs ``benchmarks/comparison/run.sh`` kept
(the commands themselves take over an hour, so the suite reads their record) hold every table row the README shows,
and the README and docs/searching.md quote the one replay's recommendation those outputs end with."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "benchmarks" / "comparison"
README = (ROOT / "README.md").read_text(encoding="utf-8")
SECTION = README.split("**A real comparison, measured.**", 1)[1].split("## Quick start", 1)[0]


def _rows(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.startswith("| minilm |")]


def test_every_row_the_first_page_shows_is_a_row_its_commands_printed():
    printed = {name: _rows((RECORD / name).read_text(encoding="utf-8"))
               for name in ("best.md", "seeds.md", "budget.md")}
    shown = _rows(SECTION)
    assert len(shown) >= 3 + 3 + 2, "the best, seeds, robust and budget rows"
    for row in shown:
        assert any(row in rows for rows in printed.values()), row
    for name, rows in printed.items():  # each table is shown, if in part
        assert set(rows) & set(shown), name


def test_the_readme_and_the_searching_page_quote_the_one_current_replay():
    replay = (RECORD / "replay.md").read_text(encoding="utf-8")
    line = next(found for found in replay.splitlines() if found.startswith("recommendation: "))
    said = line.split(" (replayed in ")[0].removeprefix("recommendation: ")
    searching = (ROOT / "docs" / "searching.md").read_text(encoding="utf-8")
    for page, text in (("README.md", SECTION), ("docs/searching.md", searching)):
        assert said in " ".join(text.split()), (page, said)
    assert not re.search(r"\b73 %", README + searching), "an older replay's figure is quoted"
