"""(i) The four configurations of the second call's search (``benchmarks/device/search.py``) trained one by one, in a
process of their own, written to ``--search-reference`` for that call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..common import Check, failure, in_own_process
from ..search import reference

NAME = "reference"


def _reference(args, results) -> None:
    try:
        results.put({"found": reference(args.model, args.data_dir, args.search_train_samples)})
    except Exception as err:  # noqa: BLE001 - reported by the section
        results.put({"error": failure(err)})


def run(check: Check, args) -> dict[str, Any]:
    """In a process of its own, as each trial is: ``deterministic`` fixes cuBLAS's workspace before its first call,
    which this process's earlier sections have made."""
    answer = in_own_process(check, _reference, args)
    if "error" in answer:
        raise RuntimeError(answer["error"])
    found = answer["found"]
    path = Path(args.search_reference or (args.out / "search_reference.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(found, indent=2) + "\n")
    if path.parent != args.out:
        (args.out / "search_reference.json").write_text(path.read_text())
    return {"written_to": str(path), "configurations": {k: {"accuracy": v["accuracy"], "train_loss": v["train_loss"],
                                                            "wall_s": v["wall_s"]} for k, v in found.items()}}


def summary(r: dict[str, Any]) -> list[str]:
    lines = ["## (i) The second call's configurations, one by one", ""]
    lines += [f"- {name}: accuracy {v['accuracy']}, train loss {v['train_loss']} ({v['wall_s']} s)"
              for name, v in r["configurations"].items()]
    return lines + [""]
