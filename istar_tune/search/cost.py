"""The cost model of a trial: what planning orders trials by, the dry run and the rehearsal wait for.

An assumption written down here, not a measurement: training examples of the task × epochs ÷ a per-model,
per-batch-size throughput × the method's relative step cost, plus a fixed start-up cost per trial, an evaluation pass
per epoch and, for I-STAR, the Σ_S pass per epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from istar_tune.config import HYPERPARAMETER_KEYS, Hyperparameters, from_dict, trial_epochs
from istar_tune.methods import get_method
from istar_tune.tasks import get_task

MODEL_THROUGHPUT = {"bert": 600.0, "albert": 550.0, "distilbert": 1100.0, "minilm": 3000.0, "tiny-bert": 30000.0}
"""Training examples per second at batch size 32 and 256 tokens on one data-centre GPU (assumed, not measured);
other models get :data:`DEFAULT_THROUGHPUT`."""
DEFAULT_THROUGHPUT = 600.0
STARTUP_SECONDS = 45.0
"""Loading the model and tokenising the data, once per trial start (also after a retry)."""
EVAL_SPEEDUP = 3.0
"""Evaluation and the Σ_S pass run forward only: this many times the training throughput."""
SHRINKAGE_TOKENS_PER_EXAMPLE = 128.0


# ----------------------------------------------------------------------------------------------- cost model


def throughput(model: str, batch_size: int) -> float:
    """Training examples per second: the model's rate at batch 32, lower for smaller batches."""
    base = MODEL_THROUGHPUT.get(model, DEFAULT_THROUGHPUT)
    return base * (batch_size / (batch_size + 16.0)) / (32.0 / 48.0)


def typed_hyperparameters(config: Mapping[str, Any]):
    return from_dict(Hyperparameters, {k: v for k, v in config.items() if k in HYPERPARAMETER_KEYS},
                     source="trial config")


def epoch_seconds(config: Mapping[str, Any], shrinkage_tokens: int = 250_000) -> float:
    """Modelled seconds of one training epoch of ``config``, its evaluation and (I-STAR) its Σ_S pass."""
    hp = typed_hyperparameters(config)
    task, method = get_task(hp.task), get_method(hp.method)
    rate = throughput(hp.model, hp.batch_size)
    seconds = task.train_examples / rate * method.relative_step_cost
    seconds += task.eval_examples / (rate * EVAL_SPEEDUP)
    if method.uses_zeta:
        seconds += min(shrinkage_tokens / SHRINKAGE_TOKENS_PER_EXAMPLE, task.train_examples) / (rate * EVAL_SPEEDUP)
    return seconds


def trial_seconds(config: Mapping[str, Any], shrinkage_tokens: int = 250_000) -> float:
    """Modelled seconds of a whole trial on one GPU: start-up plus every epoch it reports."""
    return STARTUP_SECONDS + trial_epochs(config) * epoch_seconds(config, shrinkage_tokens)
