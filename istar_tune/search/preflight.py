"""Checks on the driver before a search starts anything: every problem at once, one line each.

A search that would fail in every trial (data missing or malformed, a model that cannot be resolved, a
``max_length`` past the model's positions, a tracking store that cannot be reached, a storage path that is a file,
a trial that no node of the cluster can hold) is refused here, before any trial, results folder or MLflow
experiment exists. Data files are parsed with the parsers the trials use; models are resolved by their config
only (no weights).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from istar_tune.errors import ConfigError, IstarTuneError
from istar_tune.models import check_max_length, check_model_at_hand, check_model_name, max_positions
from istar_tune.tasks import EXTRACTIVE_QA, Task, get_task
from istar_tune.tasks.task import IN_DATA_FOLDER
from istar_tune.tracking.storage import is_remote, unwritable
from istar_tune.tracking.store import check_reachable, check_writable


def check_tracking(tracking_uri: str) -> list[str]:
    """The tracking URI has a known scheme, its server or database answers quickly, and the store can be written
    (:func:`istar_tune.tracking.store.check_writable`)."""
    try:
        check_reachable(tracking_uri)
        check_writable(tracking_uri)
    except IstarTuneError as err:
        return [str(err)]
    return []


def check_storage(storage: str) -> list[str]:
    if is_remote(storage):
        return []
    problem = f"{storage} is a file" if Path(storage).is_file() else unwritable(storage)
    return [f"storage path {storage!r}: {problem}; give a folder for the results"] if problem else []


def check_data(tasks: list[Task | str], data_dir: str | None, hub_timeout_s: float = 5.0,
               definitions_only: bool = False, read: bool = True) -> list[str]:
    """The problems :func:`resolve_data` finds (tasks given as objects, or shipped tasks by name)."""
    return resolve_data(tasks, data_dir, hub_timeout_s, definitions_only, read)[1]


def resolve_data(tasks: list[Task | str], data_dir: str | None, hub_timeout_s: float = 5.0,
                 definitions_only: bool = False, read: bool = True,
                 limits: tuple[int | None, int | None] = (None, None),
                 seen: list[Task] | None = None) -> tuple[list[Task], list[str]]:
    """Every task's data reads as the trials will read it (files exist and parse; fields, labels and splits fit its
    definition); returns the tasks with each definition resolved (class names, sizes, checksums), so its trials carry
    exactly that, and the problems. A task read from the hub needs the hub to answer within ``hub_timeout_s`` (else
    every trial would fail after its retries); one whose classes and sizes its definition gives (the paper's) is then
    downloaded by its trials alone. ``definitions_only``: only the definitions not resolved yet (a rehearsal or a dry
    run needs their sizes; it reads no other data). ``read=False``: only where the data comes from (files exist, the
    hub answers when it is needed): what ``train`` checks before it reads the data itself. ``limits``: the trials'
    ``max_train_samples`` and ``max_eval_samples``, whose cuts are checked here too; ``seen`` collects each task as
    read with them (the rows and classes the trials train on, for the search's task lines)."""
    import datasets

    from istar_tune.data.reading import read_task, task_files
    from istar_tune.tasks.data_folder import hub_reachable

    datasets.utils.logging.disable_progress_bar()  # the driver's terminal shows the search's own lines
    problems: list[str] = []
    resolved: list[Task] = []
    hub_answers = None
    for given in tasks:
        task = given if isinstance(given, Task) else get_task(given)
        resolved.append(task)
        if definitions_only and task.resolved:
            continue
        try:
            if task_files(task, data_dir) is None:
                hub_answers = hub_reachable(hub_timeout_s) if hub_answers is None else hub_answers
                if not hub_answers:
                    problems.append(_no_hub(task, hub_timeout_s))
                    continue
                if task.resolved:
                    continue
            if read:
                checked = read_task(task, data_dir, *limits)[0]
                resolved[-1] = task if task.shipped else checked  # a shipped task stays as it ships
                if seen is not None:
                    seen.append(checked)
        except IstarTuneError as err:
            problems += [p for p in getattr(err, "problems", [str(err)]) if p not in problems]
    return resolved, problems


def holdout_problems(tasks: list[Task], settings, path: str) -> list[str]:
    """``settings.holdout`` with a task it cannot apply to (extractive QA: its training windows are not examples),
    refused before any trial starts rather than in every trial."""
    if settings.holdout is None:
        return []
    return [f"{path}: settings.holdout {settings.holdout:g} applies to sentence-level tasks, and {task.name} is "
            "extractive QA (its training windows are not examples): search it in a space without holdout"
            for task in tasks if task.problem_type == EXTRACTIVE_QA]


def _no_hub(task, hub_timeout_s: float) -> str:
    if task.files_in == IN_DATA_FOLDER:  # its files would come from a data folder
        return (f"no data folder (--data-dir, the space's data_dir or $GLUE_DIR) and the Hugging Face hub does not "
                f"answer within {hub_timeout_s:g} s (or HF_HUB_OFFLINE is set): give --data-dir DIR in the GLUE "
                "layout (SST-2/train.tsv, RTE/dev.tsv, ...), or set GLUE_DIR")
    return (f"{task.source}: task {task.name} reads the hub data set {task.hub.path}, and the Hugging Face hub does "
            f"not answer within {hub_timeout_s:g} s (or HF_HUB_OFFLINE is set): give its train and validation files "
            "instead, or run where the hub answers")


def check_models(models: list[str], max_length: int | None = None, at_hand: bool = False) -> list[str]:
    """Each model resolves (:func:`istar_tune.models.check_model_name`: one line within seconds, no hub retries) and,
    with ``max_length``, takes inputs that long (its config only, no weights). ``at_hand``: its files are also here
    or the hub answers (:func:`istar_tune.models.check_model_at_hand`)."""
    problems = []
    for model in models:
        try:
            (check_model_at_hand if at_hand else check_model_name)(model)
            if max_length is not None:
                check_max_length(max_length, max_positions(model), model)
        except IstarTuneError as err:
            problems.append(str(err))
    return problems


def check_resources(cpu: float, gpu: float, nodes: list[dict]) -> list[str]:
    """Some alive node of the cluster can hold one trial's request."""
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive", n.get("alive", True))]
    if any(r.get("CPU", 0) >= cpu and r.get("GPU", 0) >= gpu for r in alive):
        return []
    total_gpu = sum(r.get("GPU", 0) for r in alive)
    largest = max(alive, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), default={})
    return [f"a trial asks for {gpu:g} GPU(s) and {cpu:g} CPU(s), but no node of the cluster has that: the cluster "
            f"has {total_gpu:g} GPU(s) in {len(alive)} node(s), the largest node {largest.get('GPU', 0):g} GPU(s) "
            f"and {largest.get('CPU', 0):g} CPU(s); lower resources in the search space or add nodes"]


ACCELERATOR_MEMORY_GB = {"K80": 12, "P4": 8, "P100": 16, "V100": 16, "T4": 16, "A10": 24, "A10G": 24, "L4": 24,
                         "L40S": 48, "A100": 40, "A100-40G": 40, "A100-80G": 80, "H100": 80, "H20": 96, "H200": 141,
                         "B200": 180}
"""GPU memory (GiB) by the accelerator type Ray reports for a node (its ``accelerator_type:<type>`` resource; an A100 of
unknown size counts 40)."""


def cluster_gpu_memory(nodes: list[dict]) -> tuple[float, str] | None:
    """(GiB, where from) of the smallest GPU among the cluster's alive GPU nodes whose accelerator type Ray reports;
    ``None`` when no GPU node reports a known type."""
    known = []
    for node in nodes:
        resources = node.get("Resources", {})
        if not node.get("Alive", node.get("alive", True)) or not resources.get("GPU"):
            continue
        for key in resources:
            kind = key.partition("accelerator_type:")[2]
            if kind in ACCELERATOR_MEMORY_GB:
                known.append((float(ACCELERATOR_MEMORY_GB[kind]), f"the {kind}'s {ACCELERATOR_MEMORY_GB[kind]} GiB"))
    return min(known) if known else None


def check_packing(needs: list[tuple[str, int]], gpu: float, gpu_gb: float, source: str) -> list[str]:
    """Trials packed ``1/gpu`` to a GPU (``resources.gpu`` below 1) fit in its ``gpu_gb`` GiB: ``needs`` is (what,
    estimated peak bytes) per group; one line for the group that fits worst, naming the largest packing that fits."""
    from istar_tune.search.spaces.cost import gpu_share, packing_of
    from istar_tune.training.memory import GIB, PACKING_HEADROOM, largest_packing

    if not 0 < gpu or not needs:
        return []
    packing = packing_of(gpu)
    what, peak = max(needs, key=lambda need: need[1])
    fits = largest_packing(peak, int(gpu_gb * GIB))
    if fits >= packing:
        return []
    usable = f"{PACKING_HEADROOM:.0%} of {source} ({gpu_gb * PACKING_HEADROOM:.1f} GiB)"
    if fits == 0:
        return [f"a trial of {what} needs about {peak / GIB:.1f} GiB of GPU memory (estimate), more than {usable}: "
                "lower batch_size or max_length, or use GPUs with more memory"]
    return [f"resources.gpu {gpu:g} packs {packing} trials to a GPU, but a trial of {what} needs about "
            f"{peak / GIB:.1f} GiB (estimate): {packing} need {packing * peak / GIB:.1f} GiB, more than {usable}; the "
            f"largest packing that fits is {fits} (resources.gpu: {gpu_share(fits):g})"
            + ("" if source.startswith("--gpu-memory-gb") else "; give --gpu-memory-gb if the GPUs have more")]


def trial_needs(planned: list, settings) -> list[tuple[str, int]]:
    """(what, estimated peak bytes) of a trial of each planned group (at its largest batch size) with ``settings``."""
    from istar_tune.search.spaces.cost import group_memory

    needs = {}
    for item in planned:
        what, estimate = group_memory(item, settings)
        needs.setdefault(what, estimate.peak)
    return list(needs.items())


def check_cluster(cpu: float, gpu: float, nodes: list[dict], needs: Callable[[], list[tuple[str, int]]],
                  gpu_memory_gb: float | None = None) -> list[str]:
    """A node can hold one trial (:func:`check_resources`), and the packing ``gpu`` asks for fits in the GPUs'
    memory (:func:`check_packing`; ``needs``: :func:`trial_needs` of the search, asked for only then):
    ``gpu_memory_gb`` (``--gpu-memory-gb``) or what the nodes' accelerator type says (unchecked when neither is
    known)."""
    problems = check_resources(cpu, gpu, nodes)
    known = (gpu_memory_gb, f"--gpu-memory-gb {gpu_memory_gb:g}") if gpu_memory_gb else cluster_gpu_memory(nodes)
    if problems or known is None or not gpu:
        return problems
    return check_packing(needs(), gpu, *known)


def run_checks(checks: list[tuple[str, callable]]) -> float:
    """Run ``checks`` (name, function returning problems); raise one :class:`ConfigError` listing them all.
    Returns the seconds they took."""
    began = time.monotonic()
    problems = []
    for _, check in checks:
        problems += check()
    if problems:
        raise ConfigError(problems)
    return time.monotonic() - began
