"""One trial's peak accelerator memory, known before it starts: exact where it is arithmetic, modelled where not.

Exact, counted from the model built on PyTorch's ``meta`` device (:func:`istar_tune.models.meta_model`: every
parameter's shape, no memory): the float32 weights, their gradients, AdamW's two moments and its step counters.
Modelled, per token of a batch padded to ``max_length``: the activations a training step keeps for its backward
pass (:data:`LAYER_ELEMENTS`, :data:`SCORE_ELEMENTS`), I-STAR's point cloud of every layer's tokens, and the
forward-only passes at ``eval_batch_size`` (evaluation, Σ_S). The activation model is eager PyTorch's, fitted to
what ``torch.profiler`` records on CPU for tiny-bert and MiniLM (``tests/training/test_memory.py`` keeps it within
30 %); on CUDA the attention scores are not kept (PyTorch's memory-efficient attention kernel) and a process adds
its CUDA context (:data:`CUDA_CONTEXT_BYTES`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

from istar_tune.errors import TrainingError
from istar_tune.methods import ISOSCORE, get_method

GIB = 2**30

LAYER_ELEMENTS = (10.0, 2.0)
"""Activation elements one encoder layer keeps per token for the backward pass: ``a·H + b·I`` (hidden size H,
feed-forward size I): the attention block's inputs, queries, keys, values and context, the layer norms' inputs,
dropout masks, and the feed-forward's two I-wide tensors (before and after GELU). Fitted on CPU with
``torch.profiler`` (eager PyTorch, dropout on)."""
SCORE_ELEMENTS = 3.0
"""Attention-score elements one layer keeps per token and head and key position on the math attention path (CPU):
the softmax's output, its dropout mask and the dropped-out probabilities; none with a fused kernel (CUDA)."""
EMBEDDING_ELEMENTS = 3.0
"""Per token, in units of H: the embeddings' sum, layer norm and dropout, and the head."""
CUDA_CONTEXT_BYTES = 512 * 2**20
"""What a process's CUDA context takes on the GPU outside PyTorch's allocator (kernels, cuBLAS workspace); each
co-located trial has its own."""
AUTOCAST_BYTES = 2
"""Bytes per activation element under fp16/bf16 autocast (float32: 4); autocast also keeps a half-precision copy of
each weight while the forward pass runs."""


@dataclass(frozen=True)
class Shape:
    """What the activation model reads from a model's config."""

    layers: int
    hidden: int
    heads: int
    intermediate: int

    @classmethod
    def of(cls, config) -> Shape:
        hidden = _read(config, "hidden_size", "dim", "d_model")
        return cls(layers=_read(config, "num_hidden_layers", "n_layers", "num_layers"), hidden=hidden,
                   heads=_read(config, "num_attention_heads", "n_heads", "num_heads"),
                   intermediate=_read(config, "intermediate_size", "hidden_dim", "ffn_dim", default=4 * hidden))


def _read(config, *keys: str, default: int | None = None) -> int:
    """The first of ``keys`` the config sets (model families name the same size differently)."""
    value = next((getattr(config, k) for k in keys if getattr(config, k, None)), default)
    if value is None:
        raise ValueError(f"the {type(config).__name__} of this model names none of {', '.join(keys)}: its memory "
                         "cannot be estimated")
    return int(value)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of one trial's peak memory, by part."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    """A training step's activations at the trial's batch size and ``max_length`` (with the autocast weight copies)."""
    point_cloud: int
    """I-STAR's penalty: every layer's tokens in float32 and its covariances (0 for other methods)."""
    forward_pass: int
    """The largest forward-only pass at ``eval_batch_size`` (evaluation, Σ_S): all hidden states and tokens."""
    context: int
    """The CUDA context (0 on CPU)."""

    @property
    def training_step(self) -> int:
        return self.activations + self.point_cloud

    @property
    def peak(self) -> int:
        """Weights and optimizer state always; gradients and a training step's activations, or a forward-only
        pass (gradients freed), whichever is larger; the context."""
        return (self.weights + self.optimizer + max(self.gradients + self.training_step, self.forward_pass)
                + self.context)

    @property
    def peak_gb(self) -> float:
        return self.peak / GIB

    def bundled(self, members: int) -> MemoryEstimate:
        """A fused trial of ``members`` such configurations (:mod:`istar_tune.training.fused`): each member's weights,
        gradients, optimizer state, activations and penalty cloud; one forward-only pass at a time (members are
        evaluated one after another) and one CUDA context."""
        return MemoryEstimate(weights=members * self.weights, gradients=members * self.gradients,
                              optimizer=members * self.optimizer, activations=members * self.activations,
                              point_cloud=members * self.point_cloud, forward_pass=self.forward_pass,
                              context=self.context)

    def largest_bundle(self, gpu_bytes: int, headroom: float = 0.9) -> int:
        """The most members a fused trial of this configuration may hold on one GPU of ``gpu_bytes`` (0: not one)."""
        members = 0
        while self.bundled(members + 1).peak <= gpu_bytes * headroom and members < 1024:
            members += 1
        return members


def parameter_bytes(model) -> tuple[int, int, int]:
    """(weights, gradients, AdamW state) in bytes of ``model`` (built on ``meta`` or real): every parameter once
    (tied ones too), a gradient and two moments per trainable element in its dtype, and a step counter (float32 scalar)
    per trainable tensor."""
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    weights = sum(p.numel() * p.element_size() for p in params)
    gradients = sum(p.numel() * p.element_size() for p in trainable)
    return weights, gradients, 2 * gradients + 4 * len(trainable)


def activation_bytes(shape: Shape, batch: int, length: int, element_bytes: int = 4,
                     fused_attention: bool = False) -> int:
    """Modelled bytes a training step's forward pass keeps for backward (:data:`LAYER_ELEMENTS` and friends)."""
    tokens = batch * length
    per_token = shape.layers * (LAYER_ELEMENTS[0] * shape.hidden + LAYER_ELEMENTS[1] * shape.intermediate)
    per_token += EMBEDDING_ELEMENTS * shape.hidden
    if not fused_attention:
        per_token += shape.layers * SCORE_ELEMENTS * shape.heads * length
    return int(tokens * per_token * element_bytes)


def point_cloud_bytes(shape: Shape, batch: int, length: int, layer: int | None = None) -> int:
    """I-STAR's penalty: the selected layers' tokens as one float32 cloud, and its H×H covariances."""
    layers = 1 if layer is not None else shape.layers + 1
    return int(layers * batch * length * shape.hidden * 4 + 4 * shape.hidden**2 * 4)


def forward_pass_bytes(shape: Shape, batch: int, length: int, fused_attention: bool = False) -> int:
    """A forward-only pass (evaluation, Σ_S) at ``batch``, float32: every layer's hidden states and the token cloud
    read from them, one layer's transient tensors, and the streaming covariance (float64)."""
    tokens = batch * length
    kept = 2 * (shape.layers + 1) * tokens * shape.hidden
    transient = tokens * 2 * shape.intermediate + (0 if fused_attention else 2 * batch * shape.heads * length**2)
    return int((kept + transient) * 4 + 2 * shape.hidden**2 * 8)


def estimate_memory(model, method: str, batch_size: int, max_length: int, eval_batch_size: int,
                    half_precision: bool = False, cuda: bool = True, layer: int | None = None,
                    attn_implementation: str = "sdpa") -> MemoryEstimate:
    """One trial's memory (:class:`MemoryEstimate`) of ``model`` (built on ``meta``, :func:`istar_tune.models.
    meta_model`) trained with ``method`` at ``batch_size`` × ``max_length``; ``half_precision``: fp16/bf16 autocast;
    ``cuda``: a CUDA context, and fused attention with ``attn_implementation`` sdpa (eager keeps the scores)."""
    shape = Shape.of(model.config)
    weights, gradients, optimizer = parameter_bytes(model)
    element = AUTOCAST_BYTES if half_precision else 4
    fused = cuda and attn_implementation == "sdpa"
    activations = activation_bytes(shape, batch_size, max_length, element, fused_attention=fused)
    if half_precision:
        activations += weights // 2
    cloud = 0
    if get_method(method).penalty == ISOSCORE:
        cloud = point_cloud_bytes(shape, batch_size, max_length, layer)
    return MemoryEstimate(weights=weights, gradients=gradients, optimizer=optimizer, activations=activations,
                          point_cloud=cloud, forward_pass=forward_pass_bytes(shape, eval_batch_size, max_length, fused),
                          context=CUDA_CONTEXT_BYTES if cuda else 0)


PACKING_HEADROOM = 0.9
"""The share of a GPU's memory co-located trials may fill between them (the rest: the allocator's fragmentation and
what the estimate misses)."""


def trial_shape(model: str, task: str, method: str, batch_size: int, max_length: int) -> str:
    """What a trial's memory depends on, in words: the name memory estimates and out-of-memory errors give it."""
    return f"{model} × {task} × {method} at batch {batch_size} × {max_length} tokens"


def largest_packing(peak_bytes: int, gpu_bytes: int, headroom: float = PACKING_HEADROOM) -> int:
    """How many trials of ``peak_bytes`` fit on one GPU of ``gpu_bytes`` (``headroom``: the share a packing may
    fill); 0 when not even one does."""
    return max(0, math.floor(gpu_bytes * headroom / peak_bytes)) if peak_bytes > 0 else 0


def cap_gpu_memory(share: float | None) -> bool:
    """A trial holding ``share`` of a GPU (Ray's fractional ``gpu``) caps its allocator at that share of the GPU's
    memory (``torch.cuda.set_per_process_memory_fraction``), so one trial cannot starve the trials beside it: it
    fails with an out-of-memory error of its own instead. True when a cap was set (CUDA, share below 1)."""
    import torch

    if share is None or not 0 < share < 1 or not torch.cuda.is_available():
        return False
    torch.cuda.set_per_process_memory_fraction(share)
    return True


@contextlib.contextmanager
def out_of_memory_explained(what: str, share: float | None) -> Iterator[None]:
    """An out-of-memory error inside becomes a :class:`~istar_tune.errors.TrainingError` saying what ran out, with
    which share of the GPU, and what to change (the trial fails with it; the search goes on)."""
    import torch

    try:
        yield
    except (torch.OutOfMemoryError, MemoryError) as err:
        detail = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        held = f"its share: {share:g} of the GPU" if share and share < 1 else "a whole GPU"
        raise TrainingError(f"out of memory training {what} ({held}): lower batch_size or max_length, give each "
                            "trial a larger resources.gpu (fewer trials a GPU), or measure with `istar-tune "
                            f"calibrate`; the search goes on with its other trials ({detail})") from None
