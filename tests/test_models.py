"""Loading encoders by short name, hub id or local path; their sizes from the config; input length checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from istar_tune.errors import ConfigError, ModelError
from istar_tune.models import (
    MODELS,
    check_max_length,
    hidden_size,
    load_model,
    load_tokenizer,
    max_positions,
    model_spec,
    resolve_source,
)
from istar_tune.tasks import get_task


def test_short_names_and_hub_ids_resolve_to_the_same_spec_and_unknown_names_pass_through():
    assert model_spec("bert").source == "bert-base-cased"
    assert model_spec("sentence-transformers/all-MiniLM-L6-v2") is MODELS["minilm"]  # its offline package
    assert model_spec("org/some-model").source == "org/some-model"


def test_minilm_loads_offline_from_its_package():
    source = resolve_source(MODELS["minilm"])
    assert not source.startswith("sentence-transformers/")  # the installed package's folder, not the hub
    assert max_positions("minilm") == 512


@pytest.mark.parametrize("task, heads", [("sst2", 2), ("stsb", 1), ("sst5", 5)])
def test_the_head_fits_the_task_and_sizes_come_from_the_config(task, heads):
    model = load_model("tiny-bert", get_task(task))
    assert hidden_size(model) == 32 and model.config.num_hidden_layers == 2  # tiny-bert's overrides
    assert model.config.num_labels == heads
    task = get_task(task)
    if task.label_names:  # the saved config names the classes; a score head says it is regression
        assert model.config.id2label == dict(enumerate(task.label_names))
        assert model.config.label2id == {name: i for i, name in enumerate(task.label_names)}
    assert model.config.problem_type == ("regression" if heads == 1 else "single_label_classification")
    assert load_tokenizer("tiny-bert")("a sentence")["input_ids"][0] == load_tokenizer("minilm").cls_token_id


def test_squad_gets_a_span_head():
    model = load_model("tiny-bert", get_task("squad"))
    assert type(model).__name__.endswith("ForQuestionAnswering")


def test_a_missing_local_model_says_what_to_give(tmp_path):
    with pytest.raises(ModelError, match="does not exist: give a short name"):
        load_model(str(tmp_path / "nowhere"), get_task("rte"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    with pytest.raises(ModelError, match="cannot load model"):
        load_tokenizer(str(broken))


def test_max_length_longer_than_the_models_positions_is_refused_before_training():
    check_max_length(512, 512, "minilm")
    check_max_length(10_000, None, "a model whose config does not say")
    with pytest.raises(ConfigError, match="max_length 600 exceeds the 512 positions of model 'minilm'"):
        check_max_length(600, max_positions("minilm"), "minilm")


def test_a_model_without_sdpa_attention_is_refused_with_the_setting_that_fixes_it():
    from istar_tune.models import _load_failure

    error = ValueError("BertForSequenceClassification does not support an attention implementation through "
                       "torch.nn.functional.scaled_dot_product_attention yet.")
    text = _load_failure("bert", "bert-base-cased", error)
    assert "set attn_implementation: eager" in text and "hub may be unreachable" not in text


def test_the_longest_input_comes_from_a_local_config_as_json_and_anything_else_through_autoconfig(tmp_path):
    import json
    import subprocess
    import sys

    code = ("import sys; from istar_tune.models import max_positions; "
            "print(max_positions('tiny-bert'), 'transformers' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.split() == ["512", "False"]  # a preflight needs no transformers
    stated = tmp_path / "stated"
    stated.mkdir()
    config = json.loads((Path(resolve_source(MODELS["minilm"])) / "config.json").read_text())
    (stated / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 128}))
    assert max_positions(str(stated)) == 128
    unstated = tmp_path / "unstated"
    unstated.mkdir()
    (unstated / "config.json").write_text(json.dumps({k: v for k, v in config.items()
                                                      if k != "max_position_embeddings"}))
    assert max_positions(str(unstated)) == 512  # AutoConfig's default for the model type


def test_an_installed_offline_package_that_does_not_import_says_its_own_error(monkeypatch):
    import importlib

    from istar_tune.errors import ConfigError
    from istar_tune.models import MODELS, resolve_source

    spec = next(s for s in MODELS.values() if s.offline_package)

    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(importlib, "import_module", missing)
    assert resolve_source(spec) == spec.source  # not installed: the hub id (or its cache)

    def broken(name):
        raise ImportError("libtorch_cuda.so: cannot open shared object file")

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(ConfigError, match=r"is installed but does not import \(ImportError: libtorch_cuda.so: cannot "
                                          r"open shared object file\): reinstall it"):
        resolve_source(spec)

    def lacks_a_dependency(name):
        raise ModuleNotFoundError("No module named 'safetensors'", name="safetensors")

    monkeypatch.setattr(importlib, "import_module", lacks_a_dependency)
    with pytest.raises(ConfigError, match="No module named 'safetensors'"):
        resolve_source(spec)
