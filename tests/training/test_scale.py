"""A regression's scores trained as z-scores of the training split, the scale folded into a saved model: a 0-100 copy
of a 0-5 task trains the same model and predicts twenty times the scores."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from istar_tune.tasks import task_of
from istar_tune.training.scale import LabelScale, fold, folded, output_layer, saved_scale, unfold


def test_the_scale_standardises_and_folds_into_the_output_layer_and_back():
    scale = LabelScale.of([1.0, 2.0, 3.0, 6.0])
    assert scale.mean == 3.0 and scale.std == pytest.approx(1.8708287)
    assert scale.standardise([3.0, 6.0]) == [0.0, pytest.approx(3.0 / 1.8708287)]
    assert LabelScale.of([4.0, 4.0]).std == 1.0  # one score: nothing to divide by
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    model.config = type("Config", (), {})()
    x = torch.randn(5, 4)
    z = model(x)
    fold(model, scale)
    torch.testing.assert_close(model(x), scale.mean + scale.std * z)
    unfold(model, scale)
    torch.testing.assert_close(model(x), z)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with folded(model, scale):
        assert saved_scale(model) == scale
        torch.testing.assert_close(model(x), scale.mean + scale.std * z)
    # Saving leaves the weights training goes on with bit for bit as they were.
    assert saved_scale(model) is None and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert output_layer(model) is model[1]


def _stsb(glue_tiny, folder, factor: float) -> str:
    """glue-tiny's STS-B as one's own csv task, its scores multiplied by ``factor``."""
    folder.mkdir()
    for split, name in (("train", "train"), ("dev", "dev")):
        table = pd.read_csv(glue_tiny / "STS-B" / f"{name}.tsv", sep="\t", quoting=3)
        pd.DataFrame({"sentence1": table.sentence1, "sentence2": table.sentence2,
                      "label": table.score * factor}).to_csv(folder / f"{split}.csv", index=False)
    (folder / "task.yaml").write_text("name: similar\ntrain: train.csv\nvalidation: dev.csv\n"
                                      "problem_type: regression\n")
    return str(folder / "task.yaml")


def test_a_zero_to_hundred_copy_trains_to_the_same_pearson_and_predicts_in_its_own_scale(glue_tiny, tmp_path,
                                                                                         make_hparams, make_settings):
    from transformers import AutoModelForSequenceClassification

    from istar_tune.training.loop import train
    from istar_tune.training.run import prepare

    results, predictions = {}, {}
    for factor in (1.0, 20.0):
        task = task_of(_stsb(glue_tiny, tmp_path / f"x{factor:g}", factor))
        hparams = make_hparams(task="similar", method="base", lam=0.0, epochs=2, learning_rate=1e-3)
        settings = make_settings(output_dir=str(tmp_path / f"out{factor:g}"), max_length=32)
        results[factor] = train(hparams, settings, task=task).best["pearson"]
        saved = AutoModelForSequenceClassification.from_pretrained(tmp_path / f"out{factor:g}" / "best-checkpoint")
        run = prepare(hparams, settings, task=task)
        batch = run.collate([run.data.validation[i] for i in range(8)])
        with torch.no_grad():
            predictions[factor] = saved(**{k: v for k, v in batch.items() if k != "labels"}).logits.squeeze(-1)
        assert saved_scale(saved).std == pytest.approx(run.data.label_scale.std, rel=1e-6)
    # The same z-scores: the same training, to float rounding, whatever the scale.
    assert results[20.0] == pytest.approx(results[1.0], abs=1e-4)
    torch.testing.assert_close(predictions[20.0], 20.0 * predictions[1.0], rtol=1e-3, atol=1e-3)
