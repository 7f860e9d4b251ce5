"""Every MLflow UI link istar-tune writes opens in model-training mode (``workflowType=machine_learning``): MLflow
3.17 opens an experiment or a comparison in its GenAI mode otherwise. The links are found in the package's source
(each address fragment a string of ours writes) and the ones a function builds are built and read back."""

from __future__ import annotations

import ast
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from istar_tune import tracking
from istar_tune.results.aggregates import compare_link

PACKAGE = Path(tracking.__file__).resolve().parents[1]


def _link_strings() -> list[tuple[str, int, str]]:
    """Every string (or f-string) of the package that writes a UI address (``#/``), with its file and line; a
    docstring (a bare string statement) that only names the address's shape is not a link."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        bare = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
        for node in ast.walk(tree):
            written = isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant)
                                                          and isinstance(node.value, str))
            text = (ast.get_source_segment(source, node) or "") if written and id(node) not in bare else ""
            if "#/" in text:
                found.append((str(path.relative_to(PACKAGE)), node.lineno, text))
    return found


def test_every_link_the_package_writes_carries_model_training_mode():
    links = _link_strings()
    assert len({path for path, _, _ in links}) >= 3, links  # the shared view, the comparison, the demo's address
    for path, line, text in links:
        # The mode is added by the constant (or written out): each link's own expression, or its continuation.
        source = (PACKAGE / path).read_text(encoding="utf-8").splitlines()
        expression = " ".join(source[line - 1:line + 2])
        assert "MODEL_TRAINING" in expression or tracking.MODEL_TRAINING in expression, f"{path}:{line}: {text}"


def test_the_aggregates_comparison_link_opens_in_model_training_mode():
    link = compare_link("7", ["a", "b"])
    query = parse_qs(urlsplit(link.removeprefix("#")).query)
    assert query["workflowType"] == ["machine_learning"]
    assert query["runs"] == ['["a","b"]'] and query["experiments"] == ['["7"]']
