"""The first page's comparisons are what their commands printed: the outputs ``benchmarks/comparison/run.sh`` kept
(the commands themselves take over an hour, so the suite reads their record) hold every table row the README shows,
and the README and docs/searching.md quote the one replay's recommendation those outputs end with. What the page
says of them is what the paired statistics of the record say (a scipy paired t-test on the logged seeds; no "above
Base" where the interval includes 0), the paper's own effects on both tasks are the shipped Table 1's, and the
second comparison is where the paper reports a gain: five seeds a method, λ −5 and −3 in its grid."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import yaml
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "benchmarks" / "comparison"
SECOND = RECORD / "minilm_stsb"
README = (ROOT / "README.md").read_text(encoding="utf-8")
SECTION = README.split("**Two real comparisons, measured.**", 1)[1].split("## Quick start", 1)[0]


def _rows(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.startswith("| minilm |")]


def test_every_row_the_first_page_shows_is_a_row_its_commands_printed():
    printed = {f"{folder.name}/{name}": _rows((folder / name).read_text(encoding="utf-8"))
               for folder in (RECORD, SECOND) for name in ("best.md", "seeds.md", "budget.md")}
    shown = _rows(SECTION)
    assert len(shown) >= 3 + 3 + 3 + 2 + 1, "SST-2's best, seeds and budget rows; STS-B's seeds and robust rows"
    for row in shown:
        assert any(row in rows for rows in printed.values()), row
    for name in ("comparison/best.md", "comparison/seeds.md", "comparison/budget.md", "minilm_stsb/seeds.md"):
        assert set(printed[name]) & set(shown), name  # each of these tables is shown, if in part


def test_the_readme_and_the_searching_page_quote_the_one_current_replay():
    replay = (RECORD / "replay.md").read_text(encoding="utf-8")
    line = next(found for found in replay.splitlines() if found.startswith("recommendation: "))
    said = line.split(" (replayed in ")[0].removeprefix("recommendation: ")
    searching = (ROOT / "docs" / "searching.md").read_text(encoding="utf-8")
    for page, text in (("README.md", SECTION), ("docs/searching.md", searching)):
        assert said in " ".join(text.split()), (page, said)
    assert not re.search(r"\b73 %", README + searching), "an older replay's figure is quoted"


def _paired_t(differences: np.ndarray) -> tuple[float, float, float]:
    test = stats.ttest_rel(differences, np.zeros(differences.size))
    found = test.confidence_interval(0.95)
    return found.low, found.high, test.pvalue


def _logged_seeds(log: str, metric: str) -> dict[str, dict[int, float]]:
    scores: dict[str, dict[int, float]] = {}
    for value, method, seed in re.findall(rf"done: (?:held-out {metric} [\d.]+ \(dev )?(?:{metric} )?([\d.]+)\)?"
                                          rf"(?: at epoch \d)? — (\w+) [^\n]*? s(\d) \(", log):
        scores.setdefault(method, {})[int(seed)] = 100 * float(value)
    return scores


def _signed(value: float) -> str:
    return f"{value:.2f}".replace("-", "−")


def _effect(value: float) -> str:
    return f"{round(value, 2) + 0.0:+.2f}".replace("-", "−")


def test_the_sst2_sentences_are_the_paired_statistics_of_the_logged_seeds():
    scores = _logged_seeds((RECORD / "seeds.log").read_text(encoding="utf-8"), "accuracy")
    said = " ".join(SECTION.split())
    p_values = []
    for method, label in (("cosreg", "CosReg"), ("istar", "I-STAR")):
        d = np.array([scores[method][s] - scores["base"][s] for s in (1, 2, 3)])
        low, high, p = _paired_t(d)
        p_values.append(p)
        assert f"{label} − Base {_effect(d.mean())}" in said, label
        assert f"[{_signed(low)}, {_signed(high)}]" in said and f"p = {p:.2g}" in said, label
    assert f"{min(1.0, 2 * min(p_values)):.2g}" in said  # Holm over the two comparisons
    assert "CosReg above Base" not in said.replace("CosReg was above Base", "")


def _paper_effects(task: str, method: str) -> str:
    table = json.loads((ROOT / "istar_tune" / "paper_results.json").read_text(encoding="utf-8"))["seeds"]
    effects = {model: table[model][method][task][0][0] - table[model]["base"][task][0][0]
               for model in ("albert", "bert", "distilbert")}
    return (f"{_effect(effects['albert'])} (ALBERT), {_effect(effects['bert'])} (BERT) and "
            f"{_effect(effects['distilbert'])} (DistilBERT)")


def test_the_first_page_prints_the_papers_own_effects_on_both_tasks():
    said = " ".join(SECTION.split())
    for task in ("sst2", "stsb"):
        for method in ("istar", "cosreg"):
            assert _paper_effects(task, method) in said, (task, method)


def test_the_second_comparison_is_five_seeds_where_the_paper_reports_a_gain():
    grid = yaml.safe_load((ROOT / "search_spaces" / "minilm_stsb.yaml").read_text(encoding="utf-8"))
    assert {-5, -3} <= set(grid["method_hyperparameters"]["istar"]["lam"]["grid"]) and grid["tasks"] == ["stsb"]
    seeds = yaml.safe_load((ROOT / "search_spaces" / "minilm_stsb_seeds.yaml").read_text(encoding="utf-8"))
    assert seeds["seeds"] == [1, 2, 3, 4, 5] and seeds["best_of"] == ["minilm-stsb"]
    scores = _logged_seeds((SECOND / "seeds.log").read_text(encoding="utf-8"), "pearson")
    assert set(scores) == set(seeds["methods"]) and all(len(v) == 5 for v in scores.values())
    printed = (SECOND / "seeds.md").read_text(encoding="utf-8")
    robust = [row for row in _rows(printed) if re.match(r"\| minilm \| [\w-]+ \| stsb \|", row)]
    said = " ".join(SECTION.split())
    assert robust
    for row in robust:
        cells = [c.strip() for c in row.strip("|").split("|")]
        method, n, low, high = cells[1], int(cells[3]), float(cells[5]), float(cells[6])
        assert n == 5, row
        stated = f"{method} − Base {_effect(float(cells[4]))} points, 95 % paired t-interval [{_signed(low)}, "
        assert stated + f"{_signed(high)}]" in said, method
        if low <= 0 <= high:  # the page says no more than the interval supports
            assert f"{method} above Base" not in said and f"{method} is above Base" not in said, method
    power = next(row for row in _rows(printed) if row.startswith("| minilm | stsb | 5 |"))
    detectable, for_half = [c.strip() for c in power.strip("|").split("|")][4:6]
    assert f"Five seeds detect {detectable} points with 80 % power" in said
    assert f"half a point would need {for_half}" in said
    assert 'bash benchmarks/comparison/run.sh "$GLUE_DIR" comparison minilm_stsb' in README
