"""A stand-in for fine-tuning, for rehearsals of a search at cluster scale (never the default).

Under ``--simulate`` every trial runs as usual (Ray schedules it with its resources, Tune gets a report and a real
checkpoint every epoch through the real reporter, the MLflow logger, retries and resume all work) except the model
training: the trial waits for the duration the cost model (``cost.py``) gives the real trial, scaled by
``time_factor``, writes a checkpoint of ``checkpoint_bytes``, and reports per-epoch metrics drawn from a
deterministic synthetic landscape whose best configuration per (model, task, method) is known (:func:`optimum`). It
never imports torch. The landscape is an assumption, written down here, not a measurement.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from istar_tune.config import RunSettings, trial_epochs
from istar_tune.errors import ConfigError
from istar_tune.methods import SHRINKAGE_TOKENS, get_method
from istar_tune.search.spaces.cost import (
    STARTUP_SECONDS,
    Throughput,
    epoch_seconds,
    packing_of,
    shrinkage_seconds,
    typed_hyperparameters,
)
from istar_tune.search.tune import checkpoints
from istar_tune.search.tune.reporter import TuneReporter
from istar_tune.search.tune.trainable import quiet_ray_loggers
from istar_tune.tasks import EXTRACTIVE_QA
from istar_tune.trial_config import SHARED_EPOCHS_KEY, completes, for_search, trial_task

OPTIMUM_CANDIDATES = {"learning_rate": (1e-5, 3e-5, 5e-5), "batch_size": (8, 16, 32), "epochs": (3, 4, 5),
                      "lam": (-5.0, -3.0, -1.0, 1.0, 3.0, 5.0), "zeta": (0.2, 0.4, 0.6, 0.8)}
"""The landscape's optimum of each group is one of these values per hyperparameter (the paper's grid), drawn by a
hash of (model, task, method, seed)."""
PENALTIES = {"learning_rate": 0.03 / math.log(3.0), "batch_size": 0.02, "epochs": 0.015, "lam": 0.005,
             "zeta": 0.05}
"""Score lost per unit of distance from the optimum: |ln lr ratio|, |log2 batch ratio|, |Δepochs|, |Δλ|, |Δζ|.
The smallest step of the paper's grid costs at least 0.01 (lr 3e-5 → 5e-5: 0.014)."""


@dataclass(frozen=True)
class Simulation:
    """Settings of a rehearsal: how fast simulated time runs, what a checkpoint weighs, how noisy metrics are."""

    time_factor: float = 1e-3
    """Seconds waited per second of the modelled real trial (1e-3: a 2-hour trial takes 7.2 s)."""
    checkpoint_bytes: int = 65536
    """Bytes of a full-state checkpoint (a BERT-base model with its AdamW state: about 1.32e9)."""
    noise: float = 0.002
    """Half-width of the seeded uniform noise on every metric; below half the smallest landscape step, so the best
    trial of a grid is always the landscape's optimum."""
    seed: int = 0
    """Seed of the landscape (which configuration is best in each group)."""
    gpus: int = 8
    """Logical GPUs a local Ray instance declares for the rehearsal (a CPU-only machine rehearses a GPU search; a
    cluster's own GPUs are used as they are)."""
    throughput: Throughput | None = None
    """Measured rates (``--throughput``/``--tokens-per-second``); else the assumed ones. Each trial runs at the rate
    of the packing its GPU share makes (:meth:`Throughput.at`); with the assumed rates, ``k`` trials sharing a GPU
    share its speed (no gain assumed without a measurement)."""

    def __post_init__(self):
        problems = []
        if not (math.isfinite(self.time_factor) and 0 <= self.time_factor <= 1):
            problems.append(f"--time-factor must lie in [0, 1] (1: a rehearsed trial takes as long as the real one; "
                            f"1e-3, the default: a 2-hour trial takes 7.2 s), got {self.time_factor:g}")
        if self.gpus < 0:
            problems.append(f"simulation gpus must be non-negative, got {self.gpus}")
        if self.checkpoint_bytes < 0:
            problems.append(f"simulation checkpoint_bytes must be non-negative, got {self.checkpoint_bytes}")
        if not 0 <= self.noise < 0.0035:
            problems.append(f"simulation noise must lie in [0, 0.0035) so the optimum stays identifiable, got "
                            f"{self.noise}")
        if problems:
            raise ConfigError(problems)


# ------------------------------------------------------------------------------------------------ landscape


def _unit(*parts: Any) -> float:
    """A deterministic number in [0, 1) from ``parts`` (the same in every process, unlike ``hash``)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def optimum(model: str, task: str, method: str, seed: int = 0) -> dict[str, Any]:
    """The known best configuration of a group: one value per searched hyperparameter the method uses."""
    spec = get_method(method)
    chosen = {}
    for key, values in OPTIMUM_CANDIDATES.items():
        if key in ("lam", "zeta") and not spec.uses_zeta:
            continue  # λ and ζ are searched for I-STAR; CosReg keeps its λ (the paper's grid fixes it)
        chosen[key] = values[int(_unit(seed, model, task, method, key) * len(values))]
    if spec.uses_lambda and "lam" not in chosen:
        chosen["lam"] = spec.default_lambda
    return chosen


def peak(model: str, task: str, method: str, seed: int = 0) -> float:
    """The group's score at its optimum: in [0.6, 0.9), shifted slightly per method."""
    shift = {0: 0.0, 1: 0.004, 2: -0.003}[int(_unit(seed, model, task, method, "shift") * 3)]
    return 0.6 + 0.3 * _unit(seed, model, task, "peak") + shift


def expected_score(config: Mapping[str, Any], seed: int = 0) -> float:
    """The noiseless task metric after the last epoch of ``config`` (a fraction; SQuAD's F1 is this × 100)."""
    hp = typed_hyperparameters(config)
    best = optimum(hp.model, hp.task, hp.method, seed)
    score = peak(hp.model, hp.task, hp.method, seed)
    distance = {"learning_rate": abs(math.log(hp.learning_rate / best["learning_rate"])),
                "batch_size": abs(math.log2(hp.batch_size / best["batch_size"])),
                "epochs": abs(hp.epochs - best["epochs"])}
    if "lam" in best:
        distance["lam"] = abs(hp.penalty_weight - best["lam"])
    if "zeta" in best:
        distance["zeta"] = abs(hp.zeta - best["zeta"])
    return score - sum(PENALTIES[key] * value for key, value in distance.items())


def epoch_metrics(config: Mapping[str, Any], epoch: int, simulation: Simulation) -> dict[str, float]:
    """The metrics a simulated trial reports after ``epoch``: its task's metrics, eval IsoScore* and a loss."""
    hp = typed_hyperparameters(config)
    task, method = trial_task(dict(config)), get_method(hp.method)
    # Epoch e of a run is the last epoch of the same configuration with e epochs (a run never depends on its total
    # epochs under a constant learning rate): what shared epoch prefixes rely on, and rehearse.
    prefix = {k: v for k, v in config.items() if k not in ("epochs", SHARED_EPOCHS_KEY)}
    noise = simulation.noise * (2.0 * _unit(simulation.seed, sorted(prefix.items()), epoch, "noise") - 1.0)
    value = expected_score({**prefix, "epochs": min(epoch, hp.epochs)}, simulation.seed) + noise
    if epoch > hp.epochs:  # a second stage: closer to the configuration's score with every epoch of it
        value -= 0.03 * (trial_epochs(config) - epoch)
    lam = hp.penalty_weight if method.uses_zeta else 0.0
    isoscore = min(0.95, max(0.01, 0.2 + 0.04 * lam + 0.02 * _unit(simulation.seed, hp.model, hp.task, epoch)))
    metrics = {"eval_isoscore_star": isoscore, "train_loss": max(0.01, 1.0 - value)}
    if task.problem_type == EXTRACTIVE_QA:
        metrics.update(f1=100.0 * value, exact_match=100.0 * value - 8.0)
    else:
        metrics[task.metric] = value
    return metrics


# ---------------------------------------------------------------------------------------------- the trial

STATE_FILE = "simulated-state.json"
PAYLOAD_FILE = "payload.bin"
WEIGHTS_SHARE = 1.0 / 3.0
"""Model weights as a share of the full state (AdamW keeps two moments per weight)."""


def _checkpoint_bytes(mode: str, final: bool, simulation: Simulation) -> int:
    if not final or mode == "state":
        return simulation.checkpoint_bytes
    if mode == "weights":
        return int(simulation.checkpoint_bytes * WEIGHTS_SHARE)
    return 0  # resume: once the trial is over, only its records


def simulated_trainable(config: dict[str, Any], settings: dict[str, dict[str, Any]], simulation: Simulation,
                        keep: dict[str, int]) -> None:
    """The Tune trainable of a rehearsal: the same reports and checkpoints as
    :func:`~istar_tune.search.tune.trainable.trainable`, through the same
    :class:`~istar_tune.search.tune.reporter.TuneReporter` (``settings`` and ``keep`` by search name, as there)."""
    from ray import tune

    quiet_ray_loggers()
    settings, keep = for_search(config, settings), for_search(config, keep)
    mode = settings.get("checkpoint", RunSettings.checkpoint)
    shrinkage = int(settings.get("shrinkage_tokens") or SHRINKAGE_TOKENS)
    closing = completes(config)
    reporter = TuneReporter(trial_task(config).metric, keep, wants_checkpoint=mode != "none", completes=closing)
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        epoch, reporter.note = checkpoints.restore(checkpoint, lambda folder: _read_state(folder)["epoch"])
        start = int(epoch or 0)
        reporter.remember([{"epoch": e, **epoch_metrics(config, e, simulation)} for e in range(1, start + 1)])
    epochs = trial_epochs(config)
    rates, slowdown = packed_rates(simulation.throughput)
    per_epoch = epoch_seconds(config, shrinkage, rates) * simulation.time_factor * slowdown
    # A method without Σ_S in its loss pays a Σ_S pass only at the last epoch of each configuration it completes.
    sigma = 0.0 if get_method(config["method"]).uses_zeta else shrinkage_seconds(config, shrinkage, rates)
    sigma *= simulation.time_factor * slowdown
    time.sleep(STARTUP_SECONDS * simulation.time_factor)
    for epoch in range(start + 1, epochs + 1):
        began = time.monotonic()
        time.sleep(per_epoch + (sigma if epoch in closing else 0.0))
        record = {"epoch": epoch, **epoch_metrics(config, epoch, simulation), "epoch_time_s": time.monotonic() - began,
                  "simulated": 1, "torch_imported": int("torch" in sys.modules)}
        if mode == "none":
            reporter(record, None)
            continue
        size = _checkpoint_bytes(mode, epoch == epochs, simulation)
        with tempfile.TemporaryDirectory(prefix="istar-sim-") as folder:
            Path(folder, STATE_FILE).write_text(json.dumps({"epoch": epoch, "bytes": size}))
            if size:
                with open(Path(folder, PAYLOAD_FILE), "wb") as handle:
                    handle.write(os.urandom(min(size, 1 << 20)) * (size // (1 << 20)) + os.urandom(size % (1 << 20)))
            reporter(record, Path(folder))


def packed_rates(measured: Throughput | None) -> tuple[Throughput | None, int]:
    """This trial's rates at the packing its GPU share makes (Ray's assigned ``GPU``), and the factor its modelled
    time is slowed by: 1 with measured rates (they are per trial at that packing), else the packing (the assumed
    rates are a whole GPU's, shared without gain)."""
    import ray

    packing = packing_of(ray.get_runtime_context().get_assigned_resources().get("GPU") or 0.0)
    return (measured.at(packing), 1) if measured is not None else (None, packing)


def _read_state(folder: Path) -> dict[str, Any]:
    state = json.loads((Path(folder) / STATE_FILE).read_text())
    payload = Path(folder) / PAYLOAD_FILE
    if state.get("bytes") and (not payload.is_file() or payload.stat().st_size != state["bytes"]):
        raise ValueError(f"{payload.name} is truncated")
    return state
