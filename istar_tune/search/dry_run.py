"""The dry run's report: per (model, task, method) group, the configurations, Tune trials, epochs, one trial's
estimated peak GPU memory and, with a measured throughput, GPU-hours at the space's packing and at the recommended
one; then the totals and why epochs are or are not shared. One cost model for all of it
(:mod:`istar_tune.search.spaces.cost`), the one planning and ``--simulate`` use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from istar_tune.config import RunSettings, trial_epochs
from istar_tune.errors import IstarTuneError
from istar_tune.search.backends import get_backend
from istar_tune.search.plan import PlannedGroup, counted, plan, planned_configs
from istar_tune.search.schedulers import get_scheduler
from istar_tune.search.spaces.cost import (
    Throughput,
    bundle_seconds,
    by_cores,
    group_memory,
    packing_advice,
    packing_of,
    trial_seconds,
)
from istar_tune.search.spaces.space import ANY_MODEL, SearchSpace
from istar_tune.trial_config import FUSED_SHARED, completes, configuration, members


def dry_run(spaces: list[SearchSpace], tracking_uri: str | None = None, data_dir: str | None = None,
            gpu_memory_gb: float | None = None,
            measured: Callable[[SearchSpace], Throughput | None] | None = None,
            cores_per_gpu: float | None = None) -> list[str]:
    """What each of ``spaces`` would train, as :func:`dry_run_report` writes it (nothing runs, nothing is written):
    one trial's memory per group where the models' configs can be read, the packing checked against
    ``gpu_memory_gb`` and ``cores_per_gpu`` (which binds), GPU-hours by ``measured(space)`` rates; a seeds stage's
    configurations read from ``tracking_uri`` when its searches have run there, else from the spaces before it."""
    from istar_tune.models import config_is_local
    from istar_tune.search.preflight import check_models, resolve_data, run_checks
    from istar_tune.tasks.data_folder import hub_reachable

    resolved = []
    for space in spaces:  # models that resolve; a task definition's sizes and classes come from its data
        tasks, problems = resolve_data(list(space.task_objects or space.tasks), data_dir, definitions_only=True)
        run_checks([("models", lambda s=space: check_models(list(s.models))), ("tasks", lambda p=problems: p)])
        resolved.append(space.with_tasks(tasks))
    spaces = resolved
    readable = all(config_is_local(m) for s in spaces for m in s.models) or hub_reachable(2.0)
    store = Path(tracking_uri[len("sqlite:///"):]) if tracking_uri and tracking_uri.startswith("sqlite:///") else None
    held = tracking_uri if tracking_uri and (store is None or store.is_file()) else None
    names, reports = [s.name for s in spaces], []
    for index, space in enumerate(spaces):
        planned = plan(space, held if space.stage == "seeds" else None, dry_run=True,
                       chained=dict(zip(names[:index], spaces[:index])))
        memory = memory_column(planned, space.run_settings(), readable)
        if space.gpu and (gpu_memory_gb and readable or cores_per_gpu):
            memory[1].append("packing: " + _packing(space, planned, gpu_memory_gb if readable else None,
                                                    cores_per_gpu))
        reports.append(dry_run_report(space, planned, measured(space) if measured else None, memory))
    return reports


def _packing(space: SearchSpace, planned: list[PlannedGroup], gpu_memory_gb: float | None,
             cores_per_gpu: float | None) -> str:
    """The space's packing against the GPUs' memory and the node's cores per GPU: how many trials a GPU holds by
    each, which binds (:func:`~istar_tune.search.spaces.cost.packing_advice`), and a packing memory refuses."""
    from istar_tune.search.preflight import check_packing, trial_needs
    from istar_tune.training.memory import GIB, largest_packing

    needs = trial_needs(planned, space.run_settings()) if gpu_memory_gb else []
    refused = check_packing(needs, space.gpu, gpu_memory_gb, f"--gpu-memory-gb {gpu_memory_gb:g}") if needs else []
    fits = largest_packing(max(peak for _, peak in needs), int(gpu_memory_gb * GIB)) if needs else None
    cores = by_cores(cores_per_gpu, space.cpu) if cores_per_gpu else None
    said = packing_advice(packing_of(space.gpu), fits, cores, cores_per_gpu, space.cpu)
    gpus = f", {gpu_memory_gb:g} GiB GPUs" if gpu_memory_gb else ""
    fused = _largest_bundles(space, planned, int(gpu_memory_gb * GIB)) if needs else ""
    return f"{said} (resources.gpu {space.gpu:g}{gpus})" + (f"; {refused[0]}" if refused else "") + fused


def _largest_bundles(space: SearchSpace, planned: list[PlannedGroup], gpu_bytes: int) -> str:
    """``; fused: one GPU holds bundles of up to N members of <model>`` for the fused groups (empty: none)."""
    from istar_tune.search.spaces.cost import group_memory

    largest: dict[str, int] = {}
    for item in (p for p in planned if p.bundle > 1):
        _, one = group_memory(replace(item, bundle=1), space.run_settings())
        largest[item.group.model] = min(largest.get(item.group.model, 1 << 30), one.largest_bundle(gpu_bytes))
    if not largest:
        return ""
    each = ", ".join(f"{n} members of {model}" for model, n in sorted(largest.items()))
    return f"; fused: one GPU holds bundles of up to {each} (the space's largest: {max(p.bundle for p in planned)})"


@dataclass
class GroupCost:
    epochs: float
    """Epochs its trials train (as planned: shared where they share)."""
    unshared_epochs: float
    gpu_hours: float = 0.0
    unshared_gpu_hours: float = 0.0
    recommended_gpu_hours: float | None = None
    """GPU-hours at the packing calibrate recommends for the group's model (``None``: not calibrated)."""


def group_cost(space: SearchSpace, item: PlannedGroup, measured: Throughput | None = None) -> GroupCost:
    """What a group's trials cost, with and without shared epoch prefixes, at the space's packing and (calibrated
    models) the recommended one: each trial holds ``1/packing`` of a GPU for its modelled time
    (:func:`istar_tune.search.spaces.cost.trial_seconds`)."""
    planned_trials = planned_configs(space, item)
    trials = [member for trial in planned_trials for member in members(trial)]  # a fused trial's each
    unshared = [configuration(t, k) for t in trials for k in completes(t)]
    tokens = space.run_settings().shrinkage_tokens

    def seconds(trial: dict, rates: Throughput, packing: int) -> float:
        """A trial's; a fused one's at its bundle's calibrated rate, else its members' as trials of their own."""
        inside = members(trial)
        rate = rates.bundle_rate(item.group.model, len(inside), packing) if len(inside) > 1 else None
        if rate is not None:
            return bundle_seconds(inside, rate, rates, tokens)
        return sum(trial_seconds(c, tokens, rates) for c in inside)

    def hours(configs: list[dict], rates: Throughput, packing: int, share: float) -> float:
        return sum(seconds(c, rates, packing) for c in configs) * share / 3600.0

    cost = GroupCost(epochs=sum(map(trial_epochs, trials)), unshared_epochs=sum(map(trial_epochs, unshared)))
    if measured is not None:
        share, packing = space.gpu or 1.0, packing_of(space.gpu)
        cost.gpu_hours = hours(planned_trials, measured, packing, share)
        cost.unshared_gpu_hours = hours(unshared, measured, packing, share)
        best = measured.recommended.get(item.group.model)
        if best is not None:
            cost.recommended_gpu_hours = hours(planned_trials, measured.at(best), best, 1.0 / best)
    return cost


def memory_column(planned: list[PlannedGroup], settings: RunSettings, readable: bool) -> tuple[list[str], list[str]]:
    """One trial's estimated peak GPU memory per group (GiB; ``?`` where its model's config cannot be read), and the
    notes the report adds. ``readable``: model configs may be read (locally, or the hub answers)."""
    if not readable:
        return ["?"] * len(planned), ["(GiB/trial: the models' configs are not on this machine and the Hugging Face "
                                      "hub does not answer; run where it does for the memory estimate)"]
    column, notes = [], []
    for item in planned:
        try:
            column.append(f"{group_memory(item, settings)[1].peak_gb:.2f}")
        except (IstarTuneError, ValueError) as err:
            column.append("?")
            notes.append(f"(GiB/trial of {item.group.model}: {err})")
    precision = "float32" if settings.precision == "fp32" else "fp16/bf16 autocast"
    notes.insert(0, f"GiB/trial: one trial's estimated peak GPU memory at its group's largest batch size × max_length "
                    f"{settings.max_length}, {precision}, CUDA context included")
    return column, list(dict.fromkeys(notes))


def dry_run_report(space: SearchSpace, planned: list[PlannedGroup], measured: Throughput | None = None,
                   memory: tuple[list[str], list[str]] | None = None) -> str:
    """Per group: configurations, Tune trials, epochs trained (and without shared prefixes), with ``memory``
    (:func:`memory_column`) one trial's GPU memory, and with a measured throughput GPU-hours; then the totals."""
    costs = [group_cost(space, p, measured) for p in planned]
    header = ["model", "task", "method", "configurations", "trials", "epochs", "unshared epochs"]
    rows = [[p.group.model, p.group.task, p.group.method, str(p.trials), str(p.trainings), f"{c.epochs:g}",
             f"{c.unshared_epochs:g}"] for p, c in zip(planned, costs)]
    if memory is not None:
        header.append("GiB/trial")
        rows = [[*row, gib] for row, gib in zip(rows, memory[0])]
    if measured is not None:
        header.append("GPU-hours")
        rows = [[*row, f"{c.gpu_hours:.1f}"] for row, c in zip(rows, costs)]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [f"search {space.name} ({space.path}): {space.stage}, {strategy_line(space)}"]
    lines += [f"  {space.task(task).describe()}" for task in space.tasks]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    lines += _seeds_lines(space, planned) + _sharing_lines(planned) + _fusing_lines(space, planned, measured)
    lines += memory[1] if memory else []
    lines.append(_total(planned, costs, measured, space))
    concurrency = space.concurrency or "as the cluster allows"
    lines.append(f"each trial {space.cpu:g} CPU, {space.gpu:g} GPU; trials at once per group: {concurrency}; "
                 f"retries per trial: {space.max_failures}")
    sampled = not get_backend(space.algorithm).enumerates
    if sampled or (space.stage == "seeds" and not all(p.param_space for p in planned)):
        lines.append("(epochs of sampled or not yet chosen configurations estimated from the space's typical values)")
    return "\n".join(lines)


def strategy_line(space: SearchSpace) -> str:
    """``algorithm tpe (Optuna's TPE, …), scheduler asha (grace 1, η 2), from the replay of …``."""
    scheduler = get_scheduler(space.scheduler)
    said = f"algorithm {space.algorithm} ({get_backend(space.algorithm).summary}), scheduler "
    said += (scheduler.describe(space.grace_period, space.reduction_factor, space.alpha) if space.stage != "seeds"
             else "none")
    return said + (f"; strategy from {space.strategy_source}" if space.strategy_source else "")


def _total(planned: list[PlannedGroup], costs: list[GroupCost], measured: Throughput | None,
           space: SearchSpace) -> str:
    configurations, trials = sum(p.trials for p in planned), sum(p.trainings for p in planned)
    epochs, unshared = sum(c.epochs for c in costs), sum(c.unshared_epochs for c in costs)
    saved = f" ({epochs / unshared:.2f}×)" if unshared and epochs != unshared else ""
    total = (f"total {configurations} configurations in {trials} trials, {counted(len(planned), 'group')}; "
             f"{epochs:g} epochs trained, {unshared:g} without sharing{saved}")
    if measured is None:
        return total
    packing = packing_of(space.gpu)
    gpu_hours, unshared_hours = sum(c.gpu_hours for c in costs), sum(c.unshared_gpu_hours for c in costs)
    rates = ", ".join(f"{m} {r:,.0f} tokens/s" for m, r in sorted(measured.tokens_per_second.items()))
    total += (f"; {gpu_hours:.1f} GPU-hours ({unshared_hours:.1f} without sharing) at the space's packing "
              f"({counted(packing, 'trial')} a GPU: {rates} per trial)")
    if all(c.recommended_gpu_hours is not None for c in costs) and measured.recommended:
        recommended = sum(c.recommended_gpu_hours for c in costs)
        chosen = ", ".join(f"{m} {k} a GPU (resources.gpu {1 / k:.3g})"
                           for m, k in sorted(measured.recommended.items()))
        total += f"; {recommended:.1f} GPU-hours at the recommended packing ({chosen})"
    return total


def _seeds_lines(space: SearchSpace, planned: list[PlannedGroup]) -> list[str]:
    if space.stage != "seeds":
        return []
    chained = sorted({p.after.split(":")[0] for p in planned if p.after})
    source = (f"the searches {', '.join(chained)} of this run: each group starts when the group it re-runs has "
              "ended") if chained else "MLflow when the search runs"
    start = (f"the best {space.start_from} configuration of each model × task" if space.start_from
             else "the best configuration of each group")
    constants = {k: d.values[0] for k, d in space.hyperparameters.items()}
    fixed = f" with {', '.join(f'{k} = {v}' for k, v in constants.items())}," if constants else ""
    each = f" for each {space.vary[0]} of {_listed(space.vary[1], space.models)} and" if space.vary else " with"
    if space.choose_by == "holdout":
        start += " (chosen by its held-out training examples' score, not the dev set)"
    return [f"(at most: {start} found in {', '.join(space.best_of)} is re-run{fixed}{each} seeds "
            f"{list(space.seeds)}; read from {source})"]


def _sharing_lines(planned: list[PlannedGroup]) -> list[str]:
    lines = []
    shared = [p for p in planned if p.sharing is None]
    if shared:
        lines.append(f"epoch prefixes shared in {len(shared)} of {len(planned)} groups: configurations that differ "
                     "only in epochs run as one trial to the largest count, each smaller count completed on the way "
                     "(its own MLflow run)")
    for reason in dict.fromkeys(p.sharing for p in planned if p.sharing):
        lines.append(f"epoch prefixes not shared: {reason}")
    return lines


def _fusing_lines(space: SearchSpace, planned: list[PlannedGroup], measured: Throughput | None = None) -> list[str]:
    """What ``search.fuse`` bundles: each fused group's trials by their members (with a measured throughput, how their
    GPU-hours are counted), the configurations that train alone and why, and why a group is not fused."""
    if space.fuse == 1:
        return []
    lines = []
    for item in planned:
        if item.fusing is not None:
            continue
        trials = planned_configs(space, item)
        sizes = [len(members(t)) for t in trials]
        alone = sum(size == 1 for size in sizes)
        said = (f"; {counted(alone, 'configuration')} alone: no other of the group reads its batch stream (the same "
                f"{', '.join(FUSED_SHARED)})") if alone else ""
        hours = ""
        if measured is not None:
            bundled = sorted({k for k in sizes if k > 1})
            rated = all(measured.bundle_rate(item.group.model, k, packing_of(space.gpu)) for k in bundled)
            hours = ("; GPU-hours at the bundles' calibrated rates" if rated else
                     f"; GPU-hours counted per member, as trials of their own (calibrate --fuse "
                     f"{','.join(map(str, bundled))} measures a bundle's rate)")
        lines.append(f"fused {item.group.key}: {item.trials} configurations in {counted(len(trials), 'trial')} of "
                     f"{', '.join(map(str, sizes))} members (one stacked model a trial, each member its own run"
                     f"{hours}){said}")
    for reason in dict.fromkeys(p.fusing for p in planned if p.fusing):
        lines.append(f"not fused: {reason}")
    return lines


def _listed(per_model: dict[str, tuple], models: tuple[str, ...]) -> str:
    return "; ".join(f"{list(values)}" + ("" if model == ANY_MODEL else f" ({model})")
                     for model, values in per_model.items() if model == ANY_MODEL or model in models)
