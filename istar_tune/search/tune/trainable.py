"""The trial: a plain function of its sampled configuration that fine-tunes it
(:func:`istar_tune.training.loop.train`; a fused trial's bundle: :mod:`istar_tune.search.tune.fused`), resuming from
its newest readable checkpoint, and the configurations a trial's results stand for (a shared trial's epoch counts, a
fused trial's members); what it reports: :mod:`istar_tune.search.tune.reporter`.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from istar_tune import tracking
from istar_tune.config import Hyperparameters, RunSettings, from_dict, trial_epochs
from istar_tune.search.tune import checkpoints
from istar_tune.search.tune.fused import ERROR, member_last, train_fused
from istar_tune.search.tune.reporter import (
    DEV_OBJECTIVE,
    DEV_OBJECTIVE_AT,
    OBJECTIVE,
    OBJECTIVE_AT,
    TuneReporter,
)
from istar_tune.tasks import Task
from istar_tune.trial_config import (
    FUSED_KEY,
    SHARED_EPOCHS_KEY,
    completes,
    configuration,
    for_search,
    hyperparameters,
    members,
    trial_task,
)

# ---------------------------------------------------------------------------------------------- the trial


def configurations(trial_id: str, config: dict[str, Any]) -> list[tuple[str, dict[str, Any], int]]:
    """``(id, configuration, epochs)`` of each configuration a trial completes: the trial itself, or for a shared
    trial one per epoch count (id ``<trial id>-e<k>``; each gets its own MLflow run), for a fused trial one per
    member (id ``<trial id>-m<i>``; a shared member's ``<trial id>-m<i>-e<k>``)."""
    if config.get(FUSED_KEY):
        return [found for i, member in enumerate(members(config))
                for found in configurations(f"{trial_id}-m{i}", member)]
    if not config.get(SHARED_EPOCHS_KEY):
        return [(trial_id, config, int(config.get("epochs", Hyperparameters.epochs)))]
    return [(f"{trial_id}-e{k}", configuration(config, k), k) for k in completes(config)]


def dev_values(config: dict[str, Any], result: dict[str, Any] | None) -> dict[int, float]:
    """With held-out data: the dev value (chooses nothing) of each configuration of a trial by its epochs, from its
    last result (empty without held-out data)."""
    result = result or {}
    if config.get(FUSED_KEY):  # each member's, by its own epochs
        return {}
    last, dev = int(result.get("epoch", 0) or 0), result.get(DEV_OBJECTIVE)
    if not config.get(SHARED_EPOCHS_KEY):
        return {} if dev is None else {int(config.get("epochs", Hyperparameters.epochs)): dev}
    found = {k: result.get(f"{DEV_OBJECTIVE_AT}{k}", dev) if k <= last else dev for k in completes(config)}
    return {k: v for k, v in found.items() if v is not None}


def configuration_results(trial_id: str, config: dict[str, Any], result: dict[str, Any] | None
                          ) -> list[tuple[str, dict[str, Any], float | None, int, bool]]:
    """``(id, configuration, objective, last epoch, passed)`` of each configuration of a trial, from its last
    result. ``passed``: a shared trial completed it on its way (whatever happened to the trial later); it ended with
    the objective it reported at its last epoch. One the trial did not pass ends where the trial ended, with its last
    objective (as an unshared trial stopped there). A fused trial's member ended where it reported last, with its
    own objective; ``passed`` where it completed its epochs (:func:`~istar_tune.search.tune.fused.member_last`), a
    shared member's configurations as a shared trial's."""
    result = result or {}
    if config.get(FUSED_KEY):
        found = []
        for i, member in enumerate(members(config)):
            own = member_last(result, i)
            if member.get(SHARED_EPOCHS_KEY):
                found += configuration_results(f"{trial_id}-m{i}", member, own)
            else:
                last, k = own["epoch"], int(member.get("epochs", Hyperparameters.epochs))
                found.append((f"{trial_id}-m{i}", member, own.get(OBJECTIVE), last, last >= k and not own.get(ERROR)))
        return found
    last, objective = int(result.get("epoch", 0) or 0), result.get(OBJECTIVE)
    if not config.get(SHARED_EPOCHS_KEY):
        return [(trial_id, config, objective, last, False)]
    return [(cid, cfg, result.get(f"{OBJECTIVE_AT}{k}", objective) if k <= last else objective, min(k, last),
             k <= last) for cid, cfg, k in configurations(trial_id, config)]


def quiet_ray_loggers() -> None:
    """Ray's per-checkpoint info lines of every trial would drown the search's progress lines."""
    for name in ("ray.train", "ray.tune"):
        logging.getLogger(name).setLevel(logging.WARNING)


def trainable(config: dict[str, Any], settings: dict[str, dict[str, Any]], keep: dict[str, int]) -> None:
    """The Ray Tune trainable: a plain function of the sampled config (plus the fixed run settings and checkpoints
    to keep of each search in the experiment, by search name)."""
    import ray
    from ray import tune

    from istar_tune.training.memory import cap_gpu_memory, out_of_memory_explained, trial_shape

    quiet_ray_loggers()
    task = trial_task(config)  # a task that is not shipped: from the definition the config carries
    hparams = hyperparameters(config)
    run_settings = from_dict(RunSettings, for_search(config, settings), source="settings")
    if config.get(FUSED_KEY):  # several configurations as one bundle: istar_tune.search.tune.fused
        train_fused(config, run_settings, for_search(config, keep), task)
        return
    shared = completes(config)  # its own epochs alone unless shared
    reporter = TuneReporter(task.metric, for_search(config, keep), run_settings.checkpoint != "none",
                            completes=shared, epochs=trial_epochs(config), heartbeat_s=run_settings.heartbeat_s,
                            label=f"{tune.get_context().get_trial_id()} — {tracking.run_name(config)}")
    share = ray.get_runtime_context().get_assigned_resources().get("GPU")
    cap_gpu_memory(share)  # co-located trials: each within its share of the GPU's memory
    what = trial_shape(hparams.model, hparams.task, hparams.method, hparams.batch_size, run_settings.max_length)
    with out_of_memory_explained(what, share):
        _train(hparams, task, run_settings, reporter, shared)


def _train(hparams: Hyperparameters, task: Task, run_settings: RunSettings, reporter: TuneReporter,
           shared: tuple[int, ...]):
    """The trial's training, from its newest readable checkpoint when Tune restored one."""
    from ray import tune

    from istar_tune.training.loop import train
    from istar_tune.training.sigma import SIGMA_CACHE
    from istar_tune.training.state import read_state

    # Σ_S of the pretrained model, shared by the trials of this node's experiment folder that have the same key.
    cache = Path(tune.get_context().get_trial_dir()).parent / SIGMA_CACHE
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        train(hparams, run_settings, reporter, completes=shared, sigma_cache=cache, task=task)
        return
    with tempfile.TemporaryDirectory(prefix="istar-tune-resume-") as local:
        def copy(folder: Path) -> Path:
            state = read_state(folder)  # a missing or truncated state fails here, and an older checkpoint is tried
            shutil.copytree(folder, local, dirs_exist_ok=True)
            reporter.remember(state.get("records", []))
            return Path(local)

        state_dir, reporter.note = checkpoints.restore(checkpoint, copy)
        train(hparams, run_settings, reporter, resume_from=state_dir, completes=shared, sigma_cache=cache, task=task)


TRIAL_CONFIG = "config.yaml"
"""A trial folder's resolved configuration, in the form ``istar-tune train --config`` reads."""
def write_trial_config(folder: str | Path, config: dict[str, Any], settings: dict[str, Any]) -> None:
    """A trial folder's ``config.yaml``: its resolved configuration (:func:`istar_tune.tracking.train_config`)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / TRIAL_CONFIG).write_text(
        yaml.safe_dump(tracking.train_config(config, settings), sort_keys=False, allow_unicode=True), "utf-8")
