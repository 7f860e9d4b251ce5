"""What every table shares: the papers' published values, transcribed from their text; the axes shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from istar_tune.results.groups import paper_results


def test_the_isolayer_papers_tables_are_transcribed_from_its_text():
    text = Path(__file__).resolve().parents[3] / "shared" / "docs" / "papers" / "isolayer.txt"
    if not text.is_file():
        pytest.skip("../shared/docs/papers/isolayer.txt is not beside the checkout")
    lines = text.read_text(encoding="utf-8").splitlines()
    models = {"BERT-base": "bert", "RoBERTa-L": "roberta-large"}
    # Table 3: "<task>\t<model>[+Isotropy]\t<IsoBN> (std)\t<IsoLayer> (std)\t<IsoBN EV>\t<IsoLayer EV>".
    start = next(i for i, line in enumerate(lines) if line.startswith("Dataset\tWiethou"))
    found, task = {}, None
    for line in lines[start + 1:start + 13]:
        cells = [c.strip() for c in line.split("\t")]
        task = cells[0].lower() or task
        model, _, layered = cells[1].partition("+")
        median, std = cells[3].rstrip(")").split(" (")
        found.setdefault(models[model], {}).setdefault(task, {})["isolayer" if layered else "finetuned"] = {
            "median": float(median), "std": float(std), "ev": [float(v) for v in cells[5].split("/")]}
    assert found == paper_results()["isolayer_table3"]
    # Table 2: "<task>\tFinetuned Language Model (LM)\t<bert> <IsoScore>\t<roberta> <IsoScore>", then "+ Isotropy".
    start = next(i for i, line in enumerate(lines) if line.startswith("Dataset\tMethod\tPerformance"))
    table2, task = {}, None
    for line in lines[start + 1:start + 10]:
        cells = [c.strip() for c in line.split("\t")]
        task = cells[0].lower() or task
        if cells[1].startswith("Improvement"):
            continue
        key = "isolayer" if "Isotropy Layer" in cells[1] else "finetuned"
        for model, (score, iso) in zip(("bert", "roberta-large"), (cells[2:4], cells[4:6])):
            table2.setdefault(model, {}).setdefault(task, {})[key] = {"score": float(score),
                                                                      "sentence_isoscore": float(iso)}
    assert table2 == paper_results()["isolayer_table2"]


def test_percent_follows_the_problem_type_and_axes_show_what_the_runs_hold():
    from istar_tune.results.groups import axes, percent
    from istar_tune.tracking import TrialRun

    assert percent("sst2", 0.91) == pytest.approx(91.0) and percent("squad", 88.5) == 88.5
    runs = [TrialRun("r", "t", "bert", "rte", "istar", "finished", {}, {}),
            TrialRun("s", "u", "bert", "sst2", "base", "finished", {}, {})]
    assert axes(runs, None, None, None) == (["bert"], ["sst2", "rte"], ["base", "istar"])  # the paper's order
    assert axes(runs, None, ["RTE"], None)[1] == ["rte"]
