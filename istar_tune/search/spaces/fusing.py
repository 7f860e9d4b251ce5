"""What ``search.fuse`` bundles (:mod:`istar_tune.search.tune.fused` trains a bundle): why a group's configurations
cannot join fused trials, the settings a fused search is refused with, and the members of each trial of a group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from istar_tune.config import EAGER_ATTENTION
from istar_tune.errors import ConfigError
from istar_tune.methods import get_method
from istar_tune.search.backends import get_backend
from istar_tune.search.spaces.grid import grid_configs
from istar_tune.step_modes import STEP_MODES
from istar_tune.trial_config import FUSED_KEY, fuse

# ``space`` below is a :class:`~istar_tune.search.spaces.space.SearchSpace`, ``group`` one of its groups (that module
# imports this one).


def fuse_problem(space: Any, group: Any) -> str | None:
    """Why the configurations of ``group`` do not train as fused trials (``None``: those that read one batch
    stream do, :func:`istar_tune.trial_config.fuse`)."""
    if space.fuse == 1:
        return "search.fuse is 1"
    if get_method(group.method).second_stage:
        return f"{group.method} has a second stage, which is not fused"
    settings = space.run_settings()
    if settings.precision == "fp16":
        return "precision fp16 scales each run's loss by a factor of its own: use bf16 or fp32 to fuse"
    mode = STEP_MODES[settings.step_mode]
    if mode.graphs or mode.compiles:
        return f"step_mode {mode.name} is not fused yet: use step_mode eager"
    return None


def check_fuse(space: Any, path: Path, scheduler) -> None:
    """Refuse ``search.fuse`` where it cannot bundle: configurations not known before the search starts, sdpa
    attention's dropout, a scheduler (a bundle's members end by their own epochs)."""
    if space.fuse > 1 and space.stage != "seeds" and not get_backend(space.algorithm).enumerates:
        raise ConfigError(f"{path}: search.fuse: {space.fuse} bundles a grid's configurations, but "
                          f"search.algorithm {space.algorithm} hands out one configuration at a time: use "
                          "algorithm grid, or fuse 1")
    if space.fuse > 1 and space.run_settings().attn_implementation != EAGER_ATTENTION:
        raise ConfigError(f"{path}: search.fuse: {space.fuse} needs settings.attn_implementation: eager (sdpa draws "
                          "attention dropout inside its kernel, where no member's own generator reaches)")
    if space.fuse > 1 and scheduler.build is not None and space.stage != "seeds":
        raise ConfigError(f"{path}: search.fuse: {space.fuse} with scheduler {scheduler.name}: an early-stopping "
                          "scheduler stops whole trials, and a fused trial's members are judged one by one: "
                          "use scheduler none with fuse (a replay of the fused grid says what the scheduler "
                          "would have saved), or fuse 1")


def bundles_in(space: Any, group: Any) -> list[int]:
    """The members of each trial of ``group`` as ``search.fuse`` bundles it (configurations of one batch stream,
    ``fuse`` a trial; those that differ only in ``epochs`` one member where they share a trial)."""
    shares = space.sharing_problem(group) is None
    configs = (space.variants(group.model, group.method) if space.stage == "seeds"
               else grid_configs({}, group.domains, space.num_samples, space.seed, shares))
    return [len(trial.get(FUSED_KEY, [trial])) for trial in fuse(configs, space.fuse)]
