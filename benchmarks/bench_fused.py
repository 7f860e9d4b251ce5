"""K configurations trained as one fused bundle against the same K trained one after another in one process.

    python -m benchmarks.bench_fused [--models minilm,tiny-bert] [--k 1,2,4,8] [--batch-size 16] [--seq-len 64]
                                     [--steps 6] [--threads N]

Each configuration is I-STAR (λ = −1, ζ = 0.2, a fixed Σ_S) with a learning rate of its own, dropout on, eager
attention (what a bundle needs). A step is forward, every member's loss, backward, and every member's clipped AdamW
update. The fused step runs the K members as one model (``istar_tune.training.fused``: stacked weights under
``torch.func.vmap``); the separate steps run each member's model in turn. Rounds alternate (separate, fused) so
machine noise hits both alike; medians are printed, with the throughput ratio (examples per second of the fused
bundle over the separate steps: 1.0 is no loss) and the operators a step's forward and backward call, as the
profiler counts them (leaf ``aten`` calls that compute, views and allocations left out: on a GPU each is a kernel
launch, the host work a bundle shares; the members' updates stay one optimizer each). Both sides train the same
configurations on the same batch with the same dropout masks, so the largest gaps between a fused member's losses
and weights and its separate twin's are printed too (float32 rounding of the batched kernels; 0 at K = 1).

A third side runs the same bundle through HFTA-style fused operators written by hand for BERT
(``benchmarks/hfta_bert.py``: one ``baddbmm`` per linear layer over the stacked weights, one dropout draw for all
members), on the same stacks and updates as the vmap side: its step time, its throughput over vmap's, its operator
count, and its largest task-loss gap from vmap's with dropout off on the first batch (exactness of the mechanism; with
dropout on its masks are not the members' own, so its losses are not compared).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.hfta_bert import HftaBert
from istar_tune.losses import penalty
from istar_tune.models import hidden_size, load_model
from istar_tune.tasks import get_task
from istar_tune.training.fused import FusedModel, MemberLoss, fused_forward_backward, fused_losses

RATES = (1e-4, 2e-4, 3e-4, 5e-4, 8e-4, 1e-3, 2e-3, 3e-3, 5e-3, 8e-3, 1e-2, 2e-2, 3e-2, 5e-2, 8e-2, 1e-1)
"""The members' learning rates, in order (K ≤ 16)."""


def members(model_name: str, k: int) -> tuple[list[torch.nn.Module], list[torch.optim.Optimizer], list]:
    """K copies of the model as one seed builds it (eager attention, training mode), each with its own AdamW, and
    the global generator's state where each would start training alone (its dropout draws from there)."""
    models, optimizers, states = [], [], []
    for rate in RATES[:k]:
        torch.manual_seed(0)
        model = load_model(model_name, get_task("sst2"), "eager").train()
        states.append(torch.get_rng_state())
        models.append(model)
        optimizers.append(torch.optim.AdamW(model.parameters(), lr=rate, fused=True))
    return models, optimizers, states


def batch_of(vocab: int, batch_size: int, seq_len: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    mask[batch_size // 2:, seq_len * 3 // 4:] = 0  # some padding, as in real batches
    return {"input_ids": torch.randint(1000, vocab, (batch_size, seq_len), generator=generator),
            "attention_mask": mask, "labels": torch.randint(0, 2, (batch_size,), generator=generator)}


def _update(models, optimizers) -> None:
    for model, optimizer in zip(models, optimizers):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def separate_work(models, batch, sigma, states: list) -> torch.Tensor:
    """Each member's forward, loss and backward in turn, as K trials would run them (each drawing its dropout from
    its own place in the global generator's stream, ``states``); the members' losses (K,)."""
    losses = []
    for k, model in enumerate(models):
        torch.set_rng_state(states[k])
        outputs = model(**batch, output_hidden_states=True)
        loss = outputs.loss + penalty("istar", outputs.hidden_states, batch["attention_mask"], lam=-1.0, zeta=0.2,
                                      shrinkage_cov=sigma)
        loss.backward()
        states[k] = torch.get_rng_state()
        losses.append(loss.detach())
    return torch.stack(losses)


NO_KERNEL = frozenset({"aten::as_strided", "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::expand",
                       "aten::permute", "aten::transpose", "aten::t", "aten::slice", "aten::select", "aten::unsqueeze",
                       "aten::squeeze", "aten::alias", "aten::detach", "aten::resolve_conj", "aten::resolve_neg",
                       "aten::empty", "aten::empty_strided", "aten::_local_scalar_dense", "aten::lift_fresh",
                       "aten::to", "aten::result_type", "aten::split", "aten::unbind", "aten::chunk",
                       "aten::narrow", "aten::as_strided_", "aten::resize_", "aten::set_"})
"""Leaf operators that launch no kernel on a GPU (views, allocations, host reads)."""


def kernel_ops(work) -> int:
    """Leaf ``aten`` calls of one call of ``work`` that compute (on a GPU each is a kernel launch): the profiler's
    count, views and allocations left out."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        work()
    return sum(1 for e in prof.events() if e.name.startswith("aten::") and not e.cpu_children
               and e.name not in NO_KERNEL)


def measure(model_name: str, k: int, batch_size: int, seq_len: int, steps: int) -> dict[str, float]:
    separate_models, separate_optimizers, states = members(model_name, k)
    fused_models, fused_optimizers, fused_states = members(model_name, k)
    sigma = torch.eye(hidden_size(fused_models[0]))
    generators = [torch.Generator() for _ in range(k)]
    for generator, state in zip(generators, fused_states):
        generator.set_state(state)
    fused = FusedModel(fused_models, generators)
    hfta_models, hfta_optimizers, _ = members(model_name, k)
    hfta = HftaBert(FusedModel(hfta_models, [torch.Generator() for _ in range(k)]))
    losses = [MemberLoss("istar", -1.0, 0.2, shrinkage_cov=sigma)] * k
    batch = batch_of(fused_models[0].config.vocab_size, batch_size, seq_len)
    hfta_gap = _no_dropout_gap(fused, hfta, losses, batch)
    work_of = {"separate": lambda: separate_work(separate_models, batch, sigma, states),
               "fused": lambda: fused_forward_backward(fused, losses, batch)[:, 0],
               "hfta": lambda: fused_forward_backward(hfta, losses, batch)[:, 0]}
    updates = {"separate": lambda: _update(separate_models, separate_optimizers),
               "fused": lambda: _update(fused.models, fused_optimizers),
               "hfta": lambda: _update(hfta.models, hfta_optimizers)}
    times: dict[str, list[float]] = {name: [] for name in work_of}
    logged: dict[str, list[torch.Tensor]] = {name: [] for name in work_of}
    for round_ in range(steps + 1):
        for name, work in work_of.items():
            start = time.perf_counter()
            logged[name].append(work().double())
            updates[name]()
            if round_:  # the first round warms up
                times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(values) for name, values in times.items()}
    # The same configurations, batches and dropout masks: how far the fused members' losses and weights are from
    # the separate ones' after every step (float32 rounding of the batched kernels).
    loss_gap = (torch.stack(logged["fused"]) - torch.stack(logged["separate"])).abs().max().item()
    weight_gap = max((a - b).abs().max().item() for fused_model, alone in zip(fused.models, separate_models)
                     for a, b in zip(fused_model.parameters(), alone.parameters()))
    return {"separate_s": median["separate"], "fused_s": median["fused"],
            "ratio": median["separate"] / median["fused"],
            "examples_per_s_fused": k * batch_size / median["fused"], "loss_gap": loss_gap, "weight_gap": weight_gap,
            "ops_separate": _counted(work_of["separate"], separate_models),
            "ops_fused": _counted(work_of["fused"], fused.models),
            "hfta_s": median["hfta"], "hfta_over_vmap": median["fused"] / median["hfta"],
            "ops_hfta": _counted(work_of["hfta"], hfta.models), "hfta_gap": hfta_gap}


def _no_dropout_gap(fused: FusedModel, hfta: HftaBert, losses: list[MemberLoss], batch) -> float:
    """The largest gap between the HFTA side's and the vmap side's task losses on one batch with dropout off (the same
    weights: exactness of the mechanism alone)."""
    fused.train(False)
    hfta.training = False
    with torch.no_grad():
        gap = (fused_losses(fused, losses, batch)[1][:, 1] - fused_losses(hfta, losses, batch)[1][:, 1]).abs().max()
    fused.train(True)
    hfta.training = True
    return gap.item()


def _counted(work, models) -> int:
    count = kernel_ops(work)
    for model in models:  # the counted pass's gradients are not a step's
        model.zero_grad(set_to_none=True)
    return count


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="minilm,tiny-bert")
    parser.add_argument("--k", default="1,2,4,8")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); batch {args.batch_size} × "
          f"{args.seq_len} tokens, {args.steps} timed steps (medians)")
    print("| model | K | separate step (s) | fused step (s) | fused / separate throughput | examples/s fused | "
          "forward + backward kernels: separate → fused | max |Δ loss| | max |Δ weight| | HFTA-style step (s) | "
          "HFTA / vmap throughput | HFTA kernels | HFTA − vmap |Δ task loss|, no dropout |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for model_name in args.models.split(","):
        for k in (int(v) for v in args.k.split(",")):
            f = measure(model_name, k, args.batch_size, args.seq_len, args.steps)
            print(f"| {model_name} | {k} | {f['separate_s']:.3f} | {f['fused_s']:.3f} | {f['ratio']:.2f}× | "
                  f"{f['examples_per_s_fused']:.0f} | {f['ops_separate']} → {f['ops_fused']} | "
                  f"{f['loss_gap']:.1e} | {f['weight_gap']:.1e} | {f['hfta_s']:.3f} | {f['hfta_over_vmap']:.2f}× | "
                  f"{f['ops_hfta']} | {f['hfta_gap']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
