"""Time one forward+backward of istar_tune's closed-form IsoScore* against the released SVD formula.

    python benchmarks/bench_isoscore.py [--dim 768] [--sizes 2048 16384] [--repeats 5]

Both are measured in the same run on the same inputs (float32, ζ = 0.2, a random PSD Σ_S); the figure printed is
the median of ``--repeats`` timed runs after one warm-up. On a CUDA machine the GPU is measured too.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from istar_tune.isotropy import isoscore_star


def released_formula(points: torch.Tensor, shrinkage_cov: torch.Tensor, zeta: float) -> torch.Tensor:
    d = points.shape[1]
    cov = (1 - zeta) * torch.cov(points.T) + zeta * shrinkage_cov
    pcs = torch.linalg.svdvals(cov)
    normalised = pcs * math.sqrt(d) / torch.linalg.vector_norm(pcs)
    defect = torch.linalg.vector_norm(normalised - 1) / math.sqrt(2 * (d - math.sqrt(d)))
    return ((d - defect**2 * (d - math.sqrt(d))) ** 2 - d) / (d * (d - 1))


def time_backward(fn, points: torch.Tensor, repeats: int) -> float:
    def once() -> float:
        x = points.detach().clone().requires_grad_(True)
        if x.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn(x).backward()
        if x.is_cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    once()  # warm-up
    return statistics.median(once() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 16384])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--zeta", type=float, default=0.2)
    args = parser.parse_args()

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, d = {args.dim}, zeta = {args.zeta}")
    print(f"{'device':>6} {'n':>7} {'closed form (s)':>16} {'released SVD (s)':>17} {'speed-up':>9}")
    for device in devices:
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(args.dim, 2 * args.dim, generator=gen)
        shrink = (a @ a.T / (2 * args.dim)).to(device)
        for n in args.sizes:
            points = (torch.randn(n, args.dim, generator=gen) * torch.linspace(3, 0.1, args.dim)).to(device)
            ours = time_backward(lambda x, s=shrink: isoscore_star(x, s, args.zeta), points, args.repeats)
            released = time_backward(lambda x, s=shrink: released_formula(x, s, args.zeta), points, args.repeats)
            print(f"{device:>6} {n:>7} {ours:>16.4f} {released:>17.4f} {released / ours:>8.2f}x")


if __name__ == "__main__":
    main()
