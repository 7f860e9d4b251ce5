"""Typed, validated configuration of one training run.

:class:`Hyperparameters` are what a search samples; :class:`RunSettings` are how a run is executed (data, output,
precision, ...). Both are frozen dataclasses built from plain dicts (YAML, CLI flags, a Ray trial's config) by
:func:`from_dict`, which rejects unknown keys and wrong types and reports every problem at once.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from istar_tune.errors import ConfigError, unknown_keys
from istar_tune.methods import METHODS, SHRINKAGE_TOKENS, get_method
from istar_tune.recipes import RECIPES
from istar_tune.step_modes import STEP_MODES, get_step_mode
from istar_tune.tasks import EXTRACTIVE_QA, Task, get_task, is_shipped
from istar_tune.yamlfile import MAX_YAML_BYTES, MAX_YAML_NODES, coerce_value, load_yaml  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class Hyperparameters:
    """What a search samples: one point of a search space."""

    model: str = "minilm"
    """Short name (bert, albert, distilbert, roberta-large, minilm, tiny-bert), Hugging Face hub id or local path."""
    task: str = "sst2"
    """A shipped task (sst2, qnli, rte, mrpc, qqp, cola, stsb, sst5, squad) or a task definition file (.yaml)."""
    method: str = "base"
    """base, cosreg, istar or isolayer."""
    learning_rate: float = 3e-5
    """AdamW learning rate (recipe modern: the peak of the linear schedule; paper: constant)."""
    batch_size: int = 32
    """Examples per forward pass (the effective batch is ``batch_size × grad_accum``)."""
    epochs: int = 3
    """Training epochs (IsoLayer: epochs of its first, Base-like stage)."""
    lam: float | None = None
    """Penalty weight λ (I-STAR: λ < 0 decreases isotropy); ``None`` uses the method's default."""
    zeta: float = 0.2
    """I-STAR shrinkage ζ ∈ [0, 1]: Σ_ζ = (1 − ζ)·Σ_X + ζ·Σ_S."""
    seed: int = 42
    """Seed of model initialisation, dropout and data order."""
    grad_accum: int = 2
    """Gradient accumulation steps (the paper uses 2)."""
    warmup_ratio: float = 0.1
    """Share of optimizer steps spent warming the learning rate up linearly from 0 (recipe modern)."""
    weight_decay: float = 0.01
    """AdamW weight decay, not applied to biases and LayerNorm weights (recipe modern; paper: 0)."""
    layer: int | None = None
    """I-STAR on one hidden layer (1-based, negative from the last) instead of the union of all layers; the eval
    IsoScore* is then of that layer too."""
    include_padding: bool = False
    """Feed padding positions into the I-STAR/CosReg point cloud, as the released code does."""
    alpha: float = 0.5
    """IsoLayer: weight of the task loss in α·L1 + (1 − α)·L2."""
    isolayer_learning_rate: float = 1e-2
    """IsoLayer: learning rate of the inserted d × d layer in stage 2 (1e-3 barely moves MiniLM's space)."""
    isolayer_epochs: int = 1
    """IsoLayer: epochs of stage 2."""

    @property
    def penalty_weight(self) -> float:
        return get_method(self.method).default_lambda if self.lam is None else float(self.lam)


@dataclass(frozen=True)
class RunSettings:
    """How a run is executed; never searched."""

    data_dir: str | None = None
    """Folder in the GLUE layout (in a search space: relative to the space's file); ``None`` uses $GLUE_DIR, then the
    Hugging Face hub."""
    output_dir: str | None = None
    """Where metrics.json, config.yaml and the best checkpoint go (``None``: keep nothing on disk)."""
    max_train_samples: int | None = None
    """Use only the first N training examples."""
    max_eval_samples: int | None = None
    """Use only the first N validation examples."""
    max_length: int = 128
    """Maximum tokens per input (longer inputs are truncated; SQuAD contexts are split into windows)."""
    eval_batch_size: int = 64
    """Examples per forward pass in evaluation and in the Σ_S pass."""
    shrinkage_tokens: int = SHRINKAGE_TOKENS
    """Token budget of the Σ_S estimate, refreshed at the start of every epoch."""
    eval_zeta: float = 0.2
    """ζ of the reported eval IsoScore* (the paper's Figure 3 uses 0.2)."""
    star_sigma: str = "pass"
    """Where a method without Σ_S in its loss (Base, CosReg, IsoLayer's first stage) takes its eval IsoScore*'s Σ_S:
    pass (a pass over up to ``shrinkage_tokens`` training tokens after the epoch, as the release) or training (the
    epoch's training pass: no extra pass, but a changing model, dropout on; measured in benchmarks/README.md)."""
    isoscore_star_every_epoch: bool = False
    """Measure the eval IsoScore* after every epoch for Base, CosReg and IsoLayer's first stage; by default only
    where it is used: each configuration's last epoch, or with ``holdout`` each epoch with a new best held-out metric
    (I-STAR measures it every epoch: its loss needs Σ_S)."""
    precision: str = "auto"
    """auto (bf16 on CUDA when supported, else fp16 with a scaler; fp32 on CPU), fp32, fp16 or bf16."""
    device: str = "auto"
    """auto (CUDA when available), cpu, cuda or cuda:N."""
    attn_implementation: str = "sdpa"
    """The encoder's attention kernel, as transformers names it: sdpa (PyTorch's scaled_dot_product_attention, fused
    kernels on CUDA: flash or memory-efficient, never cuDNN's, which is slow at each new sequence length; what
    transformers chose for the paper's models before this setting existed) or eager (the model's own matmul, softmax,
    matmul; keeps the attention scores: more memory on CUDA). The two differ in the last bits of every result, so
    `table` (every kind, the seeds stage's comparison too) refuses to mix them unless given --mix-exactness."""
    matmul_precision: str = "highest"
    """float32 matrix products (a fp32 run's layers, and I-STAR's Gram matrix, which autocast leaves in float32):
    highest (true float32, torch's default) or high (TF32 on Ampere and later GPUs: faster, a 10-bit mantissa; the same
    as highest on CPU). Recorded like attn_implementation, and refused in one table with the other value."""
    length_bucket: int = 0
    """Pad each batch to the next multiple of this many tokens, a divisor of max_length (0: to its longest input): a
    run meets max_length / length_bucket shapes at most, as a compiled or graph-captured GPU step needs. The same data,
    labels and, for one model, metrics up to float effects (padding is masked); dropout draws over the padded shape,
    so training differs: recorded like attn_implementation, and refused in one table with another value."""
    step_mode: str = "eager"
    """How a training step runs: eager (PyTorch op by op), graphs (CUDA only: forward, loss and backward replayed as
    one CUDA graph per batch shape, the optimizer as in eager; eager's kernels, so eager's numbers bit for bit; needs
    length_bucket, not fp16 nor star_sigma training; IsoLayer's second stage stays eager; not yet run on a GPU by
    this project's device check: see docs/cluster.md) or compile (the encoder through torch.compile, mode
    reduce-overhead on CUDA: fewer kernel launches; its first steps and each new shape compile, tens of seconds on a
    CPU). Compiled, dropout draws other masks (the compiler's own random numbers) and fused kernels reorder float
    sums: a run follows another random path, its numbers near eager's as another draw's are (tiny-bert, one epoch:
    losses within 0.3 %, eval IsoScore within 1e-5), so it is recorded like attn_implementation and refused in one
    table with the other value (graphs too, until a GPU has shown it equal)."""
    threads: int | None = None
    """CPU threads torch computes with (``None``: torch's default, every core). Float sums differ with the count (an
    export retrained on 2 threads gave 0.4625 where its 1-thread trial gave 0.4600): a search records its trials'
    count (``resources.cpu``, Ray's ``OMP_NUM_THREADS`` for them), and ``train --config`` of an export uses it."""
    deterministic: bool = False
    """Torch's deterministic algorithms (and cuBLAS's deterministic workspace): a GPU run then repeats bit for bit, so
    shared epochs, resumes and Σ_S computed once are as exact on CUDA as on CPU (where they always are); slower, and
    an operation without a deterministic kernel fails the trial with torch's error."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (0 disables; recipe paper does not clip)."""
    init_checkpoint: str | None = None
    """IsoLayer: start stage 2 from this fine-tuned checkpoint folder instead of training stage 1."""
    save_checkpoint: bool = True
    """Keep the best epoch's model and tokenizer in ``output_dir/best-checkpoint``."""
    progress: bool = True
    """Show progress bars."""
    heartbeat_s: float = 60.0
    """A search trial's progress line (batches done, rate, time left) every so many seconds of an epoch (0: none)."""
    recipe: str = "modern"
    """The training recipe: modern (AdamW with weight decay, linear warm-up and decay, clipping at max_grad_norm,
    bf16 on CUDA when supported, SQuAD windows of max_length) or paper (the I-STAR release: AdamW without weight
    decay, a constant learning rate, no clipping, fp16 with a gradient scaler on CUDA, SQuAD windows of 384 tokens
    with stride 128)."""
    holdout: float | None = None
    """Share of the training data held out, by a seeded random split, to choose each stage's scored epoch: the epoch
    whose held-out task metric is best is the one scored on the validation set, reported as ``scored_<metric>`` and
    kept (IsoLayer's paper: 0.3). ``None``: train on all of it and score the last epoch."""
    holdout_seed: int | None = None
    """Seed of the held-out split (``None``: the run's seed)."""
    patience: int | None = None
    """With ``holdout``: end a stage after this many epochs without a better held-out metric (``None``: train every
    epoch)."""
    checkpoint: str = "state"
    """What a search trial checkpoints: state (the full resumable state every epoch, the newest
    ``checkpoints_to_keep`` kept), resume (the full state while the trial runs, only its records once it finished: a
    few KB a trial), weights (as resume, plus the final model weights) or none (a retried trial starts over)."""


MAX_SEED = 2**32 - 1
MIN_MAX_LENGTH = 8
"""The shortest ``max_length`` accepted: [CLS], [SEP] (twice for a pair) and a few tokens of text."""
PRECISIONS = ("auto", "fp32", "fp16", "bf16")
CHECKPOINT_MODES = ("state", "resume", "weights", "none")
STAR_SIGMAS = ("pass", "training")
ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")
EAGER_ATTENTION = "eager"
"""The attention that runs its dropout as a plain ``torch.nn.functional.dropout`` call (what a fused trial needs)."""
MATMUL_PRECISIONS = ("highest", "high")
EXACTNESS_SETTINGS = {"attn_implementation": "sdpa", "matmul_precision": "highest", "length_bucket": "0",
                      "step_mode": "eager", "fused": "no"}
"""The settings that change a run's numbers without changing what it trains, with the value a run recorded before
the setting existed had: runs that differ in one of them are not compared in one table unless asked."""


T = typing.TypeVar("T")


def _unknown(source: str, keys: list[str], known) -> str:
    """One problem naming every unknown key, a close known one for a typo, and the known ones."""
    where, text = unknown_keys(keys, known)
    return f"{source}: {where}: {text}"


def from_dict(cls: type[T], values: dict[str, Any], *, source: str = "config") -> T:
    """Build ``cls`` from ``values``: unknown keys, wrong types and bad ranges are all reported together."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    problems = [_unknown(source, [key for key in values if key not in known], known)] if set(values) - known else []
    kwargs = {}
    for key, value in values.items():
        if key in known:
            coerced, problem = coerce_value(key, hints[key], value)
            if problem:
                problems.append(f"{source}: {problem}")
            else:
                kwargs[key] = coerced
    if not problems:
        instance = cls(**kwargs)
        problems = [f"{source}: {p}" for p in _range_problems(instance)]
        if not problems:
            return instance
    raise ConfigError(problems)


def _range_problems(obj: Any) -> list[str]:
    if isinstance(obj, Hyperparameters):
        return _hyperparameter_problems(obj)
    if isinstance(obj, RunSettings):
        return _settings_problems(obj)
    return []


def task_problems(method: str, task: Task) -> list[str]:
    """What does not fit between a method and the task it trains (the task itself, read from wherever it came)."""
    known = METHODS.get(method)
    if known is not None and known.second_stage and task.problem_type == EXTRACTIVE_QA:
        return [f"method {method} applies to sentence-level tasks; {task.display_name} is extractive QA"]
    return []


def _positive(problems: list[str], name: str, value, strict: bool = True) -> None:
    if value is not None and (value <= 0 if strict else value < 0):
        problems.append(f"{name} must be {'positive' if strict else 'non-negative'}, got {value}")


def _hyperparameter_problems(obj: Hyperparameters) -> list[str]:
    problems: list[str] = []
    positive = functools.partial(_positive, problems)
    if is_shipped(obj.task):  # another task is checked where its definition is read (task_problems)
        problems += task_problems(obj.method, get_task(obj.task))
    elif not str(obj.task).strip():
        problems.append("task must not be empty")
    if obj.method not in METHODS:
        problems.append(f"method {obj.method!r} is unknown: choose one of {', '.join(METHODS)}")
    if not obj.model:
        problems.append("model must not be empty")
    for name in ("learning_rate", "batch_size", "epochs", "grad_accum", "isolayer_learning_rate",
                 "isolayer_epochs"):
        positive(name, getattr(obj, name))
    positive("weight_decay", obj.weight_decay, strict=False)
    for name in ("zeta", "alpha"):
        value = getattr(obj, name)
        if not 0.0 <= value <= 1.0:
            problems.append(f"{name} must lie in [0, 1], got {value}")
    if not 0.0 <= obj.warmup_ratio < 1.0:
        problems.append(f"warmup_ratio must lie in [0, 1), got {obj.warmup_ratio}")
    if obj.layer == 0:
        problems.append("layer is 1-based (1 = first transformer layer, -1 = last), got 0")
    if not 0 <= obj.seed <= MAX_SEED:
        problems.append(f"seed must lie in [0, {MAX_SEED}] (what NumPy and CUDA accept), got {obj.seed}")
    return problems


def _settings_problems(obj: RunSettings) -> list[str]:
    problems: list[str] = []
    positive = functools.partial(_positive, problems)
    for name in ("max_train_samples", "max_eval_samples", "max_length", "eval_batch_size", "shrinkage_tokens"):
        positive(name, getattr(obj, name))
    if 0 < obj.max_length < MIN_MAX_LENGTH:
        problems.append(f"max_length must be at least {MIN_MAX_LENGTH} tokens (the special tokens take 2 or 3 of "
                        f"them), got {obj.max_length}")
    positive("max_grad_norm", obj.max_grad_norm, strict=False)
    positive("heartbeat_s", obj.heartbeat_s, strict=False)
    if not 0.0 <= obj.eval_zeta <= 1.0:
        problems.append(f"eval_zeta must lie in [0, 1], got {obj.eval_zeta}")
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", obj.device):
        problems.append(f"device must be auto, cpu, cuda, cuda:N or mps, got {obj.device!r}")
    if obj.length_bucket < 0 or (obj.length_bucket and obj.max_length % obj.length_bucket):
        problems.append(f"length_bucket must be 0 (pad to each batch's longest) or a divisor of max_length "
                        f"({obj.max_length}), so a padded batch never outgrows it; got {obj.length_bucket}")
    if obj.threads is not None and obj.threads < 1:
        problems.append(f"threads must be at least 1 (or left out: torch's default), got {obj.threads}")
    if obj.holdout_seed is not None and not 0 <= obj.holdout_seed <= MAX_SEED:
        problems.append(f"holdout_seed must lie in [0, {MAX_SEED}], got {obj.holdout_seed}")
    if obj.output_dir and Path(obj.output_dir).exists() and not Path(obj.output_dir).is_dir():
        problems.append(f"output_dir {obj.output_dir!r} is a file, not a folder")
    if obj.checkpoint not in CHECKPOINT_MODES:
        problems.append(f"checkpoint must be one of {', '.join(CHECKPOINT_MODES)}, got {obj.checkpoint!r}")
    if obj.precision not in PRECISIONS:
        problems.append(f"precision must be one of {', '.join(PRECISIONS)}, got {obj.precision!r}")
    if obj.attn_implementation not in ATTENTION_IMPLEMENTATIONS:
        problems.append(f"attn_implementation must be one of {', '.join(ATTENTION_IMPLEMENTATIONS)}, got "
                        f"{obj.attn_implementation!r}")
    if obj.step_mode not in STEP_MODES:
        problems.append(f"step_mode must be one of {', '.join(STEP_MODES)}, got {obj.step_mode!r}")
    else:
        problems += get_step_mode(obj.step_mode).setting_problems(obj.length_bucket, obj.star_sigma)
    if obj.matmul_precision not in MATMUL_PRECISIONS:
        problems.append(f"matmul_precision must be one of {', '.join(MATMUL_PRECISIONS)}, got "
                        f"{obj.matmul_precision!r}")
    if obj.star_sigma not in STAR_SIGMAS:
        problems.append(f"star_sigma must be one of {', '.join(STAR_SIGMAS)}, got {obj.star_sigma!r}")
    if obj.recipe not in RECIPES:
        problems.append(f"recipe must be one of {', '.join(RECIPES)}, got {obj.recipe!r}")
    if obj.holdout is not None and not 0.0 < obj.holdout < 1.0:
        problems.append(f"holdout must lie strictly between 0 and 1 (a share of the training data), got "
                        f"{obj.holdout}")
    positive("patience", obj.patience)
    if obj.patience is not None and obj.holdout is None:
        problems.append(f"patience {obj.patience} needs a holdout share to watch: set holdout (e.g. 0.3)")
    if obj.shrinkage_tokens is not None and obj.shrinkage_tokens < 2:
        problems.append(f"shrinkage_tokens must be at least 2, got {obj.shrinkage_tokens}")
    return problems


def validate(obj: Any, *, source: str = "config") -> None:
    """Raise :class:`ConfigError` listing every range problem of a built config object."""
    problems = _range_problems(obj)
    if problems:
        raise ConfigError([f"{source}: {p}" for p in problems])


HYPERPARAMETER_KEYS = frozenset(f.name for f in fields(Hyperparameters))
SETTING_KEYS = frozenset(f.name for f in fields(RunSettings))


def split_config(values: dict[str, Any], *, source: str = "config") -> tuple[Hyperparameters, RunSettings]:
    """Split one flat dict (a train YAML, CLI flags) into validated hyperparameters and run settings."""
    problems: list[str] = []
    unknown = [k for k in values if k not in HYPERPARAMETER_KEYS | SETTING_KEYS]
    problems += [_unknown(source, unknown, HYPERPARAMETER_KEYS | SETTING_KEYS)] if unknown else []
    built: list[Any] = []
    for cls, keys in ((Hyperparameters, HYPERPARAMETER_KEYS), (RunSettings, SETTING_KEYS)):
        try:
            built.append(from_dict(cls, {k: v for k, v in values.items() if k in keys}, source=source))
        except ConfigError as err:
            problems += err.problems
    if problems:
        raise ConfigError(problems)
    return built[0], built[1]


def as_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def group_key(config: Mapping[str, Any]) -> str:
    """``model/task/method`` of a trial's configuration (or of any mapping with those keys): the group its trials are
    compared within, and the value of its MLflow runs' group tag."""
    return f"{config.get('model')}/{config.get('task')}/{config.get('method')}"


def trial_epochs(config: Mapping[str, Any]) -> int:
    """How many epochs a trial of ``config`` reports (defaults filled in from ``Hyperparameters``).

    The one epoch rule: the search (ASHA's horizon), the MLflow logger (stopped early or finished) and the
    simulator all use it.
    """
    method = get_method(config.get("method", Hyperparameters.method))
    return method.trial_epochs(config.get("epochs", Hyperparameters.epochs),
                               config.get("isolayer_epochs", Hyperparameters.isolayer_epochs))


def prefix_sharing_problem(settings: RunSettings, method: str) -> str | None:
    """Why a run of ``method`` under ``settings`` is *not* the first k epochs of the same run with more epochs
    (``None`` when it is): the one rule for whether a grid's configurations differing only in ``epochs`` share a trial.
    Everything else in a run is independent of its total epochs: epoch k's data order and Σ_S's draw k are seeded by
    (seed, k), the held-out scored epoch is the best so far and ``patience`` looks only backwards."""
    if RECIPES[settings.recipe].schedule != "constant":
        return (f"recipe {settings.recipe}: the learning rate warms up and decays over all of a run's steps, so a "
                "shorter run is not the start of a longer one")
    if get_method(method).second_stage:
        return f"method {method}: its second stage starts after the last fine-tuning epoch"
    return None
