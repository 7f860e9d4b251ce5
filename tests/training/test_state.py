from __future__ import annotations

import json

import pytest

from istar_tune.training.loop import MEASURED_KEYS, train
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
    drop = MEASURED_KEYS
    uninterrupted = train(make_hparams(epochs=3), make_settings(), make_recorder()).epochs
    state = tmp_path / "state"
    with pytest.raises(KeyboardInterrupt):
        train(make_hparams(epochs=3), make_settings(), make_recorder(stop_after=1, keep_dir=state))
    resumed = make_recorder()
    result = train(make_hparams(epochs=3), make_settings(), resumed, resume_from=state)
    assert [r["epoch"] for r in resumed.records] == [2, 3]  # epoch 1 is not trained again
    assert ([{k: v for k, v in r.items() if k not in drop} for r in result.epochs]
            == [{k: v for k, v in r.items() if k not in drop} for r in uninterrupted])


class _Payload:
    """Runs a command when unpickled: what a crafted checkpoint on shared storage could hold."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_a_crafted_checkpoint_is_refused_and_its_code_never_runs(tmp_path):
    import torch

    from istar_tune.errors import TrainingError
    from istar_tune.training.state import STATE_FILE, read_state

    marker = tmp_path / "ran"
    torch.save({"epoch": 1, "model": _Payload(marker)}, tmp_path / STATE_FILE)
    with pytest.raises(TrainingError, match="holds objects other than tensors and plain data \\(it names "
                                            "posix.system\\), refused unread") as refused:
        read_state(tmp_path)
    assert not marker.exists()
    assert "weights_only" not in str(refused.value)  # torch's advice to load it unsafely is not passed on


def test_a_saved_state_holds_only_tensors_and_plain_data(make_recorder, make_hparams, make_settings, tmp_path):
    from istar_tune.training.state import STATE_FILE, load_data

    recorder = make_recorder(keep_dir=tmp_path / "kept")
    train(make_hparams(epochs=1), make_settings(max_train_samples=16, max_eval_samples=16), recorder)
    state = load_data(tmp_path / "kept" / STATE_FILE)  # weights_only=True: would fail on any other object
    assert state["epoch"] == 1 and set(state["numpy_rng"]) == {"name", "keys", "position", "has_gauss",
                                                                "cached_gaussian"}


def test_a_resumed_run_goes_on_with_the_gpus_random_state_too(make_recorder, make_hparams, make_settings, tmp_path,
                                                              monkeypatch):
    import torch

    from istar_tune.training import state as state_module

    saved = [torch.arange(16, dtype=torch.uint8)]  # a GPU's RNG state, as torch.cuda.get_rng_state_all gives it
    restored = []
    monkeypatch.setattr(state_module, "_cuda_rng_state", lambda: saved)
    monkeypatch.setattr(state_module, "_set_cuda_rng_state", restored.append)
    folder = tmp_path / "state"
    with pytest.raises(KeyboardInterrupt):
        train(make_hparams(epochs=2), make_settings(device="cpu"), make_recorder(stop_after=1, keep_dir=folder))
    assert torch.equal(state_module.read_state(folder)["cuda_rng"][0], saved[0])
    train(make_hparams(epochs=2), make_settings(device="cpu"), make_recorder(), resume_from=folder)
    assert len(restored) == 1 and torch.equal(restored[0][0], saved[0])


def test_a_checkpointer_writes_what_each_content_asks_for_and_loads_a_whole_state_back(make_hparams, make_settings,
                                                                                       tmp_path):
    import dataclasses
    import random

    import torch

    from istar_tune.errors import TrainingError
    from istar_tune.training.run import make_optimizer, prepare
    from istar_tune.training.state import Checkpointer, Saved, read_state

    run = prepare(make_hparams(), make_settings())
    checkpointer = Checkpointer(run, *make_optimizer(run, list(run.model.named_parameters()), 1e-3, 1, 0.0))
    records = [{"epoch": 1, "accuracy": 0.5}]
    kinds = {}
    for contents in ("records", "weights", "state"):
        checkpointer.writer(Saved(1, records, (1, 0.5), contents, best_model={"w": torch.ones(1)}))(tmp_path / contents)
        kinds[contents] = set(read_state(tmp_path / contents))
    assert {"epoch", "records", "best", "hparams", "settings"} <= kinds["records"]
    assert not {"model", "optimizer"} & kinds["records"] and kinds["weights"] - kinds["records"] == {"model"}
    assert {"optimizer", "scheduler", "scaler", "torch_rng", "python_rng", "best_model"} <= kinds["state"]

    torch.manual_seed(0)
    random.seed(0)
    checkpointer.save(tmp_path / "again", Saved(1, records, (1, 0.5)))
    expected = (torch.rand(1), random.random())
    torch.manual_seed(1)
    random.seed(1)
    state = checkpointer.load(tmp_path / "again")
    assert (torch.rand(1), random.random()) == expected and not state["finished"]  # the random streams go on
    assert checkpointer.load(tmp_path / "records")["finished"]  # records only: nothing is left to train
    other = dataclasses.replace(checkpointer, run=dataclasses.replace(run, hparams=make_hparams(learning_rate=2e-3)))
    with pytest.raises(TrainingError, match="belongs to different hyperparameters"):
        other.load(tmp_path / "again")


def test_a_saved_state_copies_views_out_of_larger_storages_and_leaves_the_rest():
    import torch

    from istar_tune.training.state import compact

    stack, alone = torch.zeros(4, 3), torch.ones(3)
    saved = compact({"row": stack[1], "alone": alone, "tied": alone})
    assert saved["alone"] is alone and saved["tied"] is alone  # its own storage (tied weights stay tied)
    assert saved["row"].untyped_storage().nbytes() == 3 * 4 and torch.equal(saved["row"], stack[1])
