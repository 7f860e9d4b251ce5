from __future__ import annotations

import pytest
import torch

from istar_tune.config import Hyperparameters, RunSettings
from istar_tune.training.isolayer import IsoLayerHook, LossBalancer, head_input_module
from istar_tune.training.loop import train


def test_balancer_matches_hand_computed_values():
    balancer = LossBalancer(rate=0.15)
    # k = 0: means initialised to the losses (2, 8); mean of means 5 → normalised 2·5/2 = 5 and 8·5/8 = 5.
    out = balancer([torch.tensor(2.0), torch.tensor(8.0)])
    assert [o.item() for o in out] == pytest.approx([5.0, 5.0])
    # update with step 0.15/(1+0): means stay (2, 8) since the losses equal the means.
    assert balancer.means == pytest.approx([2.0, 8.0])
    # k = 1: losses (4, 4); normalise with means (2, 8), mean 5 → 4·5/2 = 10, 4·5/8 = 2.5.
    out = balancer([torch.tensor(4.0), torch.tensor(4.0)])
    assert [o.item() for o in out] == pytest.approx([10.0, 2.5])
    # update with step 0.15/2 = 0.075: 4·0.075 + 2·0.925 = 2.15; 4·0.075 + 8·0.925 = 7.7.
    assert balancer.means == pytest.approx([2.15, 7.7])
    # k = 2: losses (1, 3); mean of means 4.925 → 1·4.925/2.15, 3·4.925/7.7; step 0.05.
    out = balancer([torch.tensor(1.0), torch.tensor(3.0)])
    assert [o.item() for o in out] == pytest.approx([4.925 / 2.15, 3 * 4.925 / 7.7])
    assert balancer.means == pytest.approx([1 * 0.05 + 2.15 * 0.95, 3 * 0.05 + 7.7 * 0.95])


def test_balancer_keeps_the_gradient_of_each_loss():
    balancer = LossBalancer()
    x = torch.tensor(3.0, requires_grad=True)
    balancer([x * 1.0, torch.tensor(6.0)])
    task_hat, _ = balancer([x * 2.0, torch.tensor(6.0)])
    task_hat.backward()
    assert x.grad.item() == pytest.approx(2.0 * (4.5 / 3.0))  # d/dx of 2x · (mean 4.5 / L̄1 3)


@pytest.mark.parametrize(
    ("architecture", "config_kwargs", "expected"),
    [
        ("bert", {}, "classifier"),
        ("distilbert", {}, "pre_classifier"),
        ("albert", {"embedding_size": 16}, "classifier"),
    ],
)
def test_identity_layer_leaves_predictions_unchanged_on_each_head_style(architecture, config_kwargs, expected):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    torch.manual_seed(0)
    sizes = {"bert": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
             "distilbert": dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64),
             "albert": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)}
    config = AutoConfig.for_model(architecture, vocab_size=100, num_labels=3, **sizes[architecture], **config_kwargs)
    model = AutoModelForSequenceClassification.from_config(config).eval()
    target = head_input_module(model)
    assert target is dict(model.named_modules())[expected]
    ids = torch.randint(0, 100, (4, 9))
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        hook = IsoLayerHook(model)
        hooked = model(input_ids=ids).logits
    torch.testing.assert_close(hooked, plain)
    assert hook.embeddings.shape == (4, target.in_features)
    hook.remove()


def test_isolayer_method_trains_both_stages(glue_tiny):
    hp = Hyperparameters(model="tiny-bert", task="sst2", method="isolayer", epochs=1, batch_size=16,
                         learning_rate=1e-3, alpha=0.5, isolayer_epochs=2, isolayer_learning_rate=1e-2)
    settings = RunSettings(data_dir=str(glue_tiny), max_length=32, progress=False, shrinkage_tokens=1000)
    result = train(hp, settings)
    assert [r.get("stage", 1) for r in result.epochs] == [1, 2, 2]
    stats = result.second_stage
    for side in (stats.before, stats.after):
        assert 0.0 <= side.isoscore <= 1.0
        ev = side.explained_variance
        assert len(ev) == 3 and 0 < ev[0] <= ev[1] <= ev[2] <= 1
    # Stage 1's predictions are where stage 2 starts: the "before" accuracy equals stage 1's final accuracy.
    assert stats.before.metrics["accuracy"] == result.epochs[0]["accuracy"]
    # Only the inserted layer trained: the L2 term pushed the sentence space towards isotropy.
    assert stats.after.isoscore > stats.before.isoscore
    assert result.epochs[-1]["sentence_isoscore"] == stats.after.isoscore
    assert result.as_json()["second_stage"]["after"]["isoscore"] == stats.after.isoscore
    # Every stage-2 record (so the trial's MLflow run) carries the fine-tuned LM's own row: "Finetuned LM".
    for record in result.epochs[1:]:
        assert record["finetuned_accuracy"] == stats.before.metrics["accuracy"]
        assert record["finetuned_sentence_isoscore"] == stats.before.isoscore
        assert [record[f"finetuned_sentence_ev{k}"] for k in (1, 2, 3)] == stats.before.explained_variance


def test_isolayer_rejects_extractive_qa(glue_tiny):
    from istar_tune.errors import ConfigError

    hp = Hyperparameters(model="tiny-bert", task="squad", method="isolayer", epochs=1, batch_size=16)
    with pytest.raises(ConfigError, match="extractive QA"):  # before any training starts
        train(hp, RunSettings(data_dir=str(glue_tiny), max_length=48, progress=False, shrinkage_tokens=500))


def test_isolayer_with_holdout_scores_each_stages_chosen_epoch_and_analyze_reads_that_model(glue_tiny, tmp_path,
                                                                                          monkeypatch):
    from istar_tune.apps.analyze import analyze
    from istar_tune.training import fitting, loop
    from istar_tune.training.state import BEST_CHECKPOINT, ISOLAYER_FILE

    values = iter([0.6, 0.8, 0.7,   # stage 1: epoch 2 is chosen (its weights go on to stage 2)
                   0.5, 0.9, 0.6])  # stage 2: its second epoch (epoch 5) is chosen
    real = loop.evaluate_holdout
    for module in (fitting, loop):  # stage 1's epochs end in fitting, stage 2's in the loop
        monkeypatch.setattr(module, "evaluate_holdout", lambda run: {k: next(values) for k in real(run)})
    hp = Hyperparameters(model="tiny-bert", task="sst2", method="isolayer", epochs=3, batch_size=16,
                         learning_rate=1e-3, alpha=0.5, isolayer_epochs=3, isolayer_learning_rate=1e-2)
    out = tmp_path / "run"
    settings = RunSettings(data_dir=str(glue_tiny), max_length=32, progress=False, shrinkage_tokens=1000,
                           holdout=0.3, output_dir=str(out))
    result = train(hp, settings)
    assert [r.get("stage", 1) for r in result.epochs] == [1, 1, 1, 2, 2, 2]
    assert [r["scored_epoch"] for r in result.epochs] == [1, 2, 2, 4, 5, 5]
    assert result.best_epoch == 5
    # Stage 2 started from epoch 2's model: its "before" space scores what epoch 2 scored.
    assert result.second_stage.before.metrics["accuracy"] == result.epochs[1]["accuracy"]
    # "after" is the chosen epoch's space; the run's scored measures are that epoch's.
    chosen = result.epochs[4]
    assert result.second_stage.after.isoscore == chosen["sentence_isoscore"]
    assert result.final["scored_accuracy"] == chosen["accuracy"]
    assert result.final["scored_sentence_ev1"] == chosen["sentence_ev1"]
    # The best checkpoint is that model with its layer, and analyze measures the same sentence space.
    assert (out / BEST_CHECKPOINT / ISOLAYER_FILE).is_file()
    analysed = analyze(out)
    assert analysed["isolayer"] is True
    assert analysed["sentence_isoscore"] == pytest.approx(chosen["sentence_isoscore"], abs=1e-4)
    assert analysed["sentence_explained_variance"] == pytest.approx(
        [chosen[f"sentence_ev{k}"] for k in (1, 2, 3)], abs=1e-4)
