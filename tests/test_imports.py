"""The house's import graph: no cycles among istar_tune's modules (imports at module level)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "istar_tune"


def _graph() -> dict[str, set[str]]:
    modules = {path.stem for path in PACKAGE.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.glob("*.py"):
        edges = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:  # module level only: lazy imports may cross
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("istar_tune"):
                parts = node.module.split(".")
                if len(parts) > 1:
                    edges.add(parts[1])
                else:
                    edges |= {alias.name for alias in node.names if alias.name in modules}
            elif isinstance(node, ast.Import):
                edges |= {a.name.split(".")[1] for a in node.names if a.name.startswith("istar_tune.")}
        graph[path.stem] = edges & modules - {path.stem}
    return graph


def test_no_import_cycle():
    graph, state, path = _graph(), {}, []

    def visit(module: str) -> None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            assert state.get(target) != "open", f"import cycle: {' -> '.join(path[path.index(target):] + [target])}"
            if target not in state:
                visit(target)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert graph["train"] >= {"isolayer", "forward"} and "train" not in graph["isolayer"]  # stage 2: train → isolayer


def test_the_check_finds_a_cycle(monkeypatch):
    import pytest

    monkeypatch.setattr(__import__(__name__), "_graph", lambda: {"a": {"b"}, "b": {"a"}, "train": {"isolayer",
                                                                                               "forward"},
                                                                 "isolayer": set(), "forward": set()})
    with pytest.raises(AssertionError, match="import cycle: a -> b -> a"):
        test_no_import_cycle()
