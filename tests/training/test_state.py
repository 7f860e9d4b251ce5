from __future__ import annotations

import json

import pytest

from istar_tune.training.loop import train
from istar_tune.training.state import BEST_CHECKPOINT, CONFIG_FILE, METRICS_FILE


def test_outputs_written_and_best_checkpoint_loads(make_hparams, make_settings, tmp_path):
    from transformers import AutoModelForSequenceClassification

    out = tmp_path / "run"
    result = train(make_hparams(epochs=2, method="cosreg", lam=None), make_settings(output_dir=str(out)))
    metrics = json.loads((out / METRICS_FILE).read_text())
    assert metrics["status"] == "finished" and metrics["metric"] == "accuracy"
    assert [r["epoch"] for r in metrics["epochs"]] == [1, 2]
    assert metrics["best"]["accuracy"] == max(r["accuracy"] for r in metrics["epochs"])
    assert metrics["best_epoch"] == result.best_epoch
    assert "hyperparameters" in (out / CONFIG_FILE).read_text()
    model = AutoModelForSequenceClassification.from_pretrained(out / BEST_CHECKPOINT)
    assert model.config.hidden_size == 32




def test_resumed_run_continues_from_its_last_epoch_and_matches_an_uninterrupted_run(make_recorder, make_hparams,
                                                                                    make_settings, tmp_path):
    drop = ("shrinkage_time_s", "train_time_s", "eval_time_s", "epoch_time_s")
    uninterrupted = train(make_hparams(epochs=3), make_settings(), make_recorder()).epochs
    state = tmp_path / "state"
    with pytest.raises(KeyboardInterrupt):
        train(make_hparams(epochs=3), make_settings(), make_recorder(stop_after=1, keep_dir=state))
    resumed = make_recorder()
    result = train(make_hparams(epochs=3), make_settings(), resumed, resume_from=state)
    assert [r["epoch"] for r in resumed.records] == [2, 3]  # epoch 1 is not trained again
    assert [{k: v for k, v in r.items() if k not in drop} for r in result.epochs] == \
        [{k: v for k, v in r.items() if k not in drop} for r in uninterrupted]
