"""A bundle's training pass: K members (each a prepared run of its own configuration, sharing one batch stream)
stepping together through one fused forward and backward per batch (:mod:`istar_tune.training.fused`), each member
updated by its own optimizer, schedule and clipping exactly as :func:`istar_tune.training.epoch.train_epoch` updates
one run (:func:`~istar_tune.training.epoch.update`). A member whose loss or weights become non-finite leaves the
bundle with the error its run alone would raise, and the others go on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from istar_tune.errors import ConfigError
from istar_tune.training.epoch import (
    TRAIN_TOKENS,
    all_finite,
    epoch_batches,
    host_sync_steps,
    non_finite_loss,
    non_finite_weights,
    update,
)
from istar_tune.training.fused import FusedModel, MemberLoss, fused_forward_backward
from istar_tune.training.graphs import EagerSteps
from istar_tune.training.run import Run

SHARED = ("batch_size", "grad_accum", "seed", "task", "model")
"""What the members of a bundle share (one batch stream), besides the run settings."""


@dataclass
class Member:
    """One configuration in a bundle: its run (its model's weights live in the bundle's stacks while it trains), its
    optimizer, schedule and gradient scaler, its loss, its dropout generator, and why it left the bundle (``None``
    while it trains)."""

    run: Run
    optimizer: Any
    scheduler: Any
    scaler: Any
    loss: MemberLoss
    generator: torch.Generator
    error: str | None = None

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.run.model.parameters() if p.requires_grad]


def bundle_problems(members: list[Member]) -> list[str]:
    """Why ``members`` cannot share a batch stream: a hyperparameter of :data:`SHARED` or a run setting differs,
    a scaled loss (fp16: one loss scale per member), or a step mode other than eager."""
    first = members[0].run
    problems = []
    for k, member in enumerate(members[1:], start=1):
        for key in SHARED:
            if getattr(member.run.hparams, key) != getattr(first.hparams, key):
                problems.append(f"member {k}'s {key} is {getattr(member.run.hparams, key)!r}, member 0's "
                                f"{getattr(first.hparams, key)!r}: a bundle's members read one batch stream")
        if member.run.settings != first.settings:
            problems.append(f"member {k}'s run settings differ from member 0's: a bundle runs with one")
    if first.amp_dtype == torch.float16:
        problems.append("precision fp16 scales each run's loss by a factor of its own: use bf16 or fp32 to fuse")
    if first.step_mode.graphs or first.step_mode.compiles:
        problems.append(f"step_mode {first.step_mode.name} is not fused yet: use step_mode eager")
    return problems


def bundle_epoch(members: list[Member], epoch: int) -> dict[int, dict[str, float]]:
    """One pass over the shuffled training data for every member still in the bundle; returns each one's mean
    losses and tokens (as :func:`~istar_tune.training.epoch.train_epoch`), by its index in ``members``. A member
    that fails gets its ``error`` and no entry."""
    live = [k for k, m in enumerate(members) if m.error is None]
    if not live:
        return {}
    if problems := bundle_problems([members[k] for k in live]):
        raise ConfigError(problems)
    run = members[live[0]].run
    for k in live:
        members[k].run.model.train()
    batches, steps = epoch_batches(run, epoch, f"bundle of {len(live)}, epoch {epoch}")
    accum, sync_every = run.hparams.grad_accum, host_sync_steps(run.device)
    fused = FusedModel([members[k].run.model for k in live], [members[k].generator for k in live])
    sums = {k: torch.zeros(3, dtype=torch.float64, device=run.device) for k in live}
    first_bad = {k: torch.zeros((), dtype=torch.int64, device=run.device) for k in live}
    bad_loss = {k: torch.zeros((), dtype=torch.float64, device=run.device) for k in live}
    tokens, stepper = 0, EagerSteps(run.device)
    for step, batch in enumerate(batches):
        tokens += batch["input_ids"].numel()
        values = fused_forward_backward(fused, [members[k].loss for k in live], run.to_device(batch), accum)
        for row, k in enumerate(live):
            sums[k] += values[row]
            newly_bad = (first_bad[k] == 0) & ~torch.isfinite(values[row, 0])
            first_bad[k] = torch.where(newly_bad, step + 1, first_bad[k])
            bad_loss[k] = torch.where(newly_bad, values[row, 0], bad_loss[k])
        if (step + 1) % sync_every == 0 or step + 1 == steps:
            failed = [k for k in live if int(first_bad[k].item())]
            for k in failed:
                members[k].error = non_finite_loss(members[k].run, epoch, int(first_bad[k].item()),
                                                   bad_loss[k].item())
            if failed:  # the others go on, as a bundle of their own
                live = [k for k in live if k not in failed]
                if not live:
                    return {}
                fused = FusedModel([members[k].run.model for k in live], [members[k].generator for k in live])
        if (step + 1) % accum == 0 or step + 1 == steps:
            for k in live:
                m = members[k]
                update(m.run, m.params, m.optimizer, m.scheduler, m.scaler, stepper)
    out = {}
    for k in live:
        if not all_finite(members[k].params):
            members[k].error = non_finite_weights(members[k].run, epoch)
            continue
        totals = dict(zip(("train_loss", "task_loss", "penalty"), sums[k].tolist()))
        out[k] = {**{key: v / max(steps, 1) for key, v in totals.items()}, TRAIN_TOKENS: tokens}
    return out
