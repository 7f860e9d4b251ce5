"""``istar-tune calibrate``: which packing this machine's accelerator holds best, measured.

For each packing k (1, 2, 4, 8), k processes start together on the machine it runs on, each training the real
training step (:func:`istar_tune.training.epoch.train_epoch`, the method's loss, AdamW) of one model × task ×
method × batch size for a fixed number of steps after a warm-up, eagerly and, where it works, with ``torch.compile``.
Per packing it reports tokens per second of one trial and of all k together (tokens: examples × ``max_length``, the
cost model's unit, as ``--tokens-per-second``) and the peak memory of a trial; it recommends the packing with the
most tokens per second in total (the smallest within 5 % of it), and writes a throughput file
(``search --dry-run --throughput FILE``).
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from istar_tune.errors import ConfigError

MIN_OVERLAP = 0.8
"""Below this share of the timed window with every process training, a packing's figure is flagged as unsteady."""
WITHIN = 0.05
"""A smaller packing is recommended when its total is within this share of the best (fewer trials sharing a GPU:
less interference, more memory each)."""


@dataclass(frozen=True)
class Job:
    """What each co-located process trains."""

    model: str
    task: str
    method: str
    batch_size: int
    max_length: int
    steps: int
    warmup: int
    data_dir: str | None
    device: str
    mode: str = "eager"
    threads: int = 1


@dataclass
class Calibration:
    job: Job
    machine: str
    measurements: list[dict[str, Any]] = field(default_factory=list)
    recommended: dict[str, Any] | None = None

    def as_yaml(self) -> dict[str, Any]:
        job = self.job
        return {"model": job.model, "task": job.task, "method": job.method, "batch_size": job.batch_size,
                "max_length": job.max_length, "steps": job.steps, "warmup": job.warmup, "device": job.device,
                "machine": self.machine, "measurements": self.measurements, "recommended": self.recommended}


def _train_steps(job: Job, barrier, results) -> None:
    """One co-located process: set up a run as a trial does, wait for the others, time ``steps`` training steps."""
    import torch

    from istar_tune.config import Hyperparameters, RunSettings
    from istar_tune.methods import get_method
    from istar_tune.training.epoch import method_loss, train_epoch
    from istar_tune.training.run import make_optimizer, prepare
    from istar_tune.training.sigma import estimate_shrinkage

    try:
        torch.set_num_threads(job.threads)
        hparams = Hyperparameters(model=job.model, task=job.task, method=job.method, batch_size=job.batch_size,
                                  grad_accum=1, epochs=1)  # λ: the method's default
        settings = RunSettings(data_dir=job.data_dir, max_length=job.max_length, device=job.device, progress=False,
                               max_train_samples=(job.steps + job.warmup) * job.batch_size, shrinkage_tokens=2000)
        run = prepare(hparams, settings)
        if job.mode == "compiled":
            run.model = torch.compile(run.model)
        cov = estimate_shrinkage(run).to(run.device) if get_method(job.method).uses_zeta else None
        named = list(run.model.named_parameters())
        optimizer, scheduler, scaler = make_optimizer(run, named, 1e-5, 1, 0.0)
        ended: list[float] = []
        # CLOCK_MONOTONIC: one clock for every process of the machine, so their windows can be joined.
        run.heartbeat = lambda epoch, done, total: ended.append(time.monotonic())
        if run.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(run.device)
        barrier.wait(timeout=600)
        epoch = 0
        while len(ended) < job.steps + job.warmup:
            epoch += 1
            train_epoch(run, method_loss(run, cov), [p for _, p in named if p.requires_grad], optimizer, scheduler,
                        scaler, epoch, "calibrate")
        peak = (torch.cuda.max_memory_allocated(run.device) if run.device.type == "cuda"
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        # The timed steps: from the warm-up's last step's end to the last timed step's end.
        results.put({"began": ended[job.warmup - 1], "ended": ended[job.warmup + job.steps - 1],
                     "tokens": job.steps * job.batch_size * job.max_length, "peak_bytes": peak})
    except BaseException as err:  # noqa: BLE001 - reported as this packing's failure, not a crash
        out_of_memory = isinstance(err, (torch.OutOfMemoryError, MemoryError))
        results.put({"error": "out of memory" if out_of_memory else f"{type(err).__name__}: {err}"[:300]})
        barrier.abort()


def measure(job: Job, packing: int, timeout_s: float = 1800.0) -> dict[str, Any]:
    """``packing`` processes training ``job`` at once: per trial and total tokens per second, peak memory."""
    context = multiprocessing.get_context("spawn")  # CUDA in the children needs a fresh interpreter
    barrier, results = context.Barrier(packing), context.Queue()
    processes = [context.Process(target=_train_steps, args=(job, barrier, results), daemon=True)
                 for _ in range(packing)]
    for process in processes:
        process.start()
    found = []
    deadline = time.monotonic() + timeout_s
    while len(found) < packing and time.monotonic() < deadline:
        try:
            found.append(results.get(timeout=1.0))
        except Exception:  # noqa: BLE001 - queue.Empty: see whether a process died without a word
            if not any(p.is_alive() for p in processes) and results.empty():
                break
    for process in processes:
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
    row: dict[str, Any] = {"packing": packing, "mode": job.mode}
    errors = [r["error"] for r in found if "error" in r]
    if errors or len(found) < packing:
        row["error"] = errors[0] if errors else "a process ended without a result (killed: out of host memory?)"
        return row
    # All trials' tokens over the window from the first timed step's start to the last one's end: what the machine
    # did while they shared it (a trial that ran alone for a while does not count double).
    window = max(r["ended"] for r in found) - min(r["began"] for r in found)
    total = sum(r["tokens"] for r in found) / window
    row.update(tokens_per_second_per_trial=round(total / packing, 1), tokens_per_second_total=round(total, 1),
               overlap=round(min(r["ended"] for r in found) - max(r["began"] for r in found), 3) / window,
               peak_memory_gb=round(max(r["peak_bytes"] for r in found) / 2**30, 3))
    row["overlap"] = round(max(row["overlap"], 0.0), 2)
    return row


def recommend(measurements: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The packing (and mode) with the most tokens per second in total; the smallest packing within
    :data:`WITHIN` of it."""
    from istar_tune.search.spaces.cost import gpu_share

    done = [m for m in measurements if "tokens_per_second_total" in m]
    if not done:
        return None
    best = max(m["tokens_per_second_total"] for m in done)
    chosen = min((m for m in done if m["tokens_per_second_total"] >= (1 - WITHIN) * best),
                 key=lambda m: (m["packing"], -m["tokens_per_second_total"]))
    single = [m["tokens_per_second_total"] for m in done if m["packing"] == 1 and m["mode"] == chosen["mode"]]
    gain = chosen["tokens_per_second_total"] / single[0] if single else None
    return {"packing": chosen["packing"], "mode": chosen["mode"], "resources_gpu": gpu_share(chosen["packing"]),
            **({"gain_over_one": round(gain, 2)} if gain else {})}


def cores_advice(packing: int, gpus: int, cores: int | None = None) -> str:
    """How many trials a GPU of this node holds by its cores (its cores shared among its ``gpus``, a core a trial:
    a trial's step is host-bound) against the measured ``packing``, and which binds."""
    from istar_tune.search.spaces.cost import by_cores, packing_advice

    per_gpu = (cores or os.cpu_count() or 1) / max(gpus, 1)
    return packing_advice(packing, None, by_cores(per_gpu, 1.0), per_gpu, 1.0)


def check_output(output: str | os.PathLike) -> None:
    """``--output`` can be written: not a folder, its folder creatable and writable (one line otherwise)."""
    path = Path(output)
    if path.is_dir():
        raise ConfigError(f"--output {str(output)!r} is a folder: name the YAML file to write, e.g. "
                          f"{str(path / 'calibration.yaml')!r}")
    folder = next((p for p in (path.parent, *path.parent.parents) if p.exists()), Path("."))
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise ConfigError(f"--output {str(output)!r}: {str(folder)!r} is not a folder this process can write in: "
                          "write elsewhere")


def calibrate(job: Job, packings: tuple[int, ...], modes: tuple[str, ...], output: str | os.PathLike,
              write: Callable[[str], None] = print) -> Calibration:
    """Measure every packing × mode (:func:`measure`), print a line each, recommend, and write ``output`` (checked
    writable before anything is measured: a measurement takes minutes)."""
    import torch

    check_output(output)
    if job.device == "cpu" or (job.device == "auto" and not torch.cuda.is_available()):
        machine = f"cpu ({os.cpu_count()} cores, {platform.processor() or platform.machine()})"
        cuda = False
    else:
        machine, cuda = torch.cuda.get_device_name(0), True
    job = Job(**{**job.__dict__, "device": "cuda" if cuda else "cpu"})
    result = Calibration(job, machine)
    write(f"calibrate {job.model} × {job.task} × {job.method}, batch {job.batch_size} × {job.max_length} tokens, "
          f"{job.steps} steps after {job.warmup} warm-up, on {machine}")
    memory = "peak memory" if cuda else "peak RSS (the whole process: a CPU has no allocator peak)"
    write(f"{'packing':>7}  {'mode':<8}  {'tokens/s per trial':>18}  {'tokens/s total':>14}  {memory}")
    for mode in modes:
        for packing in packings:
            threads = max(1, (os.cpu_count() or 1) // packing)
            row = measure(Job(**{**job.__dict__, "mode": mode, "threads": threads}), packing)
            result.measurements.append(row)
            if "error" in row:
                write(f"{packing:>7}  {mode:<8}  failed: {row['error']}")
                continue
            write(f"{packing:>7}  {mode:<8}  {row['tokens_per_second_per_trial']:>18,.0f}  "
                  f"{row['tokens_per_second_total']:>14,.0f}  {row['peak_memory_gb']:.2f} GiB"
                  + (f"  (all {packing} ran together for only {row['overlap']:.0%} of the time: raise --steps)"
                     if packing > 1 and row["overlap"] < MIN_OVERLAP else ""))
    result.recommended = recommend(result.measurements)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(yaml.safe_dump(result.as_yaml(), sort_keys=False, allow_unicode=True), "utf-8")
    if result.recommended is None:
        raise ConfigError(f"no packing could be measured (see the lines above); wrote {output}")
    chosen = result.recommended
    gain = f", {chosen['gain_over_one']:g}× the total of one trial" if "gain_over_one" in chosen else ""
    write(f"recommended: {chosen['packing']} a GPU, {chosen['mode']} (resources: {{gpu: {chosen['resources_gpu']:g}}})"
          f"{gain}; wrote {output} (search --dry-run --throughput {output})")
    if cuda:
        write(f"packing on this node: {cores_advice(chosen['packing'], torch.cuda.device_count())}")
    if not cuda:
        write("measured on a CPU: these are this machine's figures; GPU figures need a GPU (run calibrate on one of "
              "your GPU nodes)")
    return result
