"""The prepared device check: every GPU-specific part of istar-tune measured on whatever machine runs it.

    python benchmarks/device_check.py --out DIR [--model PATH|NAME] [--data-dir DIR] [--sections a,b,...]
                                      [--budget-s 420]

It writes ``DIR/device_check.json`` (every figure, every error, what was skipped and why) and ``DIR/device_check.md``
(the summary), rewritten after each section, so a run cut short still leaves what it measured. Sections, in the order
they run (``--sections`` picks some):

* ``profile`` (0): where a step's time goes (``profile_step.py``).
* ``reference`` (i) and ``modes`` (h): ``device_modes.py`` — the second call's four configurations one by one (for
  ``device_search.py``), and each step mode's tokens/s.
* ``epoch`` (a): one epoch of Base on RTE under bf16 autocast and under fp32 (on CUDA also fp32 with TF32 matmuls and
  bf16 with eager attention), after an unmeasured warm-up run: loss finite, tokens/s (tokens as trained: padded to
  each batch's longest), MFU against the matrix rate measured here, peak memory.
* ``memory`` (c): the dry run's memory estimate (``search/spaces/cost.trial_memory``, less the CUDA context that the
  allocator does not see) against ``torch.cuda.max_memory_allocated`` of a real run, Base and I-STAR at batch 8, 16,
  32 × 128 tokens, bf16 autocast.
* ``step`` (d): the I-STAR/Base step ratio (``bench_step.py``) and one IsoScore* forward and backward
  (``bench_isoscore.py``) with the Gram matrix in float32 and in TF32, and how far the two scores differ.
* ``determinism`` (e): with ``deterministic: true``, two epochs straight against one epoch, its checkpoint, a resume
  and the second epoch; a shared-prefix trial's epoch-3 record (a 4-epoch run completing 3) against an unshared
  3-epoch run's; the same without determinism, to size the drift (I-STAR, recipe paper: what prefix sharing needs);
  on CUDA, ``step_mode: graphs`` against eager, every epoch record bit for bit (``device_modes.graphs_equal_eager``).
* ``oom`` (f): a trial whose memory cap (``training/memory.cap_gpu_memory``) is set too small fails inside
  ``out_of_memory_explained`` with the advice, its process allocates again afterwards, and a neighbour process training
  at the same time finishes.
* ``shapes`` (g): what a sequence length not seen before costs a training step, batch 8 and bf16 autocast as an
  epoch's batches padded to their longest give them: the first step at each of 16 lengths against the same length's
  later steps, with sdpa as torch chooses its kernel (cuDNN's first, on Hopper), sdpa with cuDNN's attention off (what
  ``training/run.use_attention_kernels`` sets for every run on CUDA since this section's first run), and eager
  attention (the first device run's batch-8 calibration, 6,138 tokens/s against 86,000 at batch 32, asked for it).
* ``calibrate`` (b): ``istar-tune calibrate``'s measurement with 1, 2, 4, 8 co-located trials at batch 8 and 32, MPS
  off, then on where the daemon starts (``--packings``, ``--batches``, ``--mps`` choose). Last, as it takes the
  longest: what the time budget does not reach is listed, so a later run can measure just that.

On a machine without CUDA it runs what needs none (``profile``'s host side, ``reference``, ``modes``' eager row,
``epoch``, ``step``, ``determinism``, the estimates of ``memory``, ``calibrate`` with 1 and 2 trials at batch 8) and
lists the rest as skipped. ``benchmarks/device_prepare.py`` builds
the payload that travels to a lent GPU machine (wheels, the model folder, RTE); a model folder that holds a config
but no weights gets random weights here (``--model``), since 440 MB of BERT-base cannot travel.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import math
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_step, bench_isoscore beside this file
import device_modes  # noqa: E402 - beside this file

GRAPHS_ROW = "graphs_vs_eager"
"""The determinism section's row of ``step_mode: graphs`` against eager (on CUDA)."""
SECTIONS = ("profile", "reference", "modes", "epoch", "memory", "step", "shapes", "determinism", "oom",
            "calibrate")



class Check:
    """The results file, rewritten after every section."""

    def __init__(self, out: Path, budget_s: float):
        self.out, self.started, self.budget_s = out, time.monotonic(), budget_s
        self.results: dict[str, Any] = {"machine": machine(), "sections": {}, "skipped": [], "errors": {}}

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def skip(self, what: str, why: str) -> None:
        self.results["skipped"].append({"what": what, "why": why})
        print(f"skipped {what}: {why}", flush=True)

    def run(self, name: str, section) -> None:
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
        (self.out / "device_check.json").write_text(json.dumps(self.results, indent=2, default=str) + "\n")
        (self.out / "device_check.md").write_text(summary(self.results))


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


# ------------------------------------------------------------------------------------------------ the sections


@functools.cache
def matmul_peaks() -> dict[str, float]:
    """The measured matrix rate (TFLOP/s) of each precision a section times: bf16, fp32 and TF32; measured once."""
    return {"bf16": matmul_tflops(torch.bfloat16), "fp32": matmul_tflops(torch.float32),
            "tf32": matmul_tflops(torch.float32, "high")}


def matmul_tflops(dtype: torch.dtype, precision: str = "highest") -> float:
    """TFLOP/s of a square matrix product on this machine's device (8192 on CUDA, 256 on CPU, where bf16 has no fast
    kernel: 17 s at 1024 on two cores, for a figure that says nothing of a GPU), mean of 5."""
    device = "cuda" if cuda() else "cpu"
    n = 8192 if cuda() else 256
    torch.set_float32_matmul_precision(precision)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
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


def section_epoch(check: Check, args) -> dict[str, Any]:
    from istar_tune.training.loop import train

    variants = [("bf16", "sdpa", "highest"), ("fp32", "sdpa", "highest")]
    if cuda():
        # bf16 + sdpa again last: the 2026-11-27 run timed it first after the warm-up and eager's epoch came out faster.
        variants += [("fp32", "sdpa", "high"), ("bf16", "eager", "highest"), ("bf16", "sdpa", "highest")]
    peaks = matmul_peaks()
    per_token = train_flops_per_token(args.model, 128)
    # Unmeasured: CUDA's lazy start, cuBLAS handles and kernel loading would otherwise fall on the first variant (the
    # first device run's bf16 row, 37,572 tokens/s against 100,343 for the same precision with eager attention).
    train(hparams(args), settings(args, max_train_samples=64, max_eval_samples=16))
    rows = []
    for precision, attention, matmul in variants:
        settle()
        result = train(hparams(args), settings(args, precision=precision, attn_implementation=attention,
                                                matmul_precision=matmul, max_train_samples=args.train_samples))
        record = result.final
        rate = record["train_tokens_per_s"]
        peak = peaks["tf32" if matmul == "high" and precision == "fp32" else precision]
        rows.append({"precision": precision, "attn_implementation": attention, "matmul_precision": matmul,
                     "train_loss": record["train_loss"], "loss_finite": math.isfinite(record["train_loss"]),
                     "accuracy": record.get("accuracy"), "train_tokens_per_s": round(rate, 1),
                     "train_time_s": round(record["train_time_s"], 2),
                     "mfu_vs_measured_matmul": round(rate * per_token / (peak * 1e12), 4),
                     "gpu_peak_memory_gb": record.get("gpu_peak_memory_gb")})
        print(json.dumps(rows[-1]), flush=True)
    return {"model": args.model, "train_flops_per_token": per_token,
            "matmul_tflops": {k: round(v, 1) for k, v in peaks.items()}, "runs": rows}


def section_memory(check: Check, args) -> dict[str, Any]:
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


def section_profile(check: Check, args) -> dict[str, Any]:
    """Where a step's time goes (:mod:`profile_step`), Base and I-STAR at batch 8 and 32, bf16 on CUDA."""
    import profile_step

    from istar_tune.training.epoch import method_loss, train_epoch
    from istar_tune.training.run import make_optimizer, prepare

    steps, rows = max(args.steps, 2) if not cuda() else 20, []

    def optimizer_of(run):
        return make_optimizer(run, list(run.model.named_parameters()), 2e-5, 2, 0.0)

    for method in ("base", "istar"):
        for batch in (8, 32):
            run = prepare(hparams(args, method=method, batch_size=batch, lam=-1.0 if method == "istar" else None),
                          settings(args, max_train_samples=steps * batch, max_eval_samples=8))
            found = profile_step.profile_steps(run, method_loss, train_epoch, optimizer_of,
                                               math.ceil(len(run.data.train) / batch))
            rows.append({"method": method, "batch": batch, **found})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "top_host_ops"}), flush=True)
            del run
    if not cuda():
        check.skip("profile's GPU busy time", "a CPU has no device to be busy")
    return {"precision": "bf16" if cuda() else "fp32", "max_length": 128, "rows": rows}


def section_step(check: Check, args) -> dict[str, Any]:
    import bench_isoscore
    import bench_step

    from istar_tune.isotropy import isoscore_star

    device = torch.device("cuda" if cuda() else "cpu")
    base_s, istar_s = bench_step.measure(args.model, 32, 128, args.steps, device)
    gen = torch.Generator().manual_seed(0)
    dim = 768 if cuda() else 128
    a = torch.randn(dim, 2 * dim, generator=gen)
    shrink = (a @ a.T / (2 * dim)).to(device)
    gram = {}
    for n in (2048, 16384) if cuda() else (2048,):
        points = torch.randn(n, dim, generator=gen).to(device)
        for precision in ("highest", "high"):
            torch.set_float32_matmul_precision(precision)
            try:
                seconds = bench_isoscore._time(lambda x: isoscore_star(x, shrink, 0.2), points, 5)
                score = float(isoscore_star(points, shrink, 0.2))
            finally:
                torch.set_float32_matmul_precision("highest")
            gram[f"n{n}_{precision}"] = {"seconds": seconds, "score": score}
        gram[f"n{n}_tf32_score_difference"] = abs(gram[f"n{n}_high"]["score"] - gram[f"n{n}_highest"]["score"])
    return {"batch": "32 × 128", "base_step_s": base_s, "istar_step_s": istar_s,
            "istar_over_base": round(istar_s / base_s, 3), "isoscore_dim": dim, "gram": gram}


def _shape_steps(args, attention: str, lengths: list[int], batch: int, device) -> dict[str, Any]:
    """Step times (ms) at each length: the first one seen, then two more at the same length."""
    import statistics

    import bench_step

    from istar_tune.models import load_model
    from istar_tune.tasks import get_task

    torch.manual_seed(0)
    model = load_model(args.model, get_task("rte"), attn_implementation=attention).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    amp = torch.bfloat16 if device.type == "cpu" or torch.cuda.is_bf16_supported() else torch.float16

    def step(length: int) -> float:
        batch_ = {"input_ids": torch.randint(1000, model.config.vocab_size, (batch, length)),
                  "attention_mask": torch.ones(batch, length, dtype=torch.long),
                  "labels": torch.randint(0, 2, (batch,))}
        batch_["attention_mask"][batch // 2:, length * 3 // 4:] = 0
        batch_ = {k: v.to(device) for k, v in batch_.items()}
        if cuda():
            torch.cuda.synchronize()
        began = time.perf_counter()
        bench_step._step(model, optimizer, batch_, "base", None, amp, device)
        if cuda():
            torch.cuda.synchronize()
        return 1000 * (time.perf_counter() - began)

    step(lengths[0] - 1)  # the process's and the model's first step, outside the figures
    step(lengths[0] - 1)
    first, again = [], []
    for length in lengths:
        first.append(step(length))
        again += [step(length), step(length)]
    return {"first_seen_ms_median": round(statistics.median(first), 2), "first_seen_ms_max": round(max(first), 2),
            "seen_ms_median": round(statistics.median(again), 2),
            "first_over_seen": round(statistics.median(first) / statistics.median(again), 2)}


def section_shapes(check: Check, args) -> dict[str, Any]:
    device = torch.device("cuda" if cuda() else "cpu")
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
            rows.append({"attention": label, "batch": 8, **_shape_steps(args, attention, lengths, 8, device)})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
    return {"lengths": lengths, "sdp_backends_enabled": flags, "rows": rows}


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Whether two epoch records are equal bit for bit (the machine's measurements aside), and the largest gap."""
    from istar_tune.training.loop import MEASURED_KEYS

    keys = sorted(k for k in set(a) & set(b) if k not in MEASURED_KEYS and isinstance(a[k], (int, float)))
    gaps = {k: abs(float(a[k]) - float(b[k])) for k in keys if a[k] != b[k]}
    return {"equal": not gaps, "keys_compared": len(keys), "differing": sorted(gaps),
            "largest_gap": max(gaps.values(), default=0.0)}


def _determinism_variant(args, deterministic: bool, results) -> None:
    """One variant in a process of its own, as a trial is: cuBLAS's workspace is fixed at its first call, which
    ``deterministic`` must precede (``training/run.use_deterministic_algorithms``)."""
    from istar_tune.training.loop import train

    run_settings = settings(args, deterministic=deterministic, recipe="paper",
                            max_train_samples=args.train_samples_small, max_eval_samples=128)
    hp = {"method": "istar", "lam": -1.0, "batch_size": 16}
    try:
        with tempfile.TemporaryDirectory(prefix="device-check-") as tmp:
            straight = Capture(keep_epoch=1, folder=Path(tmp, "state"))
            train(hparams(args, epochs=2, **hp), run_settings, straight)
            resumed = Capture()
            train(hparams(args, epochs=2, **hp), run_settings, resumed, resume_from=Path(tmp, "state"))
        shared, alone = Capture(), Capture()
        train(hparams(args, epochs=4, **hp), run_settings, shared, completes=(3,))
        train(hparams(args, epochs=3, **hp), run_settings, alone)
        results.put({"resume": compare(straight.record(2), resumed.record(2)),
                     "shared_prefix": compare(shared.record(3), alone.record(3))})
    except Exception as err:  # noqa: BLE001 - e.g. an operation without a deterministic kernel: a finding
        results.put({"error": f"{type(err).__name__}: {err}"[:1000]})


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


def section_determinism(check: Check, args) -> dict[str, Any]:
    outcome = {}
    for deterministic in (True, False):
        key = "deterministic" if deterministic else "default"
        outcome[key] = in_own_process(check, _determinism_variant, args, deterministic)
        print(key, json.dumps(outcome[key]), flush=True)
    if cuda():
        outcome[GRAPHS_ROW] = in_own_process(check, device_modes.graphs_equal_eager, args)
        print(GRAPHS_ROW, json.dumps(outcome[GRAPHS_ROW]), flush=True)
    else:
        check.skip("determinism: graphs = eager bit for bit", "CUDA graphs need CUDA")
    return outcome


def _oom_victim(args, share: float, results) -> None:
    """A trial as the trainable runs it, its memory capped at ``share``; then the same process allocates again."""
    from istar_tune.errors import TrainingError
    from istar_tune.training.loop import train
    from istar_tune.training.memory import cap_gpu_memory, out_of_memory_explained, trial_shape

    cap_gpu_memory(share)
    try:
        with out_of_memory_explained(trial_shape(args.model, "rte", "base", 32, 128), share):
            train(hparams(args), settings(args, max_train_samples=args.train_samples_small))
        results.put({"who": "victim", "error": None})
    except TrainingError as err:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
        alive = float(torch.ones(2**28, device="cuda").sum())  # 1 GiB, after the failure
        results.put({"who": "victim", "error": str(err), "allocated_after": alive == 2**28})


def _oom_neighbour(args, results) -> None:
    from istar_tune.training.loop import train

    result = train(hparams(args, epochs=2), settings(args, max_train_samples=args.train_samples_small))
    results.put({"who": "neighbour", "status": result.status, "epochs": len(result.epochs)})


def section_oom(check: Check, args) -> dict[str, Any]:
    from istar_tune.models import meta_model
    from istar_tune.tasks import get_task
    from istar_tune.training.memory import parameter_bytes

    weights, gradients, optimizer = parameter_bytes(meta_model(args.model, get_task("rte")))
    # The weights, gradients and AdamW's moments fit; a training step's activations do not.
    share = (weights + gradients + optimizer + 2**27) / torch.cuda.get_device_properties(0).total_memory
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=_oom_victim, args=(args, share, results)),
                 context.Process(target=_oom_neighbour, args=(args, results))]
    for process in processes:
        process.start()
    found = collect(results, processes, len(processes), max(60.0, check.left_s()))
    for process in processes:
        process.join(timeout=30)
    victim, neighbour = found.get("victim", {}), found.get("neighbour", {})
    return {"share": round(share, 5), "victim": victim, "neighbour": neighbour,
            "exit_codes": [p.exitcode for p in processes],
            "advice_given": "lower batch_size" in (victim.get("error") or ""),
            "victim_lived": bool(victim.get("allocated_after")), "neighbour_finished": neighbour.get("status") ==
            "finished"}


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


def section_calibrate(check: Check, args) -> dict[str, Any]:
    from istar_tune.apps.calibrate import Job, measure

    packings, batches = ((1, 2, 4, 8), (32, 8)) if cuda() else ((1, 2), (8,))
    packings, batches = args.packings or packings, args.batches or batches
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
            for packing in packings:
                if check.left_s() < 20 * (1 + packing // 4):
                    check.skip(f"calibrate packing {packing} batch {batch} mps {mps}", "time budget spent")
                    continue
                job = Job(model=args.model, task="rte", method="base", batch_size=batch, max_length=128,
                          steps=args.steps * 2, warmup=3, data_dir=args.data_dir,
                          device="cuda" if cuda() else "cpu",
                          threads=max(1, (os.cpu_count() or 1) // packing))
                row = {"mps": mps, "batch_size": batch, **measure(job, packing, timeout_s=240)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return {"rows": rows}


# ------------------------------------------------------------------------------------------------- the summary


def _table(rows: list[dict[str, Any]], columns: dict[str, str]) -> list[str]:
    """Rows as a Markdown table (the package's renderer) of ``columns`` (key: heading)."""
    import pandas as pd

    from istar_tune.markdown import markdown

    frame = pd.DataFrame([{heading: row.get(key) for key, heading in columns.items()} for row in rows])
    return [markdown(frame), ""]


def summary(results: dict[str, Any]) -> str:
    """The results file in words: one table per section measured."""
    m = results["machine"]
    lines = [f"# Device check: {m.get('gpu', 'no GPU')} (torch {m['torch']}, transformers {m['transformers']}, "
             f"{m['cpus']} CPUs)", ""]
    sections = results["sections"]
    if "profile" in sections:
        p = sections["profile"]
        lines += [f"## (0) Where a step's time goes ({p['precision']}, {p['max_length']} tokens; torch.profiler)", ""]
        lines += _table(p["rows"], {"method": "method", "batch": "batch", "host_ms_per_step": "host ms/step",
                                    "gpu_busy_ms_per_step": "GPU busy ms/step", "gpu_busy_share": "GPU busy",
                                    "host_reads_per_step": "host reads/step", "cuda_syncs_per_step": "syncs/step"})
        for row in p["rows"]:
            ops = ", ".join(f"{o['op']} {o['self_cpu_ms_per_step']} ms" for o in row["top_host_ops"][:5])
            lines += [f"- {row['method']} at batch {row['batch']}, top host ops per step: {ops}"]
        lines.append("")
    if "epoch" in sections:
        e = sections["epoch"]
        lines += [f"## (a) One epoch, {e['model']} on RTE (matmul TFLOP/s measured: {e['matmul_tflops']})", ""]
        lines += _table(e["runs"], {"precision": "precision", "attn_implementation": "attention",
                                    "matmul_precision": "fp32 matmul", "train_loss": "loss",
                                    "train_tokens_per_s": "tokens/s", "mfu_vs_measured_matmul": "MFU",
                                    "gpu_peak_memory_gb": "peak GiB"})
    if "memory" in sections:
        lines += ["## (c) Memory estimate against measured (bf16, × 128 tokens)", ""]
        lines += _table(sections["memory"]["rows"], {
            "method": "method", "batch_size": "batch", "estimate_without_context_gb": "estimate GiB (no context)",
            "measured_gb": "measured GiB", "estimate_over_measured": "ratio", "within_15_percent": "within 15 %"})
    if "step" in sections:
        s = sections["step"]
        lines += [f"## (d) I-STAR/Base step ratio: **{s['istar_over_base']}** (I-STAR {s['istar_step_s']:.4f} s, "
                  f"Base {s['base_step_s']:.4f} s, batch {s['batch']})", "",
                  f"IsoScore* forward+backward: {s['gram']}", ""]
    if "shapes" in sections:
        g = sections["shapes"]
        lines += [f"## (g) A new sequence length's first step (batch 8, bf16; lengths {g['lengths']}; sdpa backends "
                  f"on: {g['sdp_backends_enabled'] or 'n/a'})", ""]
        lines += _table(g["rows"], {"attention": "attention", "first_seen_ms_median": "first step ms (median)",
                                    "first_seen_ms_max": "first step ms (max)", "seen_ms_median": "later steps ms",
                                    "first_over_seen": "first / later"})
    if "determinism" in sections:
        lines += ["## (e) Determinism (I-STAR, recipe paper)", ""]
        rows = []
        for key, d in sections["determinism"].items():
            if key == GRAPHS_ROW:
                continue
            if "error" in d:
                rows.append({"setting": key, "resume": "failed: " + d["error"].splitlines()[0]})
                continue
            rows.append({"setting": key, "resume": d["resume"]["equal"], "shared": d["shared_prefix"]["equal"],
                         "gap": max(d["resume"]["largest_gap"], d["shared_prefix"]["largest_gap"])})
        lines += _table(rows, {"setting": "setting", "resume": "resume = straight", "shared": "shared prefix = "
                               "unshared", "gap": "largest gap"})
        if (graphs := sections["determinism"].get(GRAPHS_ROW)) is not None:
            verdict = graphs.get("error") or all(e["equal"] for e in graphs["epochs"])
            lines += [f"step_mode graphs = eager bit for bit (I-STAR, two epochs, bf16, deterministic): {verdict}", ""]
    if "oom" in sections:
        o = sections["oom"]
        lines += [f"## (f) Memory cap too small (share {o['share']}): advice given {o['advice_given']}, victim "
                  f"process lived {o['victim_lived']}, neighbour finished {o['neighbour_finished']}", ""]
    if "calibrate" in sections:
        lines += ["## (b) calibrate (Base, RTE, × 128 tokens)", ""]
        lines += _table(sections["calibrate"]["rows"], {
            "mps": "MPS", "batch_size": "batch", "packing": "packing", "tokens_per_second_per_trial":
            "tokens/s per trial", "tokens_per_second_total": "tokens/s total", "peak_memory_gb": "peak GiB",
            "error": "error"})
    lines += device_modes.summary_lines(sections)
    lines += [f"Skipped: {s['what']} ({s['why']})" for s in results["skipped"]]
    lines += [f"Error in {k}: {v.splitlines()[0]}" for k, v in results["errors"].items()]
    return "\n".join(lines) + "\n"


SECTION_FUNCTIONS = {"profile": section_profile, "reference": device_modes.section_reference,
                     "modes": device_modes.section_modes, "epoch": section_epoch, "memory": section_memory,
                     "step": section_step,
                     "shapes": section_shapes, "determinism": section_determinism, "oom": section_oom,
                     "calibrate": section_calibrate}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for device_check.json and .md")
    parser.add_argument("--model", default="tiny-bert", help="short name or model folder (default: %(default)s)")
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared/data/glue"),
                        help="a folder in the GLUE layout holding RTE (default: %(default)s)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated (default: all)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="wall time the check may take; calibrate "
                                                                       "measures what fits (default: %(default)s)")
    parser.add_argument("--train-samples", type=int, default=None, help="training examples of section epoch "
                                                                        "(default: all of RTE)")
    parser.add_argument("--train-samples-small", type=int, default=256,
                        help="training examples of the determinism and oom runs (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps of step and calibrate "
                                                              "(default: %(default)s)")
    parser.add_argument("--search-reference", type=Path, default=None,
                        help="where section reference writes the second call's one-by-one records (default: "
                             "OUT/search_reference.json; a copy goes there too)")
    parser.add_argument("--search-train-samples", type=int, default=512,
                        help="training examples of the second call's configurations (default: %(default)s)")
    parser.add_argument("--packings", type=lambda t: tuple(int(x) for x in t.split(",")), default=None,
                        help="calibrate's trials a GPU, e.g. 4,8 (default: 1,2,4,8 on CUDA, 1,2 on a CPU)")
    parser.add_argument("--batches", type=lambda t: tuple(int(x) for x in t.split(",")), default=None,
                        help="calibrate's batch sizes, e.g. 8 (default: 32,8 on CUDA, 8 on a CPU)")
    parser.add_argument("--mps", choices=("both", "off", "on"), default="both",
                        help="calibrate without MPS, with it, or both (default: %(default)s)")
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}: choose from {', '.join(SECTIONS)}")
    args.model = model_source(args.model)
    check = Check(args.out, args.budget_s)
    for name in SECTIONS:
        if name not in args.sections.split(","):
            continue
        if name == "oom" and not cuda():
            check.skip("oom", "a memory cap is a CUDA allocator's (torch.cuda.set_per_process_memory_fraction)")
            continue
        check.run(name, functools.partial(SECTION_FUNCTIONS[name], args=args))
    check.write()
    print((args.out / "device_check.md").read_text(), flush=True)
    return 1 if check.results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
