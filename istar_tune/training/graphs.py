"""``step_mode: graphs``: a training step's forward, loss (the I-STAR penalty included) and backward replayed as one
CUDA graph per batch shape, so the host launches one graph where eager PyTorch launches every kernel itself.

What is captured is the step's device work from the batch to its gradients and logged losses
(:func:`~istar_tune.training.epoch.forward_backward`); clipping, the fused AdamW step, the schedule and the epoch's
bookkeeping run as in eager mode, the same kernels on the same tensors (a few launches a step). The same kernels in
the same order on the same random stream (a graph's dropout draws from the generator's offset at its replay, as an
eager step would): a graphed run gives eager's numbers bit for bit, which the device check's determinism section
verifies on a GPU.

How: a batch shape meets its first step eagerly (on a side stream, as capture needs its lazily made state — the
optimizer's, cuBLAS's — made outside it), as do the stage's first :data:`WARMUP_STEPS` steps; its next step is
captured into a graph over static input buffers and replayed; every later batch of that shape is copied into those
buffers and the graph replayed. The graphs of a stage share one memory pool: everything a step leaves behind
(weights, gradients, optimizer state, Σ_S) lives outside it, so replaying them in any order is safe. A batch whose
attention mask is all ones runs eagerly (transformers skips an all-ones mask in eager mode, for another attention
kernel, and keeps it in a capture), so those steps stay eager's too. Length buckets (``length_bucket``) bound the
shapes, hence the graphs, to ``max_length / length_bucket`` (twice: an epoch's last batch is smaller).

A stage's steps run through :func:`stage_steps`: :class:`GraphedStep` where the run's step mode replays graphs, else
:class:`EagerSteps`; both say how a step runs, how the gradients are zeroed between steps and how the stage's Σ_S is
held and refreshed, so the training loop asks the mode nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch

from istar_tune.errors import ConfigError, TrainingError
from istar_tune.step_modes import StepMode

WARMUP_STEPS = 3
"""Eager steps at the start of each stage before any capture (PyTorch's advice for whole-step capture)."""

StepFn = Callable[[dict[str, torch.Tensor]], torch.Tensor]
"""A batch on the device → its logged losses (3,), its gradients accumulated."""


def graphs_problems(device: torch.device, amp_dtype: torch.dtype | None) -> list[str]:
    """Why ``step_mode: graphs`` cannot run on this device at this precision (empty: it can). What the settings
    alone decide (length buckets, ``star_sigma``) is checked with them (``config.RunSettings``)."""
    problems = []
    if device.type != "cuda":
        problems.append(f"step_mode graphs replays CUDA graphs and this run's device is {device.type}: use "
                        "step_mode eager or compile")
    if amp_dtype == torch.float16:
        problems.append("step_mode graphs does not take fp16 (its gradient scaler reads the host every step): use "
                        "precision bf16 or fp32, or step_mode eager")
    return problems


def check_graphs(device: torch.device, amp_dtype: torch.dtype | None) -> None:
    if problems := graphs_problems(device, amp_dtype):
        raise ConfigError([f"settings: {p}" for p in problems])


class CudaGraphs:
    """What :class:`GraphedStep` does on the GPU: eager steps on a side stream, captures into a shared pool."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()
        self.side = torch.cuda.Stream(device=device)

    def eager(self, step_fn: StepFn, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        self.side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.side):
            losses = step_fn(inputs)
        torch.cuda.current_stream(self.device).wait_stream(self.side)
        return losses

    def capture(self, step_fn: StepFn, inputs: dict[str, torch.Tensor]) -> tuple[Callable[[], None], torch.Tensor]:
        """The step recorded, not run: (its replay, the tensor each replay writes its losses to)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            losses = step_fn(inputs)
        return graph.replay, losses


class GraphedStep:
    """A stage's graphs, one per batch shape; called as ``graphed(step_fn, batch)`` with the batch still on the host
    (its shape and mask are read there, without a device sync). ``backend``: :class:`CudaGraphs` on the run's
    device unless given (the suite rehearses the bookkeeping on a CPU with a backend whose replay reruns the step on
    the static buffers)."""

    def __init__(self, device: torch.device, warmup_steps: int = WARMUP_STEPS, backend=None):
        self.device = device
        self.warmup_steps = warmup_steps
        self.backend = backend if backend is not None else CudaGraphs(device)
        self.graphs: dict[tuple, tuple[Callable[[], None], dict[str, torch.Tensor], torch.Tensor]] = {}
        self.seen: Counter = Counter()
        self.eager_steps = 0
        self.replays = 0

    def __call__(self, step_fn: StepFn, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mask = batch.get("attention_mask")
        if mask is not None and bool(mask.all()):  # a host tensor: no sync
            self.eager_steps += 1
            return step_fn(_to(batch, self.device))
        key = tuple((name, tuple(t.shape), t.dtype) for name, t in sorted(batch.items()))
        if key in self.graphs:
            replay, inputs, losses = self.graphs[key]
            for name, tensor in batch.items():
                inputs[name].copy_(tensor, non_blocking=True)
            replay()
            self.replays += 1
            return losses
        self.seen[key] += 1
        if self.seen[key] == 1 or self.eager_steps < self.warmup_steps:
            self.eager_steps += 1
            return self.backend.eager(step_fn, _to(batch, self.device))
        inputs = _to(batch, self.device)  # static buffers, allocated outside the graphs' pool
        try:
            replay, losses = self.backend.capture(step_fn, inputs)
        except RuntimeError as err:
            shape = ", ".join(f"{name} {tuple(t.shape)}" for name, t in batch.items())
            raise TrainingError(f"step_mode graphs could not capture the training step for the batch shape {shape}: "
                                f"{str(err).splitlines()[0]}; use step_mode eager or compile") from err
        self.graphs[key] = (replay, inputs, losses)
        replay()
        self.replays += 1
        return losses


    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Zeroed in place, kept allocated: the graphs write the gradients where they were captured."""
        optimizer.zero_grad(set_to_none=False)

    def own(self, shrinkage_cov: torch.Tensor | None) -> torch.Tensor | None:
        """The stage's Σ_S: a copy of its own, which the graphs read at one address."""
        return None if shrinkage_cov is None else shrinkage_cov.clone()

    def refreshed(self, old: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
        """The next epoch's Σ_S, copied into the one the graphs read."""
        return new if old is None else old.copy_(new)


class EagerSteps:
    """A stage's steps op by op (``eager``, ``compile``): each batch moved to the device and stepped, the gradients
    freed between steps, each epoch's Σ_S a tensor of its own."""

    def __init__(self, device: torch.device):
        self.device = device

    def __call__(self, step_fn: StepFn, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return step_fn(_to(batch, self.device))

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad(set_to_none=True)

    def own(self, shrinkage_cov: torch.Tensor | None) -> torch.Tensor | None:
        return shrinkage_cov

    def refreshed(self, old: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
        return new


def stage_steps(mode: StepMode, device: torch.device) -> GraphedStep | EagerSteps:
    """How one stage of a run steps under ``mode``."""
    return GraphedStep(device) if mode.graphs else EagerSteps(device)


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()}
