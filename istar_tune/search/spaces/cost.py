"""The cost model of a trial: what planning orders trials by, the dry run and the rehearsal wait for.

Training examples of the task × epochs ÷ a per-model, per-batch-size throughput × the method's relative step cost,
plus a fixed start-up cost per trial, an evaluation pass per epoch, and a Σ_S pass per epoch for a method whose
loss uses Σ_S (I-STAR), per completed configuration for the others (their eval IsoScore* at the scored epoch). The
throughput is an assumption written down with each model (``models.ModelSpec.throughput``) unless the user
measured it (:class:`Throughput`, tokens per second per model).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from istar_tune.config import Hyperparameters, trial_epochs
from istar_tune.errors import ConfigError
from istar_tune.methods import SHRINKAGE_TOKENS, get_method
from istar_tune.models import model_spec
from istar_tune.tasks import Task
from istar_tune.trial_config import completes, hyperparameters, trial_task

STARTUP_SECONDS = 45.0
"""Loading the model and tokenising the data, once per trial start (also after a retry)."""
EVAL_SPEEDUP = 3.0
"""Evaluation and the Σ_S pass run forward only: this many times the training throughput."""
SHRINKAGE_TOKENS_PER_EXAMPLE = 128.0


# ----------------------------------------------------------------------------------------------- cost model


@dataclass(frozen=True)
class Throughput:
    """Training tokens per second of one trial per model, measured on the user's hardware (``--tokens-per-second``,
    or ``--throughput`` files written by ``istar-tune calibrate``): a batch of inputs padded to ``max_length`` counts
    ``batch × max_length`` tokens, so examples per second are the tokens per second ÷ ``max_length`` (an upper bound
    on the time: batches are padded only to their longest input). ``packing``: trials sharing one GPU, which the rates
    are for; ``per_packing``: a calibrated model's per-trial rate at each packing it measured."""

    tokens_per_second: dict[str, float] = field(default_factory=dict)
    max_length: int = 128
    packing: int = 1
    per_packing: dict[str, dict[int, float]] = field(default_factory=dict)
    recommended: dict[str, int] = field(default_factory=dict)
    """A calibrated model's packing with the most tokens per second in total."""
    bundles: dict[str, dict[tuple[int, int], float]] = field(default_factory=dict)
    """A calibrated model's fused trials (``calibrate --fuse``): by (members, packing), one trial's tokens per second
    of all its members' configurations."""

    @classmethod
    def parse(cls, values: list[str], models: tuple[str, ...], max_length: int) -> Throughput:
        """``--tokens-per-second bert=52000 ...``: one measured rate per model of the search (one trial a GPU)."""
        rates = {}
        for value in values:
            model, _, text = value.partition("=")
            try:
                rate = float(text)
            except ValueError:
                rate = math.nan
            if not model or not rate > 0 or math.isinf(rate):
                raise ConfigError(f"--tokens-per-second: {value!r} is not MODEL=TOKENS_PER_SECOND (e.g. bert=52000, "
                                  "measured with `istar-tune calibrate` on one GPU)")
            rates[model] = rate
        _all_models(rates, models, "--tokens-per-second")
        return cls(rates, max_length)

    @classmethod
    def read(cls, paths: list[str], models: tuple[str, ...], max_length: int, packing: int = 1) -> Throughput:
        """``--throughput FILE ...``: calibrate's files, one per model of the search; the rates at ``packing``."""
        from istar_tune.yamlfile import load_yaml

        per_packing, recommended, bundles = {}, {}, {}
        for path in paths:
            data = load_yaml(path)
            try:
                model, measured_at = str(data["model"]), int(data["max_length"])
                rates, fused = {}, {}
                for row in data["measurements"]:
                    if row.get("tokens_per_second_per_trial"):  # a packing that failed has none
                        k, size = int(row["packing"]), int(row.get("fuse", 1))
                        found = rates if size == 1 else fused
                        key = k if size == 1 else (size, k)
                        found[key] = max(found.get(key, 0.0), float(row["tokens_per_second_per_trial"]))
                best = int(data["recommended"]["packing"]) if data.get("recommended") else min(rates)
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                raise ConfigError(f"--throughput {path}: not a file written by `istar-tune calibrate` "
                                  f"({type(err).__name__}: {err}): run calibrate again") from None
            if not rates:
                only = " (only fused bundles were: measure --fuse 1 too)" if fused else ""
                raise ConfigError(f"--throughput {path}: no packing of {model} was measured{only}: run calibrate again")
            # Examples per second are what the cost model needs: rates measured at another max_length are rescaled.
            per_packing[model] = {k: rate / measured_at * max_length for k, rate in rates.items()}
            bundles[model] = {key: rate / measured_at * max_length for key, rate in fused.items()}
            recommended[model] = best
        _all_models(per_packing, models, "--throughput")
        return cls({}, max_length, per_packing=per_packing, recommended=recommended, bundles=bundles).at(packing)

    def bundle_rate(self, model: str, members: int, packing: int) -> float | None:
        """Tokens per second of the configurations of one fused trial of ``members`` when ``packing`` such trials
        share a GPU, where calibrate measured that (``None``: not measured; no bundle's rate is guessed)."""
        return self.bundles.get(model, {}).get((members, packing))

    def at(self, packing: int) -> Throughput:
        """The same measurements, the rates of one trial when ``packing`` trials share a GPU."""
        models = set(self.tokens_per_second) | set(self.per_packing)
        return replace(self, packing=packing, tokens_per_second={m: self.rate(m, packing) for m in models})

    def rate(self, model: str, packing: int) -> float:
        """Tokens per second of one of ``packing`` trials sharing a GPU: measured, else the total of the largest
        measured packing below it shared among them (no further gain assumed)."""
        measured = self.per_packing.get(model) or {self.packing: self.tokens_per_second[model]}
        if packing in measured:
            return measured[packing]
        below = max((k for k in measured if k <= packing), default=min(measured))
        return measured[below] * below / packing

    def examples_per_second(self, model: str) -> float | None:
        rate = self.tokens_per_second.get(model)
        return None if rate is None else rate / self.max_length


def _all_models(rates: Mapping[str, Any], models: tuple[str, ...], flag: str) -> None:
    missing = sorted(set(models) - set(rates))
    if missing:
        raise ConfigError(f"{flag}: no rate for {', '.join(missing)}: give one per model of the search")


def packing_of(gpu: float) -> int:
    """Trials sharing one GPU at ``resources.gpu`` (1 at a whole GPU or more, or none)."""
    return max(1, math.floor(1 / gpu + 1e-9)) if 0 < gpu < 1 else 1


def gpu_share(packing: int) -> float:
    """``resources.gpu`` for ``packing`` trials a GPU: ``1/packing`` rounded down to a thousandth, so Ray fits that
    many (``round(1/6, 3)`` is 0.167, and six of those exceed one GPU). The inverse of :func:`packing_of`."""
    return math.floor(1000 / packing) / 1000


def by_cores(cores_per_gpu: float, cpu: float) -> int:
    """Trials a GPU's share of a node's cores holds at ``resources.cpu`` each (a trial's step is host-bound: it needs
    at least a core of its own)."""
    return max(0, math.floor(cores_per_gpu / max(cpu, 1.0) + 1e-9))


def packing_advice(packing: int, by_memory: int | None, cores: int | None, cores_per_gpu: float | None = None,
                   cpu: float = 1.0) -> str:
    """How many trials a GPU holds at a packing of ``packing``: by memory (``by_memory`` trials fit) and by the
    node's cores per GPU (``cores`` trials get a core each), and which binds."""
    limits = {"memory": by_memory, "cores": cores}
    known = {what: n for what, n in limits.items() if n is not None}
    said = []
    if by_memory is not None:
        said.append(f"memory holds {by_memory}")
    if cores is not None:
        said.append(f"cores hold {cores} ({cores_per_gpu:g} cores per GPU at resources.cpu {cpu:g})")
    if not known:
        return f"{packing} trials a GPU (neither memory nor cores given)"
    binding = min(known, key=lambda what: known[what])
    runs = min(packing, known[binding])
    head = f"{packing} trials a GPU asked; {', '.join(said)}"
    if known[binding] >= packing:
        return f"{head}: all {packing} fit"
    return (f"{head}: the {binding} bind, so {runs} run a GPU"
            + (" (a trial's step is host-bound: each needs a core of its own)" if binding == "cores" else ""))


def throughput(model: str, batch_size: int, measured: Throughput | None = None) -> float:
    """Training examples per second: measured (``measured``), else the model's assumed rate at batch 32, lower for
    smaller batches."""
    rate = measured.examples_per_second(model) if measured is not None else None
    if rate is not None:
        return rate
    base = model_spec(model).throughput
    return base * (batch_size / (batch_size + 16.0)) / (32.0 / 48.0)


def largest_batch_size(group, fixed: Mapping[str, Any]) -> int:
    """The largest batch size a group trains (its peak memory): its domain's largest value, else the value fixed for
    it, else the default."""
    domain = group.domains.get("batch_size")
    if domain is None:
        return int(fixed.get("batch_size", Hyperparameters.batch_size))
    return int(max(domain.values))


def trial_memory(model: str, task: Task, method: str, batch_size: int, settings):
    """One trial's peak GPU memory (:class:`istar_tune.training.memory.MemoryEstimate`) at ``settings``'
    ``max_length``, ``eval_batch_size`` and precision (``auto`` is half precision on CUDA), from the model built on
    ``meta`` (its config only)."""
    from istar_tune.training.memory import estimate_memory

    return estimate_memory(_meta_model(model, task), method, batch_size, settings.max_length,
                           settings.eval_batch_size, half_precision=settings.precision != "fp32", cuda=True,
                           attn_implementation=settings.attn_implementation)


def group_memory(item, settings) -> tuple[str, Any]:
    """One trial of a planned group at its largest batch size: what its memory depends on, in words
    (:func:`istar_tune.training.memory.trial_shape`), and its :func:`trial_memory`."""
    from istar_tune.training.memory import trial_shape

    group = item.group
    batch = largest_batch_size(group, item.param_space)
    estimate = trial_memory(group.model, group.task_object, group.method, batch, settings)
    members = getattr(item, "bundle", 1)  # a fused group: its largest bundle's members, each its own weights
    method = group.method if members == 1 else f"{group.method} (fused trial of {members})"
    return (trial_shape(group.model, group.task, method, batch, settings.max_length),
            estimate if members == 1 else estimate.bundled(members))


_META_MODELS: dict[tuple, Any] = {}


def _meta_model(model: str, task: Task):
    """The model on ``meta`` with the head of ``task`` (its problem type and classes), built once per process."""
    from istar_tune.models import meta_model

    key = (model, task.problem_type, task.num_labels, task.label_names)
    if key not in _META_MODELS:
        _META_MODELS[key] = meta_model(model, task)
    return _META_MODELS[key]


def typed_hyperparameters(config: Mapping[str, Any]):
    return hyperparameters(config)


def shrinkage_seconds(config: Mapping[str, Any], shrinkage_tokens: int = SHRINKAGE_TOKENS,
                      measured: Throughput | None = None, task: Task | None = None) -> float:
    """Modelled seconds of one Σ_S pass of ``config`` (``task``: as :func:`epoch_seconds`)."""
    hp = typed_hyperparameters(config)
    task, rate = task or trial_task(dict(config)), throughput(hp.model, hp.batch_size, measured)
    return min(shrinkage_tokens / SHRINKAGE_TOKENS_PER_EXAMPLE, task.train_examples) / (rate * EVAL_SPEEDUP)


def epoch_seconds(config: Mapping[str, Any], shrinkage_tokens: int = SHRINKAGE_TOKENS,
                  measured: Throughput | None = None, task: Task | None = None) -> float:
    """Modelled seconds of one training epoch of ``config``, its evaluation and (I-STAR) its Σ_S pass; ``task``:
    the configuration's task where the caller holds it (a replay's, read from its runs), else the configuration's."""
    hp = typed_hyperparameters(config)
    task, method = task or trial_task(dict(config)), get_method(hp.method)
    rate = throughput(hp.model, hp.batch_size, measured)
    seconds = task.train_examples / rate * method.relative_step_cost
    seconds += task.eval_examples / (rate * EVAL_SPEEDUP)
    if method.uses_zeta:
        seconds += shrinkage_seconds(config, shrinkage_tokens, measured, task)
    return seconds


def training_seconds(config: Mapping[str, Any], measured: Throughput | None = None) -> float:
    """Modelled seconds of the training passes alone of a trial of ``config`` (no start-up, evaluation or Σ_S)."""
    hp = typed_hyperparameters(config)
    rate, task = throughput(hp.model, hp.batch_size, measured), trial_task(dict(config))
    return trial_epochs(config) * task.train_examples / rate * get_method(hp.method).relative_step_cost


def bundle_seconds(member_configs: list[Mapping[str, Any]], rate: float, measured: Throughput,
                   shrinkage_tokens: int = SHRINKAGE_TOKENS) -> float:
    """Modelled seconds of a fused trial whose bundle calibrate measured at ``rate`` (tokens per second of all its
    members' configurations, :meth:`Throughput.bundle_rate`): one start-up; each member's training passes at that
    rate, one after another in the bundle's time (a bundle's step is every member's step); each member's evaluations
    and Σ_S passes at one trial's rate (``measured``: members are evaluated one after another)."""
    bundle = Throughput({str(c.get("model")): rate for c in member_configs}, measured.max_length)
    return STARTUP_SECONDS + sum(trial_seconds(c, shrinkage_tokens, measured) - STARTUP_SECONDS
                                 - training_seconds(c, measured) + training_seconds(c, bundle)
                                 for c in member_configs)


def trial_seconds(config: Mapping[str, Any], shrinkage_tokens: int = SHRINKAGE_TOKENS,
                  measured: Throughput | None = None) -> float:
    """Modelled seconds of a whole trial on one GPU: start-up plus every epoch it reports (and, for a method
    without Σ_S in its loss, a Σ_S pass per configuration it completes)."""
    seconds = STARTUP_SECONDS + trial_epochs(config) * epoch_seconds(config, shrinkage_tokens, measured)
    if not get_method(config.get("method", Hyperparameters.method)).uses_zeta:
        seconds += len(completes(dict(config))) * shrinkage_seconds(config, shrinkage_tokens, measured)
    return seconds
