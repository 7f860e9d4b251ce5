"""The device check's step-mode sections (``benchmarks/device_check.py`` runs them; kept here to keep that file
short):

* ``modes``: Base on RTE (4 × ``--train-samples-small`` examples, two epochs, the second timed: the first holds the
  captures and compiles) for each ``step_mode`` (eager, graphs, compile) at batch 8 and 32, bf16 autocast and fp32
  with TF32 matmuls, length buckets of 16 tokens: tokens/s and the share of the matrix rate measured on the machine.
  The determinism section's graphs row is here too (:func:`graphs_equal_eager`: ``graphs`` against ``eager`` bit for
  bit, I-STAR, two epochs, deterministic kernels, in a process of its own as cuBLAS's workspace needs). On a CPU:
  eager alone (graphs needs CUDA; compile's CPU figure would be its compile time), the rest listed as skipped.
* ``reference``: the four configurations of the second call's search (``benchmarks/device_search.py``) trained one
  by one, written to ``--search-reference`` for that call.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

BUCKET = 16


def _modes(cuda: bool) -> list[tuple[str, str, int]]:
    if not cuda:
        return [("eager", "fp32", 8)]
    return [(mode, precision, batch) for precision in ("bf16", "tf32") for batch in (8, 32)
            for mode in ("eager", "graphs", "compile")]


def graphs_equal_eager(args, results) -> None:
    """The determinism section's graphs row (in a process of its own, ``device_check.in_own_process``): I-STAR, two
    epochs, eager then graphs, deterministic kernels, every epoch record compared."""
    from device_check import Capture, compare, hparams, settings

    from istar_tune.training.loop import train

    try:
        records = {}
        for mode in ("eager", "graphs"):
            capture = Capture()
            train(hparams(args, method="istar", lam=-1.0, zeta=0.2, epochs=2, batch_size=16),
                  settings(args, deterministic=True, precision="bf16", length_bucket=BUCKET, step_mode=mode,
                           max_train_samples=args.train_samples_small, max_eval_samples=128), capture)
            records[mode] = capture.records
        results.put({"epochs": [compare(a, b) for a, b in zip(records["eager"], records["graphs"], strict=True)]})
    except Exception as err:  # noqa: BLE001 - a capture that fails is a finding
        results.put({"error": f"{type(err).__name__}: {err}"[:1000]})


def section_modes(check, args) -> dict[str, Any]:
    from device_check import cuda, hparams, matmul_peaks, settings, settle, train_flops_per_token

    from istar_tune.training.loop import train

    peaks = matmul_peaks()
    per_token = train_flops_per_token(args.model, 128)
    rows = []
    for mode, precision, batch in _modes(cuda()):
        settle()
        chosen = {"precision": "fp32", "matmul_precision": "high"} if precision == "tf32" else {"precision": precision}
        try:
            result = train(hparams(args, batch_size=batch, epochs=2),  # the second epoch is timed: the first
                           settings(args, step_mode=mode, length_bucket=BUCKET,  # holds the captures and compiles
                                    max_train_samples=4 * args.train_samples_small, **chosen))
        except Exception as err:  # noqa: BLE001 - one mode's failure is a finding, the others still run
            rows.append({"step_mode": mode, "precision": precision, "batch_size": batch,
                         "error": f"{type(err).__name__}: {err}"[:500]})
            print(json.dumps(rows[-1]), flush=True)
            continue
        rate = result.final["train_tokens_per_s"]
        rows.append({"step_mode": mode, "precision": precision, "batch_size": batch,
                     "train_loss": result.final["train_loss"], "train_tokens_per_s": round(rate, 1),
                     "share_of_matmul_rate": round(rate * per_token / (peaks[precision] * 1e12), 4),
                     "loss_finite": math.isfinite(result.final["train_loss"])})
        print(json.dumps(rows[-1]), flush=True)
    if not cuda():
        check.skip("modes: graphs and compile", "graphs replays CUDA graphs; compile's CPU figure is its compile time")
    return {"length_bucket": BUCKET, "matmul_tflops": {k: round(v, 1) for k, v in peaks.items()}, "rows": rows}


def _reference(args, results) -> None:
    import device_search

    try:
        results.put({"found": device_search.reference(args.model, args.data_dir, args.search_train_samples)})
    except Exception as err:  # noqa: BLE001 - reported by the section
        results.put({"error": f"{type(err).__name__}: {err}"[:1000]})


def section_reference(check, args) -> dict[str, Any]:
    """In a process of its own, as each trial is: ``deterministic`` fixes cuBLAS's workspace before its first call,
    which this process's earlier sections have made."""
    from device_check import in_own_process

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


def summary_lines(sections: dict[str, Any]) -> list[str]:
    from device_check import _table

    lines = []
    if "modes" in sections:
        m = sections["modes"]
        lines += [f"## (h) Step modes (Base, RTE, length buckets of {m['length_bucket']})", ""]
        rows = [{**r, "error": r["error"].splitlines()[0]} if r.get("error") else r for r in m["rows"]]
        lines += _table(rows, {"step_mode": "step mode", "precision": "precision", "batch_size": "batch",
                                    "train_tokens_per_s": "tokens/s", "share_of_matmul_rate": "share of the matrix "
                                    "rate", "error": "error"})
    if "reference" in sections:
        r = sections["reference"]
        lines += ["## (i) The second call's configurations, one by one", ""]
        lines += [f"- {name}: accuracy {v['accuracy']}, train loss {v['train_loss']} ({v['wall_s']} s)"
                  for name, v in r["configurations"].items()]
        lines += [""]
    return lines
