"""A bundle: K configurations of one batch stream fine-tuned together (:func:`train_bundle`), each member's
result what :func:`istar_tune.training.loop.train` gives it alone.

Each epoch's training pass (:func:`bundle_epoch`) steps every member through one fused forward and backward per batch
(:mod:`istar_tune.training.fused`), each updated by its own optimizer, schedule and clipping exactly as
:func:`~istar_tune.training.epoch.train_epoch` updates one run (:func:`~istar_tune.training.epoch.update`); the
rest of each member's stage is the plain path's own (:mod:`istar_tune.training.fitting`: its setup, resume, Σ_S,
evaluation, best epoch, reports and checkpoints, its dropout generator's state kept in them). A member whose loss or
weights become non-finite leaves the bundle with the error its run alone would raise (FAILED), and the others go on;
a member whose epochs or ``patience`` end sooner rests while the others train on.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from istar_tune.config import Hyperparameters, RunSettings
from istar_tune.errors import ConfigError
from istar_tune.methods import get_method
from istar_tune.tasks import Task
from istar_tune.training.epoch import (
    LossWatch,
    all_finite,
    epoch_batches,
    host_sync_steps,
    non_finite_loss,
    non_finite_weights,
    update,
)
from istar_tune.training.fitting import Fitting, TrainResult, begin_fit, end_epoch
from istar_tune.training.fused import (
    FusedModel,
    MemberLoss,
    fused_forward_backward,
    own_generator,
    stack_batches,
)
from istar_tune.training.graphs import EagerSteps
from istar_tune.training.run import Run, prepare
from istar_tune.training.state import Reporter
from istar_tune.training.usage import DeviceUsage
from istar_tune.trial_status import TrialStatus

SHARED = ("batch_size", "grad_accum", "task", "model")
"""What the members of a bundle share, besides the run settings. Members of one seed read one batch stream (one
tokenised batch a step); members of different seeds each read their own seed's data order (:func:`member_batches`)."""


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
    host: torch.Generator | None = None
    """Its host-side random stream where the dropout generator is on an accelerator (on a CPU they are one)."""

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.run.model.parameters() if p.requires_grad]

    @contextlib.contextmanager
    def own_streams(self):
        """While on, the global generators are this member's streams (what its run alone draws from between its
        training passes: evaluation's loaders, its checkpoints' saved state), and they are its own again after."""
        host = self.host if self.host is not None else self.generator
        device = self.generator.device
        saved = torch.get_rng_state()
        torch.set_rng_state(host.get_state())
        saved_device = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
        if saved_device is not None:
            torch.cuda.set_rng_state(self.generator.get_state(), device)
        try:
            yield
        finally:
            host.set_state(torch.get_rng_state())
            torch.set_rng_state(saved)
            if saved_device is not None:
                self.generator.set_state(torch.cuda.get_rng_state(device))
                torch.cuda.set_rng_state(saved_device, device)


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
        if member.run.hparams.seed != first.hparams.seed and (member.run.hparams.include_padding or
                                                               first.hparams.include_padding):
            problems.append(f"member {k}'s seed differs from member 0's with include_padding: members of different "
                            "seeds have their batches padded to one length, which would add points to its penalty")
    if first.amp_dtype == torch.float16:
        problems.append("precision fp16 scales each run's loss by a factor of its own: use bf16 or fp32 to fuse")
    if first.step_mode.graphs or first.step_mode.compiles:
        problems.append(f"step_mode {first.step_mode.name} is not fused yet: use step_mode eager")
    return problems


def member_batches(members: dict[int, Member], epoch: int) -> tuple[Iterator[dict[int, dict]], int, bool]:
    """Each step's batches of an epoch, by member index, on the device: one batch every member reads where they have
    one seed (the first's stream: :func:`~istar_tune.training.epoch.epoch_batches`), else each member's own stream,
    in the order its run alone reads it; the steps of the epoch; whether the members read one stream."""
    runs = {k: member.run for k, member in members.items()}
    first = next(iter(runs.values()))
    if len({run.hparams.seed for run in runs.values()}) == 1:
        batches, steps = epoch_batches(first, epoch, f"bundle of {len(runs)}, epoch {epoch}")
        return ({k: batch for k in runs} for batch in map(first.to_device, batches)), steps, True
    streams = {k: epoch_batches(run, epoch, f"bundle member {k} (seed {run.hparams.seed}), epoch {epoch}")
               for k, run in runs.items()}
    counts = {k: steps for k, (_, steps) in streams.items()}
    if len(set(counts.values())) > 1:
        raise ConfigError(f"the bundle's members of different seeds have {sorted(set(counts.values()))} batches an "
                          "epoch (their training splits differ in size): bundle configurations of one seed only")
    steps = counts[next(iter(counts))]
    together = zip(*(batches for batches, _ in streams.values()))
    return ({k: runs[k].to_device(batch) for k, batch in zip(streams, step)} for step in together), steps, False


def bundle_epoch(members: list[Member], epoch: int) -> dict[int, dict[str, float]]:
    """One pass over the shuffled training data for every member still in the bundle (one batch stream, or each
    member its own seed's: :func:`member_batches`); returns each one's mean losses and tokens (as
    :func:`~istar_tune.training.epoch.train_epoch`), by its index in ``members``. A member that fails gets its
    ``error`` and no entry."""
    live = [k for k, m in enumerate(members) if m.error is None]
    if not live:
        return {}
    if problems := bundle_problems([members[k] for k in live]):
        raise ConfigError(problems)
    run = members[live[0]].run
    for k in live:
        members[k].run.model.train()
    steps_of, steps, shared = member_batches({k: members[k] for k in live}, epoch)
    accum, sync_every = run.hparams.grad_accum, host_sync_steps(run.device)
    fused = FusedModel([members[k].run.model for k in live], [members[k].generator for k in live])
    watch, tokens, stepper = LossWatch(run.device, rows=len(live)), dict.fromkeys(live, 0), EagerSteps(run.device)
    beat, pad = members[0].run.heartbeat, run.tokenizer.pad_token_id  # the progress: the first member's reporter
    config = run.model.config  # a padded length none of the model's other axes has (stack_batches)
    avoid = (run.hparams.batch_size, config.hidden_size, config.num_attention_heads, config.intermediate_size,
             config.hidden_size // config.num_attention_heads, getattr(config, "num_labels", 0))
    for step, own in enumerate(steps_of):
        for k in live:
            tokens[k] += own[k]["input_ids"].numel()
        batch, lengths = own[live[0]], None
        if not shared and len(live) > 1:
            batch, lengths = stack_batches([own[k] for k in live], pad, avoid)
        watch.add(fused_forward_backward(fused, [members[k].loss for k in live], batch, accum, lengths), step)
        if (step + 1) % sync_every == 0 or step + 1 == steps:
            bad = watch.first_bad.tolist()  # one host read for every member
            if any(bad):  # those members leave with their errors; the others go on, as a bundle of their own
                losses = watch.bad_loss.tolist()
                for row in (row for row, at in enumerate(bad) if at):
                    members[live[row]].error = non_finite_loss(members[live[row]].run, epoch, bad[row], losses[row])
                kept = [row for row, at in enumerate(bad) if not at]
                watch.keep(kept)
                live = [live[row] for row in kept]
                if not live:
                    return {}
                fused = FusedModel([members[k].run.model for k in live], [members[k].generator for k in live])
        if (step + 1) % accum == 0 or step + 1 == steps:
            for k in live:
                m = members[k]
                update(m.run, m.params, m.optimizer, m.scheduler, m.scaler, stepper)
        if beat is not None:
            beat(epoch, step + 1, steps)
    out = {}
    for row, k in enumerate(live):
        if all_finite(members[k].params):
            out[k] = watch.means(steps, tokens[k], row)
        else:
            members[k].error = non_finite_weights(members[k].run, epoch)
    return out


def train_bundle(hparams: Sequence[Hyperparameters], settings: RunSettings,
                 reporters: Sequence[Reporter | None] | None = None,
                 resume_from: Sequence[str | os.PathLike | None] | None = None,
                 sigma_cache: str | os.PathLike | None = None, task: Task | None = None,
                 epoch_done: Callable[[int, dict[int, str]], None] | None = None,
                 completes: Sequence[Sequence[int]] | None = None) -> list[TrainResult]:
    """Fine-tune the configurations ``hparams`` (one batch stream: :func:`bundle_problems`) as one bundle; returns
    each one's result, in order, as :func:`~istar_tune.training.loop.train` returns it alone (a failed member's
    with status FAILED and its error). ``reporters``/``resume_from``: each member's, as ``train`` takes them (the
    first member's reporter is told the data read and the bundle's heartbeat). ``epoch_done(epoch, errors)``: after
    each of the bundle's epochs, once every member that trained it has reported it; ``errors``: the members that
    failed in it, by index, with their errors. ``completes``: each member's shorter configurations' epoch counts, as
    ``train`` takes them (a member that is a search's shared trial)."""
    count = len(hparams)
    reporters = list(reporters) if reporters is not None else [None] * count
    resume_from = list(resume_from) if resume_from is not None else [None] * count
    completes = list(completes) if completes is not None else [()] * count
    if settings.output_dir:
        raise ConfigError(f"output_dir {settings.output_dir!r}: a bundle's members write through their reporters; "
                          "give no output_dir")
    if second := [hp.method for hp in hparams if get_method(hp.method).second_stage]:
        raise ConfigError(f"method {second[0]} has a second stage, which is not fused: train it on its own")
    members, fits = [], []
    for hp, reporter, resume, closing in zip(hparams, reporters, resume_from, completes):
        # The global generators seeded from its seed; the data read and tokenised once for all members.
        run = prepare(hp, settings, task, data_of=members[0].run if members else None)
        if not members:
            run.heartbeat = getattr(reporter, "heartbeat", None)
            if (read := getattr(reporter, "data_read", None)) is not None:  # a search's dataset inputs
                read(run.task, run.data)
        result = TrainResult(metric=run.task.metric, epochs=[], best_epoch=0, status=TrialStatus.RUNNING)
        # A resumed run's streams restored; a shared member scores its shorter configurations on its way.
        fit = begin_fit(run, result, reporter, resume, None, set(closing), sigma_cache)
        # Where this configuration's own streams stand when its training starts (its dropout, and the host's).
        generator = own_generator(run.device)
        host = own_generator("cpu") if run.device.type != "cpu" else None
        fits.append((result, fit))
        members.append(Member(run, *((None,) * 3 if fit is None else (fit.optimizer, fit.scheduler, fit.scaler)),
                              MemberLoss.of(hp), generator, host=host))
    if problems := bundle_problems(members):
        raise ConfigError(problems)
    _fit_bundle(members, [fit for _, fit in fits], epoch_done)
    results = [result for result, _ in fits]
    for member, result in zip(members, results):
        result.status = TrialStatus.FINISHED if member.error is None else TrialStatus.FAILED
        result.error = "" if member.error is None else f"TrainingError: {member.error}"
    return results


def _fit_bundle(members: list[Member], fits: list[Fitting | None],
                epoch_done: Callable[[int, dict[int, str]], None] | None = None) -> None:
    """The bundle's epochs: at each, the members whose stage goes on train together, then each closes its epoch."""
    training = {k for k, fit in enumerate(fits) if fit is not None and fit.start < fit.last}
    epoch = min((fits[k].start for k in training), default=0)
    while training:
        epoch += 1
        now = [k for k in sorted(training) if fits[k].start < epoch]
        for k in now:
            members[k].loss = MemberLoss.of(members[k].run.hparams, fits[k].shrinkage_cov)
        began = time.perf_counter()
        with DeviceUsage(members[now[0]].run.device) as usage:
            losses = bundle_epoch([members[k] for k in now], epoch)
        seconds, measured = time.perf_counter() - began, usage.record()
        for row, k in enumerate(now):
            if row not in losses:  # it failed: the error is its member's
                training.discard(k)
                continue
            with members[k].own_streams():
                stop = end_epoch(fits[k], epoch, {**losses[row], **measured}, time.perf_counter() - seconds)
            if stop or epoch >= fits[k].last:
                training.discard(k)
        if epoch_done is not None:
            epoch_done(epoch, {k: f"TrainingError: {members[k].error}" for k in now if members[k].error is not None})
