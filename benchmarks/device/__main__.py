"""The device check's runner: its options, the summary, the sections in order."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

from .common import RESULTS, Check, cuda, model_source
from .sections import SECTIONS


def summary(results: dict[str, Any]) -> str:
    """The results file in words: the machine, one part per section measured, what was skipped and what failed."""
    m = results["machine"]
    lines = [f"# Device check: {m.get('gpu', 'no GPU')} (torch {m['torch']}, transformers {m['transformers']}, "
             f"{m['cpus']} CPUs)", ""]
    for name, section in SECTIONS.items():
        if name in results["sections"]:
            lines += section.summary(results["sections"][name])
    lines += [f"Skipped: {s['what']} ({s['why']})" for s in results["skipped"]]
    lines += [f"Error in {k}: {v.splitlines()[0]}" for k, v in results["errors"].items()]
    return "\n".join(lines) + "\n"


def numbers(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(prog="python -m benchmarks.device",
                                    description="every GPU-specific part of istar-tune, measured here")
    add = found.add_argument
    add("--out", required=True, type=Path, help=f"folder for {RESULTS}.json and .md")
    add("--model", default="tiny-bert", help="short name or model folder (default: %(default)s)")
    add("--data-dir", default=str(Path(__file__).resolve().parents[3] / "shared/data/glue"),
        help="a folder in the GLUE layout holding RTE (default: %(default)s)")
    add("--sections", default=",".join(SECTIONS), help="comma-separated (default: all)")
    add("--budget-s", type=float, default=420.0, help="wall time the check may take; calibrate measures what fits "
                                                      "(default: %(default)s)")
    add("--train-samples", type=int, default=None, help="training examples of section epoch (default: all of RTE)")
    add("--train-samples-small", type=int, default=256,
        help="training examples of the determinism and oom runs (default: %(default)s)")
    add("--steps", type=int, default=10, help="timed steps of step and calibrate (default: %(default)s)")
    add("--search-reference", type=Path, default=None, help="where section reference writes the second call's "
        "one-by-one records (default: OUT/search_reference.json; a copy goes there too)")
    add("--search-train-samples", type=int, default=512,
        help="training examples of the second call's configurations (default: %(default)s)")
    add("--packings", type=numbers, default=None,
        help="calibrate's trials a GPU, e.g. 4,8 (default: 1,2,4,8 on CUDA, 1,2 on a CPU)")
    add("--batches", type=numbers, default=None,
        help="calibrate's batch sizes, e.g. 8 (default: 32,8 on CUDA, 8 on a CPU)")
    add("--mps", choices=("both", "off", "on"), default="both",
        help="calibrate without MPS, with it, or both (default: %(default)s)")
    return found


def main(argv: list[str] | None = None) -> int:
    options = parser()
    args = options.parse_args(argv)
    wanted = args.sections.split(",")
    if unknown := set(wanted) - set(SECTIONS):
        options.error(f"unknown sections {sorted(unknown)}: choose from {', '.join(SECTIONS)}")
    args.model = model_source(args.model)
    check = Check(args.out, args.budget_s, summary)
    for name, section in SECTIONS.items():
        if name not in wanted:
            continue
        if (why := getattr(section, "NEEDS_CUDA", None)) and not cuda():
            check.skip(name, why)
            continue
        check.run(name, functools.partial(section.run, args=args))
    check.write()
    print((args.out / f"{RESULTS}.md").read_text(), flush=True)
    return 1 if check.results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
