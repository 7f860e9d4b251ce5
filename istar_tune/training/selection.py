"""Which epoch of a stage is scored: the last, or, with the ``holdout`` setting, the epoch of each stage
whose task metric on held-out training examples is best; its weights are put back when the stage ends (``patience``
ends it early), and every record then carries that epoch's validation measures as ``scored_<name>``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from istar_tune.metrics import HOLDOUT_PREFIX, SCORED_PREFIX
from istar_tune.training.run import Run


class Selection:
    """Which epoch of a stage is scored, and the epoch ``best_epoch`` names.

    Without ``holdout``: the last epoch is scored, and ``best`` follows the best validation metric (the best
    checkpoint, ``--scope best-epoch``). With it: ``best`` follows the best held-out metric and is the scored epoch;
    the weights of ``module`` at that epoch are kept (on the CPU) and put back by :meth:`restore` when the stage
    ends; ``patience`` epochs without a better held-out metric end the stage.
    """

    def __init__(self, run: Run, module: torch.nn.Module, start: int = 0):
        self.run = run
        self.module = module
        self.holdout = run.data.holdout is not None
        self.key = (HOLDOUT_PREFIX if self.holdout else "") + run.task.metric
        self.best: tuple[int, float] = (start, -math.inf)
        self.kept: dict[str, torch.Tensor] | None = None

    def update(self, epoch: int, record: dict[str, Any]) -> bool:
        """Note an epoch's record; True when it is the new best."""
        if not record[self.key] > self.best[1]:
            return False
        self.best = (epoch, record[self.key])
        if self.holdout:
            self.kept = {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}
        return True

    def scored(self, records: list[dict[str, Any]]) -> dict[str, float]:
        """``scored_epoch`` and ``scored_<name>`` of the scored epoch's validation measures (holdout only)."""
        chosen = next((r for r in records if r["epoch"] == self.best[0]), None)
        if not self.holdout or chosen is None:
            return {}
        # The held-out measures too: a seeds stage with ``choose_by: holdout`` ranks configurations by them.
        names = [*self.run.task.metrics,
                 *(k for k in chosen if k.startswith(("eval_isoscore", "sentence_", HOLDOUT_PREFIX)))]
        return {"scored_epoch": self.best[0], **{SCORED_PREFIX + k: chosen[k] for k in names if k in chosen}}

    def resume(self, best: tuple[int, float], kept: dict[str, torch.Tensor] | None, epoch: int) -> None:
        """Continue after ``epoch`` from a saved state: its best, and the kept weights it saved (none when the best
        epoch was ``epoch`` itself: the weights just loaded are the ones to keep)."""
        self.best = (int(best[0]), float(best[1]))
        self.kept = kept
        if self.holdout and kept is None and self.best[0] == epoch:
            self.kept = {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}

    def should_stop(self, epoch: int) -> bool:
        patience = self.run.settings.patience
        return self.holdout and patience is not None and epoch - self.best[0] >= patience

    def restore(self) -> None:
        """Put the scored epoch's weights back (holdout only)."""
        if self.holdout and self.kept is not None:
            self.module.load_state_dict(self.kept)

    def kept_unless(self, epoch: int) -> dict[str, torch.Tensor] | None:
        """The kept weights when they are not the module's current ones (for a resumable state)."""
        return self.kept if self.holdout and self.best[0] != epoch else None
