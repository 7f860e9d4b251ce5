"""Many configurations trained as one model: K members of one architecture, each with weights of its own, stacked
along a leading member axis and run as one forward and one backward pass (``torch.func.functional_call`` under
``torch.func.vmap``): one operator call for all K members where K separate runs make K.

Each member stays the configuration it is alone: its own parameters (so its own gradients, optimizer state, learning
rate, weight decay and clipping norm: the plain path's optimizer, one per member; their storage is the stack's row,
:class:`FusedModel`), its own loss (task loss +
its own λ·penalty with its own ζ and Σ_S, :func:`istar_tune.losses.penalty` on its slice of the hidden states) and
its own dropout draws (:class:`MemberDropouts`: each member's masks from a generator of its own, started where the
global generator stands when the member would start training alone, so on a CPU member k draws exactly the masks
its configuration draws alone).

Exactness: a bundle of one runs its member's model itself (no vmap), so K = 1 equals the plain path bit for bit.
For K > 1 the batched kernels round differently from the unbatched ones: a member's losses agree with its
configuration alone to float32 rounding, and the difference grows with training as any rounding difference does
(tests/training/test_fused.py measures it). Why vmap over stacked weights and not operators of one's own (HFTA):
``functional_call`` runs the model's own forward, so every encoder transformers builds fuses without code per
architecture. Attention must be ``eager`` when its dropout is on (sdpa draws its dropout inside its kernel, where no
member's generator reaches); on CUDA the members' masks are their own seeded draws but not the ones the fused
dropout kernel of a lone run draws.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.func import functional_call, vmap
from torch.overrides import TorchFunctionMode

from istar_tune.config import EAGER_ATTENTION, Hyperparameters
from istar_tune.errors import ConfigError, IsotropyError
from istar_tune.losses import penalty
from istar_tune.methods import PENALISED


def fuse_problems(models: Sequence[torch.nn.Module]) -> list[str]:
    """What refuses training ``models`` as one bundle: none to fuse, architectures that differ (parameter names,
    shapes or dtypes), or attention whose dropout runs inside sdpa's kernel."""
    if not models:
        return ["a bundle needs at least one member"]
    problems = []
    layout = [(name, p.shape, p.dtype) for name, p in models[0].named_parameters()]
    for k, model in enumerate(models[1:], start=1):
        other = [(name, p.shape, p.dtype) for name, p in model.named_parameters()]
        if other != layout:
            differs = next((a[0] for a, b in zip(layout, other) if a != b), f"{len(layout)} vs {len(other)} tensors")
            problems.append(f"member {k}'s parameters differ from member 0's (first at {differs}): a bundle is one "
                            "architecture")
    config = getattr(models[0], "config", None)
    attention = getattr(config, "_attn_implementation", EAGER_ATTENTION)
    if attention != EAGER_ATTENTION and getattr(config, "attention_probs_dropout_prob", 0.0) > 0:
        problems.append(f"attention {attention} draws its dropout inside its kernel, where no member's own generator "
                        f"reaches: use attn_implementation {EAGER_ATTENTION} to fuse")
    return problems


def own_generator(device: torch.device | str = "cpu") -> torch.Generator:
    """A generator on ``device`` in the state the global generator of that device has now. Taken where a member's
    configuration would start training alone (after its model is built from its seed), it draws the dropout masks
    that configuration draws alone from the global generator."""
    device = torch.device(device)
    state = torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()
    generator = torch.Generator(device=device)
    generator.set_state(state)
    return generator


def member_dropout(x: torch.Tensor, p: float, generators: Sequence[torch.Generator], member: torch.Tensor,
                   lengths: Sequence[int] | None = None, padded: int = 0) -> torch.Tensor:
    """Dropout of ``x`` with each member's mask drawn from that member's generator, as ``torch.nn.functional
    .dropout`` draws one on a CPU (a Bernoulli(1 − p) mask of ``x``'s dtype, scaled by 1/(1 − p)); under vmap
    ``member`` is the member axis's index, so each member's slice of ``x`` meets its own mask. ``lengths``: members
    whose own batches were padded to one length ``padded`` (:func:`stack_batches`: a length no other axis has): each
    member's mask is drawn in its own shape (every axis of the padded length at its own length, as its run alone draws
    it) and padded with zeros."""
    masks = []
    for k, generator in enumerate(generators):
        shape = tuple(lengths[k] if lengths and n == padded else n for n in x.shape)
        mask = torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(1 - p, generator=generator)
        if shape != tuple(x.shape):
            mask = torch.nn.functional.pad(mask, [pad for own, n in zip(reversed(shape), reversed(x.shape))
                                                  for pad in (0, n - own)])
        masks.append(mask)
    noise = torch.stack(masks)  # (K, *x's shape)
    noise.div_(1 - p)
    return x * noise[member]


OTHER_RANDOM = frozenset({torch.nn.functional.alpha_dropout, torch.nn.functional.feature_alpha_dropout,
                          torch.nn.functional.dropout1d, torch.nn.functional.dropout2d,
                          torch.nn.functional.dropout3d, torch.nn.functional.rrelu})
"""Random layers a fused forward refuses: under vmap they would draw one mask for every member."""


def _in_training(func, args, kwargs) -> bool:
    """Whether a call of a random layer ``func`` is in training (its ``training`` argument, given or its default)."""
    bound = inspect.signature(func).bind(*args, **kwargs)
    bound.apply_defaults()
    return bool(bound.arguments.get("training", True))


class MemberDropouts(TorchFunctionMode):
    """While on, every ``torch.nn.functional.dropout`` in training (``nn.Dropout`` modules and the functional calls
    of eager attention alike) draws each member's mask from its own generator (:func:`member_dropout`)."""

    def __init__(self, generators: Sequence[torch.Generator], member: torch.Tensor,
                 lengths: Sequence[int] | None = None, padded: int = 0):
        super().__init__()
        self.generators, self.member, self.lengths, self.padded = generators, member, lengths, padded

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in OTHER_RANDOM and _in_training(func, args, kwargs):
            raise ConfigError(f"the model calls {func.__name__} in training, which a fused bundle cannot draw per "
                              "member (only dropout): train this model unfused")
        if func is not torch.nn.functional.dropout:
            return func(*args, **kwargs)
        named = dict(zip(("input", "p", "training", "inplace"), args)) | kwargs
        p, training = named.get("p", 0.5), named.get("training", True)
        if not training or p == 0:
            return named["input"]
        return member_dropout(named["input"], p, self.generators, self.member, self.lengths, self.padded)


class FusedModel:
    """K members' models run as one: :meth:`__call__` gives every member's task loss and hidden states for one batch
    (a batch all members read).

    With K > 1 the members' weights move into one stacked tensor per parameter (K, ...), which the fused forward
    reads as it is: each member's parameters stay its own ``nn.Parameter`` objects (its optimizer, clipping and
    checkpoints take them as before) but are views of their row of the stack, and after each backward pass their
    ``.grad`` are views of the stack's gradient (:meth:`share_gradients`). A member's gradients set to ``None`` (its
    optimizer's ``zero_grad``) zero its row before the next pass. A member's state dict holds views of the stacks:
    its checkpoints copy them out (:func:`istar_tune.training.state.compact`)."""

    def __init__(self, models: Sequence[torch.nn.Module], generators: Sequence[torch.Generator]):
        if problems := fuse_problems(models):
            raise ConfigError(problems)
        if len(generators) != len(models):
            raise ConfigError(f"a bundle of {len(models)} members needs as many generators, got {len(generators)}")
        self.models, self.generators = list(models), list(generators)
        self.buffers = dict(self.models[0].named_buffers())
        named = [dict(m.named_parameters()) for m in self.models]
        self.params = {name: [member[name] for member in named] for name in named[0]}
        """Every parameter's K members' tensors, by name."""
        self.stacked: dict[str, torch.Tensor] = {}
        if len(self.models) > 1:
            with torch.no_grad():
                for name, params in self.params.items():
                    stack = torch.stack([p.detach() for p in params]).requires_grad_(params[0].requires_grad)
                    if any(p.grad is not None for p in params):  # gradients accumulated before (a bundle re-made)
                        stack.grad = torch.stack([torch.zeros_like(p) if p.grad is None else p.grad for p in params])
                    for k, param in enumerate(params):
                        param.data = stack.data[k]  # the member's weights now live in its row of the stack
                    self.stacked[name] = stack
            self.share_gradients()

    def __len__(self) -> int:
        return len(self.models)

    def train(self, mode: bool = True) -> None:
        for model in self.models:
            model.train(mode)

    def share_gradients(self) -> None:
        """Each member's ``.grad`` a view of its row of the stacked gradient (after a backward pass)."""
        for name, stack in self.stacked.items():
            if stack.grad is not None:
                for k, param in enumerate(self.params[name]):
                    param.grad = stack.grad[k]

    def _forget_zeroed(self) -> None:
        """The members' gradients are the truth: rows whose member's ``.grad`` was set to ``None`` start from zero."""
        for name, stack in self.stacked.items():
            if stack.grad is None:
                continue
            gone = [k for k, param in enumerate(self.params[name]) if param.grad is None]
            if len(gone) == len(self.models):
                stack.grad = None
            for k in gone if len(gone) < len(self.models) else ():
                stack.grad[k].zero_()

    def __call__(self, batch: dict[str, torch.Tensor], hidden_states: bool,
                 lengths: Sequence[int] | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """Task losses (K,) and, with ``hidden_states``, the embedding output and every layer's, each (K, B, T, d).
        ``lengths``: ``batch`` holds each member's own batch, of these lengths, padded along a leading member axis
        (:func:`stack_batches`); ``None``: one batch every member reads."""
        if lengths is not None and len(self.models) == 1:  # its own batch, as it was
            batch = {key: value[0, :, :lengths[0]] if key in SEQUENCE_KEYS else value[0]
                     for key, value in batch.items()}
            lengths = None
        if len(self.models) == 1:  # the member's own model: the plain path's kernels, bit for bit
            with MemberDropouts(self.generators, torch.tensor(0)):
                outputs = self.models[0](**batch, output_hidden_states=hidden_states)
            states = tuple(h.unsqueeze(0) for h in outputs.hidden_states) if hidden_states else ()
            return outputs.loss.unsqueeze(0), states
        self._forget_zeroed()
        base = self.models[0]

        padded = batch["input_ids"].shape[-1]

        def one(params, member, own):
            with MemberDropouts(self.generators, member, lengths, padded):
                outputs = functional_call(base, {**params, **self.buffers}, (), {**own,
                                          "output_hidden_states": hidden_states})
            return outputs.loss, (tuple(outputs.hidden_states) if hidden_states else ())

        members = torch.arange(len(self.models), device=batch["input_ids"].device)
        if lengths is not None:  # each member's own padding: its mask made here, where its values may be read
            dtype = next(iter(self.stacked.values())).dtype
            batch = {**batch, "attention_mask": additive_mask(batch["attention_mask"], dtype)}
        in_dims = (0, 0, None if lengths is None else 0)
        return vmap(one, in_dims=in_dims, randomness="same")(self.stacked, members, batch)


@dataclass(frozen=True)
class MemberLoss:
    """What a member's loss adds to its task loss: its method's penalty with its own λ, ζ and Σ_S."""

    method: str
    lam: float
    zeta: float
    layer: int | None = None
    include_padding: bool = False
    shrinkage_cov: torch.Tensor | None = None

    @classmethod
    def of(cls, hparams: Hyperparameters, shrinkage_cov: torch.Tensor | None = None) -> MemberLoss:
        return cls(hparams.method, hparams.penalty_weight, hparams.zeta, hparams.layer, hparams.include_padding,
                   shrinkage_cov)

    @property
    def penalised(self) -> bool:
        return self.method in PENALISED and self.lam != 0


def fused_losses(model: FusedModel, losses: Sequence[MemberLoss], batch: dict[str, torch.Tensor],
                 lengths: Sequence[int] | None = None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every member's total loss (what its backward pass takes) and the logged values (K, 3): total, task loss and
    penalty per member, float64, as :func:`istar_tune.training.epoch.forward_backward` logs one run's. ``lengths``:
    each member reads its own row of ``batch`` (:func:`stack_batches`)."""
    task_losses, hidden = model(batch, hidden_states=any(loss.penalised for loss in losses), lengths=lengths)
    totals, values = [], []
    for k, loss in enumerate(losses):
        task = task_losses[k].float()
        pen = None
        if loss.penalised:
            try:
                mask = batch["attention_mask"] if lengths is None else batch["attention_mask"][k]
                pen = penalty(loss.method, tuple(h[k] for h in hidden), mask, lam=loss.lam,
                              zeta=loss.zeta, shrinkage_cov=loss.shrinkage_cov, layer=loss.layer,
                              include_padding=loss.include_padding)
            except IsotropyError:  # this member's points are no longer finite: its loss is not, the others go on
                pen = torch.full_like(task, float("nan"))
        total = task if pen is None else task + pen
        totals.append(total)
        values.append(torch.stack([total.detach(), task.detach(),
                                   pen.detach() if pen is not None else torch.zeros_like(total)]))
    return totals, torch.stack(values).double()


def fused_forward_backward(model: FusedModel, losses: Sequence[MemberLoss], batch: dict[str, torch.Tensor],
                           accum: int = 1, lengths: Sequence[int] | None = None) -> torch.Tensor:
    """One step's device work for every member up to its gradients (accumulated into its own ``.grad``); returns
    the logged values (K, 3). A member whose loss is non-finite spoils only its own gradients and weights (its
    penalty's points turning non-finite give it a NaN loss, not an error): the caller drops it from the bundle."""
    totals, values = fused_losses(model, losses, batch, lengths)
    (torch.stack(totals) / accum).sum().backward()
    model.share_gradients()
    return values


def stack_batches(batches: Sequence[dict[str, torch.Tensor]], pad_id: int,
                  avoid: Sequence[int] = ()) -> tuple[dict[str, torch.Tensor], list[int]]:
    """Members' own batches (one batch size, each padded to its own longest sequence) as one batch with a leading
    member axis, and each one's own length: each sequence-shaped tensor padded on the right (``input_ids`` with
    ``pad_id``, masks and token types with 0: what the collator pads with) to the longest of them, or past it to the
    first length none of the sizes ``avoid`` has (the model's other axes: a member's dropout masks are drawn in its
    own shape by telling the padded axes from the others, :func:`member_dropout`). What a member's attention and
    penalty see stays its own."""
    lengths = [batch["input_ids"].shape[1] for batch in batches]
    length = max(lengths)
    while length in set(avoid):
        length += 1
    stacked = {}
    for key in batches[0]:
        parts = [batch[key] for batch in batches]
        if key in SEQUENCE_KEYS:
            fill = pad_id if key == "input_ids" else 0
            parts = [torch.nn.functional.pad(part, (0, length - part.shape[1]), value=fill) for part in parts]
        stacked[key] = torch.stack(parts)
    return stacked, lengths


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Members' padding masks (K, B, T) as the additive mask eager attention adds, (K, B, 1, 1, T): 0 where a token
    is seen, the dtype's lowest value where it is padding (what transformers makes of a 2D mask, broadcast over the
    queries). Made before vmap: transformers' own mask building reads the mask's values, which vmap cannot."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        mask == 0, torch.finfo(dtype).min)[:, :, None, None, :]


SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids")
"""A batch's tensors with a sequence axis (the collator pads them)."""
