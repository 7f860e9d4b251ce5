"""The docstring under each field of a dataclass: the one text of what a setting, a hyperparameter or a search-space
key means (docs/reference.md, the CLI's help and the validator's key lists all read it)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import cache


@cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each dataclass field (the configuration reference, the CLI's
    help and the search-space keys are generated from these)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, following in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant) and isinstance(following.value.value, str)):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs
