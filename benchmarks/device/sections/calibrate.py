"""(b) ``istar-tune calibrate``'s measurement with 1, 2, 4, 8 co-located trials at batch 8 and 32, MPS off and on
(``--packings``, ``--batches``, ``--mps``); last, as it takes longest: what the budget does not reach is listed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ..common import Check, cuda, table

NAME = "calibrate"


@contextlib.contextmanager
def mps_daemon(folder: Path):
    """NVIDIA MPS for the processes started inside (its pipe and log folders in ``folder``); yields whether it
    started."""
    control = shutil.which("nvidia-cuda-mps-control")
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}
    started = False
    if control:
        for path in env.values():
            Path(path).mkdir(parents=True, exist_ok=True)
        started = subprocess.run([control, "-d"], env={**os.environ, **env}, capture_output=True).returncode == 0
    saved = {k: os.environ.get(k) for k in env}
    if started:
        os.environ.update(env)
    try:
        yield started
    finally:
        if started:
            subprocess.run([control], input=b"quit\n", env={**os.environ, **env}, capture_output=True, timeout=30)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _packings(check: Check, args, batch: int, mps: bool) -> list[dict[str, Any]]:
    from istar_tune.apps.calibrate import Job, measure

    rows = []
    for packing in args.packings or ((1, 2, 4, 8) if cuda() else (1, 2)):
        if check.left_s() < 20 * (1 + packing // 4):
            check.skip(f"calibrate packing {packing} batch {batch} mps {mps}", "time budget spent")
            continue
        job = Job(model=args.model, task="rte", method="base", batch_size=batch, max_length=128,
                  steps=args.steps * 2, warmup=3, data_dir=args.data_dir, device="cuda" if cuda() else "cpu",
                  threads=max(1, (os.cpu_count() or 1) // packing))
        rows.append({"mps": mps, "batch_size": batch, **measure(job, packing, timeout_s=240)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def run(check: Check, args) -> dict[str, Any]:
    batches = args.batches or ((32, 8) if cuda() else (8,))
    mps_modes = [m for m in ((False, True) if cuda() else (False,)) if args.mps in ("both", "on" if m else "off")]
    if not cuda():
        check.skip("calibrate: 4 and 8 trials, batch 32, MPS", "no CUDA: a CPU's figures say nothing of a GPU's")
    rows = []
    for batch, mps in [(b, m) for b in batches for m in mps_modes]:
        with tempfile.TemporaryDirectory(prefix="mps-") as tmp, (mps_daemon(Path(tmp)) if mps
                                                                 else contextlib.nullcontext(False)) as on:
            if mps and not on:
                check.skip(f"calibrate batch {batch} with MPS", "nvidia-cuda-mps-control is missing or its daemon "
                           "did not start")
                continue
            rows += _packings(check, args, batch, mps)
    return {"rows": rows}


def summary(section: dict[str, Any]) -> list[str]:
    return ["## (b) calibrate (Base, RTE, × 128 tokens)", ""] + table(section["rows"], {
        "mps": "MPS", "batch_size": "batch", "packing": "packing", "tokens_per_second_per_trial": "tokens/s per trial",
        "tokens_per_second_total": "tokens/s total", "peak_memory_gb": "peak GiB", "error": "error"})
