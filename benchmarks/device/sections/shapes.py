"""(g) What a sequence length not seen before costs a training step (batch 8, bf16 autocast, batches padded to their
longest as an epoch's are): the first step at each of 16 lengths against that length's later steps, with sdpa as torch
chooses its kernel, sdpa with cuDNN's attention off (``training/run.use_attention_kernels``' choice on CUDA) and eager
attention."""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import torch

from ..common import Check, cuda, device, settle, table

NAME = "shapes"


def _step_ms(model, optimizer, length: int, batch: int) -> float:
    """One Base training step on a random batch of ``length`` tokens (a quarter of half the rows padding), in ms."""
    from ... import bench_step

    amp = torch.bfloat16 if not cuda() or torch.cuda.is_bf16_supported() else torch.float16
    inputs = {"input_ids": torch.randint(1000, model.config.vocab_size, (batch, length)),
              "attention_mask": torch.ones(batch, length, dtype=torch.long), "labels": torch.randint(0, 2, (batch,))}
    inputs["attention_mask"][batch // 2:, length * 3 // 4:] = 0
    inputs = {k: v.to(device()) for k, v in inputs.items()}
    if cuda():
        torch.cuda.synchronize()
    began = time.perf_counter()
    bench_step.train_step(model, optimizer, inputs, "base", None, amp, device())
    if cuda():
        torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - began)


def shape_steps(args, attention: str, lengths: list[int], batch: int) -> dict[str, Any]:
    """Step times (ms) at each length: the first one seen, then two more at the same length."""
    from istar_tune.models import load_model
    from istar_tune.tasks import get_task

    torch.manual_seed(0)
    model = load_model(args.model, get_task("rte"), attn_implementation=attention).to(device()).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    for _ in range(2):  # the process's and the model's first steps, outside the figures
        _step_ms(model, optimizer, lengths[0] - 1, batch)
    first, again = [], []
    for length in lengths:
        first.append(_step_ms(model, optimizer, length, batch))
        again += [_step_ms(model, optimizer, length, batch), _step_ms(model, optimizer, length, batch)]
    return {"first_seen_ms_median": round(statistics.median(first), 2), "first_seen_ms_max": round(max(first), 2),
            "seen_ms_median": round(statistics.median(again), 2),
            "first_over_seen": round(statistics.median(first) / statistics.median(again), 2)}


def run(check: Check, args) -> dict[str, Any]:
    lengths = list(range(68, 129, 4)) if cuda() else [33, 41, 49, 57]
    flags = ({"flash": torch.backends.cuda.flash_sdp_enabled(), "mem_efficient":
              torch.backends.cuda.mem_efficient_sdp_enabled(), "math": torch.backends.cuda.math_sdp_enabled()}
             if cuda() else {})
    variants = [("sdpa, cuDNN on (torch's default)", "sdpa", True), ("sdpa, cuDNN off (istar-tune's)", "sdpa", False),
                ("eager", "eager", False)]
    if not cuda():  # the cuDNN switch is CUDA's alone
        variants = [("sdpa", "sdpa", False), ("eager", "eager", False)]
    before, rows = torch.backends.cuda.cudnn_sdp_enabled(), []
    try:
        for label, attention, cudnn in variants:
            settle()
            torch.backends.cuda.enable_cudnn_sdp(cudnn)
            rows.append({"attention": label, "batch": 8, **shape_steps(args, attention, lengths, 8)})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
    return {"lengths": lengths, "sdp_backends_enabled": flags, "rows": rows}


def summary(g: dict[str, Any]) -> list[str]:
    lines = [f"## (g) A new sequence length's first step (batch 8, bf16; lengths {g['lengths']}; sdpa backends "
             f"on: {g['sdp_backends_enabled'] or 'n/a'})", ""]
    return lines + table(g["rows"], {"attention": "attention", "first_seen_ms_median": "first step ms (median)",
                                     "first_seen_ms_max": "first step ms (max)", "seen_ms_median": "later steps ms",
                                     "first_over_seen": "first / later"})
