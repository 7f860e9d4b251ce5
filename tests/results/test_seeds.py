"""The paper's Table 1 from seed runs: cells, intervals, marks, captions, IsoLayer's rows, typed exports."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from scipy.stats import sem, t, ttest_ind
from statsmodels.stats.multitest import multipletests

from istar_tune import tracking
from istar_tune.cli import main
from istar_tune.errors import ConfigError
from istar_tune.results.formats import render
from istar_tune.results.seeds import significant_tasks
from istar_tune.results.tables import build_table


def test_seeds_table_mean_std_best_marker_and_welch_test(log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "seeds", str(tmp_path / "artifacts"))
    istar = [0.930, 0.928, 0.931, 0.929, 0.932]
    base = [0.920, 0.921, 0.919, 0.922, 0.918]
    for i, (a, b) in enumerate(zip(istar, base)):
        log_trial(client, exp, f"i{i}", "bert", "sst2", "istar", {"accuracy": [a]}, seed=i, stage="seeds")
        log_trial(client, exp, f"b{i}", "bert", "sst2", "base", {"accuracy": [b]}, seed=i, stage="seeds")
    for i, (f1, em) in enumerate([(87.0, 80.0), (88.0, 81.0)]):
        log_trial(client, exp, f"q{i}", "bert", "squad", "base", {"f1": [f1], "exact_match": [em]}, seed=i,
                  stage="seeds")
    assert ttest_ind([100 * v for v in istar], [100 * v for v in base], equal_var=False,
                     alternative="greater").pvalue < 0.05
    table = build_table(uri, "seeds", "seeds", tasks=["sst2", "squad"])
    assert list(table.columns) == ["model", "method", "SST-2", "SQuAD"]
    assert table.values.tolist() == [
        ["bert", "Base", "92.00 ± 0.16 [91.80, 92.20]", "87.50 ± 0.71 [81.15, 93.85] / 80.50 ± 0.71 [74.15, 86.85] *"],
        ["bert", "I-STAR", "93.00 ± 0.16 [92.80, 93.20] * †", "—"],
    ]
    low, high = t.interval(0.95, 4, loc=93.0, scale=sem([100 * v for v in istar]))
    assert f"[{low:.2f}, {high:.2f}]" == "[92.80, 93.20]"
    against = build_table(uri, "seeds", "seeds", tasks=["sst2"], against_paper=True)
    rows = {(r[0], r[1]): r[2] for r in against.values.tolist()}
    assert rows[("bert", "I-STAR")] == "93.00 ± 0.16 [92.80, 93.20] * † (paper 92.65 ± 0.18, Δ +0.35)"
    assert rows[("albert", "CosReg")] == "— (paper 91.86 ± 0.42)"  # no run: marked missing, the paper beside it
    # Every one of the paper's 81 Table 1 cells, with its std (SQuAD: F1 / EM).
    full = build_table(uri, "seeds", "seeds", against_paper=True)
    assert len(full) == 9 and len(full.columns) == 2 + 9
    cells = [c for row in full.values.tolist() for c in row[2:]]
    assert len(cells) == 81 and all("(paper " in c and " ± " in c.split("(paper ")[1] for c in cells)
    squad = {(r[0], r[1]): r[-1] for r in full.values.tolist()}[("distilbert", "I-STAR")]
    assert squad == "— (paper 83.69 ± 0.36 / 74.80 ± 0.27)"
    md = render(table, "md", caption="caption")
    assert "| bert | I-STAR | 93.00 ± 0.16 [92.80, 93.20] * † | — |" in md and md.rstrip().endswith("caption")


def test_isolayer_seeds_show_the_median_and_the_ev_of_the_median_ev1_run_scored_at_the_chosen_epoch(log_trial,
                                                                                                    tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "iso", str(tmp_path / "artifacts"))
    # Five seeds chose an earlier epoch on held-out data: their scored_* values count, not the last epoch's.
    scored = [0.70, 0.74, 0.71, 0.60, 0.90]
    ev1 = [0.30, 0.50, 0.20, 0.40, 0.10]  # the median EV_1 (0.30) is seed 0's run
    for i, (value, ev) in enumerate(zip(scored, ev1)):
        log_trial(client, exp, f"s{i}", "bert", "rte", "isolayer",
               {"accuracy": [0.55], "scored_accuracy": [value], "sentence_ev1": [0.99],
                "scored_sentence_ev1": [ev], "scored_sentence_ev2": [ev + 0.2], "scored_sentence_ev3": [ev + 0.3]},
               seed=i, alpha=0.5, stage="seeds")
    table = build_table(uri, "iso", "seeds", tasks=["rte"])
    std = pd.Series([100 * v for v in scored]).std()
    low, high = t.interval(0.95, 4, loc=np.mean(scored) * 100, scale=sem([100 * v for v in scored]))
    assert table.values.tolist() == [["bert", "Finetuned LM (median)", "—"],
                                     ["bert", "+IsoLayer (median)",
                                      f"71.00 ± {std:.2f} [{low:.2f}, {high:.2f}] *; EV 0.30/0.50/0.60"]]
    best = build_table(uri, "iso", "best", tasks=["rte"])
    assert (best.iloc[0].trial_id, best.iloc[0].score) == ("s4", 0.90)
    assert tracking.best_trials(uri, "iso", groups=[("bert", "rte", "isolayer")])[
        ("bert", "rte", "isolayer")].trial_id == "s4"


def test_the_mark_is_holm_corrected_over_the_tasks_of_a_model():
    # Task a alone would pass (p ≈ 0.03 < 0.05); among three tasks Holm asks p < 0.05 / 3 of the smallest.
    istar = {"a": [70.0, 71.0, 72.0, 73.0], "b": [60.0, 62.0, 61.0, 59.0], "c": [80.0, 80.5, 79.5, 80.2]}
    base = {"a": [68.5, 69.5, 70.0, 70.5], "b": [61.0, 60.0, 62.0, 60.0], "c": [80.1, 80.0, 80.4, 79.9]}
    p = [ttest_ind(istar[k], base[k], equal_var=False, alternative="greater").pvalue for k in "abc"]
    assert p[0] < 0.05 and not multipletests(p, alpha=0.05, method="holm")[0].any()
    assert significant_tasks({"a": istar["a"]}, {"a": base["a"]}) == {"a"}
    assert significant_tasks(istar, base) == set()
    strong = {**istar, "a": [75.0, 75.5, 76.0, 75.2]}
    assert significant_tasks(strong, base) == {"a"}


@pytest.mark.parametrize(("chosen_by", "says"), [("dev", "not for that choice"),
                                                 ("holdout", "the dev set reported here chose nothing")])
def test_the_seeds_table_says_how_its_configurations_were_chosen(chosen_by, says, log_trial, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "seeds", str(tmp_path / "artifacts"))
    for i in range(2):
        run_id = log_trial(client, exp, f"b{i}", "bert", "rte", "base", {"accuracy": [0.6 + i / 100]}, seed=i)
        client.set_tag(run_id, tracking.TAG_STAGE, "seeds")
        client.set_tag(run_id, tracking.TAG_CHOSEN_BY, chosen_by)
    assert main(["table", "--tracking-uri", uri, "--experiment", "seeds", "--kind", "seeds", "--tasks", "rte"]) == 0
    out = capsys.readouterr().out
    assert says in out and "Holm" in out and "95 % Student's t-interval" in out and "A seed changes" in out


def test_isolayer_shows_the_finetuned_lm_row_from_mlflow_and_the_isolayer_papers_values(log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "iso", str(tmp_path / "artifacts"))
    finetuned, layered = [0.66, 0.68, 0.67], [0.70, 0.72, 0.71]
    for i, (before, after) in enumerate(zip(finetuned, layered)):
        log_trial(client, exp, f"s{i}", "bert", "rte", "isolayer",
                  {"accuracy": [after], "sentence_ev1": [0.3], "sentence_ev2": [0.4], "sentence_ev3": [0.5],
                   "finetuned_accuracy": [before], "finetuned_sentence_ev1": [0.6 + i / 100],
                   "finetuned_sentence_ev2": [0.7], "finetuned_sentence_ev3": [0.8]}, seed=i, stage="seeds")
    table = build_table(uri, "iso", "seeds", tasks=["rte"])
    rows = {r[1]: r[2] for r in table.values.tolist()}
    assert rows["Finetuned LM (median)"].startswith("67.00 ± 1.00 [") and "EV 0.61/0.70/0.80" in rows[
        "Finetuned LM (median)"]
    assert rows["+IsoLayer (median)"].startswith("71.00 ± 1.00 [") and rows["+IsoLayer (median)"].endswith(
        "*; EV 0.30/0.40/0.50")
    against = build_table(uri, "iso", "seeds", tasks=["rte", "cola"], against_paper=True)
    cells = {(r[0], r[1]): r[2:] for r in against.values.tolist()}
    assert cells[("bert", "Finetuned LM (median)")][0].endswith("(paper 67.72 ± 0.83; EV 0.61/0.75/0.78, Δ -0.72)")
    assert cells[("bert", "+IsoLayer (median)")][0].endswith("(paper 70.40 ± 1.05; EV 0.27/0.35/0.38, Δ +0.60)")
    assert cells[("roberta-large", "+IsoLayer (median)")][1] == "— (paper 68.77 ± 0.80; EV 0.41/0.63/0.76)"
    best = build_table(uri, "iso", "best", tasks=["rte"], against_paper=True)  # the IsoLayer paper's Table 2
    assert best.iloc[0].paper_isolayer == "Finetuned LM 67.87 (IsoScore 0.0051) → +IsoLayer 71.84 (0.025)"


def test_the_seeds_kind_refuses_a_search_and_exports_typed_numbers_and_escaped_latex(store, log_trial, tmp_path,
                                                                                     capsys):
    uri, client = store
    assert main(["table", "--tracking-uri", uri, "--experiment", "s", "--kind", "seeds"]) == 2
    assert "is a search, not a seeds stage" in capsys.readouterr().err
    exp = tracking.ensure_experiment(client, "seeded", str(tmp_path / "artifacts"))
    for i, (a, b) in enumerate([(0.93, 0.92), (0.95, 0.91), (0.94, 0.90)]):
        log_trial(client, exp, f"i{i}", "bert", "sst2", "istar", {"accuracy": [a]}, seed=i, stage="seeds")
        log_trial(client, exp, f"b{i}", "bert", "sst2", "base", {"accuracy": [b]}, seed=i, stage="seeds")
    out = tmp_path / "seeds.parquet"
    assert main(["table", "--tracking-uri", uri, "--experiment", "seeded", "--kind", "seeds", "--format", "parquet",
                 "--output", str(out), "--against-paper", "--models", "bert", "--tasks", "sst2"]) == 0
    schema = pq.read_table(out).schema
    assert {str(schema.field(c).type) for c in ("value", "std", "ci_low", "ci_high", "paper_value")} == {"double"}
    assert str(schema.field("n").type) == "int64" and str(schema.field("best").type) == "bool"
    back = pq.read_table(out).to_pandas()
    istar = back[back.method == "I-STAR"].iloc[0]
    assert istar["value"] == pytest.approx(94.0) and istar["std"] == pytest.approx(1.0) and istar["n"] == 3
    assert istar.ci_low == pytest.approx(94.0 - t.ppf(0.975, 2) / 3 ** 0.5) and bool(istar.best)
    assert istar.paper_value == pytest.approx(92.65) and istar.paper_std == pytest.approx(0.18)
    capsys.readouterr()
    assert main(["table", "--tracking-uri", uri, "--experiment", "seeded", "--kind", "seeds", "--format", "latex"]) == 0
    text = capsys.readouterr().out
    assert r"94.00 $\pm$ 1.00" in text and r"\caption{" in text and "Holm" in text
    assert not set(text) & set("±λζ†—Δ`") and "choose\\_by" not in text.replace("choose\\_by: holdout", "")


def test_a_task_of_ones_own_is_learnt_from_its_runs_and_its_f1_is_a_fraction_shown_in_percent(log_trial, tmp_path):
    import json

    from istar_tune.tasks import task_names

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "own", str(tmp_path / "artifacts"))
    facts = {"name": "tickets", "display_name": "Tickets", "problem_type": "classification", "metric": "f1"}
    for i, value in enumerate([0.80, 0.82]):
        run_id = log_trial(client, exp, f"i{i}", "bert", "tickets", "istar", {"f1": [value]}, seed=i, stage="seeds")
        client.set_tag(run_id, tracking.TAG_TASK, json.dumps(facts))
    assert "tickets" not in task_names()  # this process has never seen its definition
    runs = tracking.trial_runs(uri, "own")
    assert {r.definition.metric for r in runs} == {"f1"} and "tickets" not in task_names()  # read, not registered
    table = build_table(uri, "own", "seeds")
    assert list(table.columns) == ["model", "method", "Tickets"]
    assert table.values.tolist() == [["bert", "I-STAR", "81.00 ± 1.41 [68.29, 93.71] *"]]
    best = build_table(uri, "own", "best")
    assert best[["task", "metric", "score"]].values.tolist() == [["tickets", "f1", 0.82]]



def test_a_study_is_refused_not_pooled_into_one_cell_and_its_plot_keeps_a_point_per_value(log_trial, tmp_path,
                                                                                             capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "study", str(tmp_path / "artifacts"))
    for lam, scores in [(-1.0, [0.60, 0.62]), (1.0, [0.70, 0.72])]:  # λ ∈ {−1, 1} × 2 seeds, one group
        for seed, value in enumerate(scores):
            log_trial(client, exp, f"l{lam}s{seed}", "bert", "rte", "istar", {"accuracy": [value]}, seed=seed,
                      lam=lam, zeta=0.2, stage="seeds")
    with pytest.raises(ConfigError, match=r"bert × rte × istar differ in lam \(-1.0, 1.0\).*study"):
        build_table(uri, "study", "seeds")
    capsys.readouterr()
    assert main(["table", "--tracking-uri", uri, "--experiment", "study", "--kind", "seeds"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "istar-tune plots" in err
    from istar_tune.results.plots import study_points

    key, points = study_points(tracking.trial_runs(uri, "study"), "accuracy")
    assert key == "lam" and [(p["value"], p["seeds"], round(p["metric_mean"], 2)) for p in points] == [
        (-1.0, [0, 1], 0.61), (1.0, [0, 1], 0.71)]


def test_a_fair_comparisons_caption_and_exports_say_what_its_seed_runs_trained_on(log_trial, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "fair", str(tmp_path / "artifacts"))
    for i in range(2):
        for method, value in [("istar", 0.70 + i / 100), ("base", 0.66 + i / 100)]:
            run_id = log_trial(client, exp, f"{method}{i}", "bert", "rte", method, {"accuracy": [value]}, seed=i,
                               stage="seeds", **{"setting.holdout": 0.3})
            client.set_tag(run_id, tracking.TAG_CHOSEN_BY, "holdout")
    table = build_table(uri, "fair", "seeds", against_paper=True, tasks=["rte"], models=["bert"])
    caption = table.attrs["caption"]
    assert "remaining 70 % of the training set (holdout 0.3)" in caption and "Δ against the paper" in caption
    typed = table.attrs["typed"]
    assert set(typed.chosen_by.dropna()) == {"holdout"} and set(typed.training_share.dropna()) == {0.7}
    out = tmp_path / "fair.parquet"
    assert main(["table", "--tracking-uri", uri, "--experiment", "fair", "--kind", "seeds", "--format", "parquet",
                 "--output", str(out), "--tasks", "rte"]) == 0
    assert b"remaining 70 %" in pq.read_schema(out).metadata[b"caption"]
    capsys.readouterr()
    assert main(["table", "--tracking-uri", uri, "--experiment", "fair", "--kind", "seeds", "--format", "csv",
                 "--tasks", "rte"]) == 0
    csv = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert set(csv.training_share.dropna()) == {0.7} and set(csv.chosen_by.dropna()) == {"holdout"}
    plain = tracking.ensure_experiment(client, "plain", str(tmp_path / "artifacts"))
    log_trial(client, plain, "p0", "bert", "rte", "base", {"accuracy": [0.6]}, seed=0, stage="seeds")
    assert "Training data:" not in build_table(uri, "plain", "seeds").attrs["caption"]


def test_seeds_that_agree_print_no_library_warning_and_say_so_in_the_cell(log_trial, tmp_path, recwarn):
    # Seeds that agree made scipy warn of "catastrophic cancellation" on the user's terminal.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "same", str(tmp_path / "artifacts"))
    for i in range(3):
        log_trial(client, exp, f"i{i}", "bert", "sst2", "istar", {"accuracy": [0.8]}, seed=i, stage="seeds")
        log_trial(client, exp, f"b{i}", "bert", "sst2", "base", {"accuracy": [0.7 + 0.01 * i]}, seed=i, stage="seeds")
        log_trial(client, exp, f"c{i}", "bert", "sst2", "cosreg", {"accuracy": [0.75]}, seed=i, stage="seeds")
    table = build_table(uri, "same", "seeds", tasks=["sst2"], stats="all")
    cells = {row[1]: row[2] for row in table.values.tolist()}
    assert cells["I-STAR"].startswith("80.00 ± 0.00 [80.00, 80.00] (all 3 seeds agree)"), cells
    assert "agree" not in cells["Base"]
    assert not [w for w in recwarn.list if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in recwarn]
    # The reference for a side without variance: Welch's statistic is the other side's one-sample t.
    from scipy.stats import ttest_1samp

    from istar_tune.results.seeds import _welch_greater
    assert _welch_greater([80.0] * 3, [70.0, 71.0, 72.0], ttest_ind) == pytest.approx(
        ttest_1samp([70.0, 71.0, 72.0], 80.0, alternative="less").pvalue)
    assert _welch_greater([80.0] * 3, [80.0] * 3, ttest_ind) == 1.0
