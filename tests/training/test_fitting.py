"""One run's fine-tuning stage set up and closed epoch by epoch: what ``train`` and a bundle share."""

from __future__ import annotations

import time

from istar_tune.training.epoch import method_loss, train_epoch
from istar_tune.training.fitting import TrainResult, begin_fit, end_epoch
from istar_tune.training.run import prepare
from istar_tune.trial_status import TrialStatus


def _begun(make_hparams, make_settings, reporter=None, resume_from=None, **hparams):
    run = prepare(make_hparams(**hparams), make_settings(max_train_samples=32, max_eval_samples=16))
    result = TrainResult(metric=run.task.metric, epochs=[], best_epoch=0, status=TrialStatus.RUNNING)
    return run, result, begin_fit(run, result, reporter, resume_from, None, set())


def test_a_stage_is_set_up_then_each_epoch_closed_with_its_record_report_and_checkpoint(make_hparams, make_settings,
                                                                                        make_recorder):
    recorder = make_recorder()
    run, result, fit = _begun(make_hparams, make_settings, recorder, epochs=2)
    assert (fit.start, fit.last, fit.epochs) == (0, 2, 2) and fit.shrinkage_cov is not None  # I-STAR: Σ_S in its loss
    first_sigma = fit.shrinkage_cov
    began = time.perf_counter()
    losses = train_epoch(run, method_loss(run, fit.shrinkage_cov), fit.params, fit.optimizer, fit.scheduler,
                         fit.scaler, 1, "epoch 1")
    assert end_epoch(fit, 1, losses, began) is False  # no patience: nothing stops it
    (record,) = recorder.records
    assert record["epoch"] == 1 and record["train_tokens_per_s"] > 0 and "train_tokens" not in record
    assert record["train_time_s"] <= record["epoch_time_s"] and result.epochs == [record]
    assert fit.shrinkage_cov is not first_sigma  # drawn again from the model after the epoch


def test_a_state_that_had_finished_sets_up_nothing_and_gives_its_records_back(make_hparams, make_settings,
                                                                             make_recorder, tmp_path):
    from istar_tune.training.loop import train

    hp = dict(epochs=1, method="base", lam=None)
    train(make_hparams(**hp), make_settings(max_train_samples=32, max_eval_samples=16),
          make_recorder(keep_dir=tmp_path / "state"))
    _, result, fit = _begun(make_hparams, make_settings, resume_from=tmp_path / "state", **hp)
    assert fit is None and [r["epoch"] for r in result.epochs] == [1] and result.best_epoch == 1
