"""The suite's own assertions: none of them has a clause another clause of the same ``assert`` implies, so that
each clause can fail on its own (``"a" in t and "ab" in t`` is ``"ab" in t``; ``x == y or x.startswith(y)`` is
``x.startswith(y)``; a clause written twice says nothing twice, unless it calls something)."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _contains(node: ast.AST) -> tuple[str, str] | None:
    """``"literal" in <expr>`` as (literal, the expression's dump)."""
    if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In)
            and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
        return node.left.value, ast.dump(node.comparators[0])
    return None


def _equality(node: ast.AST) -> frozenset[str] | None:
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
        return frozenset({ast.dump(node.left), ast.dump(node.comparators[0])})
    return None


def _affix(node: ast.AST) -> frozenset[str] | None:
    """``a.startswith(b)`` / ``a.endswith(b)`` as {a, b}."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith") and len(node.args) == 1):
        return frozenset({ast.dump(node.func.value), ast.dump(node.args[0])})
    return None


def implied(first: ast.AST, second: ast.AST, conjunction: bool) -> bool:
    """Whether, in ``first and second`` (``conjunction``) or ``first or second``, one clause is implied by the
    other (or is the other)."""
    if ast.dump(first) == ast.dump(second):  # the same clause twice, unless it calls (a call may differ each time)
        return not any(isinstance(node, ast.Call) for node in ast.walk(first))
    a, b = _contains(first), _contains(second)
    if a and b and a[1] == b[1] and a[0] != b[0] and (a[0] in b[0] or b[0] in a[0]):
        return True  # the shorter literal is in the expression whenever the longer one is
    equal = _equality(first) or _equality(second)
    affix = _affix(second) if _equality(first) else _affix(first)
    return bool(equal and affix and equal == affix)  # equality implies the prefix (or suffix) test


def findings(source: str) -> list[int]:
    """The lines of asserts with a clause implied by another of the same assert."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.BoolOp):
            conjunction = isinstance(node.test.op, ast.And)
            if any(implied(x, y, conjunction) for x, y in itertools.combinations(node.test.values, 2)):
                found.append(node.lineno)
    return found


@pytest.mark.parametrize("source", [
    'assert "stopped early" in text and " 0 stopped early" in text',
    'assert str(e) == f"{p}: {said}" or str(e).startswith(f"{p}: {said}")',
    'assert x.endswith(y) and x == y',
    'assert a > 1 and a > 1',
])
def test_the_check_flags_a_clause_another_implies(source):
    assert findings(source) == [1]


@pytest.mark.parametrize("source", [
    'assert "started" in text and "finished" in text',
    'assert x == y or x.startswith(z)',
    'assert "a" in first and "ab" in second',
    'assert read() is False and read() is False',  # called twice on purpose: a call may answer differently
])
def test_the_check_leaves_independent_clauses_alone(source):
    assert findings(source) == []


def test_no_assert_in_the_suite_has_a_clause_another_implies():
    flagged = {str(path.relative_to(TESTS)): lines for path in sorted(TESTS.rglob("*.py"))
               if (lines := findings(path.read_text(encoding="utf-8")))}
    assert not flagged, flagged
