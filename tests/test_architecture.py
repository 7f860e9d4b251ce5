"""The house rules, read from the code: floors (ARCHITECTURE.md's table), no import circle, module and function
sizes, light imports where they are promised, and a test module for each module with logic."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "istar_tune"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def floors(text: str) -> dict[str, int]:
    """Module → floor, from the floors table of ARCHITECTURE.md (`x.py` is a module, `pkg/` every module in it)."""
    table = {}
    for row in re.findall(r"^\| (\d+)\. [^|]+\| ([^|]+) \|", text, flags=re.M):
        floor, cell = int(row[0]), row[1]
        for item in re.findall(r"`([^`]+)`", cell):
            if item.endswith("/"):
                prefix = "istar_tune." + item.rstrip("/").replace("/", ".")
                table.update({m: floor for m in MODULES if m == prefix or m.startswith(prefix + ".")})
            else:
                name = "istar_tune." + item.removesuffix(".py").replace("/", ".")
                table["istar_tune" if name == "istar_tune.__init__" else name] = floor
    return table


def imports(path: Path) -> set[str]:
    """The package's modules ``path`` imports, at any depth (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "istar_tune":
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "istar_tune"}
    return found


def graph() -> dict[str, set[str]]:
    return {name: imports(path) - {name} for name, path in MODULES.items()}


def upward(edges: dict[str, set[str]], floor_of: dict[str, int]) -> list[str]:
    return sorted(f"{a} (floor {floor_of[a]}) imports {b} (floor {floor_of[b]})"
                  for a, targets in edges.items() for b in targets if floor_of[b] > floor_of[a])


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the path around it; None when there is none."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_every_module_has_one_floor_in_architecture_md():
    table = floors((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    assert sorted(set(MODULES) - set(table)) == [], "add these modules to the floors table of ARCHITECTURE.md"
    assert sorted(set(table) - set(MODULES)) == [], "the floors table names modules that do not exist"


def test_no_import_points_up_or_around_in_a_circle():
    table = floors((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    edges = graph()
    assert upward(edges, table) == []
    assert cycle(edges) is None


def test_the_results_read_mlflow_and_never_reach_into_the_search():
    """results/ sits above search/ on the floors, but reads only what the search wrote (MLflow): a table, an export
    or a status never imports the search's modules."""
    edges = graph()
    reaching = sorted(f"{module} imports {target}" for module, targets in edges.items()
                      if module.startswith("istar_tune.results.") for target in targets
                      if target.startswith("istar_tune.search"))
    assert reaching == []


def test_the_checks_find_a_planted_circle_and_a_planted_upward_import():
    planted = {"istar_tune.a": {"istar_tune.b"}, "istar_tune.b": {"istar_tune.c"}, "istar_tune.c": {"istar_tune.a"}}
    assert cycle(planted) == ["istar_tune.a", "istar_tune.b", "istar_tune.c", "istar_tune.a"]
    edges = {**graph(), "istar_tune.metrics": {"istar_tune.results.tables"}}
    table = floors((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    assert upward(edges, table) == ["istar_tune.metrics (floor 1) imports istar_tune.results.tables (floor 6)"]


def test_the_floors_table_reads_packages_and_files(tmp_path):
    text = "| 0. facts | `errors.py` | x |\n| 3. one run | `training/` | y |\n"
    table = floors(text)
    assert table["istar_tune.errors"] == 0 and table["istar_tune.training.loop"] == 3
    assert table["istar_tune.training"] == 3


def test_imports_inside_functions_are_read(tmp_path):
    source = tmp_path / "module.py"
    source.write_text("from istar_tune import tracking\n\n\ndef f():\n    from istar_tune.search import preflight\n"
                      "    import istar_tune.results.tables\n")
    assert imports(source) == {"istar_tune.tracking", "istar_tune.search.preflight", "istar_tune.results.tables"}


def too_long(modules: dict[str, Path]) -> tuple[dict[str, int], dict[str, int]]:
    """The modules over :data:`MAX_MODULE_LINES` lines and the functions over :data:`MAX_FUNCTION_LINES`."""
    long_modules = {name: n for name, path in modules.items()
                    if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    long_functions = {}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    long_functions[f"{name}.{node.name}"] = n
    return long_modules, long_functions


def test_modules_and_functions_fit_one_sitting():
    assert too_long(MODULES) == ({}, {})


BENCHMARKS = {module_name(path): path for path in (ROOT / "benchmarks").rglob("*.py")}


def local_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that module ``name`` (at ``path``) imports, absolutely or relatively, at any
    depth."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            source = node.module if node.level == 0 else ".".join(filter(None, (base, node.module)))
            for alias in node.names:
                full = f"{source}.{alias.name}"
                found.add(full if full in modules else source)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {m for m in found if m in modules and m != name}


def test_the_benchmarks_fit_one_sitting_and_import_in_no_circle():
    """The package's size, function-length and circle rules hold for ``benchmarks/`` too, whose modules import one
    another as a package (``python -m benchmarks.device``), never through ``sys.path`` edits."""
    assert len(BENCHMARKS) > 20 and too_long(BENCHMARKS) == ({}, {})
    edges = {name: local_imports(name, path, BENCHMARKS) for name, path in BENCHMARKS.items()}
    assert edges["benchmarks.device.sections.step"] >= {"benchmarks.device.common", "benchmarks.bench_step"}
    assert cycle(edges) is None
    edits = [f"{name}:{number}" for name, path in BENCHMARKS.items()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if re.search(r"sys\.path\.(insert|append)", line)]
    assert edits == []


def test_relative_imports_are_resolved_and_a_planted_circle_found(tmp_path):
    (tmp_path / "a.py").write_text("from ..common import table\nfrom ... import bench_step\n")
    modules = {"benchmarks.device.sections.a": tmp_path / "a.py", "benchmarks.device.common": tmp_path / "c.py",
               "benchmarks.bench_step": tmp_path / "b.py"}
    assert local_imports("benchmarks.device.sections.a", tmp_path / "a.py", modules) == {
        "benchmarks.device.common", "benchmarks.bench_step"}
    edges = {"benchmarks.device.common": {"benchmarks.device.sections.a"},
             "benchmarks.device.sections.a": {"benchmarks.device.common"}}
    assert cycle(edges) is not None


LIGHT = ["istar_tune", "istar_tune.config", "istar_tune.tracking", "istar_tune.results.tables",
         "istar_tune.results.status", "istar_tune.search.spaces.file", "istar_tune.search.plan",
         "istar_tune.search.tune.simulate", "istar_tune.search.run", "istar_tune.cli"]


def test_light_modules_load_neither_torch_nor_ray():
    code = (f"import sys, {', '.join(LIGHT)}; "
            "print(sorted(m for m in ('torch', 'ray', 'transformers', 'datasets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_data_package_reads_without_torch_ray_or_transformers():
    """data/ sits below training/: reading and checking a task's data loads none of the training stack."""
    modules = sorted(name for name in MODULES if name.startswith("istar_tune.data."))
    code = (f"import sys, {', '.join(modules)}; "
            "print(sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert len(modules) > 10 and out.strip() == "[]"


def _has_logic(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, (ast.FunctionDef, ast.ClassDef)) for node in tree.body)


@pytest.mark.parametrize("name", sorted(n for n, p in MODULES.items() if p.stem not in ("__init__", "__main__")))
def test_each_module_with_logic_has_its_test_module(name):
    path = MODULES[name]
    if not _has_logic(path):
        pytest.skip(f"{name} holds no function or class")
    relative = path.relative_to(PACKAGE)
    expected = ROOT / "tests" / relative.parent / f"test_{relative.stem}.py"
    assert expected.is_file(), f"{name} has logic but no {expected.relative_to(ROOT)}"


def test_no_test_imports_another_test_file():
    offenders = []
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.ImportFrom) and node.module
                    and node.module.split(".")[-1].startswith(("test_", "conftest"))):
                offenders.append(f"{path.relative_to(ROOT)}: from {node.module}")
            elif isinstance(node, ast.Import):
                offenders += [f"{path.relative_to(ROOT)}: import {a.name}" for a in node.names
                              if a.name.split(".")[-1].startswith(("test_", "conftest"))]
    assert offenders == []


UNPICKLING = {"istar_tune/search/tune/searcher.py", "istar_tune/search/tune/scheduler.py",
              "istar_tune/search/tune/state.py"}
"""The only modules that unpickle: Tune saves and restores a searcher's and a scheduler's state through them, and
``--resume`` reads Tune's state back before restoring it (Ray Tune pickles its experiment state anyway); SECURITY.md
says the storage path must be trusted for that reason."""


def test_checkpoints_load_as_data_only_and_pickle_is_read_only_where_the_readme_says():
    loads, unpickles = [], []
    for path in PACKAGE.rglob("*.py"):
        relative = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = getattr(node.func.value, "id", "")
                if (owner, node.func.attr) == ("torch", "load"):
                    safe = any(k.arg == "weights_only" and getattr(k.value, "value", None) is True
                               for k in node.keywords)
                    loads.append((relative, safe))
                elif (owner, node.func.attr) in (("pickle", "load"), ("pickle", "loads")):
                    unpickles.append(relative)
    assert loads and all(safe for _, safe in loads), loads
    assert set(unpickles) <= UNPICKLING
    assert "storage path must be trusted" in (ROOT / "SECURITY.md").read_text(encoding="utf-8")


def backslash_continuations(path: Path) -> list[int]:
    """Lines of ``path`` that end in a backslash joining them to the next, outside string literals."""
    import io
    import tokenize

    text = path.read_text(encoding="utf-8")
    inside = set()  # lines a string token spans all the way to their end
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.STRING or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            inside.update(range(token.start[0], token.end[0]))
    return [number for number, line in enumerate(text.splitlines(), start=1)
            if line.rstrip().endswith("\\") and number not in inside and not line.lstrip().startswith("#")]


def test_no_backslash_line_continuations():
    """Long expressions break inside brackets, as the codebases we admire write Python: the package, its tests and
    its benchmarks."""
    found = [f"{path.relative_to(ROOT)}:{number}" for folder in ("istar_tune", "tests", "benchmarks")
             for path in sorted((ROOT / folder).rglob("*.py")) for number in backslash_continuations(path)]
    assert found == []


def test_the_continuation_check_finds_a_planted_one_and_skips_strings(tmp_path):
    source = tmp_path / "module.py"
    source.write_text('TEXT = """\\\nline\\\n"""\nx = 1 + \\\n    2\ny = (1 +\n     2)\n')
    assert backslash_continuations(source) == [4]


def test_the_sigma_s_budget_is_written_once():
    written = [f"{name}:{number}" for name, path in MODULES.items()
               for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
               if "250_000" in line or "250000" in line]
    assert len(written) == 1 and written[0].startswith("istar_tune.methods:")


def test_only_the_configuration_module_defines_the_keys_a_search_adds_to_a_trials_configuration():
    from istar_tune import trial_config

    keys = {trial_config.SEARCH_KEY, trial_config.SHARED_EPOCHS_KEY, trial_config.TASK_DEFINITION_KEY}
    package = PACKAGE
    found = []
    for path in package.rglob("*.py"):
        if path.name == "trial_config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in keys:
                found.append(f"{path.relative_to(package)}:{node.lineno}")
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in (
                    keys - {"search"}):
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert not found, f"trial keys defined or spelled outside istar_tune/trial_config.py: {found}"


def test_where_things_go_names_only_files_and_names_that_exist():
    """ARCHITECTURE.md's "Where things go": every file it names exists, and every `module.name` is defined there."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## Where things go", 1)[1].split("\n## ", 1)[0]
    from istar_tune.search.spaces.file import SPACE_KEYS

    checked, wrong = 0, []
    for token in re.findall(r"`([^`\s]+)`", section):
        if token in SPACE_KEYS:  # a search space's YAML key (`search.algorithm`), not a module's name
            continue
        if token.endswith(".py"):
            checked += 1
            if not ((ROOT / "istar_tune" / token).is_file() or (ROOT / token).is_file()):
                wrong.append(token)
            continue
        found = re.fullmatch(r"([\w/]+)\.([A-Za-z_]\w*)", token)
        if found is None:
            continue
        module = found.group(1).removesuffix("/__init__")
        if not ((ROOT / "istar_tune" / f"{module}.py").is_file() or (ROOT / "istar_tune" / module / "__init__.py")
                .is_file()):
            continue
        checked += 1
        if not hasattr(importlib.import_module("istar_tune." + module.replace("/", ".")), found.group(2)):
            wrong.append(token)
    assert checked > 30 and wrong == []


def unnamed_in_docstring(package: Path) -> list[str]:
    """The modules and subpackages of ``package`` its ``__init__`` docstring does not name (as ``name`` or
    ``name/``)."""
    text = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    found = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    found += [p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    return sorted(name for name in found if f"``{name}``" not in text and f"``{name}/``" not in text)


@pytest.mark.parametrize("package", sorted(str(p.parent.relative_to(ROOT)) for folder in (PACKAGE, ROOT / "benchmarks")
                                           for p in folder.rglob("__init__.py") if p.parent != PACKAGE))
def test_each_package_names_every_module_of_it_in_its_docstring(package):
    assert unnamed_in_docstring(ROOT / package) == [], f"{package}/__init__.py's docstring says nothing of these"


def test_the_docstring_check_finds_a_module_left_unnamed(tmp_path):
    (tmp_path / "__init__.py").write_text('"""A package: ``told`` and ``inner/``."""\n')
    for name in ("told.py", "untold.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "__init__.py").write_text("")
    assert unnamed_in_docstring(tmp_path) == ["untold"]
