"""(f) A trial whose memory cap (``training/memory.cap_gpu_memory``) is too small fails with the advice, its process
allocates again, and a neighbour training beside it finishes."""

from __future__ import annotations

import multiprocessing
from typing import Any

import torch

from ..common import Check, collect, hparams, settings

NAME = "oom"
NEEDS_CUDA = "a memory cap is a CUDA allocator's (torch.cuda.set_per_process_memory_fraction)"


def _victim(args, share: float, results) -> None:
    """A trial as the trainable runs it, its memory capped at ``share``; then the same process allocates again."""
    from istar_tune.errors import TrainingError
    from istar_tune.training.loop import train
    from istar_tune.training.memory import cap_gpu_memory, out_of_memory_explained, trial_shape

    cap_gpu_memory(share)
    try:
        with out_of_memory_explained(trial_shape(args.model, "rte", "base", 32, 128), share):
            train(hparams(args), settings(args, max_train_samples=args.train_samples_small))
        results.put({"who": "victim", "error": None})
    except TrainingError as err:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
        alive = float(torch.ones(2**28, device="cuda").sum())  # 1 GiB, after the failure
        results.put({"who": "victim", "error": str(err), "allocated_after": alive == 2**28})


def _neighbour(args, results) -> None:
    from istar_tune.training.loop import train

    result = train(hparams(args, epochs=2), settings(args, max_train_samples=args.train_samples_small))
    results.put({"who": "neighbour", "status": result.status, "epochs": len(result.epochs)})


def run(check: Check, args) -> dict[str, Any]:
    from istar_tune.models import meta_model
    from istar_tune.tasks import get_task
    from istar_tune.training.memory import parameter_bytes

    weights, gradients, optimizer = parameter_bytes(meta_model(args.model, get_task("rte")))
    # The weights, gradients and AdamW's moments fit; a training step's activations do not.
    share = (weights + gradients + optimizer + 2**27) / torch.cuda.get_device_properties(0).total_memory
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=_victim, args=(args, share, results)),
                 context.Process(target=_neighbour, args=(args, results))]
    for process in processes:
        process.start()
    found = collect(results, processes, len(processes), max(60.0, check.left_s()))
    for process in processes:
        process.join(timeout=30)
    victim, neighbour = found.get("victim", {}), found.get("neighbour", {})
    return {"share": round(share, 5), "victim": victim, "neighbour": neighbour,
            "exit_codes": [p.exitcode for p in processes],
            "advice_given": "lower batch_size" in (victim.get("error") or ""),
            "victim_lived": bool(victim.get("allocated_after")), "neighbour_finished": neighbour.get("status") ==
            "finished"}


def summary(o: dict[str, Any]) -> list[str]:
    return [f"## (f) Memory cap too small (share {o['share']}): advice given {o['advice_given']}, victim process "
            f"lived {o['victim_lived']}, neighbour finished {o['neighbour_finished']}", ""]
