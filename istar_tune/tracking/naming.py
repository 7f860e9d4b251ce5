"""What a trial's run is called and what it logs: its hyperparameters resolved (defaults, λ of its method), the
params its method reads and the search's settings, its name in words, its task's facts for readers, and the one
line of an error it shows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from istar_tune.config import as_dict
from istar_tune.errors import ConfigError
from istar_tune.methods import unused_hyperparameters
from istar_tune.tasks import facts, is_shipped
from istar_tune.tracking.store import TAG_TASK
from istar_tune.trial_config import FUSED_MARK, TASK_DEFINITION_KEY, hyperparameters, trial_task


def resolved_hyperparameters(config: dict[str, Any]) -> dict[str, Any]:
    """Every hyperparameter of a trial, defaults filled in and λ resolved for the method."""
    hparams = hyperparameters(config)
    return {**as_dict(hparams), "lam": hparams.penalty_weight}


def logged_params(config: dict[str, Any], settings: dict[str, Any] | None = None) -> dict[str, str]:
    """A trial run's params: the hyperparameters its method reads (defaults filled in, λ resolved), and the
    search's run settings as ``setting.<name>``."""
    values = resolved_hyperparameters(config)
    unused = unused_hyperparameters(values["method"])
    params = {k: str(v) for k, v in values.items() if k not in unused}
    params.update({f"{SETTING_PREFIX}{k}": str(v) for k, v in (settings or {}).items() if v is not None})
    if config.get(FUSED_MARK):  # trained as a fused trial's member: an exactness setting of its own
        params[f"{SETTING_PREFIX}fused"] = "yes"
    return dict(sorted(params.items()))


def task_tags(config: dict[str, Any]) -> dict[str, str]:
    """A trial run's word on a task that is not shipped (its name, display name, problem type, metric): what a table,
    a plot or ``status`` read in another process needs of it."""
    if not config.get("task") or is_shipped(str(config["task"])):
        return {}
    try:
        task = trial_task(config)
    except ConfigError:
        return {}
    return {TAG_TASK: json.dumps(facts(task), sort_keys=True)}


SETTING_PREFIX = "setting."
"""Prefix of the run settings among a trial run's params."""


def run_name(config: dict[str, Any]) -> str:
    """What a trial's configuration is, in a few words (its MLflow run name, its progress lines): model and task
    first (what a narrow name column still shows), then the method and only the hyperparameters that apply, e.g.
    ``bert/rte istar λ=-1 ζ=0.2 lr=1e-4 bs=32 ep=3 s42``."""
    values = resolved_hyperparameters(config)
    return f"{Path(str(values['model'])).name}/{values['task']} {configuration_words(config)}"


def configuration_words(config: dict[str, Any]) -> str:
    """A configuration's method and the hyperparameters that apply to it, e.g. ``istar λ=-1 ζ=0.2 lr=1e-4 bs=32 ep=3
    s42`` (:func:`run_name` without the model and task)."""
    values = resolved_hyperparameters(config)
    unused = unused_hyperparameters(values["method"])
    words = [values["method"]]
    for key, short in (("lam", "λ"), ("zeta", "ζ"), ("alpha", "α")):
        if key not in unused:
            words.append(f"{short}={_short(values[key])}")
    if values.get("layer") is not None:
        words.append(f"layer={values['layer']}")
    words += [f"lr={_short(values['learning_rate'])}", f"bs={values['batch_size']}", f"ep={values['epochs']}"]
    if "isolayer_epochs" not in unused:
        words += [f"layer-lr={_short(values['isolayer_learning_rate'])}", f"layer-ep={values['isolayer_epochs']}"]
    return " ".join([*words, f"s{values['seed']}"])


def _short(value: float) -> str:
    """A number as people write it: 1e-4 (not 0.0001), 3e-5, 0.2, -1."""
    if value and abs(value) < 1e-2:
        mantissa, exponent = f"{value:.3e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}"


def error_summary(text: str, fallback: str) -> str:
    """The last line of an error text that names the error (``...Error: ...``), else its last line."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    named = [line for line in lines if "Error:" in line or "Exception:" in line]
    return (named[-1] if named else (lines[-1] if lines else fallback)).strip()


def trial_error_text(trial) -> str:
    """The last line that names the error in a trial's error file (the full traceback stays with Ray).

    Ray writes the file on the driver first (``error_file``) and syncs it to storage later (``get_error``).
    """
    text = ""
    try:
        local = trial.error_file
        if local and Path(local).is_file():
            text = Path(local).read_text(errors="replace")
        else:
            error = trial.get_error()
            text = str(error) if error is not None else ""
    except Exception:  # noqa: BLE001 - an unreadable error file must not break logging
        text = ""
    return error_summary(text, "unknown error")


SEARCH_ONLY_SETTINGS = ("checkpoint", "heartbeat_s", "progress", "output_dir", "save_checkpoint")
"""Settings of a search's trials that mean nothing to one ``train`` run."""


def train_config(config: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """A trial's configuration as ``istar-tune train --config`` reads it: the hyperparameters its method reads
    (defaults filled in) and the run settings that mean something to one run (what a trial folder's ``config.yaml``
    and ``export`` write)."""
    values = resolved_hyperparameters(config)
    if config.get(TASK_DEFINITION_KEY):  # a task that is not shipped: inline, so the file trains anywhere
        values["task"] = config[TASK_DEFINITION_KEY]
    unused = unused_hyperparameters(values["method"])
    return {**{k: v for k, v in values.items() if k not in unused},
            **{k: v for k, v in settings.items() if k not in SEARCH_ONLY_SETTINGS and v is not None}}
