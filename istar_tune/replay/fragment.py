"""The replay's advice as a search-space fragment (the ``search:`` and ``scheduler:`` keys, and the ``concurrency``
the asynchronous schedulers were replayed with), which ``istar-tune search SPACE --strategy-from EXPERIMENT`` (or a
file holding it) applies to the next search. Replayed names and settings are the search's: ``random`` and ``tpe``
with ``k`` configurations are ``search.algorithm`` with ``num_samples: k`` (each group's grid values then searched
as choices); ``asha``, ``hyperband`` and ``median`` with ``grace``, ``eta`` and ``workers`` are ``scheduler.type``
with ``grace_period``, ``reduction_factor`` and the group's ``concurrency``, over the grid; ``conformal`` with
``alpha`` is ``scheduler.alpha`` too."""

from __future__ import annotations

from typing import Any

from istar_tune.replay.summary import SHORT, Advice

KEEP_GRID: dict[str, Any] = {"search": {"algorithm": "grid", "num_samples": 1}, "scheduler": {"type": "none"}}
"""The fragment of "keep the grid"."""


def parameters(setting: str) -> dict[str, float]:
    """``grace=1 eta=2 workers=4`` → ``{"grace": 1, "eta": 2, "workers": 4}`` (whole numbers as ints)."""
    found = {}
    for part in setting.split():
        key, _, value = part.partition("=")
        number = float(value)
        found[key] = int(number) if number.is_integer() else number
    return found


def fragment(scheduler: str, setting: str) -> dict[str, Any]:
    """The search-space keys that run the replayed ``scheduler`` with ``setting`` (a row of the replay table)."""
    values = parameters(setting)
    if scheduler in ("random", "tpe"):
        return {"search": {"algorithm": scheduler, "num_samples": values["k"]}, "scheduler": {"type": "none"}}
    stopping: dict[str, Any] = {"type": scheduler}
    stopping.update({key: values[short] for key, short in SHORT.items() if short in values})
    return {"search": {"algorithm": "grid", "num_samples": 1}, "scheduler": stopping,
            "concurrency": values["workers"]}


def advised_fragment(found: Advice) -> dict[str, Any] | None:
    """The fragment of a decided recommendation: its setting, or the grid's; ``None`` when it is undecided (or
    nothing was replayed), which the next search cannot act on."""
    if found.kind == "setting":
        return fragment(found.scheduler, found.setting)
    if found.kind == "grid":
        return KEEP_GRID
    return None
