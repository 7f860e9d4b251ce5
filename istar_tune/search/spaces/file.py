"""Reading a search-space YAML: every key known (:data:`SPACE_KEYS`, from :class:`SearchSpace`'s fields; also
docs/reference.md), every problem reported at once with the file and the key; shipped spaces found by name.
"""

from __future__ import annotations

import itertools
import typing
from pathlib import Path
from typing import Any

from istar_tune.config import RunSettings, coerce_value, from_dict, load_yaml, task_problems
from istar_tune.errors import ConfigError, repeated, unknown_keys
from istar_tune.methods import METHODS, refuse_unused
from istar_tune.metrics import CHOOSE_BY
from istar_tune.models import PAPER_MODELS
from istar_tune.search import backends, schedulers
from istar_tune.search.spaces.domains import (
    check_distinct_draws,
    check_value,
    coerced,
    domains_from_yaml,
)
from istar_tune.search.spaces.fusing import check_fuse
from istar_tune.search.spaces.space import (
    ANY_MODEL,
    SEARCHED_KEYS,
    STAGES,
    Domain,
    SearchSpace,
    space_default,
    space_keys,
)
from istar_tune.search.spaces.strategy import apply_strategy, registered_name
from istar_tune.step_modes import STEP_MODES
from istar_tune.tasks import Task, task_of

# -------------------------------------------------------------------------------------------------- loading

SPACE_KEYS: dict[str, tuple[str, str, str]] = space_keys()
"""Every key a search-space YAML may hold: key → (:class:`SearchSpace` field, default, meaning), from the fields."""

MAX_TRIALS_PER_GROUP = 1_000_000
"""The most trials a space plans per (model, task, method) group (the paper's I-STAR grid: 648)."""

_TOP_KEYS = {key.split(".")[0] for key in SPACE_KEYS}
_SEARCH_KEYS = {key.split(".")[1] for key in SPACE_KEYS if key.startswith("search.")}
_SEARCH_SCALARS = ("num_samples", "seed", "share_epochs", "fuse")
_SCHEDULER_KEYS = {key.split(".")[1] for key in SPACE_KEYS if key.startswith("scheduler.")}
_RESOURCE_KEYS = {key.split(".")[1] for key in SPACE_KEYS if key.startswith("resources.")}


def shipped_spaces() -> dict[str, Path]:
    """The search spaces installed with the package (``search_spaces/`` of the repository), by name."""
    package = Path(__file__).resolve().parents[2]
    # A source checkout (or an editable install) has them beside the package; a wheel installs them inside it
    # (pyproject.toml maps search_spaces/ to istar_tune/search_spaces).
    folders = [package.parent / "search_spaces", package / "search_spaces"]
    found: dict[str, Path] = {}
    for folder in folders:
        if folder.is_dir():
            for entry in sorted(folder.glob("*.yaml")):
                found.setdefault(entry.stem, entry)
    return found


def resolve_space(name_or_path: str | Path) -> Path:
    """A search-space file: an existing path, else a shipped space by name (``paper_istar``, ``paper-istar`` or
    ``paper_istar.yaml``)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    key = Path(str(name_or_path)).stem.replace("-", "_")
    shipped = shipped_spaces()
    if not path.parent.parts and key in shipped:
        return shipped[key]
    what = "is a folder" if path.is_dir() else "does not exist"
    raise ConfigError(f"search space {str(name_or_path)!r} {what}: give a YAML file or the name of a shipped "
                      f"space ({', '.join(sorted(shipped)) or 'none installed'})")


def load_search_space(path: str | Path, strategy: tuple[dict[str, Any], str] | None = None) -> SearchSpace:
    """Read and validate a search-space YAML (a path, or a shipped space's name); raises one :class:`ConfigError`
    listing every problem. ``strategy``: a fragment and where it came from
    (:func:`~istar_tune.search.spaces.strategy.read_strategy`), applied on top of the file's own strategy."""
    path = resolve_space(path)
    raw = load_yaml(path)
    source = ""
    if strategy is not None:
        raw, changed = apply_strategy(raw, strategy[0])
        source = strategy[1] + (f" ({changed})" if changed else "")
    problems: list[str] = []

    def problem(key: str, text: str) -> None:
        problems.append(f"{path}: {key}: {text}")

    if unknown := [key for key in raw if key not in _TOP_KEYS]:
        problem(*unknown_keys(unknown, _TOP_KEYS))
    stage = raw.get("stage", space_default("stage"))
    if stage not in STAGES:
        problem("stage", f"must be one of {', '.join(STAGES)}, got {stage!r}")
    name = raw.get("name", path.stem.replace("_", "-"))
    if not isinstance(name, str) or not name.strip():
        problem("name", f"must be a non-empty string, got {name!r}")
    models, tasks, methods = _axes(raw, problem, path)
    for task, method in itertools.product(tasks, methods):
        for text in task_problems(method, task):
            problem("methods", text)
    search = _search_section(raw, problem, path)
    hyperparameters = domains_from_yaml(raw.get("hyperparameters", {}), "hyperparameters", search["algorithm"], problem)
    method_hyperparameters = _method_domains(raw, search["algorithm"], problem)
    sections = {**_scheduler_section(raw, problem, path), **_resources_section(raw, problem)}
    settings = _settings_section(raw, problem, problems, path)
    seeds: tuple[int, ...] = ()
    best_of: tuple[str, ...] = ()
    study: dict[str, Any] = {}
    if stage == "seeds":
        seeds, best_of = _seeds_section(raw, problem)
        study = _study_section(raw, models, hyperparameters, method_hyperparameters, problem)
    else:
        for key in ("vary", "start_from", "choose_by"):
            if key in raw:
                problem(key, "belongs to a seeds stage (stage: seeds), which starts from the best configurations "
                             "of best_of")
        if not hyperparameters and not method_hyperparameters:
            problem("hyperparameters", "the space has no hyperparameter domains; give at least one")
    if problems:
        raise ConfigError(problems)
    space = SearchSpace(
        path=str(path), name=name.strip(), models=models, tasks=tuple(task.name for task in tasks), task_objects=tasks,
        methods=methods, hyperparameters=hyperparameters, method_hyperparameters=method_hyperparameters,
        **search, **sections, settings=settings, stage=stage, seeds=seeds, best_of=best_of, **study,
        strategy_source=source)
    _check_across_fields(space, path)
    return space


def _check_across_fields(space: SearchSpace, path: Path) -> None:
    """The rules that read several sections at once: the grid's size, the device against the resources, the
    scheduler's grace period against the epochs, a pausing scheduler against the checkpoints."""
    largest = max(space.trials_in(group) for group in space.groups())
    if largest > MAX_TRIALS_PER_GROUP:
        raise ConfigError(f"{path}: the grid plans {largest:,} trials per model × task × method; at most "
                          f"{MAX_TRIALS_PER_GROUP:,}: narrow the grid or sample it (search.algorithm: tpe or random)")
    check_distinct_draws(space, path)
    if str(space.settings.get("device", "auto")).startswith("cuda") and space.gpu == 0:
        raise ConfigError(f"{path}: settings.device is {space.settings['device']!r} but resources.gpu is 0: a trial "
                          "without a GPU share sees no CUDA device; give resources: {gpu: 1} (or a fraction), or "
                          "device: auto")
    mode = STEP_MODES.get(str(space.settings.get("step_mode", RunSettings.step_mode)))
    if mode is not None and mode.needs_gpu and space.gpu == 0:
        raise ConfigError(f"{path}: settings.step_mode is {mode.name} (CUDA graphs) but resources.gpu is 0: give each "
                          "trial a GPU share (resources: {gpu: 0.25}), or step_mode eager or compile")
    scheduler = schedulers.get_scheduler(space.scheduler)
    check_fuse(space, path, scheduler)
    if scheduler.build is not None and space.stage != "seeds":
        horizon = max(group.max_epochs for group in space.groups())
        if "alpha" in scheduler.reads and space.alpha >= 1:
            raise ConfigError(f"{path}: scheduler.alpha: {space.alpha:g} bounds a share of trials: give a value "
                              "below 1 (e.g. 0.1)")
        if "grace_period" in scheduler.reads and space.grace_period > horizon:
            raise ConfigError(f"{path}: scheduler.grace_period: {space.grace_period} is more than the {horizon} "
                              f"epochs the longest trial reports, so {scheduler.name} could never stop a trial: "
                              "lower it")
        if scheduler.pauses and space.settings.get("checkpoint") == "none":
            raise ConfigError(f"{path}: scheduler.type: {scheduler.name} pauses trials it cannot judge yet and "
                              "resumes them from their checkpoint, but settings.checkpoint is none: use resume "
                              "(a few KB a finished trial) or state")


def _names(raw: dict, key: str, problem, default=None) -> tuple[str, ...]:
    value = raw.get(key, default)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        problem(key, f"must be a non-empty list of names, got {value!r}")
        return ()
    return tuple(value)


def _axes(raw: dict, problem, path: Path) -> tuple[tuple[str, ...], tuple[Task, ...], tuple[str, ...]]:
    """``models`` and ``methods``: lists of known names; ``tasks``: the tasks themselves (named, or defined)."""
    models = tuple(_relative_to(path, m) for m in _names(raw, "models", problem, list(PAPER_MODELS)))
    tasks = _tasks(raw.get("tasks"), path, problem)
    methods = _names(raw, "methods", problem)
    for key, names in (("models", models), ("methods", methods)):
        twice = repeated(names)
        if twice:
            problem(key, f"lists {', '.join(twice)} more than once: each once (every configuration would train "
                         "twice)")
    for method in methods:
        if method not in METHODS:
            problem("methods", f"unknown method {method!r}: choose one of {', '.join(METHODS)}")
    return models, tasks, methods


def _relative_to(path: Path, model: str) -> str:
    """A model written as a relative local path (``./my-model``, ``../models/x``) starts at the space's folder."""
    if model.startswith(("./", "../")):
        return str((path.resolve().parent / model).resolve())
    return model


def _tasks(value, path: Path, problem) -> tuple[Task, ...]:
    """``tasks``: shipped task names, definition files (relative to the space's folder) or inline definitions."""
    entries = [value] if isinstance(value, (str, dict)) else value
    if not isinstance(entries, list) or not entries:
        problem("tasks", f"must be a non-empty list of task names, definition files or definitions, got {value!r}")
        return ()
    found = []
    for index, entry in enumerate(entries):
        try:
            found.append(task_of(entry, path.resolve().parent, source=f"{path}: tasks[{index}]"))
        except ConfigError as err:
            problems = err.problems
            for text in problems:
                problem("tasks", text)
    twice = repeated([task.name for task in found])
    if twice:
        problem("tasks", f"lists {', '.join(twice)} more than once: each task once")
    return tuple(found)


def _search_section(raw: dict, problem, path: Path) -> dict[str, Any]:
    """``search``: the algorithm and its options, as :class:`SearchSpace` fields."""
    search = _mapping(raw, "search", _SEARCH_KEYS, problem)
    algorithm = registered_name(search.get("algorithm", space_default("algorithm")), "search.algorithm", backends,
                                 problem, path)
    num_samples, seed, share_epochs, fuse = (_scalar(search, f, problem) for f in _SEARCH_SCALARS)
    study_storage = search.get("storage", space_default("study_storage"))
    if study_storage is not None and (not isinstance(study_storage, str) or "://" not in study_storage):
        problem("search.storage", f"must be a database URL such as sqlite:///optuna.db, got {study_storage!r}")
    points = list(search.get("points_to_evaluate") or space_default("points_to_evaluate"))
    if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
        problem("search.points_to_evaluate", f"must be a list of mappings of hyperparameters, got {points!r}")
        points = []
    for point in points:
        for key, value in point.items():
            if key not in SEARCHED_KEYS:
                problem("search.points_to_evaluate", f"unknown hyperparameter {key!r}")
            else:
                check_value(key, value, "search.points_to_evaluate", problem)
    if points and backends.get_backend(algorithm).enumerates:
        samplers = ", ".join(name for name, backend in backends.registered().items() if not backend.enumerates)
        problem("search.points_to_evaluate", f"needs a sampling search.algorithm ({samplers}); a grid tries every "
                                             "point anyway")
    return {"algorithm": algorithm, "num_samples": num_samples, "seed": seed, "study_storage": study_storage,
            "points_to_evaluate": tuple(points), "share_epochs": share_epochs, "fuse": fuse}


def _method_domains(raw: dict, algorithm: str, problem) -> dict[str, dict[str, Domain]]:
    method_hyperparameters: dict[str, dict[str, Domain]] = {}
    per_method = raw.get("method_hyperparameters", {}) or {}
    if not isinstance(per_method, dict):
        problem("method_hyperparameters", f"must map method names to domains, got {type(per_method).__name__}")
        per_method = {}
    for method, domains in per_method.items():
        if method not in METHODS:
            problem(f"method_hyperparameters.{method}", f"unknown method: choose one of {', '.join(METHODS)}")
        if method in METHODS and isinstance(domains, dict):
            try:
                refuse_unused(method, domains, f"method_hyperparameters.{method}")
            except ConfigError as err:
                problem(f"method_hyperparameters.{method}", str(err).split(": ", 1)[1])
        method_hyperparameters[method] = domains_from_yaml(domains, f"method_hyperparameters.{method}", algorithm,
                                                           problem)
    return method_hyperparameters


def _scheduler_section(raw: dict, problem, path: Path) -> dict[str, Any]:
    scheduler = _mapping(raw, "scheduler", _SCHEDULER_KEYS, problem)
    scheduler_type = registered_name(scheduler.get("type", space_default("scheduler")), "scheduler.type", schedulers,
                                      problem, path)
    return {"scheduler": scheduler_type, **{f: _scalar(scheduler, f, problem) for f in ("grace_period",
                                                                                        "reduction_factor", "alpha")}}


def _resources_section(raw: dict, problem) -> dict[str, Any]:
    """``resources``, ``concurrency``, ``max_failures`` and ``checkpoints_to_keep``."""
    resources = _mapping(raw, "resources", _RESOURCE_KEYS, problem)
    cpu, gpu = _scalar(resources, "cpu", problem), _scalar(resources, "gpu", problem)
    if gpu > 1:
        problem("resources.gpu", f"a trial trains on one GPU; got {gpu!r}: use 1, or a fraction to share a GPU "
                                 "(several GPUs per trial are not supported)")
    return {"cpu": cpu, "gpu": gpu, **{f: _scalar(raw, f, problem) for f in ("concurrency", "max_failures",
                                                                             "checkpoints_to_keep")}}


def _settings_section(raw: dict, problem, problems: list[str], path: Path) -> dict[str, Any]:
    settings = raw.get("settings", {}) or {}
    if not isinstance(settings, dict):
        problem("settings", f"must be a mapping of run settings, got {type(settings).__name__}")
        return {}
    try:
        from_dict(RunSettings, settings, source="settings")
    except ConfigError as err:
        problems.extend(f"{path}: {p}" for p in err.problems)
    folder = path.resolve().parent  # paths in a space start at its own folder, wherever the command runs
    relative = {k for k, v in settings.items()
                if k in PATH_SETTINGS and isinstance(v, str) and v and not Path(v).is_absolute() and v[0] != "~"}
    return {k: str((folder / v).resolve()) if k in relative else v for k, v in settings.items()}


PATH_SETTINGS = ("data_dir", "init_checkpoint")
"""Run settings that name a folder: relative ones start at the space file's folder."""


def _seeds_section(raw: dict, problem) -> tuple[tuple[int, ...], tuple[str, ...]]:
    raw_seeds = raw.get("seeds")
    seeds: tuple[int, ...] = ()
    if (not isinstance(raw_seeds, list) or not raw_seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in raw_seeds)):
        problem("seeds", f"must be a non-empty list of integers, got {raw_seeds!r}")
    elif len(set(raw_seeds)) < len(raw_seeds):
        twice = repeated(raw_seeds)
        problem("seeds", f"repeats {', '.join(map(str, twice))} in {raw_seeds!r}: each seed once")
    else:
        seeds = tuple(raw_seeds)
    return seeds, _names(raw, "best_of", problem)


def _study_section(raw: dict, models: tuple[str, ...], hyperparameters: dict[str, Domain],
                   method_hyperparameters: dict[str, dict[str, Domain]], problem) -> dict[str, Any]:
    """A seeds stage's ``vary`` and ``start_from``; its hyperparameters: constants set on the best configuration."""
    for where, domains in [("hyperparameters", hyperparameters),
                           *((f"method_hyperparameters.{m}", d) for m, d in method_hyperparameters.items())]:
        for key, domain in domains.items():
            if domain.kind != "constant":
                problem(f"{where}.{key}", f"a seeds stage sets constants on top of the best configuration, got "
                                          f"{domain.describe()}: vary one hyperparameter with `vary: {{{key}: [...]}}`")
    study = {"vary": space_default("vary"), "start_from": raw.get("start_from", space_default("start_from")),
             "choose_by": raw.get("choose_by", space_default("choose_by"))}
    if study["choose_by"] not in CHOOSE_BY:
        problem("choose_by", f"must be one of {', '.join(CHOOSE_BY)}, got {study['choose_by']!r}")
    if study["start_from"] is not None and study["start_from"] not in METHODS:
        problem("start_from", f"unknown method {study['start_from']!r}: choose one of {', '.join(METHODS)}")
    raw_vary = raw.get("vary")
    if raw_vary is None:
        return study
    if not isinstance(raw_vary, dict) or len(raw_vary) != 1:
        problem("vary", f"a study varies one hyperparameter: `vary: {{lam: [-1, 1]}}`, got {raw_vary!r}")
        return study
    key, spec = next(iter(raw_vary.items()))
    if key not in SEARCHED_KEYS or key == "seed":
        problem(f"vary.{key}", f"not a hyperparameter a study can vary (one of "
                               f"{', '.join(sorted(SEARCHED_KEYS - {'seed'}))}; seeds are listed under seeds)")
        return study
    per_model = spec if isinstance(spec, dict) else {ANY_MODEL: spec}
    values: dict[str, tuple] = {}
    for model, listed in per_model.items():
        at = f"vary.{key}" + (f".{model}" if model != ANY_MODEL else "")
        if not isinstance(listed, list) or not listed:
            problem(at, f"needs a non-empty list of values, got {listed!r}")
            continue
        if len({repr(coerced(key, v)) for v in listed}) < len(listed):
            problem(at, f"repeats a value in {listed!r}: each value once")
        for value in listed:
            check_value(key, value, at, problem)
        values[model] = tuple(coerced(key, v) for v in listed)
    missing = [m for m in models if m not in values] if ANY_MODEL not in values else []
    if missing:
        problem(f"vary.{key}", f"lists no values for {', '.join(missing)}: give a list for every model, or one list")
    return {**study, "vary": (key, values)}


def _mapping(raw: dict, key: str, allowed: set[str], problem) -> dict:
    value = raw.get(key, {}) or {}
    if not isinstance(value, dict):
        problem(key, f"must be a mapping, got {type(value).__name__}")
        return {}
    unknown = [sub for sub in value if sub not in allowed]
    if unknown:
        where, text = unknown_keys(unknown, allowed)
        problem(", ".join(f"{key}.{sub}" for sub in where.split(", ")), text)
    return value


def _scalar(section: dict, name: str, problem) -> Any:
    """The scalar field ``name`` of :class:`SearchSpace` from its key in ``section``: coerced to its type by the typed
    loader every run setting goes through (:func:`istar_tune.config.coerce_value`), within the range its field
    declares; its default where it does not fit (the problem said, with the key)."""
    spec = SearchSpace.__dataclass_fields__[name]
    key = spec.metadata.get("yaml") or name
    value, text = coerce_value(name, _SPACE_HINTS[name], section.get(key.rsplit(".", 1)[-1], space_default(name)))
    low, above = spec.metadata.get("minimum"), spec.metadata.get("above")
    if text is None and value is not None:
        kind = "integer" if isinstance(value, int) else "number"
        if above is not None and value <= above:
            wanted = f"a positive {kind}" if above == 0 else f"a {kind} greater than {above:g}"
            text = f"must be {wanted}, got {value!r}"
        elif low is not None and value < low:
            wanted = f"a non-negative {kind}" if low == 0 else f"{'an' if kind == 'integer' else 'a'} {kind} >= {low:g}"
            text = f"must be {wanted}, got {value!r}"
    if text is not None:
        problem(key, text.removeprefix(f"{name} "))
        return space_default(name)
    return value


_SPACE_HINTS = typing.get_type_hints(SearchSpace)
