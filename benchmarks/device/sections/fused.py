"""(j) Fused trials: K Base configurations (learning rates of their own) trained as one bundle on RTE
(``istar_tune.training.bundle.train_bundle``), eager attention (what a bundle needs), length buckets of 16, two epochs
with the second timed: the bundle's tokens/s (K members × one stream's) and its share of the measured matrix rate, at
K = 1, 4, 8, 16 and batch 8 and 32 in bf16 on CUDA (K = 1 and 2, fp32, batch 8 on a CPU). ``step_mode: graphs`` is
not fused yet (a bundle refuses it), so no graphs rows."""

from __future__ import annotations

import json
import math
from typing import Any

from ..common import Check, cuda, failure, hparams, matmul_peaks, settings, settle, table, train_flops_per_token

NAME = "fused"
BUCKET = 16


def _cases() -> list[tuple[int, int]]:
    if not cuda():
        return [(1, 8), (2, 8)]
    return [(members, batch) for batch in (8, 32) for members in (1, 4, 8, 16)]


def run(check: Check, args) -> dict[str, Any]:
    from istar_tune.training.bundle import train_bundle

    precision = "bf16" if cuda() else "fp32"
    peak = matmul_peaks()[precision]
    per_token = train_flops_per_token(args.model, 128)
    rows = []
    for members, batch in _cases():
        settle()
        row = {"members": members, "batch_size": batch, "precision": precision}
        configs = [hparams(args, batch_size=batch, epochs=2, learning_rate=2e-5 * (k + 1)) for k in range(members)]
        try:
            results = train_bundle(configs, settings(args, precision=precision, attn_implementation="eager",
                                                     length_bucket=BUCKET,
                                                     max_train_samples=4 * args.train_samples_small))
        except Exception as err:  # noqa: BLE001 - one size's failure (memory) is a finding, the others still run
            rows.append({**row, "error": failure(err, 500)})
        else:
            stream = results[0].final["train_tokens_per_s"]  # one batch stream's tokens over the bundle's time
            rate = members * stream
            rows.append({**row, "tokens_per_s": round(rate, 1),
                         "share_of_matmul_rate": round(rate * per_token / (peak * 1e12), 4),
                         "losses_finite": all(math.isfinite(r.final["train_loss"]) for r in results),
                         "failed": sum(r.status != "finished" for r in results)})
        print(json.dumps(rows[-1]), flush=True)
    if not cuda():
        check.skip("fused: K = 4, 8, 16 at bf16", "a bundle's gain is its launches; a CPU's step is compute-bound")
    return {"length_bucket": BUCKET, "matmul_tflops": round(peak, 1), "rows": rows}


def summary(m: dict[str, Any]) -> list[str]:
    rows = [{**r, "error": r["error"].splitlines()[0]} if r.get("error") else r for r in m["rows"]]
    return [f"## (j) Fused trials (Base, RTE, eager attention, length buckets of {m['length_bucket']})", ""] + table(
        rows, {"members": "K", "batch_size": "batch", "precision": "precision", "tokens_per_s": "tokens/s (all K)",
               "share_of_matmul_rate": "share of the matrix rate", "failed": "failed members", "error": "error"})
