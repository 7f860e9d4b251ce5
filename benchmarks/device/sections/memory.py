"""(c) The dry run's memory estimate (``search/spaces/cost.trial_memory``, less the CUDA context) against the peak
``torch.cuda.max_memory_allocated`` of a real run: Base and I-STAR, batch 8, 16, 32 × 128 tokens, bf16."""

from __future__ import annotations

import json
from typing import Any

import torch

from ..common import Check, cuda, hparams, settings, settle, table

NAME = "memory"


def run(check: Check, args) -> dict[str, Any]:
    from istar_tune.search.spaces.cost import trial_memory
    from istar_tune.tasks import get_task
    from istar_tune.training.loop import train

    rows = []
    for method in ("base", "istar"):
        for batch in (8, 16, 32):
            run_settings = settings(args, precision="bf16", max_train_samples=4 * batch, max_eval_samples=64)
            estimate = trial_memory(args.model, get_task("rte"), method, batch, run_settings)
            row = {"method": method, "batch_size": batch, "estimate_gb": round(estimate.peak_gb, 3),
                   "estimate_without_context_gb": round((estimate.peak - estimate.context) / 2**30, 3)}
            if cuda():
                settle()
                before = torch.cuda.memory_allocated()
                train(hparams(args, method=method, batch_size=batch), run_settings)
                measured = (torch.cuda.max_memory_allocated() - before) / 2**30
                row.update(measured_gb=round(measured, 3),
                           estimate_over_measured=round(row["estimate_without_context_gb"] / measured, 3))
                row["within_15_percent"] = abs(row["estimate_over_measured"] - 1) <= 0.15
            rows.append(row)
            print(json.dumps(row), flush=True)
    if not cuda():
        check.skip("memory: measured peaks", "torch.cuda.max_memory_allocated needs CUDA; the estimates are listed")
    return {"rows": rows}


def summary(section: dict[str, Any]) -> list[str]:
    return ["## (c) Memory estimate against measured (bf16, × 128 tokens)", ""] + table(section["rows"], {
        "method": "method", "batch_size": "batch", "estimate_without_context_gb": "estimate GiB (no context)",
        "measured_gb": "measured GiB", "estimate_over_measured": "ratio", "within_15_percent": "within 15 %"})
