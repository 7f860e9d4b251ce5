"""Search spaces: models, tasks, methods, hyperparameter domains, the search algorithm, the scheduler and
the resources of each trial (validated from YAML by ``file.py``).

A domain is a constant (``batch_size: 32``) or a mapping with one key:

* ``grid: [v1, v2, ...]`` — every value (grid search);
* ``choice: [v1, v2, ...]`` — one value sampled per trial;
* ``loguniform: [low, high]`` / ``uniform: [low, high]`` — a float range;
* ``randint: [low, high]`` — an integer in [low, high] (both included).

:class:`Domain` is the one place a domain's kind is interpreted (grid size, a seeded draw, Ray Tune's object).
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from istar_tune.config import (
    Hyperparameters,
    RunSettings,
    from_dict,
    group_key,
    prefix_sharing_problem,
    task_problems,
    trial_epochs,
)
from istar_tune.docstrings import field_docs
from istar_tune.errors import ConfigError, repeated
from istar_tune.methods import METHODS, unused_hyperparameters
from istar_tune.models import PAPER_MODELS
from istar_tune.search.backends import get_backend
from istar_tune.search.schedulers import Rule
from istar_tune.search.spaces import fusing
from istar_tune.tasks import Task, get_task, is_shipped, task_of

DOMAIN_KINDS = ("grid", "choice", "loguniform", "uniform", "randint")
STAGES = ("search", "seeds")
ANY_MODEL = "*"
"""The key of a study's ``vary`` values that apply to every model (a list in the YAML)."""
SEARCHED_KEYS = frozenset(Hyperparameters.__dataclass_fields__) - {"model", "task", "method"}


@dataclass(frozen=True)
class Domain:
    kind: str
    """``constant`` or one of :data:`DOMAIN_KINDS`."""
    values: tuple

    @property
    def size(self) -> int:
        """Number of grid points this domain contributes (1 for everything but ``grid``)."""
        return len(self.values) if self.kind == "grid" else 1

    def describe(self) -> str:
        if self.kind == "constant":
            return repr(self.values[0])
        return f"{self.kind}{list(self.values)}"

    def sample(self, rng: random.Random) -> Any:
        """One value drawn with ``rng`` (a grid's values are enumerated, not drawn: its first one here)."""
        kind, values = self.kind, self.values
        if kind in ("constant", "grid"):
            return values[0]
        if kind == "choice":
            return rng.choice(values)
        if kind == "uniform":
            return rng.uniform(*values)
        if kind == "loguniform":
            return math.exp(rng.uniform(math.log(values[0]), math.log(values[1])))
        return rng.randint(values[0], values[1])  # randint: both bounds included

    def tune(self) -> Any:
        """The same domain as Ray Tune's search-space object (a constant as itself)."""
        from ray import tune

        kind, values = self.kind, self.values
        if kind == "constant":
            return values[0]
        if kind == "grid":
            return tune.grid_search(list(values))
        if kind == "choice":
            return tune.choice(list(values))
        if kind == "loguniform":
            return tune.loguniform(*values)
        if kind == "uniform":
            return tune.uniform(*values)
        return tune.randint(values[0], values[1] + 1)  # Tune's upper bound is exclusive


@dataclass(frozen=True)
class Group:
    """One (model, task, method) of a search and the domains of its trials."""

    model: str
    task: str
    method: str
    domains: dict[str, Domain]
    definition: Task | None = field(default=None, compare=False, repr=False)
    """The task itself (what its trials' configurations carry when it is not shipped); ``None``: a shipped task."""

    @property
    def task_object(self) -> Task:
        """The group's task: its definition, or the shipped task of its name."""
        return self.definition if self.definition is not None else get_task(self.task)

    @property
    def key(self) -> str:
        return group_key({"model": self.model, "task": self.task, "method": self.method})

    @property
    def max_epochs(self) -> int:
        """The most epochs a trial of this group can report (ASHA's horizon)."""
        def largest(key: str) -> int:
            domain = self.domains.get(key)
            if domain is None:
                return int(getattr(Hyperparameters, key))
            return int(max(domain.values)) if domain.kind != "constant" else int(domain.values[0])

        return trial_epochs({"method": self.method, "epochs": largest("epochs"),
                             "isolayer_epochs": largest("isolayer_epochs")})


def _yaml(key: str | None = None, shown: str | None = None, minimum: float | None = None, above: float | None = None,
          **default) -> Any:
    """A :class:`SearchSpace` field read from the YAML key ``key`` (dotted: under a section; default the field's
    name); ``shown``: its default as the reference writes it, where the field's own default does not say it. A
    scalar's range: at least ``minimum``, or more than ``above`` (the loader coerces it to its type, then checks)."""
    return field(metadata={"yaml": key, "shown": shown, "minimum": minimum, "above": above}, **default)


@dataclass(frozen=True)
class SearchSpace:
    """A search space as read from its YAML file. Each field's default, its YAML key and the docstring under it are
    the one source of the loader's defaults, the validator's known keys and docs/reference.md (:func:`space_keys`)."""

    path: str = field(metadata={"yaml": False})
    """The YAML file this space was read from (recorded with every trial)."""
    name: str = _yaml(shown="the file name")
    """Search name: the MLflow experiment and the Ray results folder."""
    models: tuple[str, ...] = _yaml(shown=", ".join(PAPER_MODELS))
    """Model short names, Hugging Face hub ids or local paths (relative ones start at the space's folder)."""
    tasks: tuple[str, ...] = _yaml(shown="(required)")
    """Tasks: a shipped task's name (the papers' nine: see docs/tasks.md), a task definition file (relative to the
    space's folder) or a definition inline (see Your own task); each once."""
    methods: tuple[str, ...] = _yaml(shown="(required)")
    """Methods: base, cosreg, istar, isolayer."""
    hyperparameters: dict[str, Domain] = _yaml(default_factory=dict)
    """Domains shared by every method: `key: value`, `key: {grid: [...]}`, `{choice: [...]}`,
    `{loguniform: [low, high]}`, `{uniform: [low, high]}` or `{randint: [low, high]}`."""
    method_hyperparameters: dict[str, dict[str, Domain]] = _yaml(default_factory=dict)
    """Per-method domains added to (and overriding) the shared ones: `{istar: {lam: {grid: [-1, 1]}}}`."""
    algorithm: str = _yaml("search.algorithm", default="grid")
    """The search backend that hands out each group's trials (`optuna` is read as `tpe`); one of one's own is a file
    that registers it or an entry point (docs/searching.md)."""
    num_samples: int = _yaml("search.num_samples", minimum=1, default=1)
    """grid: repeats of the grid (random domains re-sampled each time); a sampling backend (random, tpe, qmc):
    trials per model × task × method."""
    seed: int | None = _yaml("search.seed", default=None)
    """Seed of the searcher's sampling."""
    study_storage: str | None = _yaml("search.storage", shown="optuna.db beside the results", default=None)
    """tpe, qmc (a backend that keeps studies): RDB URL where each group's study lives (so `--resume` continues it
    and `optuna-dashboard URL` shows it)."""
    share_epochs: bool = _yaml("search.share_epochs", default=True)
    """grid: configurations that differ only in `epochs` run as one trial to the largest count, completing each
    smaller one on the way, where that is exact (a constant learning rate, no second stage; the dry run says)."""
    fuse: int = _yaml("search.fuse", minimum=1, default=1)
    """grid, seeds stage: up to this many configurations of a group with the same model, task, batch size and
    grad_accum train as one fused trial, one stacked model in one process (each seed its own data order; a shared
    trial of epoch prefixes one member), each member still a run of its own (docs/searching.md, Fused trials); the dry
    run says what could not join a bundle. 1: a trial per configuration."""
    points_to_evaluate: tuple[dict, ...] = _yaml("search.points_to_evaluate", default=())
    """A sampling backend: configurations each group tries first, e.g. `[{learning_rate: 3e-5, batch_size: 16}]`."""
    scheduler: str = _yaml("scheduler.type", default="none")
    """The early-stopping scheduler each group's trials are judged by, per epoch, on the search's objective; one of
    one's own is a file that registers it or an entry point (docs/searching.md)."""
    grace_period: int = _yaml("scheduler.grace_period", minimum=1, default=1)
    """asha, hyperband, median: epochs every trial runs before it can be stopped."""
    reduction_factor: float = _yaml("scheduler.reduction_factor", above=1, default=3.0)
    """asha, hyperband: the share of trials kept at each rung is 1/reduction_factor."""
    alpha: float = _yaml("scheduler.alpha", above=0, default=0.1)
    """conformal: the level of the upper prediction bounds, shared over the R epochs a stop can happen at: a trial
    exchangeable with its group's finished ones has its final score above its score plus margin with probability at
    most alpha/R at each (below 1; not a cap on the share of would-be winners stopped: docs/searching.md)."""
    cpu: float = _yaml("resources.cpu", above=0, default=1.0)
    """CPUs per trial."""
    gpu: float = _yaml("resources.gpu", minimum=0, default=0.0)
    """GPUs per trial, at most 1 (a trial trains on one GPU); fractions share a GPU (0.5: two trials per GPU)."""
    concurrency: int | None = _yaml(minimum=1, default=None)
    """Trials at once per model × task × method (none: as many as the resources allow)."""
    max_failures: int = _yaml(minimum=0, default=1)
    """Retries of a failed trial; it continues from its last epoch's checkpoint."""
    checkpoints_to_keep: int = _yaml(minimum=1, default=2)
    """With `settings.checkpoint: state`: the newest checkpoints each trial keeps (other modes keep one)."""
    settings: dict[str, Any] = _yaml(default_factory=dict)
    """Run settings of every trial (see the run settings above)."""
    stage: str = _yaml(default="search")
    """`search`, or `seeds`: re-run the best configuration of each group of `best_of`."""
    seeds: tuple[int, ...] = _yaml(shown="(stage seeds)", default=())
    """Seeds of the seeds stage, e.g. [1, 2, 3, 4, 5]."""
    best_of: tuple[str, ...] = _yaml(shown="(stage seeds)", default=())
    """Names of the finished searches (MLflow experiments) whose best configurations are re-run."""
    vary: tuple[str, dict[str, tuple]] | None = _yaml(default=None)
    """(stage seeds) A study: one hyperparameter varied around each best configuration, every value × every seed:
    `{lam: [-5, -1, 1]}`, or values per model `{layer: {bert: [1, 2], distilbert: [1]}}`. The seeds stage's
    `hyperparameters` are constants set on top (e.g. `zeta: 0.2`)."""
    choose_by: str = _yaml(default="auto")
    """(stage seeds) What chooses each group's best configuration: `auto`, the rule of every table: the held-out
    training examples of searches run with `settings.holdout` (or `search --holdout`), so the dev score reported was
    never used to choose (a fair comparison), else the validation set (as the paper); `holdout` insists on held-out
    scores (refused for searches without them); `dev` insists on the dev set (refused for searches with held-out
    data: it would choose what it then scores)."""
    start_from: str | None = _yaml(shown="the group's method", default=None)
    """(stage seeds) The method whose best configuration each group starts from, e.g. `base`: I-STAR at Base's best
    learning rate, batch, epochs."""
    strategy_source: str = field(default="", metadata={"yaml": False}, compare=False)
    """Where the search and scheduler sections came from when not from the file (``--strategy-from``)."""
    task_objects: tuple[Task, ...] = field(default=(), metadata={"yaml": False}, compare=False, repr=False)
    """The tasks themselves, as the file defines them or as the preflight resolved them (:meth:`with_tasks`): what
    the plan puts in each trial's configuration. A shipped task left out is found by its name."""
    pairs: tuple[tuple[str, str], ...] = field(default=(), metadata={"yaml": False})
    """Only these (model, task) pairs of ``models`` × ``tasks`` (a job array's shard: :mod:`istar_tune.search.shard`);
    empty: every pair."""

    def task(self, name: str) -> Task:
        """The space's task called ``name``: its own object (a definition travels with the space, not through a
        registry), or a shipped task."""
        found = next((task for task in self.task_objects if task.name == name), None)
        if found is not None:
            return found
        if not is_shipped(name):
            raise ConfigError(f"{self.name}: task {name!r} is not one of the space's tasks "
                              f"({', '.join(self.tasks)}): name one of them")
        return get_task(name)

    def with_tasks(self, tasks: list[Task]) -> SearchSpace:
        """The same space with these task objects in place of those of the same name (the preflight's, resolved)."""
        given = {task.name: task for task in tasks}
        return replace(self, task_objects=tuple(given.get(name) or self.task(name) for name in self.tasks))

    def narrow(self, models=None, tasks=None, methods=None) -> SearchSpace:
        """The same space for other models, tasks or methods (e.g. from ``--models``)."""
        problems = []
        objects = []
        own = {task.name: task for task in self.task_objects}
        for task in tasks or ():
            try:
                objects.append(task_of(task, Path.cwd(), source="--tasks", known=own))
            except ConfigError as err:
                problems.append(f"--tasks: {err}")
        names = [task.name for task in objects]
        if methods:
            problems += [f"--methods: unknown method {m!r}: choose one of {', '.join(METHODS)}"
                         for m in methods if m not in METHODS]
        problems += [f"--tasks, --methods: {text}" for task in objects or self.task_objects
                     for method in methods or self.methods for text in task_problems(method, task)]
        twice = repeated(names)  # [rte, RTE] name one task
        problems += [f"--tasks: lists {', '.join(twice)} more than once: name each task once"] if twice else []
        if problems:
            raise ConfigError(problems)
        return replace(self, models=tuple(models or self.models), tasks=tuple(names or self.tasks),
                       methods=tuple(methods or self.methods), task_objects=tuple(objects) or self.task_objects)

    def groups(self) -> list[Group]:
        out = []
        for model, task, method in itertools.product(self.models, self.tasks, self.methods):
            if self.pairs and (model, task) not in self.pairs:
                continue
            domains = self.method_domains(method)
            definition = self.task(task)
            out.append(Group(model=model, task=definition.name, method=method, domains=domains, definition=definition))
        return out

    def method_domains(self, method: str) -> dict[str, Domain]:
        """The domains a method's trials draw from: the space's and the method's own, less what the method never
        reads (a λ grid given to every method plans Base once, not once per λ: its trials would be identical)."""
        unused = unused_hyperparameters(method)
        return {key: domain for key, domain in {**self.hyperparameters, **self.method_hyperparameters.get(method, {})}
                .items() if key not in unused}

    def variants(self, model: str, method: str) -> list[dict[str, Any]]:
        """Seeds stage: what each trial of the group (``model``, ``method``) sets on top of the best configuration it
        starts from: the space's constants, the varied value (each of ``vary``'s values for the model) and the
        seed."""
        constants = {key: domain.values[0] for key, domain in self.method_domains(method).items()}
        if self.vary is None:
            return [{**constants, "seed": seed} for seed in self.seeds]
        key, per_model = self.vary
        values = per_model.get(model, per_model.get(ANY_MODEL))
        if values is None:
            raise ConfigError(f"{self.path}: vary.{key} lists values for {', '.join(per_model)}, none for model "
                              f"{model!r}: add `{model}: [...]` under it")
        return [{**constants, key: value, "seed": seed} for value in values for seed in self.seeds]

    def source_method(self, method: str) -> str:
        """Seeds stage: the method of the group whose best configuration ``method``'s group starts from."""
        return self.start_from or method

    def trials_in(self, group: Group) -> int:
        if self.stage == "seeds":
            return len(self.variants(group.model, group.method))
        return get_backend(self.algorithm).trials((d.size for d in group.domains.values()), self.num_samples)

    def stopping_rule(self, horizon: int, metric: str) -> Rule:
        """A group's early stopping (:mod:`istar_tune.search.schedulers`), its longest trial ``horizon`` epochs."""
        return Rule(self.scheduler, horizon, self.grace_period, self.reduction_factor, metric, alpha=self.alpha)

    def sharing_problem(self, group: Group) -> str | None:
        """Why the configurations of ``group`` that differ only in ``epochs`` do not share a trial (``None``: they
        do); exactness itself is :func:`istar_tune.config.prefix_sharing_problem`."""
        epochs = group.domains.get("epochs")
        if (self.stage == "seeds" or not get_backend(self.algorithm).enumerates or epochs is None
                or epochs.kind != "grid"
                or len(set(epochs.values)) < 2):
            return "one epoch count per configuration: nothing to share"
        if any(d.kind not in ("grid", "constant") for d in group.domains.values()):
            return "the grid draws a random value per configuration, so no two differ only in epochs"
        if not self.share_epochs:
            return "search.share_epochs is false"
        return prefix_sharing_problem(self.run_settings(), group.method)

    def fuse_problem(self, group: Group) -> str | None:
        """Why ``group``'s configurations do not train as fused trials (:func:`~.fusing.fuse_problem`)."""
        return fusing.fuse_problem(self, group)

    def bundles_in(self, group: Group) -> list[int]:
        """Each trial's configurations as ``search.fuse`` bundles ``group`` (:func:`~.fusing.bundles_in`)."""
        return fusing.bundles_in(self, group)

    def tune_trials_in(self, group: Group) -> int:
        """Tune trials of ``group``: its configurations, fewer where they share epoch prefixes."""
        trials = self.trials_in(group)
        if self.fuse_problem(group) is None:
            return len(self.bundles_in(group))
        if self.sharing_problem(group) is None:
            trials //= len(set(group.domains["epochs"].values))
        return trials

    def run_settings(self, **overrides) -> RunSettings:
        values = {**self.settings, **{k: v for k, v in overrides.items() if v is not None}}
        return from_dict(RunSettings, values, source=f"{self.path}: settings")


def space_keys() -> dict[str, tuple[str, str, str]]:
    """Every key a search-space YAML may hold, from :class:`SearchSpace`'s fields: YAML key → (field name, default as
    the reference writes it, meaning)."""
    docs = field_docs(SearchSpace)
    keys = {}
    for f in fields(SearchSpace):
        if f.metadata.get("yaml") is False:
            continue
        shown = f.metadata.get("shown") or _shown(f.default_factory() if f.default is MISSING else f.default)
        keys[f.metadata.get("yaml") or f.name] = (f.name, shown, docs[f.name])
    return keys


def space_default(name: str) -> Any:
    """The default of :class:`SearchSpace`'s field ``name`` (what the loader uses when the YAML leaves it out)."""
    f = SearchSpace.__dataclass_fields__[name]
    return f.default_factory() if f.default is MISSING else f.default


def _shown(value: Any) -> str:
    """A default as YAML writes it: true, none, 3 (not 3.0), [] ..."""
    if isinstance(value, (bool, type(None))):
        return {True: "true", False: "false", None: "none"}[value]
    return f"{value:g}" if isinstance(value, float) else str(list(value) if isinstance(value, tuple) else value)
