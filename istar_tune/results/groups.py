"""What every table of a search's runs shares: the rows and columns shown, each group's counted runs, scores in
percent, and the papers' published values."""

from __future__ import annotations

import json
from importlib import resources

from istar_tune import tracking
from istar_tune.config import EXACTNESS_SETTINGS
from istar_tune.errors import ConfigError
from istar_tune.methods import METHODS
from istar_tune.tasks import EXTRACTIVE_QA, TASKS, Task, get_task, is_shipped
from istar_tune.tracking.runs import TrialRun, run_tasks


def paper_results() -> dict:
    """The paper's published values shipped with the package: Table 2 (with its printed averages) and Table 1."""
    return json.loads(resources.files("istar_tune").joinpath("paper_results.json").read_text(encoding="utf-8"))


def axes(runs: list[TrialRun], models, tasks, methods,
          paper_axes: bool = False) -> tuple[list[str], list[str], list[str]]:
    """The rows and columns shown: those asked for, else the models, tasks and methods the runs hold (every task of
    the paper with ``paper_axes``: ``--against-paper``)."""
    seen_models = list(dict.fromkeys(r.model for r in runs))
    seen_methods = [m for m in METHODS if any(r.method == m for r in runs)]
    own_tasks = list(dict.fromkeys(r.task for r in runs if not is_shipped(r.task)))  # the runs' own definitions
    seen_tasks = [t for t in TASKS if any(r.task == t for r in runs)] + own_tasks
    known = run_tasks(runs)
    return (list(models or seen_models),
            [get_task(t, known).name for t in (tasks or ([*TASKS, *own_tasks] if paper_axes else seen_tasks))],
            list(methods or seen_methods))


def candidates(runs: list[TrialRun]) -> dict[tuple, list[TrialRun]]:
    groups: dict[tuple, list[TrialRun]] = {}
    for run in runs:
        if run.status in tracking.COUNTED_STATUSES:
            groups.setdefault(run.group, []).append(run)
    return groups


def varied(runs: list[TrialRun]) -> dict[str, list[str]]:
    """The hyperparameters whose values differ among ``runs``, the seed aside (each with its values, as text): what
    makes runs more than one configuration's seeds."""
    keys = sorted({k for r in runs for k in r.config if k != "seed"})
    values = {k: sorted({repr(r.config.get(k)) for r in runs}) for k in keys}
    return {k: v for k, v in values.items() if len(v) > 1}


def percent(task: Task, value: float) -> float:
    """A score in percent: SQuAD's F1 and EM already are; every other metric is a fraction."""
    return value if task.problem_type == EXTRACTIVE_QA else 100.0 * value


MIX_EXACTNESS_FLAG = "--mix-exactness"


def refuse_mixed_exactness(runs: list[TrialRun], experiment: str, allowed: bool = False, models=None, tasks=None,
                           methods=None) -> None:
    """Refuse to put runs whose exactness settings differ (``config.EXACTNESS_SETTINGS``: the attention kernel, the
    float32 matmul precision, the length buckets) into one comparison, unless ``allowed``: their numbers differ by the
    settings alone, not only by what was trained. Only the runs shown count (``models``, ``tasks``, ``methods``: the
    rows and columns asked for). A run that recorded no such setting ran with the value it had before the setting
    existed."""
    known = run_tasks(runs)
    task_names = {get_task(t, known).name for t in tasks} if tasks else None
    counted = [r for r in runs if r.status in tracking.COUNTED_STATUSES and (not models or r.model in models)
               and (not task_names or r.task in task_names) and (not methods or r.method in methods)]
    mixed = {}
    for name, before in EXACTNESS_SETTINGS.items():
        values = sorted({r.settings.get(name, before) for r in counted})
        if len(values) > 1:
            mixed[name] = values
    if mixed and not allowed:
        what = "; ".join(f"{name} {' and '.join(values)}" for name, values in mixed.items())
        raise ConfigError(f"experiment {experiment!r} mixes runs with different exactness settings ({what}): their "
                          "numbers differ by the settings as well as by the method; tabulate runs of one setting "
                          f"(one search each), or pass {MIX_EXACTNESS_FLAG} to compare them anyway")
