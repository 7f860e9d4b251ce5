"""(d) The I-STAR/Base step ratio (``benchmarks/bench_step.py``) and one IsoScore* forward and backward
(``benchmarks/bench_isoscore.py``) with the Gram matrix in float32 and in TF32, and how far the two scores differ."""

from __future__ import annotations

from typing import Any

import torch

from ..common import Check, cuda, device

NAME = "step"


def run(check: Check, args) -> dict[str, Any]:
    from istar_tune.isotropy import isoscore_star

    from ... import bench_isoscore, bench_step

    base_s, istar_s = bench_step.measure(args.model, 32, 128, args.steps, device())
    gen = torch.Generator().manual_seed(0)
    dim = 768 if cuda() else 128
    a = torch.randn(dim, 2 * dim, generator=gen)
    shrink = (a @ a.T / (2 * dim)).to(device())
    gram = {}
    for n in (2048, 16384) if cuda() else (2048,):
        points = torch.randn(n, dim, generator=gen).to(device())
        for precision in ("highest", "high"):
            torch.set_float32_matmul_precision(precision)
            try:
                seconds = bench_isoscore.time_backward(lambda x: isoscore_star(x, shrink, 0.2), points, 5)
                score = float(isoscore_star(points, shrink, 0.2))
            finally:
                torch.set_float32_matmul_precision("highest")
            gram[f"n{n}_{precision}"] = {"seconds": seconds, "score": score}
        gram[f"n{n}_tf32_score_difference"] = abs(gram[f"n{n}_high"]["score"] - gram[f"n{n}_highest"]["score"])
    return {"batch": "32 × 128", "base_step_s": base_s, "istar_step_s": istar_s,
            "istar_over_base": round(istar_s / base_s, 3), "isoscore_dim": dim, "gram": gram}


def summary(s: dict[str, Any]) -> list[str]:
    return [f"## (d) I-STAR/Base step ratio: **{s['istar_over_base']}** (I-STAR {s['istar_step_s']:.4f} s, "
            f"Base {s['base_step_s']:.4f} s, batch {s['batch']})", "", f"IsoScore* forward+backward: {s['gram']}", ""]
