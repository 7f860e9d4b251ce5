"""Every input error reachable from the command line: exit code 2, one line naming the problem, nothing created.

None of these starts Ray or trains: they are refused before (the preflight runs before the cluster is joined).
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest

from istar_tune.cli import main

GLUE_TINY = Path()
"""The shared glue-tiny folder: set from the ``glue_tiny`` fixture before each case builds its input."""


@pytest.fixture(autouse=True)
def _glue_tiny_path(glue_tiny):
    global GLUE_TINY
    GLUE_TINY = glue_tiny


SMOKE = Path(__file__).resolve().parents[1] / "search_spaces" / "smoke.yaml"

TRAIN = ["train", "--model", "tiny-bert", "--task", "rte", "--max-train-samples", "8", "--max-eval-samples", "8",
         "--max-length", "32", "--no-progress"]
SPACE = """\
name: bad
models: [tiny-bert]
tasks: [rte]
methods: [base]
hyperparameters:
  learning_rate: {grid: [1.0e-3]}
  epochs: 1
settings: {max_length: 32, data_dir: DATA}
"""


def _data(tmp: Path, break_rte=None) -> Path:
    """A copy of glue-tiny's RTE, optionally broken by ``break_rte(train_file)``."""
    root = tmp / "data"
    shutil.copytree(GLUE_TINY / "RTE", root / "RTE")
    if break_rte:
        break_rte(root / "RTE" / "train.tsv")
    return root


def _space(tmp: Path, text: str = SPACE, data: Path | None = None) -> str:
    path = tmp / "space.yaml"
    path.write_text(text.replace("DATA", str(data or GLUE_TINY)))
    return str(path)


def _columns(path: Path) -> None:
    path.write_text(path.read_text() + "1\tonly two columns\n")


def _latin1(path: Path) -> None:
    path.write_bytes(path.read_bytes() + "99\tcaf\xe9\tbar\tentailment\n".encode("latin-1"))


def _garbage(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 40)


def _no_task(tmp: Path) -> Path:
    (tmp / "empty").mkdir()
    return tmp / "empty"


def _own(tmp: Path, definition: str, train: str = "text,label\ngood,1\nbad,0\n",
         dev: str = "text,label\nfine,1\n") -> str:
    """A user's task: its two CSV files and its definition (``definition`` names them train.csv and dev.csv)."""
    folder = tmp / "own"
    folder.mkdir(exist_ok=True)
    (folder / "train.csv").write_text(train)
    (folder / "dev.csv").write_text(dev)
    return _write(folder, "task.yaml", definition)


OWN = "name: own\ntrain: train.csv\nvalidation: dev.csv\n"
OWN_SPACE = SPACE.replace("tasks: [rte]", "tasks: [TASK]")

def _binary(tmp: Path) -> str:
    path = tmp / "binary.yaml"
    path.write_bytes(bytes([0x94, 0x00, 0xff, 0x10]) * 64)
    return str(path)


def _made(path: Path, folder: bool) -> str:
    """A folder (or a file) at ``path``, where a command expects the other."""
    path.mkdir() if folder else path.write_text("x")
    return str(path)


def _http_server() -> str:
    """A local HTTP server (not Ray) on a free port, for the life of the test process; its address."""
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # the server's own lines are not the command's
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"127.0.0.1:{server.server_address[1]}"


def _truncated_state(tmp: Path) -> str:
    folder = tmp / "trial"
    folder.mkdir()
    (folder / "trainer_state.pt").write_bytes(b"PK\x03\x04" + b"\x00" * 996)  # a zip cut short
    return str(folder)


def _stsb_off_scale(tmp: Path) -> Path:
    root = tmp / "data"
    shutil.copytree(GLUE_TINY / "STS-B", root / "STS-B")
    train = root / "STS-B" / "train.tsv"
    header, first, *rest = train.read_text().splitlines()
    train.write_text("\n".join([header, "\t".join([*first.split("\t")[:-1], "7.5"]), *rest]) + "\n")
    return root


SPACE_TWICE = SPACE.replace("models: [tiny-bert]", "models: [tiny-bert, tiny-bert]").replace(
    "methods: [base]", "methods: [base, base]")

CASES = {
    # this round's sweep (#34): tracebacks, silent repeats and late failures, each now one line
    "space: a binary file": (lambda t: ["search", _binary(t), "--dry-run"], "not a text file"),
    "train: a binary --config": (lambda t: ["train", "--config", _binary(t)], "not a text file"),
    "train: --config names a folder": (lambda t: ["train", "--config", _made(t / "cfg", True)], "is a folder"),
    "search: the space names a folder": (lambda t: ["search", _made(t / "spaces", True), "--dry-run"],
                                         "is a folder"),
    "table: --output names a folder": (lambda t: ["table", "--tracking-uri", f"sqlite:///{_store(t)}",
                                                  "--experiment", "x", "--output", _made(t / "out", True)],
                                       "is a folder: name a file"),
    "table: yaml --output names a folder": (lambda t: ["table", "--tracking-uri", f"sqlite:///{_store(t)}",
                                                       "--experiment", "x", "--format", "yaml", "--output",
                                                       _made(t / "out", True)], "is a folder: name the YAML file"),
    "plots: --output-dir names a file": (lambda t: ["plots", "--tracking-uri", f"sqlite:///{_store(t)}",
                                                    "--experiment", "x", "--output-dir", _made(t / "plots", False)],
                                         "is a file"),
    "analyze: a truncated trainer_state.pt": (lambda t: ["analyze", _truncated_state(t)],
                                             "cannot be read .*truncated or damaged"),
    "tracking: a sqlite file that is not a database": (
        lambda t: ["table", "--tracking-uri", f"sqlite:///{_made(t / 'm.db', False)}", "--experiment", "x"],
        "is not a SQLite database"),
    "search: a tracking store that is not a database": (
        lambda t: ["search", _space(t), "--tracking-uri", f"sqlite:///{_made(t / 'm.db', False)}", "--storage-path",
                   str(t / "runs")], "is not a SQLite database"),
    "tracking: sqlite:// with two slashes": (lambda t: ["table", "--tracking-uri", "sqlite://", "--experiment", "x"],
                                             "three slashes"),
    "search: --address of an HTTP server, not Ray": (
        lambda t: ["search", _space(t), "--address", _http_server(), "--storage-path", str(t / "runs")],
        "is not a Ray cluster"),
    "space: a model and a method twice": (lambda t: ["search", _space(t, SPACE_TWICE), "--dry-run"],
                                          "models: lists tiny-bert more than once.*methods: lists base"),
    "search: --models twice": (lambda t: ["search", _space(t), "--models", "tiny-bert,tiny-bert", "--dry-run"],
                               "--models lists tiny-bert more than once"),
    "search: --tasks twice by another spelling": (lambda t: ["search", _space(t), "--tasks", "rte", "RTE",
                                                             "--dry-run"], "--tasks: lists rte more than once"),
    "search: --models ''": (lambda t: ["search", _space(t), "--models", "", "--dry-run"], "names nothing"),
    "search: --tasks ','": (lambda t: ["search", _space(t), "--tasks", ",", "--dry-run"], "names nothing"),
    "data: an STS-B score off its 0-5 scale": (
        lambda t: [*TRAIN[:4], "stsb", *TRAIN[5:], "--data-dir", str(_stsb_off_scale(t))],
        "'7.5' is outside the task's scale 0 to 5"),
    "space: device cuda without a GPU share": (
        lambda t: ["search", _space(t, SPACE.replace("max_length: 32", "max_length: 32, device: cuda")), "--dry-run"],
        "resources.gpu is 0"),
    "space: step_mode graphs without a GPU share": (
        lambda t: ["search", _space(t, SPACE.replace("max_length: 32", "max_length: 32, step_mode: graphs, "
                                                     "length_bucket: 16")), "--dry-run"],
        "step_mode is graphs .* but resources.gpu is 0"),
    "train: step_mode graphs on a CPU": (
        lambda t: [*TRAIN, "--data-dir", str(GLUE_TINY), "--step-mode", "graphs", "--length-bucket", "8"],
        "step_mode graphs replays CUDA graphs and this run's device is cpu"),
    "search: --time-factor 1e9": (lambda t: ["search", _space(t), "--simulate", "--time-factor", "1e9",
                                             "--storage-path", str(t / "runs")], r"--time-factor must lie in \[0, 1\]"),
    # a task of one's own (train and search)
    "task: definition file missing": (lambda t: [*TRAIN, "--task", str(t / "none.yaml")], "does not exist"),
    "task: named as a shipped task": (lambda t: [*TRAIN, "--task", _own(t, OWN.replace("own", "RTE"))],
                                      "name of a shipped task"),
    "task: its file missing": (lambda t: [*TRAIN, "--task", _own(t, OWN.replace("dev.csv", "gone.csv"))],
                               "gone.csv' does not exist"),
    "task: metric that does not fit": (lambda t: [*TRAIN, "--task", _own(t, OWN + "problem_type: regression\n"
                                                                            "metric: accuracy\n")], "does not fit"),
    "task: unknown field": (lambda t: [*TRAIN, "--task", _own(t, OWN + "label_field: y\n")],
                            r"no field 'y' \(its fields: text, label\)"),
    "task: label outside label_names": (lambda t: [*TRAIN, "--task", _own(t, OWN + "label_names: [a, b]\n",
                                                                          train="text,label\ngood,a\nbad,c\n")],
                                        "label 'c' is not one of a, b"),
    "task: validation label never trained on": (lambda t: [*TRAIN, "--task", _own(t, OWN, dev="text,label\nx,7\n")],
                                                "training split never shows it"),
    "task: score not a number": (lambda t: [*TRAIN, "--task", _own(t, OWN + "problem_type: regression\n",
                                                                   train="text,label\na,high\n")], "not a number"),
    "task: empty split": (lambda t: [*TRAIN, "--task", _own(t, OWN, dev="text,label\n")], "split is empty"),
    "task: binary f1 of three classes": (lambda t: [*TRAIN, "--task", _own(t, OWN + "metric: f1\npositive_label: 1\n",
                                                                           train="text,label\na,0\nb,1\nc,2\n")],
                                         "use f1_macro"),
    "task: --train-file alone": (lambda t: [*TRAIN, "--train-file", _own(t, OWN)], "go together"),
    "task: a ';'-separated file read with commas": (
        lambda t: [*TRAIN, "--task", _own(t, OWN, train="text;label\ngood;1\nbad;0\n", dev="text;label\nfine;1\n")],
        "its one field 'text;label' holds ';': a ';'-separated file\\? give separator: ';'"),
    "task: a workbook saved under a csv name": (
        lambda t: [*TRAIN, "--task", _own(t, OWN, train="PK\x03\x04" + "\x00" * 64)],
        "an Excel workbook \\(.xlsx\\) or a zip archive, not a csv file"),
    "task: a row with a comma too many": (
        lambda t: [*TRAIN, "--task", _own(t, OWN, train="text,label\ngood,1\nbad, sad,0\n")],
        "rows 2: 3 fields where the header has 2: a ',' inside a cell that is not quoted"),
    "task: a limit that leaves one class": (
        lambda t: [*TRAIN, "--task", _own(t, OWN, train="text,label\ngood,1\nfine,1\nbad,0\n"),
                   "--max-train-samples", "2"],
        "the first 2 rows \\(max_train_samples 2\\): every training label is '1'"),
    "task: unknown key": (lambda t: [*TRAIN, "--task", _own(t, OWN + "colour: red\n")], "colour: unknown key"),
    "search: task definition with an unknown field": (
        lambda t: ["search", _space(t, OWN_SPACE.replace("TASK", _own(t, OWN + "text_fields: [body]\n")))],
        "no field 'body'"),
    "search: hub task while the hub does not answer": (
        lambda t: ["search", _space(t, OWN_SPACE.replace("TASK", "{name: boolq, hub: google/boolq}"))],
        "hub does not answer"),
    "search: a task listed twice": (lambda t: ["search", _space(t, OWN_SPACE.replace("TASK", "rte, RTE"))],
                                    "more than once"),
    # a name or an option that nothing would read
    "search: unknown model in a dry run": (lambda t: ["search", _space(t), "--models", "bart", "--dry-run"],
                                           "model 'bart' is not a short name or a local folder"),
    "search: unknown model": (lambda t: ["search", _space(t), "--models", "bart"], "model 'bart' is not a short name"),
    "train: lam given to base": (lambda t: [*TRAIN, "--method", "base", "--lam", "-1"],
                                 r"method base does not read lam \(lam applies to cosreg, istar\)"),
    "search: lam under base": (lambda t: ["search", _space(t, SPACE + "method_hyperparameters: {base: {lam: 1.0}}\n")],
                               "method_hyperparameters.base: method base does not read lam"),
    # istar-tune train
    "train: unknown task": (lambda t: [*TRAIN, "--task", "nope"], "unknown"),
    "train: model path missing": (lambda t: [*TRAIN, "--model", str(t / "no-model")], "does not exist"),
    "train: lam not a number": (lambda t: [*TRAIN, "--lam", "abc"], "lam"),
    "train: zeta outside [0, 1]": (lambda t: [*TRAIN, "--zeta", "1.5"], "zeta"),
    "train: data dir missing": (lambda t: [*TRAIN, "--data-dir", str(t / "nowhere")], "does not exist"),
    "train: data dir without the task": (lambda t: [*TRAIN, "--data-dir", str(_no_task(t))], "not found"),
    "train: wrong column count": (lambda t: [*TRAIN, "--data-dir", str(_data(t, _columns))], "columns"),
    "train: not UTF-8": (lambda t: [*TRAIN, "--data-dir", str(_data(t, _latin1))], "not UTF-8"),
    "train: binary garbage": (lambda t: [*TRAIN, "--data-dir", str(_data(t, _garbage))], "train.tsv"),
    "train: config file missing": (lambda t: [*TRAIN, "--config", str(t / "none.yaml")], "does not exist"),
    "train: config not a mapping": (lambda t: [*TRAIN, "--config", _write(t, "c.yaml", "- 1\n- 2\n")], "mapping"),
    "train: config not YAML": (lambda t: [*TRAIN, "--config", _write(t, "c.yaml", "a: [1, 2\n")], "not valid YAML"),
    "train: config unknown key": (lambda t: [*TRAIN, "--config", _write(t, "c.yaml", "colour: red\n")], "colour"),
    "train: negative batch size": (lambda t: [*TRAIN, "--batch-size", "-4"], "batch_size"),
    "train: zero epochs": (lambda t: [*TRAIN, "--epochs", "0"], "epochs"),
    "train: unknown precision": (lambda t: [*TRAIN, "--precision", "fp8"], "precision"),
    "train: max length past the model": (lambda t: [*TRAIN, "--max-length", "100000", "--data-dir",
                                                     str(GLUE_TINY)], "positions"),
    "train: isolayer on SQuAD": (lambda t: [*TRAIN, "--task", "squad", "--method", "isolayer"], "extractive QA"),
    "train: layer 0": (lambda t: [*TRAIN, "--layer", "0"], "1-based"),
    "train: unknown checkpoint mode": (lambda t: [*TRAIN, "--checkpoint", "everything"], "checkpoint"),
    "train: warm-up ratio 1.5": (lambda t: [*TRAIN, "--warmup-ratio", "1.5"], "warmup_ratio"),
    "train: unknown method": (lambda t: [*TRAIN, "--method", "whiten"], "unknown"),
    # istar-tune search (all refused before Ray starts)
    "search: space missing": (lambda t: ["search", str(t / "none.yaml")], "does not exist"),
    "search: unknown key": (lambda t: ["search", _space(t, SPACE + "colour: red\n")], "colour"),
    "search: sqlite store is a folder": (lambda t: ["search", _space(t), "--tracking-uri", f"sqlite:///{_folder(t)}"],
                                         "is a folder, not a database file"),
    "search: postgresql store not answering": (lambda t: ["search", _space(t), "--tracking-uri",
                                                          "postgresql://mlflow@127.0.0.1:1/mlflow"], "cannot reach"),
    "search: mysql store not answering": (lambda t: ["search", _space(t), "--tracking-uri",
                                                     "mysql://mlflow@127.0.0.1:1/mlflow"], "cannot reach"),
    "search: a key given twice": (lambda t: ["search", _space(t, SPACE + "tasks: [rte]\n")], "given twice"),
    "search: share_epochs not a boolean": (lambda t: ["search", _space(t, SPACE + "search: {share_epochs: maybe}\n")],
                                           "search.share_epochs: must be true or false"),
    "search: a throughput without a rate": (lambda t: ["search", _space(t), "--dry-run", "--tokens-per-second",
                                                       "tiny-bert"], "MODEL=TOKENS_PER_SECOND"),
    "search: no throughput for a model": (lambda t: ["search", _space(t), "--dry-run", "--tokens-per-second",
                                                     "bert=5000"], "no rate for tiny-bert"),
    "train: unknown star_sigma": (lambda t: [*TRAIN, "--star-sigma", "guess"], "star_sigma"),
    "search: NaN in a grid": (lambda t: ["search", _space(t, SPACE.replace("[1.0e-3]", "[.nan]"))], "finite"),
    "search: inf as a constant": (lambda t: ["search", _space(t, SPACE.replace("epochs: 1", "epochs: 1\n  lam: .inf"))],
                                  "lam must be a finite number"),
    "search: seeds repeated": (lambda t: ["search", _space(
        t, SPACE + "stage: seeds\nseeds: [1, 2, 1]\nbest_of: [x]\n")], "repeats 1"),
    "search: ASHA grace period past the epochs": (lambda t: ["search", _space(
        t, SPACE + "scheduler: {type: asha, grace_period: 3}\n")], "grace_period: 3 is more than the 1 epochs"),
    "train: learning rate inf": (lambda t: [*TRAIN, "--lr", "inf"], "learning_rate must be a finite number"),
    "train: learning rate nan": (lambda t: [*TRAIN, "--lr", "nan"], "learning_rate must be a finite number"),
    "train: max grad norm nan": (lambda t: [*TRAIN, "--max-grad-norm", "nan"], "max_grad_norm must be a finite"),
    "train: lam -inf": (lambda t: [*TRAIN, "--lam=-inf"], "lam must be a finite number"),
    "train: max length 1": (lambda t: [*TRAIN, "--max-length", "1"], "max_length must be at least 8"),
    "train: config key given twice": (lambda t: [*TRAIN, "--config", _write(t, "c.yaml", "epochs: 1\nepochs: 2\n")],
                                      "given twice"),
    "search: unknown task": (lambda t: ["search", _space(t, SPACE.replace("[rte]", "[nope]"))], "nope"),
    "search: unknown method": (lambda t: ["search", _space(t, SPACE.replace("[base]", "[whiten]"))], "whiten"),
    "search: grid of mixed kinds": (lambda t: ["search", _space(t, SPACE.replace(
        "epochs: 1", "batch_size: {grid: [16, '8', 8.0]}\n  epochs: 1"))], "mixes"),
    "search: grid with a repeat": (lambda t: ["search", _space(t, SPACE.replace(
        "epochs: 1", "batch_size: {grid: [8, 8.0]}\n  epochs: 1"))], "repeats"),
    "search: loguniform reversed": (lambda t: ["search", _space(t, SPACE.replace(
        "{grid: [1.0e-3]}", "{loguniform: [1e-3, 1e-5]}"))], "low < high"),
    "search: two GPUs per trial": (lambda t: ["search", _space(t, SPACE + "resources: {gpu: 2}\n")], "one GPU"),
    "search: --tasks unknown": (lambda t: ["search", _space(t), "--tasks", "nope"], "nope"),
    "search: --methods unknown": (lambda t: ["search", _space(t), "--methods", "whiten"], "whiten"),
    "search: name with ..": (lambda t: ["search", _space(t), "--name", "../x"], "not usable"),
    "search: absolute name": (lambda t: ["search", _space(t), "--name", str(t / "x")], "not usable"),
    "search: unknown URI scheme": (lambda t: ["search", _space(t), "--tracking-uri", "foo://bar"], "unknown scheme"),
    "search: server not answering": (lambda t: ["search", _space(t), "--tracking-uri", "http://127.0.0.1:9"],
                                     "cannot reach"),
    "search: storage path is a file": (lambda t: ["search", _space(t), "--storage-path", _write(t, "f", "x")],
                                       "is a file"),
    "search: resume of nothing": (lambda t: ["search", _space(t), "--resume", "--storage-path", str(t / "runs")],
                                  "nothing to resume|no results"),
    "search: data without the task": (lambda t: ["search", _space(t, data=_no_task(t))], "not found"),
    "search: not UTF-8": (lambda t: ["search", _space(t, data=_data(t, _latin1))], "not UTF-8"),
    "search: wrong column count": (lambda t: ["search", _space(t, data=_data(t, _columns))], "columns"),
    "search: max length past the model": (lambda t: ["search", _space(t, SPACE.replace("max_length: 32",
                                                                                       "max_length: 100000"))],
                                          "positions"),
    "search: model path missing": (lambda t: ["search", _space(t), "--models", str(t / "no-model")],
                                   "does not exist"),
    # istar-tune table / plots / analyze
    "table: no store": (lambda t: ["table", "--experiment", "x", "--storage-path", str(t / "runs")], "no MLflow store"),
    "table: unknown kind": (lambda t: ["table", "--experiment", "x", "--kind", "worst", "--storage-path",
                                       str(t / "runs")], "worst|no MLflow store"),
    "table: unknown URI scheme": (lambda t: ["table", "--experiment", "x", "--tracking-uri", "foo://bar"],
                                  "unknown scheme"),
    "table: server not answering": (lambda t: ["table", "--experiment", "x", "--tracking-uri",
                                               "http://127.0.0.1:9"], "cannot reach"),
    "plots: no store": (lambda t: ["plots", "--experiment", "x", "--storage-path", str(t / "runs")],
                        "no MLflow store"),
    "analyze: checkpoint missing": (lambda t: ["analyze", str(t / "no-checkpoint")], "no-checkpoint"),
    "analyze: crafted checkpoint": (lambda t: ["analyze", _crafted(t)], "refused unread"),
    # every float refuses NaN and infinity (one rule), every count its range
    "train: zeta nan": (lambda t: [*TRAIN, "--zeta", "nan"], "zeta must be a finite number"),
    "train: alpha inf": (lambda t: [*TRAIN, "--alpha", "inf"], "alpha must be a finite number"),
    "train: warm-up ratio nan": (lambda t: [*TRAIN, "--warmup-ratio", "nan"], "warmup_ratio must be a finite"),
    "train: weight decay inf": (lambda t: [*TRAIN, "--weight-decay", "inf"], "weight_decay must be a finite"),
    "train: IsoLayer learning rate nan": (lambda t: [*TRAIN, "--isolayer-lr", "nan"], "isolayer_learning_rate"),
    "train: eval zeta inf": (lambda t: [*TRAIN, "--eval-zeta", "inf"], "eval_zeta must be a finite number"),
    "train: holdout nan": (lambda t: [*TRAIN, "--holdout", "nan"], "holdout must be a finite number"),
    "train: seed 2**70": (lambda t: [*TRAIN, "--seed", str(2**70)], "seed must lie in"),
    "train: negative seed": (lambda t: [*TRAIN, "--seed=-1"], "seed must lie in"),
    "train: device tpu": (lambda t: [*TRAIN, "--device", "tpu"], "device must be auto, cpu, cuda"),
    "train: output dir is a file": (lambda t: [*TRAIN, "--output-dir", _write(t, "out", "x")], "is a file"),
    "train: gradient accumulation 0": (lambda t: [*TRAIN, "--grad-accum", "0"], "grad_accum must be positive"),
    "train: IsoLayer epochs 0": (lambda t: [*TRAIN, "--isolayer-epochs", "0"], "isolayer_epochs must be positive"),
    "train: eval batch size 0": (lambda t: [*TRAIN, "--eval-batch-size", "0"], "eval_batch_size"),
    "train: one shrinkage token": (lambda t: [*TRAIN, "--shrinkage-tokens", "1"], "shrinkage_tokens must be at least"),
    "train: no training samples": (lambda t: [*TRAIN, "--max-train-samples", "0"], "max_train_samples"),
    "train: patience without holdout": (lambda t: [*TRAIN, "--patience", "2"], "needs a holdout share"),
    "train: holdout of everything": (lambda t: [*TRAIN, "--holdout", "1"], "holdout must lie strictly"),
    "train: unknown recipe": (lambda t: [*TRAIN, "--recipe", "vintage"], "recipe must be one of"),
    "train: config too large": (lambda t: [*TRAIN, "--config", _write(t, "c.yaml", "# x\n" * 300_000)],
                                "at most 1,048,576 bytes"),
    "train: YAML alias bomb": (lambda t: [*TRAIN, "--config", _write(t, "c.yaml", _alias_bomb())],
                               "expands to more than 1,000,000 values"),
    # search spaces
    "search: too many unknown keys": (lambda t: ["search", _space(t, SPACE + "".join(
        f"k{i}: 1\n" for i in range(500)))], "k0, k1, .*, k9 and 490 more: unknown keys \\(known: "),
    "search: a grid of 20,000 values": (lambda t: ["search", _space(t, SPACE.replace(
        "[1.0e-3]", "[" + ", ".join(f"{i}.0e-6" for i in range(1, 20_001)) + "]"))], "at most 10,000"),
    "search: name of 300 characters": (lambda t: ["search", _space(t), "--name", "n" * 300], "at most 100"),
    "search: name with a NUL byte": (lambda t: ["search", _space(t, SPACE.replace("name: bad", 'name: "a\\0b"'))],
                                     "control characters"),
    "search: storage path in a symlink loop": (lambda t: ["search", _space(t), "--storage-path",
                                                          str(_loop(t) / "runs")], "cannot be resolved"),
    "search: concurrency 0": (lambda t: ["search", _space(t, SPACE + "concurrency: 0\n")], "concurrency"),
    "search: negative retries": (lambda t: ["search", _space(t, SPACE + "max_failures: -1\n")], "max_failures"),
    "search: keep no checkpoint": (lambda t: ["search", _space(t, SPACE + "checkpoints_to_keep: 0\n")],
                                   "checkpoints_to_keep"),
    "search: reduction factor 1": (lambda t: ["search", _space(t, SPACE + "scheduler: {type: asha, "
                                                                         "reduction_factor: 1}\n")],
                                   "reduction_factor"),
    "search: no CPU per trial": (lambda t: ["search", _space(t, SPACE + "resources: {cpu: 0}\n")], "resources.cpu"),
    "search: zero samples": (lambda t: ["search", _space(t, SPACE + "search: {num_samples: 0}\n")], "num_samples"),
    "search: unknown stage": (lambda t: ["search", _space(t, SPACE + "stage: final\n")], "stage"),
    "search: storage of Optuna not a URL": (lambda t: ["search", _space(t, SPACE + "search: {storage: optuna.db}\n")],
                                            "search.storage"),
    "search: unknown setting": (lambda t: ["search", _space(t, SPACE.replace("max_length: 32", "max_len: 32"))],
                                "max_len"),
    "search: STS-B score nan": (lambda t: ["search", _space(t, SPACE.replace("[rte]", "[stsb]"), data=_nan_stsb(t))],
                                "not a finite number"),
    "search: SQuAD nested too deep": (lambda t: ["search", _space(t, SPACE.replace("[rte]", "[squad]"),
                                                                  data=_deep_squad(t))], "nested too deep"),
    "search: label outside the label set": (lambda t: ["search", _space(t, data=_data(t, _bad_label))],
                                            "is not one of"),
    "table: output into a missing folder": (lambda t: ["table", "--experiment", "x", "--tracking-uri",
                                                       f"sqlite:///{_store(t)}", "--output",
                                                       str(t / "missing" / "best.md")], "does not exist"),
    "status: negative watch": (lambda t: ["status", "--experiment", "x", "--watch", "-5"], "--watch -5"),
    "calibrate: --device cuda without CUDA": (lambda t: ["calibrate", "--model", "tiny-bert", "--task", "rte",
                                                         "--device", "cuda", "--output", str(t / "c.yaml")],
                                               "CUDA is not available on this machine"),
    "calibrate: --output a folder": (lambda t: ["calibrate", "--model", "tiny-bert", "--task", "rte", "--device",
                                                "cpu", "--packing", "1", "--output", str(t)], "is a folder"),
    # One reading path: every class of data defect the label rule and the field checks refuse (docs/tasks.md)
    "data: a placeholder label": (lambda t: [*TRAIN, "--task", _own(t, OWN, train="text,label\na,1\nb,0\nc,-\n")],
                                  "rows 3: '-' is not a label: .*drop_labels: \\['-'\\]"),
    "data: 'nan' beside numbers": (lambda t: [*TRAIN, "--task", _own(t, OWN, train="text,label\na,1\nb,0\nc,nan\n")],
                                   "'nan' is not a label"),
    "data: a list label (JSON)": (lambda t: [*TRAIN, "--task", _own_json(t, [0, [0, 1], 1])],
                                  "multi-label classification is not supported"),
    "data: case-only spellings": (lambda t: [*TRAIN, "--task", _own(t, OWN, train="text,label\na,Pos\nb,pos\nc,neg\n",
                                                                      dev="text,label\nd,neg\n")],
                                  "'Pos', 'pos' differ only in case"),
    "data: dev numbers, train words": (lambda t: [*TRAIN, "--task", _own(t, OWN, train="text,label\na,pos\nb,neg\n",
                                                                           dev="text,label\nd,0\n")],
                                       "no index is guessed"),
    "data: one training class despite label_names": (lambda t: [*TRAIN, "--task", _own(
        t, OWN + "label_names: [neg, pos]\n", train="text,label\na,pos\nb,pos\n", dev="text,label\nd,neg\n")],
        "every training label is 'pos'"),
    "data: a label column twice": (lambda t: [*TRAIN, "--task", _own(t, OWN + "text_fields: [text]\n",
                                                                       train="text,label,label\na,1,0\nb,0,1\n",
                                                                       dev="text,label,label\nd,1,0\n")],
                                   "names 'label' more than once"),
    "data: a headerless file": (lambda t: [*TRAIN, "--task", _own(t, OWN, train="1,good film\n0,bad film\n",
                                                                    dev="1,fine\n")],
                                "the first row looks like data .*column_names"),
    "data: 1-based labels against a list": (lambda t: [*TRAIN, "--task", _own(
        t, OWN + "column_names: [label, text]\nlabel_names: [World, Sports, Business]\n",
        train="1,a\n2,b\n3,c\n", dev="2,d\n")], "look 1-based.*give a mapping"),
    "data: numbers in a text field (JSON)": (lambda t: [*TRAIN, "--task", _own_json(t, [0, 1, 0], texts=["a", 7, "c"])],
                                             "field 'text' holds values of different kinds"),
    "data: only the label": (lambda t: [*TRAIN, "--task", _own(t, OWN, train="label\n0\n1\n", dev="label\n1\n")],
                             "no field besides the label 'label'"),
    "data: SQuAD answer shifted": (lambda t: [*TRAIN, "--task", _squad_v2(t, shift=3)],
                                   "does not hold the answer text at its answer_start"),
    "data: SQuAD ids repeated": (lambda t: [*TRAIN, "--task", _squad_v2(t, same_ids=True)], "ids q repeat"),
    "data: a currency as a label": (lambda t: [*TRAIN, "--task", _own(
        t, OWN, train='text,label\na,"12,50 \u20ac"\nb,"3,00 \u20ac"\nc,"12,50 \u20ac"\n',
        dev='text,label\nd,"3,00 \u20ac"\n')],
        "as a quantity \\(a currency sign .*problem_type: regression .*label_names"),
    "data: a degree sign as a label": (lambda t: [*TRAIN, "--task", _own(
        t, OWN, train="text,label\na,21.0\u00b0C\nb,19.5\u00b0C\n", dev="text,label\nd,21.0\u00b0C\n")],
        "as a quantity \\(a degree sign"),
    "data: a star as a label": (lambda t: [*TRAIN, "--task", _own(
        t, OWN, train="text,label\na,4\u2605\nb,5\u2605\n", dev="text,label\nd,4\u2605\n")], "as a quantity \\(a star"),
    "data: a header again with a BOM": (lambda t: [*TRAIN, "--task", _own(
        t, OWN, train="text,label\na,pos\nb,neg\n\ufefftext,label\nc,pos\n", dev="text,label\nd,neg\n")],
        "rows 3: the row holds the fields' own names"),
    "data: column_names over a header": (lambda t: [*TRAIN, "--task", _own(
        t, OWN + "column_names: [text, label]\n", train="review,sentiment\na,pos\nb,neg\nc,pos\nd,neg\n",
        dev="review,sentiment\nd,neg\ne,pos\n")], "row 1 \\(review, sentiment\\) looks like the file's own header"),
    "data: a variation selector twin": (lambda t: [*TRAIN, "--task", _own(
        t, OWN, train="text,label\na,\u2764\nb,\u2764\ufe0f\nc,x\n", dev="text,label\nd,x\n")],
        "U\\+FE0F VARIATION SELECTOR-16"),
    "data: R's NA as a label": (lambda t: [*TRAIN, "--task", _own(t, OWN, train="text,label\na,pos\nb,neg\nc,NA\n")],
                                "'NA' is not a label"),
    "data: a lone carriage return": (lambda t: [*TRAIN, "--task", _own(
        t, OWN, train="text,label\na\rb,pos\nc,neg\n")], "a carriage return .* alone inside a cell"),
    "data: a ;-file that fails on a quote": (lambda t: [*TRAIN, "--task", _own(
        t, OWN, train='text;label\n"say "hi"";pos\nb;neg\n', dev="text;label\nd;neg\n")],
        "its header holds ';' and no ',': .*separator: ';'"),
    "data: a long cell as a label": (lambda t: [*TRAIN, "--task", _own(
        t, OWN, train="text,label\na,pos\nb,neg\n", dev="text,label\nd," + "x" * 2000 + "\n")],
        "'x{40}'\u2026 \\(2,000 characters\\)"),
    "data: column_names for .txt files": (lambda t: [*TRAIN, "--task", _own(
        t, "name: own\ntrain: train.txt\nvalidation: dev.txt\ncolumn_names: [text, label]\n")],
        "format is not told by its files' extension"),
}


def _own_json(tmp: Path, labels: list, texts: list | None = None) -> str:
    """A user's task as JSON Lines whose training labels (and texts) are written as given."""
    import json

    folder = tmp / "own"
    folder.mkdir(exist_ok=True)
    texts = texts or [f"text {i}" for i in range(len(labels))]
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": x, "label": y}) + "\n"
                                                for x, y in zip(texts, labels)))
    (folder / "dev.jsonl").write_text(json.dumps({"text": "fine", "label": 1}) + "\n")
    return _write(folder, "task.yaml", "name: own\ntrain: train.jsonl\nvalidation: dev.jsonl\n")


def _squad_v2(tmp: Path, shift: int = 0, same_ids: bool = False) -> str:
    """A SQuAD-layout task of one's own (read by its JSON's shape) with a defect: an answer shifted, or two
    questions of one id (without one: an answerable and an unanswerable question, SQuAD v2, which trains)."""
    import json

    context = "The film opened in Paris in 1999."
    answerable = {"id": "q" if same_ids else "q1", "question": "Where?",
                  "answers": [{"text": "Paris", "answer_start": context.index("Paris") + shift}]}
    other = ({"id": "q", "question": "When?", "answers": [{"text": "1999", "answer_start": context.index("1999")}]}
             if same_ids or shift else
             {"id": "q2", "question": "Who?", "answers": [], "is_impossible": True})
    data = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": context,
                                                                       "qas": [answerable, other]}]}]}
    folder = tmp / "squad"
    folder.mkdir(exist_ok=True)
    for name in ("train.json", "dev.json"):
        (folder / name).write_text(json.dumps(data))
    return _write(folder, "task.yaml", "name: qa\ntrain: train.json\nvalidation: dev.json\n")


def _write(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return str(tmp / name)


class _RunsACommand:
    def __reduce__(self):
        import os

        return os.system, ("echo crafted > ran.txt",)


def _crafted(tmp: Path) -> str:
    """A search trial's checkpoint folder whose state file would run a command if it were unpickled."""
    import torch

    folder = tmp / "checkpoint_000001"
    folder.mkdir()
    torch.save({"epoch": 1, "model": _RunsACommand()}, folder / "trainer_state.pt")
    return str(folder)


def _folder(tmp: Path) -> Path:
    (tmp / "store.db").mkdir()
    return tmp / "store.db"


def _alias_bomb() -> str:
    lines = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for prev, name in zip("abcdefg", "bcdefgh"):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _loop(tmp: Path) -> Path:
    (tmp / "loop").symlink_to(tmp / "loop")
    return tmp / "loop"


def _bad_label(path: Path) -> None:
    path.write_text(path.read_text() + "99\tA sentence.\tAnother one.\tmaybe\n")


def _nan_stsb(tmp: Path) -> Path:
    root = tmp / "stsb-data"
    shutil.copytree(GLUE_TINY / "STS-B", root / "STS-B")
    train = root / "STS-B" / "train.tsv"
    header, first, *rest = train.read_text().splitlines()
    cells = first.split("\t")
    train.write_text("\n".join([header, "\t".join([*cells[:-1], "nan"]), *rest]) + "\n")
    return root


def _deep_squad(tmp: Path) -> Path:
    root = tmp / "squad-data"
    shutil.copytree(GLUE_TINY / "SQuAD", root / "SQuAD")
    for path in (root / "SQuAD").glob("*.json"):
        path.write_text("[" * 100_000 + "]" * 100_000)
    return root


def _store(tmp: Path) -> Path:
    """An MLflow store holding an experiment ``x`` with one finished trial run."""
    import logging

    from mlflow.entities import Metric, Param

    from istar_tune import tracking

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # the store's creation lines are not the command's
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = client.create_experiment("x", artifact_location=(tmp / "artifacts").as_uri())
    run = client.create_run(experiment, tags={tracking.TAG_ROLE: "trial", tracking.TAG_TRIAL_ID: "t1",
                                              tracking.TAG_STATUS: "finished", tracking.TAG_GROUP: "bert/rte/base"})
    client.log_batch(run.info.run_id, params=[Param("model", "bert"), Param("task", "rte"), Param("method", "base")],
                     metrics=[Metric("accuracy", 0.6, 0, 1)])
    return tmp / "mlflow.db"


MISSING_WORDS = ("does not exist", "not found", "no file matches", "no such", "missing", "is a folder",
                 "no MLflow store", "has no results in", "name a file such as", "cannot be resolved",
                 "cannot be written", "is not usable")
"""Words a clause uses when the path it names is not there (any other path it names must exist)."""
TEXT_ADVICE = ("latin-1", "encoding:")
"""Advice that holds only for a text file (never for a compressed, UTF-16 or binary one)."""
BINARY_MAGIC = (b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd", b"7z\xbc\xaf", b"\x1f\x8b", b"\xff\xfe", b"\xfe\xff",
                b"ARROW1", b"PAR1", b"PK\x03\x04")
EXCERPT_MOST = 90
"""A quoted cell is an excerpt: at most this many characters between its quotes."""


@functools.cache
def _vocabulary() -> set[str]:
    """The identifiers the tool itself may name: keys of a task definition, a run's settings, a search space, its
    metrics, the shipped spaces and the shipped tasks' classes."""
    from istar_tune.config import HYPERPARAMETER_KEYS, SETTING_KEYS
    from istar_tune.search.spaces.file import _TOP_KEYS
    from istar_tune.tasks import METRICS, get_task, task_names
    from istar_tune.tasks.definition import KEYS

    spaces = {p.stem for p in SMOKE.parent.glob("*.yaml")}
    classes = {name for task in task_names() for name in get_task(task).label_names}
    return (set(KEYS) | set(HYPERPARAMETER_KEYS) | set(SETTING_KEYS) | set(_TOP_KEYS) | spaces | classes
            | {m for names in METRICS.values() for m in names})


@functools.cache
def _flags() -> set[str]:
    import argparse

    from istar_tune.cli_parser import build_parser

    found: set[str] = set()

    def walk(parser):
        for action in parser._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)

    walk(build_parser())
    return found


def false_clauses(line: str, argv: list[str], tmp: Path) -> list[str]:
    """What a refusal says that is not so of the case it refuses (empty: every checked clause holds). Its reference
    is the input itself, not the code: the flags the parser has, the keys the docs list, the files on disk."""
    import re

    files = [p for p in tmp.rglob("*") if p.is_file() and p.stat().st_size < 4_000_000]
    given = " ".join(map(str, argv)) + "".join(p.read_bytes().decode("utf-8", "replace") for p in files)
    wrong = [f"flag {flag} does not exist" for flag in set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", line))
             - _flags()]
    names = set(re.findall(r"(?<![\w/.-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w/.-])", line))
    wrong += [f"{name!r} is neither the tool's key nor in the input" for name in names - _vocabulary()
              if name not in given]
    for clause in line.split("; "):
        for path in re.findall(re.escape(str(tmp)) + r"[^\s'\",:;()]*", clause):
            path = Path(path.rstrip("."))
            if not path.exists() and not any(word in clause for word in MISSING_WORDS):
                wrong.append(f"{path} is named as if it were there, and is not")
            if path.is_file() and any(advice in clause for advice in TEXT_ADVICE):
                head = path.read_bytes()[:4096]
                if head.startswith(BINARY_MAGIC) or b"\0" in head:
                    wrong.append(f"{path} is not a text file, and is told how to read text")
        if "hub data set" in clause and "hub" not in given and not any(
                arg in _shipped() for arg in map(str, argv)):
            wrong.append("a hub data set is named for a task that has none")
    wrong += [f"a quoted cell of {len(cell)} characters" for cell in re.findall(r"(?<!\w)'([^']*)'(?!\w)", line)
              if len(cell) > EXCERPT_MOST and not cell.startswith(str(tmp))]
    return wrong


@functools.cache
def _shipped() -> set[str]:
    from istar_tune.tasks import task_names

    return set(task_names())


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_one_line_and_creates_nothing(case, tmp_path, monkeypatch, capsys):
    import re

    monkeypatch.delenv("GLUE_DIR", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    make_argv, expected = CASES[case]
    argv = make_argv(tmp_path)
    before = _tree(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (out, err)
    assert len(lines) == 1 and lines[0].startswith("istar-tune: error: "), err
    assert re.search(expected, lines[0]), lines[0]
    assert _tree(tmp_path) == before  # no results folder, no store, no output
    assert not false_clauses(lines[0], argv, tmp_path), (false_clauses(lines[0], argv, tmp_path), lines[0])


def test_the_table_has_at_least_a_hundred_cases():
    assert len(CASES) >= 100


@pytest.mark.parametrize("case", ["data: a headerless file", "data: a list label (JSON)", "train: config unknown key"])
def test_a_refusal_is_one_line_from_the_installed_command(case, tmp_path):
    """The command as a user runs it, in its own process: what libraries print on import or on the way (a warning,
    a progress bar) is part of what the user reads, and in-process calls never see it."""
    import os
    import subprocess
    import sys

    work = tmp_path / "work"
    work.mkdir()
    make_argv, expected = CASES[case]
    argv = [arg for arg in make_argv(tmp_path) if arg != "--no-progress"]  # as typed: progress on by default
    env = {k: v for k, v in os.environ.items() if k not in ("GLUE_DIR", "MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    before = _tree(tmp_path)
    done = subprocess.run([str(Path(sys.executable).with_name("istar-tune")), *argv], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("istar-tune: error: "), done.stderr
    assert _tree(tmp_path) == before
