"""(e) With ``deterministic: true``: two epochs straight against one, a checkpoint, a resume and the second; a
shared-prefix trial's epoch-3 record against an unshared 3-epoch run's; the same without determinism, to size the
drift (I-STAR, recipe paper); on CUDA, ``step_mode: graphs`` against eager, bit for bit."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from ..common import Capture, Check, compare, cuda, failure, hparams, in_own_process, settings, table
from .modes import graphs_equal_eager

NAME = "determinism"
GRAPHS_ROW = "graphs_vs_eager"
"""The row of ``step_mode: graphs`` against eager (on CUDA)."""


def _variant(args, deterministic: bool, results) -> None:
    """One variant in a process of its own, as a trial is: cuBLAS's workspace is fixed at its first call, which
    ``deterministic`` must precede (``training/run.use_deterministic_algorithms``)."""
    from istar_tune.training.loop import train

    run_settings = settings(args, deterministic=deterministic, recipe="paper",
                            max_train_samples=args.train_samples_small, max_eval_samples=128)
    hp = {"method": "istar", "lam": -1.0, "batch_size": 16}
    try:
        with tempfile.TemporaryDirectory(prefix="device-check-") as tmp:
            straight = Capture(keep_epoch=1, folder=Path(tmp, "state"))
            train(hparams(args, epochs=2, **hp), run_settings, straight)
            resumed = Capture()
            train(hparams(args, epochs=2, **hp), run_settings, resumed, resume_from=Path(tmp, "state"))
        shared, alone = Capture(), Capture()
        train(hparams(args, epochs=4, **hp), run_settings, shared, completes=(3,))
        train(hparams(args, epochs=3, **hp), run_settings, alone)
        results.put({"resume": compare(straight.record(2), resumed.record(2)),
                     "shared_prefix": compare(shared.record(3), alone.record(3))})
    except Exception as err:  # noqa: BLE001 - e.g. an operation without a deterministic kernel: a finding
        results.put({"error": failure(err)})


def run(check: Check, args) -> dict[str, Any]:
    outcome = {}
    for deterministic in (True, False):
        key = "deterministic" if deterministic else "default"
        outcome[key] = in_own_process(check, _variant, args, deterministic)
        print(key, json.dumps(outcome[key]), flush=True)
    if cuda():
        outcome[GRAPHS_ROW] = in_own_process(check, graphs_equal_eager, args)
        print(GRAPHS_ROW, json.dumps(outcome[GRAPHS_ROW]), flush=True)
    else:
        check.skip("determinism: graphs = eager bit for bit", "CUDA graphs need CUDA")
    return outcome


def summary(section: dict[str, Any]) -> list[str]:
    rows = []
    for key, d in section.items():
        if key == GRAPHS_ROW:
            continue
        if "error" in d:
            rows.append({"setting": key, "resume": "failed: " + d["error"].splitlines()[0]})
            continue
        rows.append({"setting": key, "resume": d["resume"]["equal"], "shared": d["shared_prefix"]["equal"],
                     "gap": max(d["resume"]["largest_gap"], d["shared_prefix"]["largest_gap"])})
    lines = ["## (e) Determinism (I-STAR, recipe paper)", ""]
    lines += table(rows, {"setting": "setting", "resume": "resume = straight", "shared": "shared prefix = unshared",
                          "gap": "largest gap"})
    if (graphs := section.get(GRAPHS_ROW)) is not None:
        verdict = graphs.get("error") or all(e["equal"] for e in graphs["epochs"])
        lines += [f"step_mode graphs = eager bit for bit (I-STAR, two epochs, bf16, deterministic): {verdict}", ""]
    return lines
