"""Where a training step's time goes (the device check's ``profile`` section): ``torch.profiler`` over one epoch of
about 20 steps of the real training path (``training.epoch.train_epoch``: the method's loss, backward, the optimizer),
after an unprofiled warm-up epoch, for Base and I-STAR at batch 8 and 32. Per step: host time (wall), GPU busy time
(the CUDA kernels' own time; none on a CPU), host reads that wait for the device (``aten::_local_scalar_dense``,
what ``.item()`` and ``.tolist()`` run, and the CUDA synchronise calls), and the host-side ops that take the most
time. On a CPU it rehearses the section: the same path and counts, no GPU figures.
"""

from __future__ import annotations

import time
from typing import Any

import torch

SYNC_OPS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
"""CUDA runtime calls that block the host until the device catches up."""
HOST_READ_OP = "aten::_local_scalar_dense"
"""What ``.item()`` / ``.tolist()`` of a device tensor runs: on CUDA, a copy the host waits for."""
TOP = 8


def profile_steps(run, method_loss, train_epoch, optimizer_of, steps: int) -> dict[str, Any]:
    """Profile one epoch of ``steps`` steps of ``run`` (warmed up by one unprofiled epoch)."""
    from torch.profiler import ProfilerActivity, profile

    optimizer, scheduler, scaler = optimizer_of(run)
    params = [p for p in run.model.parameters() if p.requires_grad]
    loss = method_loss(run, None)
    train_epoch(run, loss, params, optimizer, scheduler, scaler, 1, "warm-up")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.device.type == "cuda" else [])
    if run.device.type == "cuda":
        torch.cuda.synchronize()
    began = time.perf_counter()
    with profile(activities=activities) as prof:
        train_epoch(run, loss, params, optimizer, scheduler, scaler, 2, "profiled")
        if run.device.type == "cuda":
            torch.cuda.synchronize()
    wall = time.perf_counter() - began
    return summarise(prof.key_averages(), wall, steps, run.device.type == "cuda")


def summarise(averages, wall_s: float, steps: int, cuda: bool) -> dict[str, Any]:
    """Per-step figures from the profiler's averages (its ``key_averages()``)."""
    counts = {event.key: event.count for event in averages}
    host_reads = counts.get(HOST_READ_OP, 0)
    syncs = sum(counts.get(name, 0) for name in SYNC_OPS)
    gpu_us = sum(getattr(event, "self_device_time_total", 0) or 0 for event in averages) if cuda else None
    top = sorted((e for e in averages if not e.key.startswith("ProfilerStep")), key=lambda e: -e.self_cpu_time_total)
    return {"steps": steps, "host_ms_per_step": round(1000 * wall_s / steps, 3),
            "gpu_busy_ms_per_step": round(gpu_us / 1000 / steps, 3) if gpu_us is not None else None,
            "gpu_busy_share": round(gpu_us / 1e6 / wall_s, 4) if gpu_us is not None else None,
            "host_reads_per_step": round(host_reads / steps, 2), "cuda_syncs_per_step": round(syncs / steps, 2),
            "top_host_ops": [{"op": e.key, "self_cpu_ms_per_step": round(e.self_cpu_time_total / 1000 / steps, 3),
                              "calls_per_step": round(e.count / steps, 2)} for e in top[:TOP]]}
