"""What ``calibrate`` is asked to measure, checked before any process starts: the numbers' bounds, the packings, the
compile modes for this machine, the method, the model and the task, made into a
:class:`~istar_tune.apps.calibrate.Job`. The command line and a Python caller go through the same checks."""

from __future__ import annotations

import re
from pathlib import Path

from istar_tune.apps.calibrate import Job
from istar_tune.errors import ConfigError

LEAST = {"batch_size": 1, "max_length": 8, "steps": 1, "warmup": 1}
"""The smallest value of each number a calibration takes (a sequence shorter than 8 tokens measures no real step)."""
COMPILE = ("auto", "off", "only")
"""``auto``: eager and, on CUDA, compiled too; ``off``: eager only; ``only``: compiled only."""


def _counts(text: str, flag: str, what: str, example: str) -> tuple[int, ...]:
    """``"1,2,4"`` → (1, 2, 4): whole numbers from 1 to 64, each once (one line naming ``flag`` otherwise)."""
    try:
        counts = tuple(dict.fromkeys(int(part) for part in text.split(",") if part.strip()))
    except ValueError:
        counts = ()
    if not counts or any(k < 1 or k > 64 for k in counts):
        raise ConfigError(f"{flag} {text!r}: give {what} as comma-separated whole numbers from 1 to 64, e.g. {example}")
    return counts


def parse_packings(text: str) -> tuple[int, ...]:
    """``"1,2,4,8"`` → (1, 2, 4, 8): trials per GPU, each once, from 1 to 64."""
    return _counts(text, "--packing", "trials per GPU", "1,2,4,8")


def parse_fuses(text: str) -> tuple[int, ...]:
    """``"1,4,8"`` → (1, 4, 8): configurations a fused trial trains (``search.fuse``), each once, from 1 to 64."""
    return _counts(text, "--fuse", "members per fused trial", "1,4,8")


def compile_modes(compile: str, device: str) -> tuple[str, ...]:
    """The modes each packing is measured in (:data:`COMPILE`); ``device``: ``auto``, ``cuda`` or ``cpu``."""
    if compile not in COMPILE:
        raise ConfigError(f"--compile {compile!r}: choose {', '.join(COMPILE)}")
    if compile == "off":
        return ("eager",)
    if compile == "only":
        return ("compiled",)
    import torch

    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    return ("eager", "compiled") if cuda else ("eager",)


def calibration_job(model: str, task: str, method: str, batch_size: int, max_length: int, steps: int, warmup: int,
                    data_dir: str | None, device: str) -> Job:
    """The job each co-located process trains, every value checked (a task file's path made absolute: the processes
    run it from anywhere)."""
    from istar_tune.methods import get_method
    from istar_tune.models import check_model_name

    numbers = {"batch_size": batch_size, "max_length": max_length, "steps": steps, "warmup": warmup}
    problems = [f"--{name.replace('_', '-')} must be at least {LEAST[name]}, got {value}"
                for name, value in numbers.items() if value < LEAST[name]]
    if re.fullmatch(r"cuda(:\d+)?", device or ""):
        import torch

        if not torch.cuda.is_available():
            problems.append(f"--device {device}: CUDA is not available on this machine: use --device cpu or auto")
    if problems:
        raise ConfigError(problems)
    get_method(method)
    check_model_name(model)
    task = str(Path(task).resolve()) if Path(task).is_file() else task
    return Job(model=model, task=task, method=method, batch_size=batch_size, max_length=max_length, steps=steps,
               warmup=warmup, data_dir=data_dir, device=device)
