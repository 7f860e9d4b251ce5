"""(0) Where a step's time goes (``benchmarks/profile_step.py``): Base and I-STAR at batch 8 and 32, bf16 on CUDA;
on a CPU the host side alone."""

from __future__ import annotations

import json
import math
from typing import Any

from ..common import Check, cuda, hparams, settings, table

NAME = "profile"


def run(check: Check, args) -> dict[str, Any]:
    from istar_tune.training.epoch import method_loss, train_epoch
    from istar_tune.training.run import make_optimizer, prepare

    from ... import profile_step

    steps, rows = max(args.steps, 2) if not cuda() else 20, []

    def optimizer_of(run):
        return make_optimizer(run, list(run.model.named_parameters()), 2e-5, 2, 0.0)

    for method in ("base", "istar"):
        for batch in (8, 32):
            prepared = prepare(hparams(args, method=method, batch_size=batch, lam=-1.0 if method == "istar" else None),
                               settings(args, max_train_samples=steps * batch, max_eval_samples=8))
            found = profile_step.profile_steps(prepared, method_loss, train_epoch, optimizer_of,
                                               math.ceil(len(prepared.data.train) / batch))
            rows.append({"method": method, "batch": batch, **found})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "top_host_ops"}), flush=True)
            del prepared
    if not cuda():
        check.skip("profile's GPU busy time", "a CPU has no device to be busy")
    return {"precision": "bf16" if cuda() else "fp32", "max_length": 128, "rows": rows}


def summary(p: dict[str, Any]) -> list[str]:
    lines = [f"## (0) Where a step's time goes ({p['precision']}, {p['max_length']} tokens; torch.profiler)", ""]
    lines += table(p["rows"], {"method": "method", "batch": "batch", "host_ms_per_step": "host ms/step",
                               "gpu_busy_ms_per_step": "GPU busy ms/step", "gpu_busy_share": "GPU busy",
                               "host_reads_per_step": "host reads/step", "cuda_syncs_per_step": "syncs/step"})
    for row in p["rows"]:
        ops = ", ".join(f"{o['op']} {o['self_cpu_ms_per_step']} ms" for o in row["top_host_ops"][:5])
        lines += [f"- {row['method']} at batch {row['batch']}, top host ops per step: {ops}"]
    return lines + [""]
