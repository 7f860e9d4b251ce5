"""One training pass over the shuffled training data, shared by every method and stage, and the loss of
each method: task loss + λ·penalty (I-STAR, CosReg) or the task loss alone (Base, IsoLayer's first stage).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from istar_tune.errors import TrainingError
from istar_tune.losses import penalty
from istar_tune.methods import PENALISED
from istar_tune.random_streams import DATA_ORDER, stream_seed
from istar_tune.recipes import RECIPES
from istar_tune.training.graphs import EagerSteps, GraphedStep
from istar_tune.training.run import Run

TRAIN_TOKENS = "train_tokens"
"""An epoch's count of the tokens it trained on (inputs padded to each batch's longest)."""

LossFn = Callable[[dict[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]
"""batch → (total loss, task loss, penalty or None)."""


def method_loss(run: Run, shrinkage_cov: torch.Tensor | None,
                observe: Callable[[tuple, torch.Tensor], None] | None = None) -> LossFn:
    """The method's loss: task loss + penalty (I-STAR, CosReg), or the task loss alone (Base, IsoLayer stage 1).
    ``observe``: also handed each batch's hidden states and attention mask (detached)."""
    hp = run.hparams
    lam = hp.penalty_weight
    penalised = hp.method in PENALISED and lam != 0

    def compute(batch):
        with run.autocast():
            outputs = run.model(**batch, output_hidden_states=penalised or observe is not None)
        task_loss = outputs.loss.float()
        if observe is not None:
            with torch.no_grad():
                observe(tuple(h.detach() for h in outputs.hidden_states), batch["attention_mask"])
        pen = None
        if penalised:
            pen = penalty(hp.method, outputs.hidden_states, batch["attention_mask"], lam=lam, zeta=hp.zeta,
                          shrinkage_cov=shrinkage_cov, layer=hp.layer, include_padding=hp.include_padding)
        return (task_loss if pen is None else task_loss + pen), task_loss, pen

    return compute


HOST_SYNC_STEPS = 32
"""On an accelerator, the steps between the host's reads of the epoch's losses and non-finite flag (on a CPU, every
step: a read costs nothing there)."""


def host_sync_steps(device: torch.device) -> int:
    return 1 if device.type == "cpu" else HOST_SYNC_STEPS


def non_finite_loss(run: Run, epoch: int, step: int, loss: float) -> str:
    """What a run whose loss became non-finite is told: the step, the value and the fix."""
    return (f"the loss became {loss} at epoch {epoch}, step {step}: lower the learning rate "
            f"({run.hparams.learning_rate}) or |lam| ({run.hparams.lam})")


def non_finite_weights(run: Run, epoch: int) -> str:
    """What a run whose weights became non-finite (a finite loss, an update that overflowed) is told."""
    return (f"the weights became non-finite in epoch {epoch}: lower the learning rate ({run.hparams.learning_rate}) "
            f"or |lam| ({run.hparams.lam})")


class LossWatch:
    """An epoch's logged losses summed (train_loss, task_loss, penalty) and the first step whose loss was not finite
    with that loss (0: none yet), kept on the device: the host reads them every few steps (each read waits for the
    GPU to catch up), and an error still names the first bad step and its loss. ``rows``: one per member of a bundle
    (``None``: one run)."""

    def __init__(self, device: torch.device, rows: int | None = None):
        shape = () if rows is None else (rows,)
        self.sums = torch.zeros((*shape, 3), dtype=torch.float64, device=device)
        self.first_bad = torch.zeros(shape, dtype=torch.int64, device=device)
        self.bad_loss = torch.zeros(shape, dtype=torch.float64, device=device)

    def add(self, values: torch.Tensor, step: int) -> None:
        """A step's logged values, (3,) or (rows, 3); ``step`` counts from 0."""
        self.sums += values
        loss = values[..., 0]
        newly_bad = (self.first_bad == 0) & ~torch.isfinite(loss)
        self.first_bad = torch.where(newly_bad, step + 1, self.first_bad)
        self.bad_loss = torch.where(newly_bad, loss, self.bad_loss)

    def keep(self, rows: list[int]) -> None:
        """Only these rows watched on (a bundle's members that left are dropped)."""
        self.sums, self.first_bad, self.bad_loss = self.sums[rows], self.first_bad[rows], self.bad_loss[rows]

    def means(self, steps: int, tokens: int, row: int | None = None) -> dict[str, float]:
        """The epoch's mean losses and its tokens, as an epoch's training pass returns them."""
        sums = self.sums if row is None else self.sums[row]
        totals = dict(zip(("train_loss", "task_loss", "penalty"), sums.tolist()))
        return {**{k: v / max(steps, 1) for k, v in totals.items()}, TRAIN_TOKENS: tokens}


def _raise_if_bad(run: Run, epoch: int, watch: LossWatch) -> None:
    """One host read: a non-finite loss since the last read fails the epoch, naming its step and value."""
    step = int(watch.first_bad.item())
    if step:
        raise TrainingError(non_finite_loss(run, epoch, step, watch.bad_loss.item()))


def all_finite(params: list[torch.nn.Parameter]) -> bool:
    """Every weight finite (one host read)."""
    return bool(torch.stack([torch.isfinite(p).all() for p in params]).all())


def update(run: Run, params: list[torch.nn.Parameter], optimizer, scheduler, scaler, stepper) -> None:
    """The update closing an accumulation window: the recipe's clipping to the run's norm, the optimizer's step
    (through the gradient scaler), the schedule's, and the gradients zeroed as the stage's stepper keeps them."""
    if RECIPES[run.settings.recipe].clip and run.settings.max_grad_norm > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, run.settings.max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    stepper.zero_grad(optimizer)


def forward_backward(loss_fn: LossFn, batch: dict[str, torch.Tensor], accum: int, scaler) -> torch.Tensor:
    """A step's device work up to its gradients: the loss, its backward pass (accumulated into ``.grad``), and the
    logged losses (total, task, penalty; float64 (3,)). What ``step_mode: graphs`` captures."""
    loss, task_loss, pen = loss_fn(batch)
    values = torch.stack([loss.detach(), task_loss.detach(),
                          pen.detach() if pen is not None else torch.zeros_like(loss)]).double()
    scaler.scale(loss / accum).backward()
    return values


def epoch_batches(run: Run, epoch: int, description: str) -> tuple[Any, int]:
    """An epoch's shuffled training batches (their order seeded by the run's seed and the epoch, independent across
    both) behind its progress bar, and their count. The order is the one the bar's iteration draws: tqdm.auto's bar
    opens an iterator of the loader when it is made, so the loader's generator has given one seed before the
    epoch's own iterator starts (every path that trains a run's epoch reads its batches here)."""
    from tqdm.auto import tqdm

    order_seed = stream_seed(run.hparams.seed, DATA_ORDER, epoch)
    loader = run.loader(run.data.train, run.hparams.batch_size, shuffle_seed=order_seed)
    return tqdm(loader, desc=description, disable=not run.settings.progress, leave=False, unit="batch"), len(loader)


def train_epoch(run: Run, loss_fn: LossFn, params: list[torch.nn.Parameter], optimizer, scheduler, scaler,
                epoch: int, description: str, train_modules: torch.nn.Module | None = None,
                stepper: GraphedStep | EagerSteps | None = None) -> dict[str, float]:
    """One pass over the shuffled training data; returns mean losses and the tokens trained on (:data:`TRAIN_TOKENS`).
    Shared by every method and stage.

    ``train_modules``: only these modules run in training mode (dropout on); the rest of the model stays in
    evaluation mode (IsoLayer's frozen encoder). ``None``: the whole model trains. ``stepper``: how the stage steps
    (:func:`~istar_tune.training.graphs.stage_steps`: its CUDA graphs, which replay :func:`forward_backward` and
    keep the gradients allocated, or op by op); default: op by op.
    """
    if train_modules is None:
        run.model.train()
    else:
        run.model.eval()
        train_modules.train()
    accum = run.hparams.grad_accum
    bar, steps = epoch_batches(run, epoch, description)
    sync_every = host_sync_steps(run.device)
    watch = LossWatch(run.device)
    tokens = 0
    stepper = stepper if stepper is not None else EagerSteps(run.device)
    stepper.zero_grad(optimizer)
    step_fn = functools.partial(forward_backward, loss_fn, accum=accum, scaler=scaler)
    for step, batch in enumerate(bar):
        tokens += batch["input_ids"].numel()  # as the model computes them: padded to the batch's longest
        values = stepper(step_fn, batch)
        watch.add(values, step)
        if (step + 1) % sync_every == 0 or step + 1 == steps:
            _raise_if_bad(run, epoch, watch)
            if run.settings.progress:
                bar.set_postfix(loss=f"{watch.sums[0].item() / (step + 1):.4f}")
        if (step + 1) % accum == 0 or step + 1 == steps:
            update(run, params, optimizer, scheduler, scaler, stepper)
        if run.heartbeat is not None:
            run.heartbeat(epoch, step + 1, steps)
    # A finite last loss can still leave non-finite weights (its update overflowed): one check per epoch, one sync.
    if params and not all_finite(params):
        raise TrainingError(non_finite_weights(run, epoch))
    return watch.means(steps, tokens)
