from __future__ import annotations

import math
from dataclasses import replace

import pytest

from istar_tune.metrics import CLOSING_ONLY
from istar_tune.tasks import TASKS, get_task
from istar_tune.training.loop import MEASURED_KEYS, train


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_trains_one_epoch_and_reports_its_metric(make_hparams, make_settings, name):
    task = get_task(name)
    result = train(make_hparams(task=name), make_settings())
    record = result.final
    for metric in task.metrics:
        assert math.isfinite(record[metric])
    lower = -1.0 if task.metric in ("mcc", "pearson") else 0.0
    upper = 100.0 if task.metric == "f1" else 1.0
    assert lower <= record[task.metric] <= upper
    assert 0.0 <= record["eval_isoscore_star"] <= 1.0 and 0.0 <= record["eval_isoscore"] <= 1.0
    assert record["penalty"] < 0  # λ = −1: the penalty −(1 − IsoScore*) is negative
    assert record["train_loss"] == pytest.approx(record["task_loss"] + record["penalty"], rel=1e-4)
    assert record["train_tokens_per_s"] > 0


def test_same_seed_gives_the_same_metrics_and_lambda_zero_equals_base(make_hparams, make_settings):
    first = train(make_hparams(epochs=2), make_settings()).epochs
    second = train(make_hparams(epochs=2), make_settings()).epochs
    drop = MEASURED_KEYS
    assert ([{k: v for k, v in r.items() if k not in drop} for r in first]
            == [{k: v for k, v in r.items() if k not in drop} for r in second])
    base = train(make_hparams(method="base", lam=None), make_settings()).final
    zero = train(make_hparams(lam=0.0), make_settings()).final
    assert zero["train_loss"] == base["train_loss"] and zero["accuracy"] == base["accuracy"]
    assert zero["penalty"] == 0.0




def test_a_progress_bar_changes_nothing_a_run_records(make_hparams, make_settings):
    """The bars wrap the loaders (tqdm): the data order, dropout and Σ_S draws must not notice them."""
    quiet = train(make_hparams(epochs=2), make_settings()).epochs
    shown = train(make_hparams(epochs=2), make_settings(progress=True)).epochs
    assert ([{k: v for k, v in r.items() if k not in MEASURED_KEYS} for r in quiet]
            == [{k: v for k, v in r.items() if k not in MEASURED_KEYS} for r in shown])


def test_each_epochs_eval_isoscore_uses_sigma_s_of_the_model_after_that_epoch(make_hparams, make_settings, monkeypatch):
    import istar_tune.training.fitting as fitting
    import istar_tune.training.loop as train_module

    events = []
    estimate, epoch_fn, evaluate = fitting.estimate_shrinkage, train_module.train_epoch, fitting.evaluate

    def spy_estimate(run, draw=0):
        cov = estimate(run, draw)
        events.append(("sigma", draw, cov))
        return cov

    def spy_epoch(run, loss_fn, params, optimizer, scheduler, scaler, epoch, desc, **options):
        events.append(("train", epoch, None))
        return epoch_fn(run, loss_fn, params, optimizer, scheduler, scaler, epoch, desc, **options)

    def spy_evaluate(run, cov):
        events.append(("eval", None, cov))
        return evaluate(run, cov)

    monkeypatch.setattr(fitting, "estimate_shrinkage", spy_estimate)
    monkeypatch.setattr(train_module, "train_epoch", spy_epoch)
    monkeypatch.setattr(fitting, "evaluate", spy_evaluate)
    train(make_hparams(task="rte", epochs=2), make_settings(max_train_samples=32, max_eval_samples=16))
    assert [(kind, step) for kind, step, _ in events] == [("sigma", 0), ("train", 1), ("sigma", 1), ("eval", None),
                                                          ("train", 2), ("sigma", 2), ("eval", None)]
    import torch

    for at in (3, 6):  # each eval gets the Σ_S estimated right after its epoch's updates
        assert torch.equal(events[at][2].cpu(), events[at - 1][2].cpu())
    assert not torch.equal(events[0][2].cpu(), events[2][2].cpu())


def _sigma_passes(monkeypatch) -> list[int]:
    import istar_tune.training.fitting as fitting

    draws, estimate = [], fitting.estimate_shrinkage

    def spy(run, draw=0):
        draws.append(draw)
        return estimate(run, draw)

    monkeypatch.setattr(fitting, "estimate_shrinkage", spy)
    return draws


def test_base_pays_a_sigma_pass_only_where_its_eval_isoscore_star_is_used(make_hparams, make_settings,
                                                                          monkeypatch):
    draws = _sigma_passes(monkeypatch)
    base = make_hparams(task="rte", method="base", lam=None, epochs=3)
    settings = make_settings(max_train_samples=32, max_eval_samples=16)
    records = train(base, settings, completes=(1, 3)).epochs
    assert draws == [1, 3]  # the last epoch of the 1-epoch and the 3-epoch configuration; none before training
    assert ["eval_isoscore_star" in r for r in records] == [True, False, True]
    assert records[0][CLOSING_ONLY] == "eval_isoscore_star,eval_zeta" and CLOSING_ONLY not in records[2]
    draws.clear()
    every = train(base, replace(settings, isoscore_star_every_epoch=True)).epochs
    assert draws == [1, 2, 3] and all("eval_isoscore_star" in r and CLOSING_ONLY not in r for r in every)
    assert [r["accuracy"] for r in every] == [r["accuracy"] for r in records]  # Σ_S never touches Base's training
    draws.clear()
    held = train(base, replace(settings, holdout=0.25)).epochs
    best, expected = -1.0, []
    for record in held:  # a pass at each epoch with a new best held-out metric: the scored epoch is one of them
        expected.append(record["holdout_accuracy"] > best)
        best = max(best, record["holdout_accuracy"])
    assert ["eval_isoscore_star" in r for r in held] == expected and draws == [
        r["epoch"] for r, new in zip(held, expected) if new]


def test_star_sigma_training_takes_base_sigma_from_the_training_pass(make_hparams, make_settings, monkeypatch):
    draws = _sigma_passes(monkeypatch)
    base = make_hparams(task="rte", method="base", lam=None, epochs=2)
    settings = make_settings(max_train_samples=32, max_eval_samples=16)
    gathered = train(base, replace(settings, star_sigma="training")).epochs
    assert draws == []  # no extra pass
    exact = train(base, settings).epochs
    assert draws == [2]
    assert 0 < gathered[-1]["eval_isoscore_star"] <= 1
    assert gathered[-1]["eval_isoscore_star"] != exact[-1]["eval_isoscore_star"]
    assert [r["accuracy"] for r in gathered] == [r["accuracy"] for r in exact]  # training itself is unchanged
    istar = train(make_hparams(task="rte", epochs=1), replace(settings, star_sigma="training")).epochs
    assert draws == [2, 0, 1] and "eval_isoscore_star" in istar[0]  # I-STAR's loss needs its passes


def test_a_squad_v2_file_trains_towards_the_null_answer_and_is_scored_by_the_v2_rules(tmp_path, make_hparams,
                                                                                       make_settings):
    """A SQuAD JSON of one's own with unanswerable questions (``is_impossible``, no answers): recognised by its
    layout, read as SQuAD v2, trained (their windows point at [CLS]) and scored with HasAns, NoAns and the best
    threshold beside exact and F1."""
    import json

    from istar_tune.tasks import task_of
    from istar_tune.training.loop import train

    context = "The film opened in Paris in 1999 and was shown in Rome a year later."
    questions = [("Where did it open?", "Paris"), ("When did it open?", "1999"), ("Where was it shown?", "Rome"),
                 ("Who directed it?", None), ("What did it cost?", None), ("Where did it close?", None)]
    qas = [{"id": f"q{i}", "question": q, "is_impossible": a is None,
            "answers": [] if a is None else [{"text": a, "answer_start": context.index(a)}]}
           for i, (q, a) in enumerate(questions)]
    data = {"version": "v2.0", "data": [{"title": "film", "paragraphs": [{"context": context, "qas": qas}]}]}
    for name in ("train.json", "dev.json"):
        (tmp_path / name).write_text(json.dumps(data))
    task = task_of({"name": "films", "train": "train.json", "validation": "dev.json"}, tmp_path)
    assert task.problem_type == "extractive_qa" and task.format == "squad"
    result = train(make_hparams(task="films", method="base", lam=0.0, epochs=1), make_settings(max_length=48),
                   task=task)
    record = result.epochs[-1]
    assert {"exact_match", "f1", "has_ans_f1", "no_ans_f1", "best_f1", "best_f1_thresh"} <= set(record)
    assert 0.0 <= record["f1"] <= 100.0 and 0.0 <= record["no_ans_exact"] <= 100.0
