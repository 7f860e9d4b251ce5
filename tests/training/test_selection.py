from __future__ import annotations

import math

import pytest

from istar_tune.training.evaluate import evaluate_holdout
from istar_tune.training.loop import MEASURED_KEYS, train
from istar_tune.training.state import BEST_CHECKPOINT


class _Scripted:
    """``evaluate_holdout`` with its value replaced by a script, one value per call (the real pass still runs)."""

    def __init__(self, values):
        self.real, self.values, self.calls = evaluate_holdout, list(values), 0

    def __call__(self, run):
        measured = self.real(run)
        assert set(measured) == {"holdout_accuracy"}
        self.calls += 1
        return {"holdout_accuracy": self.values[self.calls - 1]}


def _weights(path):
    import torch

    return torch.load(path / "trainer_state.pt", map_location="cpu", weights_only=False)


def test_with_holdout_the_epoch_chosen_on_held_out_data_is_scored_kept_and_ends_the_stage(make_recorder, make_hparams,
                                                                                          make_settings, tmp_path,
                                                                                        monkeypatch):
    import shutil

    import torch

    from istar_tune.training import fitting
    from istar_tune.training import loop as train_module

    monkeypatch.setattr(fitting, "evaluate_holdout", _Scripted([0.5, 0.7, 0.6, 0.65, 0.9]))
    out, states = tmp_path / "run", tmp_path / "states"

    class Keeper(make_recorder):
        def __call__(self, record, checkpoint_dir):
            super().__call__(record, checkpoint_dir)
            shutil.copytree(checkpoint_dir, states / str(record["epoch"]))

    settings = make_settings(holdout=0.3, patience=2, output_dir=str(out), checkpoint="weights")
    result = train(make_hparams(epochs=5, method="base", lam=None), settings, Keeper())
    # Epoch 2 is best on the held-out data; two epochs without a better one end the run after epoch 4.
    assert [r["epoch"] for r in result.epochs] == [1, 2, 3, 4]
    assert result.best_epoch == 2 and all(r["scored_epoch"] == (1 if r["epoch"] == 1 else 2) for r in result.epochs)
    assert result.final["scored_accuracy"] == result.epochs[1]["accuracy"]
    assert result.final["scored_eval_isoscore_star"] == result.epochs[1]["eval_isoscore_star"]
    # The held-out examples are not trained on: 30 % of the training file (a seeded split).
    run = train_module.prepare(make_hparams(method="base", lam=None), make_settings(holdout=0.3))
    everything = train_module.prepare(make_hparams(method="base", lam=None), make_settings())
    assert len(run.data.holdout) == math.ceil(0.3 * len(everything.data.train))
    assert len(run.data.train) + len(run.data.holdout) == len(everything.data.train)
    # The kept model is epoch 2's: in the final checkpoint, in the best checkpoint, and carried by epoch 3's state.
    final, third = _weights(states / "4"), _weights(states / "3")
    assert final["finished"] and final["stopped"] and "optimizer" not in final
    from transformers import AutoModelForSequenceClassification

    best = AutoModelForSequenceClassification.from_pretrained(out / BEST_CHECKPOINT).state_dict()
    for name, value in final["model"].items():
        assert torch.equal(value, third["best_model"][name])
        if name in best:
            assert torch.equal(value, best[name])
    assert any(not torch.equal(final["model"][n], third["model"][n]) for n in final["model"])


@pytest.mark.parametrize("stop_after", [2, 3])  # at the best epoch, and one after it
def test_a_run_with_holdout_resumed_mid_stage_ends_as_an_uninterrupted_one(make_recorder, make_hparams, make_settings,
                                                                           tmp_path, monkeypatch,
                                                                          stop_after):
    import torch

    from istar_tune.training import fitting

    drop = MEASURED_KEYS
    script = [0.5, 0.7, 0.6, 0.65]
    settings = make_settings(holdout=0.3, patience=2)
    hp = make_hparams(epochs=5, method="base", lam=None)
    monkeypatch.setattr(fitting, "evaluate_holdout", _Scripted(script))
    whole = make_recorder(keep_dir=tmp_path / "whole")
    uninterrupted = train(hp, settings, whole).epochs
    monkeypatch.setattr(fitting, "evaluate_holdout", _Scripted(script))
    with pytest.raises(KeyboardInterrupt):
        train(hp, settings, make_recorder(stop_after=stop_after, keep_dir=tmp_path / "state"))
    monkeypatch.setattr(fitting, "evaluate_holdout", _Scripted(script[stop_after:]))
    resumed = make_recorder(keep_dir=tmp_path / "resumed")
    result = train(hp, settings, resumed, resume_from=tmp_path / "state")
    assert [r["epoch"] for r in resumed.records] == list(range(stop_after + 1, 5))
    assert ([{k: v for k, v in r.items() if k not in drop} for r in result.epochs]
            == [{k: v for k, v in r.items() if k not in drop} for r in uninterrupted])
    kept, ended = _weights(tmp_path / "resumed"), _weights(tmp_path / "whole")
    assert all(torch.equal(kept["model"][n], ended["model"][n]) for n in ended["model"])
    # A stopped run resumed again trains nothing more.
    again = make_recorder()
    assert train(hp, settings, again, resume_from=tmp_path / "resumed").best_epoch == 2 and not again.records
