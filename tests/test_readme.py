"""The README is the first thing a user reads, and the pages it links the rest: their commands must exist and work."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from istar_tune import tracking
from istar_tune.cli import build_parser, main
from istar_tune.reference import configuration_reference
from istar_tune.search.spaces.file import resolve_space
from istar_tune.tracking.storage import default_tracking_uri

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = [ROOT / "README.md", *dict.fromkeys(ROOT / link for link in re.findall(r"\]\(([\w/.-]+\.md)\)", README))]
"""The README and the pages it links to, in its order: the documentation a user reads."""
DOCS = "\n".join(page.read_text(encoding="utf-8") for page in PAGES if page.is_file())


def _blocks() -> list[list[str]]:
    return [[line.strip() for line in block.strip().splitlines() if line.strip()]
            for block in re.findall(r"```bash\n(.*?)```", DOCS, re.S)]


def test_the_readme_is_a_first_page_and_every_page_it_links_exists():
    assert len(README.splitlines()) <= 200
    assert all(page.is_file() for page in PAGES), [str(p) for p in PAGES if not p.is_file()]
    written = {*(ROOT / "docs").glob("*.md"), ROOT / "benchmarks" / "README.md", ROOT / "SECURITY.md"}
    assert written <= set(PAGES), "link every page from the README's table"
    for page in PAGES:  # relative links inside the pages resolve too
        for link in re.findall(r"\]\(([\w/.-]+\.(?:md|png))\)", page.read_text(encoding="utf-8")):
            assert (page.parent / link).is_file(), (page.name, link)


def test_the_readme_reads_as_a_first_page_not_a_lab_notebook():
    """No paragraph over 700 characters, no table cell over 300, and no timing of the test suite or CI (those live in
    benchmarks/README.md)."""
    prose = [p for p in re.split(r"\n\s*\n", README) if not p.lstrip().startswith(("```", "|"))]
    assert [p[:60] for p in prose if len(p) > 700] == []
    cells = [cell.strip() for line in README.splitlines() if line.startswith("|") for cell in line.split(" | ")]
    assert [c[:60] for c in cells if len(c) > 300] == []
    timed = [line for line in README.splitlines() if re.search(r"(make test|\.ci/run|suite|CI)\b.*\b\d+(\.\d+)? "
                                                                 r"(s|seconds|minutes?)\b", line)]
    assert timed == []


def _commands(prefix: str) -> list[list[str]]:
    out = []
    for block in _blocks():
        for line in block:
            words = shlex.split(line.split("  #")[0])
            while words and "=" in words[0] and not words[0].startswith("-"):
                words = words[1:]  # leading VAR=value assignments
            if words and words[0] == prefix:
                out.append(words[1:])
    return out


def test_quick_start_is_two_commands_and_ci_runs_the_second():
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    block = re.search(r"```bash\n(.*?)```", quick, re.S).group(1).strip().splitlines()
    assert [line.split("#")[0].strip() for line in block] == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo:", "test:", "install:"):
        assert re.search(rf"^{target}", makefile, re.M)
    assert "torch==2.13.0" in makefile  # the CPU wheel is installed before anything can pull another build


def test_configuration_reference_is_current():
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    section = reference.split("<!-- reference:start -->", 1)[1].split("<!-- reference:end -->", 1)[0]
    assert section.strip() == configuration_reference().strip(), "run: istar-tune reference, and paste it"


def test_every_istar_tune_command_in_the_readme_parses():
    commands = _commands("istar-tune")
    assert {c[0] for c in commands} >= {"train", "search", "table", "plots", "analyze"}
    parser = build_parser()
    for argv in commands:
        parser.parse_args(argv)  # an unknown flag exits with SystemExit


def test_files_and_tools_the_readme_names_exist():
    for path in re.findall(r"`((?:search_spaces|jobs|benchmarks|istar_tune)/[\w./-]+)`", DOCS):
        assert (ROOT / path).exists(), path
    for argv in _commands("jobs/submit.sh"):  # its arguments are `istar-tune search`'s
        args = build_parser().parse_args(["search", *argv])
        assert all(resolve_space(space).is_file() for space in args.space)
    for argv in _commands("python"):
        assert (ROOT / argv[0]).is_file()
    assert _commands("mlflow") and _commands("mlflow")[0][:2] == ["ui", "--backend-store-uri"]


def _smoke(glue_tiny, argv: list[str], tmp_path: Path) -> list[str]:
    """A README command in a form that runs here in seconds."""
    command, rest = argv[0], list(argv[1:])
    if command == "search":
        return ["search", *rest, "--dry-run", "--storage-path", str(tmp_path / "runs")]
    if command == "train":
        return ["train", *rest, "--data-dir", str(glue_tiny), "--max-train-samples", "32", "--max-eval-samples", "16",
                "--epochs", "1", "--max-length", "32", "--no-progress", "--output-dir", str(tmp_path / "train")]
    if command == "analyze":
        return ["analyze", str(tmp_path / "train"), *rest[1:], "--max-eval-samples", "16"]
    if command == "replay":
        return ["replay", *rest, "--replays", "2", "--no-mlflow", "--storage-path", str(tmp_path / "runs")]
    if command in ("table", "plots", "status", "export"):
        rest = [str(tmp_path / Path(a).name) if i and rest[i - 1] in ("--output", "--output-dir") else a
                for i, a in enumerate(rest)]
        rest = [a for a in rest if a != "--watch" and not (rest.index(a) > 0 and rest[rest.index(a) - 1] == "--watch")]
        return [command, *rest, "--storage-path", str(tmp_path / "runs")]
    raise AssertionError(f"no smoke form for README command {command}")


@pytest.fixture
def stores(log_trial, tmp_path):
    """The MLflow experiments the README's table and plot commands read, with a few runs each."""

    (tmp_path / "runs").mkdir()
    client = tracking.client(default_tracking_uri(tmp_path / "runs"))
    for name in ("smoke", "first-hour", "paper-istar", "paper-seeds", "paper-figure3", "rehearsal", "reviews-search",
                 "minilm-sst2", "minilm-sst2-seeds"):
        exp = tracking.ensure_experiment(client, name, str(tmp_path / "runs" / "mlartifacts"))
        tracking.parent_run(client, exp, name, {})
        for seed in (1, 2):
            log_trial(client, exp, f"{name}-{seed}", "bert", "rte", "istar",
                   {"accuracy": [0.6 + seed / 100], "eval_isoscore_star": [0.1]}, lam=-1.0, zeta=0.8, seed=seed)
    rehearsal = client.get_experiment_by_name("rehearsal").experiment_id
    for run in tracking.find_runs(client, rehearsal, **{tracking.TAG_ROLE: "trial"}):
        client.set_tag(run.info.run_id, tracking.TAG_SIMULATED, "true")
    for name in ("paper-seeds", "paper-figure3", "minilm-sst2-seeds"):  # seeds stages
        for run in tracking.find_runs(client, client.get_experiment_by_name(name).experiment_id,
                                      **{tracking.TAG_ROLE: "trial"}):
            client.set_tag(run.info.run_id, tracking.TAG_STAGE, "seeds")
    return tmp_path


def _own_task_files(folder: Path) -> None:
    """What the README's "Your own task" section writes (its data and its YAML files), in ``folder``."""
    import subprocess
    import sys

    section = (ROOT / "docs" / "tasks.md").read_text(encoding="utf-8").split("## Your own task", 1)[1].split(
        "\n## ", 1)[0]
    for language, block in re.findall(r"```(python|yaml)\n(.*?)```", section, re.S):
        if language == "python":
            glue = folder.parent / "shared" / "data" / "glue"  # the clone's GLUE copy, as an offline user names it
            subprocess.run([sys.executable, "-c", block], cwd=folder, check=True,
                           env={**os.environ, "GLUE_DIR": str(glue)})
        else:
            path = folder / block.splitlines()[0][2:]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block, encoding="utf-8")


def test_every_istar_tune_command_in_the_readme_runs_in_smoke_form(glue_tiny, stores, capsys, monkeypatch):
    clone = stores / "clone"  # laid out as a clone with ../shared beside it
    clone.mkdir()
    for name in ("search_spaces", "jobs", "benchmarks", "docs"):
        (clone / name).symlink_to(ROOT / name)
    (stores / "shared").symlink_to(ROOT.parent / "shared")
    _own_task_files(clone)
    monkeypatch.chdir(clone)
    order = {"search": 0, "train": 1, "analyze": 2, "table": 3, "plots": 4, "status": 5, "replay": 6, "export": 7}
    for argv in sorted(_commands("istar-tune"), key=lambda a: order[a[0]]):
        if argv[0] == "train" and "--config" in argv:
            continue  # a file `table --format yaml` wrote: tests/docs/ run the pair verbatim
        if "--strategy-from" in argv:
            continue  # needs a decided replay of its grid: tests/replay/test_run.py runs the pair on a rehearsal
        smoke = _smoke(glue_tiny, argv, stores)
        assert main(smoke) == 0, (smoke, capsys.readouterr().err)
    out = capsys.readouterr().out
    assert "total 648 configurations in 216 trials" in out and "total 27 configurations in 9 trials" in out


def test_the_shipped_spaces_table_states_what_each_space_plans():
    from istar_tune.methods import METHODS
    from istar_tune.search.spaces.file import load_search_space

    concepts = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+\.yaml)` \| .*? \| ([^|]+) \|$", concepts, re.M)
    assert len(rows) == len(list((ROOT / "search_spaces").glob("*.yaml")))  # every shipped space, once
    labels = {m.label: name for name, m in METHODS.items()}
    for file, stated in rows:
        space = load_search_space(ROOT / "search_spaces" / file)
        groups = space.groups()
        per_method = re.findall(r"(\d+) ([A-Z][\w-]*)", stated)  # "2 Base + 4 I-STAR" (counts may repeat)
        if per_method:
            counts = {labels[label]: int(n) for n, label in per_method}
            assert {g.method: space.trials_in(g) for g in groups} == counts, file
            continue
        first = re.match(r"(\d+)(?: \((\d+)\))?", stated.strip())
        assert first, (file, stated)
        group = groups[0]
        assert space.trials_in(group) == int(first.group(1)), (file, stated)
        if first.group(2):
            assert space.tune_trials_in(group) == int(first.group(2)), (file, stated)
        for model, n in re.findall(r"\((\w+): (\d+)\)", stated):  # "(DistilBERT: 35)"
            assert space.trials_in(next(g for g in groups if g.model == model.lower())) == int(n), (file, stated)


def test_the_deviations_table_names_every_known_deviation():
    rows = [line for line in (ROOT / "docs" / "deviations.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and not line.startswith("| what") and not line.startswith("| ---")]
    assert all(line.count(" | ") == 3 for line in rows), "each row: what | paper / released code | istar-tune | why"
    named = {"IsoLayer's joint loss": "alpha", "RoBERTa-large's frozen IsoLayer head": "two layers",
             "eval IsoScore\\* with `layer` set": "that layer", "(`star_sigma`)": "star_sigma: training",
             '"exact"': "deterministic: true", "the data order of each epoch": "random_streams.py",
             "padding in the I-STAR point cloud": "include_padding"}
    for what, says in named.items():
        assert any(line.startswith(f"| {what}") or what in line.split(" | ")[0] for line in rows), what
        assert any(says in line for line in rows if what in line.split(" | ")[0]), (what, says)
