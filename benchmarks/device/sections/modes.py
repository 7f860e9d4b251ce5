"""(h) Base on RTE for each ``step_mode`` (eager, graphs, compile) at batch 8 and 32, bf16 and TF32, length buckets
of 16, two epochs with the second timed (the first holds the captures and compiles): tokens/s and the share of the
measured matrix rate; on a CPU eager alone. Also the determinism section's graphs row (:func:`graphs_equal_eager`)."""

from __future__ import annotations

import json
import math
from typing import Any

from ..common import (
    Capture,
    Check,
    compare,
    cuda,
    failure,
    hparams,
    matmul_peaks,
    settings,
    settle,
    table,
    train_flops_per_token,
)

NAME = "modes"
BUCKET = 16


def _modes() -> list[tuple[str, str, int]]:
    if not cuda():
        return [("eager", "fp32", 8)]
    return [(mode, precision, batch) for precision in ("bf16", "tf32") for batch in (8, 32)
            for mode in ("eager", "graphs", "compile")]


def graphs_equal_eager(args, results) -> None:
    """The determinism section's graphs row (in a process of its own, :func:`..common.in_own_process`): I-STAR, two
    epochs, eager then graphs, deterministic kernels, every epoch record compared."""
    from istar_tune.training.loop import train

    try:
        records = {}
        for mode in ("eager", "graphs"):
            capture = Capture()
            train(hparams(args, method="istar", lam=-1.0, zeta=0.2, epochs=2, batch_size=16),
                  settings(args, deterministic=True, precision="bf16", length_bucket=BUCKET, step_mode=mode,
                           max_train_samples=args.train_samples_small, max_eval_samples=128), capture)
            records[mode] = capture.records
        results.put({"epochs": [compare(a, b) for a, b in zip(records["eager"], records["graphs"], strict=True)]})
    except Exception as err:  # noqa: BLE001 - a capture that fails is a finding
        results.put({"error": failure(err)})


def run(check: Check, args) -> dict[str, Any]:
    from istar_tune.training.loop import train

    peaks = matmul_peaks()
    per_token = train_flops_per_token(args.model, 128)
    rows = []
    for mode, precision, batch in _modes():
        settle()
        chosen = {"precision": "fp32", "matmul_precision": "high"} if precision == "tf32" else {"precision": precision}
        row = {"step_mode": mode, "precision": precision, "batch_size": batch}
        try:
            result = train(hparams(args, batch_size=batch, epochs=2),  # the second epoch is timed: the first
                           settings(args, step_mode=mode, length_bucket=BUCKET,  # holds the captures and compiles
                                    max_train_samples=4 * args.train_samples_small, **chosen))
        except Exception as err:  # noqa: BLE001 - one mode's failure is a finding, the others still run
            rows.append({**row, "error": failure(err, 500)})
        else:
            rate = result.final["train_tokens_per_s"]
            rows.append({**row, "train_loss": result.final["train_loss"], "train_tokens_per_s": round(rate, 1),
                         "share_of_matmul_rate": round(rate * per_token / (peaks[precision] * 1e12), 4),
                         "loss_finite": math.isfinite(result.final["train_loss"])})
        print(json.dumps(rows[-1]), flush=True)
    if not cuda():
        check.skip("modes: graphs and compile", "graphs replays CUDA graphs; compile's CPU figure is its compile time")
    return {"length_bucket": BUCKET, "matmul_tflops": {k: round(v, 1) for k, v in peaks.items()}, "rows": rows}


def summary(m: dict[str, Any]) -> list[str]:
    rows = [{**r, "error": r["error"].splitlines()[0]} if r.get("error") else r for r in m["rows"]]
    return [f"## (h) Step modes (Base, RTE, length buckets of {m['length_bucket']})", ""] + table(rows, {
        "step_mode": "step mode", "precision": "precision", "batch_size": "batch", "train_tokens_per_s": "tokens/s",
        "share_of_matmul_rate": "share of the matrix rate", "error": "error"})
