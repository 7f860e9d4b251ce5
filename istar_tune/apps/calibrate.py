"""``istar-tune calibrate``: which packing this machine's accelerator holds best, measured.

For each packing k (1, 2, 4, 8), k processes start together on the machine it runs on, each training the real
training step (:func:`istar_tune.training.epoch.train_epoch`, the method's loss, AdamW) of one model × task ×
method × batch size for a fixed number of steps after a warm-up, eagerly and, where it works, with ``torch.compile``.
Per packing it reports tokens per second of one trial and of all k together (tokens: examples × ``max_length``, the
cost model's unit, as ``--tokens-per-second``) and the peak memory of a trial; it recommends the packing with the
most tokens per second in total (the smallest within 5 % of it), and writes a throughput file
(``search --dry-run --throughput FILE``). With ``--fuse 1,4,8`` each process trains a fused bundle of that many
configurations (``search.fuse``: :func:`istar_tune.training.bundle.bundle_epoch`), whose tokens are every member's;
it says the largest bundle that fit and how many such bundles a GPU holds by memory and by cores.
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
    fuse: int = 1
    """Configurations a trial trains as one fused bundle (``search.fuse``); a bundle's tokens are every member's."""
    attn_implementation: str = "sdpa"
    """``eager`` wherever a bundle is measured: the unfused rows too, so only the fusing differs."""


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
                "attn_implementation": job.attn_implementation,
                "machine": self.machine, "measurements": self.measurements, "recommended": self.recommended}


def _epoch_of(job: Job, ended: list[float]) -> tuple[Callable[[int], None], Any]:
    """One calibrated trial set up as a trial sets itself up: a function training one epoch of its data (a bundle of
    ``job.fuse`` members: one fused pass of them all, :func:`istar_tune.training.bundle.bundle_epoch`), and the run
    whose device it uses. Each step's end is appended to ``ended``."""
    import torch

    from istar_tune.config import Hyperparameters, RunSettings
    from istar_tune.methods import get_method
    from istar_tune.training.bundle import Member, bundle_epoch
    from istar_tune.training.epoch import method_loss, train_epoch
    from istar_tune.training.fused import MemberLoss, own_generator
    from istar_tune.training.run import make_optimizer, prepare
    from istar_tune.training.sigma import estimate_shrinkage

    hparams = Hyperparameters(model=job.model, task=job.task, method=job.method, batch_size=job.batch_size,
                              grad_accum=1, epochs=1)  # λ: the method's default
    settings = RunSettings(data_dir=job.data_dir, max_length=job.max_length, device=job.device, progress=False,
                           max_train_samples=(job.steps + job.warmup) * job.batch_size, shrinkage_tokens=2000,
                           attn_implementation=job.attn_implementation)
    runs = []
    for _ in range(job.fuse):  # the data read and tokenised once for every member
        runs.append(prepare(hparams, settings, data_of=runs[0] if runs else None))
    run = runs[0]
    if job.mode == "compiled":
        run.model = torch.compile(run.model)
    cov = estimate_shrinkage(run).to(run.device) if get_method(job.method).uses_zeta else None
    optimizers = [make_optimizer(r, list(r.model.named_parameters()), 1e-5, 1, 0.0) for r in runs]
    # CLOCK_MONOTONIC: one clock for every process of the machine, so their windows can be joined.
    run.heartbeat = lambda epoch, done, total: ended.append(time.monotonic())
    if job.fuse > 1:
        members = [Member(r, *made, MemberLoss.of(hparams, cov), own_generator(r.device))
                   for r, made in zip(runs, optimizers)]
        return lambda epoch: bundle_epoch(members, epoch), run
    params = [p for p in run.model.parameters() if p.requires_grad]
    return lambda epoch: train_epoch(run, method_loss(run, cov), params, *optimizers[0], epoch, "calibrate"), run


def _train_steps(job: Job, barrier, results) -> None:
    """One co-located process: set up a run (or a bundle) as a trial does, wait for the others, time ``steps``
    training steps."""
    import torch

    try:
        torch.set_num_threads(job.threads)
        ended: list[float] = []
        train_one, run = _epoch_of(job, ended)
        if run.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(run.device)
        barrier.wait(timeout=600)
        epoch = 0
        while len(ended) < job.steps + job.warmup:
            epoch += 1
            train_one(epoch)
        peak = (torch.cuda.max_memory_allocated(run.device) if run.device.type == "cuda"
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        # The timed steps: from the warm-up's last step's end to the last timed step's end; a bundle's tokens are
        # every member's (each a configuration's work, the cost model's unit).
        results.put({"began": ended[job.warmup - 1], "ended": ended[job.warmup + job.steps - 1],
                     "tokens": job.steps * job.batch_size * job.max_length * job.fuse, "peak_bytes": peak})
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
    row: dict[str, Any] = {"packing": packing, "fuse": job.fuse, "mode": job.mode}
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
    """The packing, bundle size and mode with the most tokens per second in total; within :data:`WITHIN` of it, the
    fewest configurations training at once (packing × members: more memory each), then the fewest processes."""
    from istar_tune.search.spaces.cost import gpu_share

    done = [m for m in measurements if "tokens_per_second_total" in m]
    if not done:
        return None
    best = max(m["tokens_per_second_total"] for m in done)
    chosen = min((m for m in done if m["tokens_per_second_total"] >= (1 - WITHIN) * best),
                 key=lambda m: (m["packing"] * m.get("fuse", 1), m["packing"], -m["tokens_per_second_total"]))
    single = [m["tokens_per_second_total"] for m in done
              if m["packing"] == 1 and m.get("fuse", 1) == 1 and m["mode"] == chosen["mode"]]
    gain = chosen["tokens_per_second_total"] / single[0] if single else None
    return {"packing": chosen["packing"], "mode": chosen["mode"], "resources_gpu": gpu_share(chosen["packing"]),
            **({"fuse": chosen["fuse"]} if chosen.get("fuse", 1) > 1 else {}),
            **({"gain_over_one": round(gain, 2)} if gain else {})}


def bundle_advice(measurements: list[dict[str, Any]], gpu_bytes: int | None, cores_per_gpu: float) -> str:
    """The largest bundle measured alone without running out of memory, and how many such bundles a GPU holds by its
    memory (``gpu_bytes``; ``None`` on a CPU: neither said) and by its cores (a bundle is one process: a core each)."""
    from istar_tune.search.spaces.cost import by_cores

    fitted = [m for m in measurements if m.get("fuse", 1) > 1 and m["packing"] == 1 and "peak_memory_gb" in m]
    if not fitted:
        return ""
    largest = max(fitted, key=lambda m: m["fuse"])
    said = f"fused: a bundle of {largest['fuse']} members fits ({largest['peak_memory_gb']:.2f} GiB peak)"
    larger = [m for m in measurements if m.get("fuse", 1) > largest["fuse"] and m["packing"] == 1 and "error" in m]
    if larger:
        said += f", of {larger[0]['fuse']} not ({larger[0]['error']})"
    if gpu_bytes is None:  # a CPU: no GPU to hold them
        return said
    holds = {"cores": by_cores(cores_per_gpu, 1.0), "memory": int(gpu_bytes // (largest["peak_memory_gb"] * 2**30))}
    binding = min(holds, key=lambda what: holds[what])
    each = ", ".join(f"by {what} {n}" for what, n in sorted(holds.items()))
    return (f"{said}; a GPU holds such bundles {each} ({cores_per_gpu:g} cores per GPU, one a bundle): "
            f"{holds[binding]} a GPU, the {binding} bind")


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


def _measure_all(job: Job, packings: tuple[int, ...], modes: tuple[str, ...], fuses: tuple[int, ...],
                 write: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every mode × bundle size × packing measured (:func:`measure`), a line each; a bundle is not compiled."""
    rows = []
    for mode in modes:
        for fuse in fuses:
            for packing in packings:
                if fuse > 1 and mode == "compiled":
                    rows.append({"packing": packing, "fuse": fuse, "mode": mode,
                                 "error": "a bundle is not compiled (fused trials run step_mode eager)"})
                else:
                    threads = max(1, (os.cpu_count() or 1) // packing)
                    rows.append(measure(Job(**{**job.__dict__, "mode": mode, "threads": threads, "fuse": fuse}),
                                        packing))
                row = rows[-1]
                head = f"{packing:>7}  {fuse:>7}  {mode:<8}"
                if "error" in row:
                    write(f"{head}  failed: {row['error']}")
                    continue
                write(f"{head}  {row['tokens_per_second_per_trial']:>18,.0f}  {row['tokens_per_second_total']:>14,.0f}"
                      f"  {row['peak_memory_gb']:.2f} GiB"
                      + (f"  (all {packing} ran together for only {row['overlap']:.0%} of the time: raise --steps)"
                         if packing > 1 and row["overlap"] < MIN_OVERLAP else ""))
    return rows


def calibrate(job: Job, packings: tuple[int, ...], modes: tuple[str, ...], output: str | os.PathLike,
              write: Callable[[str], None] = print, fuses: tuple[int, ...] = (1,)) -> Calibration:
    """Measure every packing × bundle size (``fuses``: members a trial, ``search.fuse``) × mode, print a line each,
    recommend, and write ``output`` (checked writable before anything is measured: a measurement takes minutes).
    Where a bundle is measured, every row runs eager attention (what a bundle needs), so only the fusing differs."""
    import torch

    from istar_tune.config import EAGER_ATTENTION

    check_output(output)
    if job.device == "cpu" or (job.device == "auto" and not torch.cuda.is_available()):
        machine = f"cpu ({os.cpu_count()} cores, {platform.processor() or platform.machine()})"
        cuda = False
    else:
        machine, cuda = torch.cuda.get_device_name(0), True
    attention = EAGER_ATTENTION if max(fuses) > 1 else job.attn_implementation
    job = Job(**{**job.__dict__, "device": "cuda" if cuda else "cpu", "attn_implementation": attention})
    result = Calibration(job, machine)
    write(f"calibrate {job.model} × {job.task} × {job.method}, batch {job.batch_size} × {job.max_length} tokens, "
          f"{job.steps} steps after {job.warmup} warm-up, {attention} attention, on {machine}")
    memory = "peak memory" if cuda else "peak RSS (the whole process: a CPU has no allocator peak)"
    write(f"{'packing':>7}  {'members':>7}  {'mode':<8}  {'tokens/s per trial':>18}  {'tokens/s total':>14}  {memory}")
    result.measurements = _measure_all(job, packings, modes, fuses, write)
    result.recommended = recommend(result.measurements)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(yaml.safe_dump(result.as_yaml(), sort_keys=False, allow_unicode=True), "utf-8")
    if result.recommended is None:
        raise ConfigError(f"no packing could be measured (see the lines above); wrote {output}")
    chosen = result.recommended
    gain = f", {chosen['gain_over_one']:g}× the total of one unfused trial" if "gain_over_one" in chosen else ""
    fused = f", fused bundles of {chosen['fuse']} (search: {{fuse: {chosen['fuse']}}})" if "fuse" in chosen else ""
    write(f"recommended: {chosen['packing']} a GPU{fused}, {chosen['mode']} (resources: {{gpu: "
          f"{chosen['resources_gpu']:g}}}){gain}; wrote {output} (search --dry-run --throughput {output})")
    gpus = torch.cuda.device_count() if cuda else 1
    if cuda:
        write(f"packing on this node: {cores_advice(chosen['packing'], gpus)}")
    gpu_bytes = torch.cuda.get_device_properties(0).total_memory if cuda else None
    if advice := bundle_advice(result.measurements, gpu_bytes, (os.cpu_count() or 1) / gpus):
        write(advice)
    if not cuda:
        write("measured on a CPU: these are this machine's figures; GPU figures need a GPU (run calibrate on one of "
              "your GPU nodes)")
    return result
