"""What every section of the device check shares: the results file, the machine's facts, a run's settings, a
reporter that keeps records, comparing two records, a section's work in a process of its own, and tables."""

from __future__ import annotations

import functools
import gc
import json
import multiprocessing
import os
import platform
import shutil
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

RESULTS = "device_check"
"""The results files' stem: ``OUT/device_check.json`` and ``.md``."""


class Check:
    """The results file, rewritten after every section (``summarise`` turns the results into the summary's text)."""

    def __init__(self, out: Path, budget_s: float, summarise: Callable[[dict[str, Any]], str]):
        self.out, self.started, self.budget_s, self.summarise = out, time.monotonic(), budget_s, summarise
        self.results: dict[str, Any] = {"machine": machine(), "sections": {}, "skipped": [], "errors": {}}

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def skip(self, what: str, why: str) -> None:
        self.results["skipped"].append({"what": what, "why": why})
        print(f"skipped {what}: {why}", flush=True)

    def run(self, name: str, section: Callable[[Check], dict[str, Any]]) -> None:
        began = time.monotonic()
        print(f"== {name} ({self.left_s():.0f} s of the budget left)", flush=True)
        try:
            self.results["sections"][name] = section(self)
        except Exception as err:  # noqa: BLE001 - one section's failure is a finding, the others still run
            self.results["errors"][name] = f"{type(err).__name__}: {err}"[:2000]
            traceback.print_exc()
        self.results.setdefault("seconds", {})[name] = round(time.monotonic() - began, 1)
        self.write()

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"{RESULTS}.json").write_text(json.dumps(self.results, indent=2, default=str) + "\n")
        (self.out / f"{RESULTS}.md").write_text(self.summarise(self.results))


def machine() -> dict[str, Any]:
    import transformers

    facts = {"python": platform.python_version(), "torch": torch.__version__,
             "transformers": transformers.__version__, "cpus": os.cpu_count(), "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts.update(gpu=props.name, gpu_memory_gb=round(props.total_memory / 2**30, 1),
                     capability=f"{props.major}.{props.minor}", cuda_runtime=torch.version.cuda,
                     mps_control=shutil.which("nvidia-cuda-mps-control"))
    return facts


def cuda() -> bool:
    return torch.cuda.is_available()


def device() -> torch.device:
    return torch.device("cuda" if cuda() else "cpu")


def settle() -> None:
    """Free what the last run held, so the next peak is its own."""
    gc.collect()
    if cuda():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


# ------------------------------------------------------------------------------------------ the model and runs


def model_source(model: str) -> str:
    """A short name as it is; a folder holding a config without weights gets seeded random ones first."""
    folder = Path(model)
    if not folder.is_dir() or any(folder.glob("*.safetensors")) or any(folder.glob("*.bin")):
        return model
    from transformers import AutoConfig, AutoModel

    print(f"generating random weights for {folder} (seed 0)", flush=True)
    torch.manual_seed(0)
    AutoModel.from_config(AutoConfig.from_pretrained(folder)).save_pretrained(folder)
    return str(folder)


def hparams(args, **values):
    from istar_tune.config import Hyperparameters

    base = {"model": args.model, "task": "rte", "method": "base", "epochs": 1, "batch_size": 32, "grad_accum": 1,
            "learning_rate": 2e-5}
    return Hyperparameters(**{**base, **values})


def settings(args, **values):
    from istar_tune.config import RunSettings

    base = {"data_dir": args.data_dir, "max_length": 128, "progress": False, "save_checkpoint": False,
            "heartbeat_s": 0.0, "shrinkage_tokens": 20_000}
    return RunSettings(**{**base, **values})


class Capture:
    """A reporter that keeps every record and, for one epoch, a copy of the resumable state folder."""

    def __init__(self, keep_epoch: int | None = None, folder: Path | None = None):
        self.records: list[dict[str, Any]] = []
        self.keep_epoch, self.folder = keep_epoch, folder
        self.wants_checkpoint = keep_epoch is not None  # a state folder is written only for the one kept

    def __call__(self, record: dict[str, Any], checkpoint_dir: Path | None) -> None:
        self.records.append(dict(record))
        if checkpoint_dir is not None and record["epoch"] == self.keep_epoch and self.folder is not None:
            shutil.copytree(checkpoint_dir, self.folder, dirs_exist_ok=True)

    def record(self, epoch: int) -> dict[str, Any]:
        return next(r for r in self.records if r["epoch"] == epoch)


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Whether two epoch records are equal bit for bit (the machine's measurements aside), and the largest gap."""
    from istar_tune.training.loop import MEASURED_KEYS

    keys = sorted(k for k in set(a) & set(b) if k not in MEASURED_KEYS and isinstance(a[k], (int, float)))
    gaps = {k: abs(float(a[k]) - float(b[k])) for k in keys if a[k] != b[k]}
    return {"equal": not gaps, "keys_compared": len(keys), "differing": sorted(gaps),
            "largest_gap": max(gaps.values(), default=0.0)}


# ----------------------------------------------------------------------------------------- the machine's rates


@functools.cache
def matmul_peaks() -> dict[str, float]:
    """The measured matrix rate (TFLOP/s) of each precision a section times: bf16, fp32 and TF32; measured once."""
    return {"bf16": matmul_tflops(torch.bfloat16), "fp32": matmul_tflops(torch.float32),
            "tf32": matmul_tflops(torch.float32, "high")}


def matmul_tflops(dtype: torch.dtype, precision: str = "highest") -> float:
    """TFLOP/s of a square matrix product on this machine's device (8192 on CUDA, 256 on CPU, where bf16 has no fast
    kernel: 17 s at 1024 on two cores, for a figure that says nothing of a GPU), mean of 5."""
    n = 8192 if cuda() else 256
    torch.set_float32_matmul_precision(precision)
    a, b = (torch.randn(n, n, device=device(), dtype=dtype) for _ in range(2))
    try:
        for _ in range(2):
            a @ b
        if cuda():
            torch.cuda.synchronize()
        began = time.perf_counter()
        for _ in range(5):
            a @ b
        if cuda():
            torch.cuda.synchronize()
        return 5 * 2 * n**3 / (time.perf_counter() - began) / 1e12
    finally:
        torch.set_float32_matmul_precision("highest")


def train_flops_per_token(model: str, length: int) -> float:
    """6 × the parameters a token passes through (embeddings aside) + the attention's 12 × layers × hidden × length."""
    from istar_tune.models import meta_model
    from istar_tune.tasks import get_task

    meta = meta_model(model, get_task("rte"))
    dense = sum(p.numel() for n, p in meta.named_parameters() if "embeddings" not in n)
    config = meta.config
    return 6.0 * dense + 12.0 * config.num_hidden_layers * config.hidden_size * length


# ------------------------------------------------------------------------------------- own processes, and tables


def collect(results, processes, wanted: int, timeout_s: float) -> dict[str, Any]:
    """Up to ``wanted`` results (keyed by their ``who``) from ``processes``, ending early when all of them died."""
    found: dict[str, Any] = {}
    deadline = time.monotonic() + timeout_s
    while len(found) < wanted and time.monotonic() < deadline:
        try:
            item = results.get(timeout=1.0)
            found[item.get("who", str(len(found)))] = item
        except Exception:  # noqa: BLE001 - queue.Empty: see whether anyone is left to answer
            if not any(p.is_alive() for p in processes) and results.empty():
                break
    return found


def in_own_process(check: Check, target, *target_args) -> dict[str, Any]:
    """``target(*target_args, results)`` in a spawned process (a trial's own: CUDA and cuBLAS set up afresh), its one
    answer put on ``results``, waited for within the budget's time left."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=target, args=(*target_args, results))
    process.start()
    found = collect(results, [process], 1, max(60.0, check.left_s()))
    process.join(timeout=30)
    if process.is_alive():
        process.kill()
    return next(iter(found.values()), None) or {"error": f"no result within the budget (exit code {process.exitcode})"}


def failure(err: BaseException, limit: int = 1000) -> str:
    """An exception as a result's ``error`` field: its type and message, cut at ``limit`` characters."""
    return f"{type(err).__name__}: {err}"[:limit]


def table(rows: list[dict[str, Any]], columns: dict[str, str]) -> list[str]:
    """Rows as a Markdown table (the package's renderer) of ``columns`` (key: heading), and a blank line."""
    import pandas as pd

    from istar_tune.markdown import markdown

    frame = pd.DataFrame([{heading: row.get(key) for key, heading in columns.items()} for row in rows])
    return [markdown(frame), ""]
