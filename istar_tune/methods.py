"""The four training methods: what each penalises, its defaults, and how many epochs a trial of it runs.

Everything method-specific lives in the :data:`METHODS` table, as ``tasks.py`` does for tasks; no other module
names a method. Pure Python: reading it loads neither torch nor Ray.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from istar_tune.errors import ConfigError

SHRINKAGE_TOKENS = 250_000
"""The I-STAR paper's budget of training tokens for the Σ_S estimate (the one place this number is written)."""
NO_PENALTY = "none"
COSINE = "cosine"
ISOSCORE = "isoscore"


@dataclass(frozen=True)
class Method:
    """One training method."""

    name: str
    """Name used on the command line, in search spaces and in MLflow (``istar``)."""
    label: str
    """Name as the papers write it (``I-STAR``), used in tables and plots."""
    penalty: str
    """What is added to the task loss: ``none``, ``cosine`` (CosReg's mean pairwise cosine similarity of the last
    layer's tokens) or ``isoscore`` (I-STAR's 1 − IsoScore* of the all-layer token cloud)."""
    default_lambda: float = 0.0
    """λ when a configuration gives none."""
    uses_zeta: bool = False
    """Whether the shrinkage ζ (and so Σ_S) enters the loss."""
    second_stage: bool = False
    """Whether a second stage (IsoLayer's inserted layer) follows the fine-tuning epochs."""
    seeds_summary: str = "mean"
    """How its paper summarises the seed runs: ``mean`` (I-STAR's Table 1) or ``median`` (IsoLayer's Table 3, with
    the explained variance of the run with the median EV_1)."""
    relative_step_cost: float = 1.0
    """Training step time relative to Base (benchmarks/bench_step.py measured 1.105 for I-STAR); used to plan and
    to simulate trials."""

    @property
    def uses_lambda(self) -> bool:
        return self.penalty != NO_PENALTY

    def trial_epochs(self, epochs: int, second_stage_epochs: int) -> int:
        """Epochs a trial reports: the fine-tuning epochs, plus the second stage's where there is one."""
        return int(epochs) + (int(second_stage_epochs) if self.second_stage else 0)


METHODS: dict[str, Method] = {
    method.name: method
    for method in (
        Method("base", "Base", NO_PENALTY),
        # CosReg's λ = 1 as Gao et al. use it.
        Method("cosreg", "CosReg", COSINE, default_lambda=1.0, relative_step_cost=1.02),
        # I-STAR's most frequent optimum λ = −1 (paper, Table 2).
        Method("istar", "I-STAR", ISOSCORE, default_lambda=-1.0, uses_zeta=True, relative_step_cost=1.105),
        Method("isolayer", "IsoLayer", NO_PENALTY, second_stage=True, seeds_summary="median"),
    )
}

PENALISED = tuple(name for name, method in METHODS.items() if method.uses_lambda)
"""Methods whose loss has a λ-weighted penalty."""
BASELINE = "base"
"""Plain fine-tuning: what the other methods are compared with (listed first; the significance test's baseline)."""
PAPER_METHOD = "istar"
"""The I-STAR paper's method: the one its Table 2 (best λ | ζ) and its significance marks are about."""


def get_method(name: str) -> Method:
    """The method called ``name``; an error listing the known ones otherwise."""
    method = METHODS.get(str(name).strip().lower())
    if method is None:
        raise ConfigError(f"unknown method {name!r}: choose one of {', '.join(METHODS)}")
    return method


def uses_lambda(name: str) -> bool:
    method = METHODS.get(name)
    return bool(method and method.uses_lambda)


def uses_zeta(name: str) -> bool:
    method = METHODS.get(name)
    return bool(method and method.uses_zeta)


def has_second_stage(name: str) -> bool:
    method = METHODS.get(name)
    return bool(method and method.second_stage)


def unused_hyperparameters(name: str) -> frozenset[str]:
    """The hyperparameters the method ``name`` never reads (its MLflow runs leave them out, so a Base run cannot be
    taken for λ = 0): λ without a penalty, ζ without I-STAR's shrinkage, the inserted layer's without a second stage.
    (``layer`` and ``include_padding`` choose the token cloud every method's eval IsoScore* is measured on.)"""
    method = get_method(name)
    unused = set()
    if not method.uses_lambda:
        unused.add("lam")
    if not method.uses_zeta:
        unused.add("zeta")
    if not method.second_stage:
        unused |= {"alpha", "isolayer_learning_rate", "isolayer_epochs"}
    return frozenset(unused)


def refuse_unused(method: str, given: Iterable[str], where: str) -> None:
    """Refuse hyperparameters ``given`` for ``method`` that it never reads (a value that would be dropped without a
    word), naming the methods that read each."""
    if method not in METHODS:
        return  # the unknown method is reported where methods are checked
    ignored = sorted(set(given) & unused_hyperparameters(method))
    if ignored:
        readers = {key: [m for m in METHODS if key not in unused_hyperparameters(m)] for key in ignored}
        raise ConfigError(f"{where}: method {method} does not read {', '.join(ignored)} ("
                          + "; ".join(f"{k} applies to {', '.join(r)}" for k, r in readers.items())
                          + "): drop it, or choose a method that reads it")


def label(name: str) -> str:
    """The paper's name of a method (the name itself for an unknown one)."""
    method = METHODS.get(name)
    return method.label if method else name
