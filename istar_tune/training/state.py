"""What a run writes: the resumable state a reporter checkpoints after every epoch (tensors and plain
data), the output folder's ``config.yaml``, ``metrics.json`` and best checkpoint, and the hand-over of a record
(with its state folder) to the reporter.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from istar_tune.config import as_dict
from istar_tune.errors import TrainingError
from istar_tune.models import (
    hidden_size,
    model_spec,
    resolve_source,
)
from istar_tune.tasks import Task, definition_mapping
from istar_tune.training.run import Run
from istar_tune.training.scale import folded
from istar_tune.trial_config import TASK_DEFINITION_KEY

STATE_FILE = "trainer_state.pt"
BEST_CHECKPOINT = "best-checkpoint"
METRICS_FILE = "metrics.json"
CONFIG_FILE = "config.yaml"
ISOLAYER_FILE = "isolayer.pt"
"""IsoLayer's trained layer (a state dict), beside the model in a best checkpoint."""


class Reporter(Protocol):
    """Receives each epoch's record. ``wants_checkpoint``: train writes a resumable state folder for it. A reporter
    with a ``task_read(task)`` method is handed the task as read, before the first epoch (the CLI prints its line);
    one with ``data_read(task, data)`` the tokenised splits (a search's trial describes them to MLflow)."""

    wants_checkpoint: bool

    def __call__(self, record: dict[str, Any], checkpoint_dir: Path | None) -> None: ...


# ---------------------------------------------------------------------------------------- state and outputs


@dataclass(frozen=True)
class Saved:
    """What a checkpoint after an epoch says of the run: ``epoch`` trained, its ``records`` and ``best`` (epoch,
    score); ``contents``: ``state`` (everything a retried trial needs to continue), ``records`` (the epoch records
    only) or ``weights`` (the records and the model weights), after the last epoch as the ``checkpoint`` setting
    says. ``stopped``: the fine-tuning stage ended early (``patience``); ``best_model``: the scored epoch's weights
    where they are not the current ones; ``isolayer``: IsoLayer's layer; ``finished``: nothing is left to train."""

    epoch: int
    records: list[dict]
    best: tuple[int, float]
    contents: str = "state"
    stopped: bool = False
    best_model: dict | None = None
    isolayer: dict | None = None
    finished: bool = False


@dataclass(frozen=True)
class Checkpointer:
    """A run with its optimizer, scheduler and gradient scaler: what :meth:`save` writes a :class:`Saved` from, and
    :meth:`load` reads one back into."""

    run: Run
    optimizer: Any
    scheduler: Any
    scaler: Any

    def save(self, directory: Path, saved: Saved) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        run = self.run
        state: dict[str, Any] = {"epoch": saved.epoch, "records": saved.records, "best": saved.best,
                                 "hparams": as_dict(run.hparams), "settings": as_dict(run.settings),
                                 "stopped": saved.stopped, "finished": saved.finished, **task_definition(run.task)}
        if run.data.label_scale is not None:  # a regression's z-scores: what a model logged from this state folds in
            state[LABEL_SCALE] = run.data.label_scale.as_config()
        if saved.contents in ("state", "weights"):
            state["model"] = compact(run.model.state_dict())
            if saved.isolayer is not None:
                state["isolayer"] = saved.isolayer
        if saved.contents == "state":
            state.update(optimizer=self.optimizer.state_dict(), scheduler=self.scheduler.state_dict(),
                         scaler=self.scaler.state_dict(), torch_rng=torch.get_rng_state(),
                         numpy_rng=_numpy_rng_state(), python_rng=random.getstate(), cuda_rng=_cuda_rng_state())
            if saved.best_model is not None:
                state["best_model"] = saved.best_model
        torch.save(state, directory / STATE_FILE)

    def writer(self, saved: Saved) -> Callable[[Path], None]:
        """What :func:`report_epoch` calls with the folder to write ``saved`` into."""
        return functools.partial(self.save, saved=saved)

    def load(self, directory: Path) -> dict[str, Any]:
        """Read a saved state and, where it can be continued, load it into the run; returns the state (a state
        without optimizer state belongs to a trial with nothing left to train)."""
        run = self.run
        state = read_state(directory)
        if state["hparams"] != as_dict(run.hparams):
            raise TrainingError(f"checkpoint {directory} belongs to different hyperparameters; start a new run")
        state.setdefault("stopped", False)
        if "optimizer" not in state:  # the trial had finished: nothing is left to train
            state["finished"] = True
            return state
        run.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["torch_rng"].cpu())
        _set_numpy_rng_state(state["numpy_rng"])
        random.setstate(state["python_rng"])
        _set_cuda_rng_state(state.get("cuda_rng") or [])  # a GPU trial goes on with its dropout stream
        return state


def compact(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict whose tensors are views of larger storages (a bundle's member: its rows of the stacked weights)
    with those copied out: ``torch.save`` writes a view's whole storage. Other tensors stay as they are."""
    return {k: v.clone() if v.untyped_storage().nbytes() > v.numel() * v.element_size() else v
            for k, v in state.items()}


def _numpy_rng_state() -> dict[str, Any]:
    """NumPy's global RNG state as tensors and plain values (a state file holds nothing that needs unpickling)."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    return {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "position": int(position),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def _set_numpy_rng_state(state: dict[str, Any]) -> None:
    np.random.set_state((state["name"], state["keys"].numpy().astype(np.uint32), state["position"],
                         state["has_gauss"], state["cached_gaussian"]))


def load_data(path: Path) -> Any:
    """A file written by ``torch.save``, read as tensors and plain data only (``weights_only=True``): a file that
    needs any other object to be built (a crafted pickle, code to run) is refused, never executed. Fails on a
    missing or truncated file too."""
    import pickle

    try:
        return torch.load(Path(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:  # torch's text advises weights_only=False: not quoted, never followed
        found = re.search(r"(?:Unsupported global|GLOBAL)\W+([\w.]+)", str(err))
        named = f" (it names {found.group(1)})" if found else ""
        raise TrainingError(f"{path} holds objects other than tensors and plain data{named}, refused unread: "
                            "istar-tune loads checkpoints as tensors only, so a file it did not write (or one altered "
                            "since) runs no code; use a checkpoint istar-tune wrote, or train again") from None
    except (RuntimeError, EOFError, OSError) as err:  # missing, truncated or damaged
        seen = (str(err).splitlines() or [type(err).__name__])[0].split(". ")[0][:160]
        raise TrainingError(f"{path} cannot be read ({seen}): the file is missing, truncated or damaged (written "
                            "while a disk filled, or copied in part); use another checkpoint or train again") from None


def read_state(directory: Path) -> dict[str, Any]:
    """The state saved in ``directory`` (fails on a missing, truncated or untrusted file: :func:`load_data`)."""
    return load_data(Path(directory) / STATE_FILE)


def _cuda_rng_state() -> list:
    """Every GPU's random state (dropout's stream on CUDA), empty on a machine without one."""
    return torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []


def _set_cuda_rng_state(states: list) -> None:
    if states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([state.cpu() for state in states])


LABEL_SCALE = "label_scale"
"""Key of a saved state holding a regression's training scale (``{mean, std}``): its weights predict z-scores, and a
model saved from the state folds the scale in (:mod:`istar_tune.training.scale`)."""


def task_definition(task: Task) -> dict[str, Any]:
    return {} if task.shipped else {TASK_DEFINITION_KEY: definition_mapping(task)}


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=float) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def resolved_config(run: Run) -> dict[str, Any]:
    config = run.model.config
    return {
        "hyperparameters": {**as_dict(run.hparams), "lam": run.hparams.penalty_weight},
        "settings": as_dict(run.settings),
        **task_definition(run.task),
        "resolved": {
            "task": run.task.name,
            "metric": run.task.metric,
            "model_source": resolve_source(model_spec(run.settings.init_checkpoint or run.hparams.model)),
            "hidden_size": hidden_size(run.model),
            "num_hidden_layers": getattr(config, "num_hidden_layers", getattr(config, "n_layers", None)),
            "device": str(run.device),
            "precision": str(run.amp_dtype).replace("torch.", "") if run.amp_dtype else "fp32",
            "train_examples": len(run.data.train),
            "eval_examples": len(run.data.validation),
            "torch": str(torch.__version__),
        },
    }


def report_epoch(reporter: Reporter | None, record: dict, write_state: Callable[[Path], None] | None) -> None:
    """Hand ``record`` to the reporter, with a state folder written by ``write_state`` when it wants one."""
    if reporter is None:
        return
    if write_state is None or not getattr(reporter, "wants_checkpoint", False):
        reporter(record, None)
        return
    with tempfile.TemporaryDirectory(prefix="istar-tune-state-") as tmp:
        write_state(Path(tmp))
        reporter(record, Path(tmp))


def save_pretrained(run: Run, directory: Path) -> None:
    """Model and tokenizer, loadable with ``from_pretrained`` (written to a sibling folder, then swapped in); a
    regression model with its scale folded into its output layer (:mod:`istar_tune.training.scale`)."""
    staging = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    with folded(run.model, run.data.label_scale):  # a regression predicts in its data's scale once saved
        run.model.save_pretrained(staging)
    run.tokenizer.save_pretrained(staging)
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(staging, directory)
