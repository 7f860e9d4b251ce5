"""The configuration reference: every hyperparameter, run setting and search-space key with its default and
meaning, generated from the config dataclasses' field docstrings (:class:`~istar_tune.search.spaces.space.SearchSpace`'s
for the search-space keys; ``istar-tune reference`` prints it; ``docs/reference.md`` is this text, and a test keeps
them equal).
The CLI's flags take their help from the same docstrings.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from istar_tune.config import Hyperparameters, RunSettings, load_yaml
from istar_tune.docstrings import field_docs
from istar_tune.search.spaces.file import SPACE_KEYS
from istar_tune.tasks.definition import KEY_DOCS
from istar_tune.tasks.labels import CLASS_RULE

NEGATED_FLAGS = {"progress", "save_checkpoint"}  # booleans that default to true: --no-progress, --no-save-checkpoint
ALIASES = {"learning_rate": ["--lr"], "isolayer_learning_rate": ["--isolayer-lr"]}


def add_config_flags(parser: argparse.ArgumentParser, cls: type, title: str) -> None:
    """A flag per field of ``cls`` (``--learning-rate``, ``--no-progress``), its help the field's docstring."""
    group = parser.add_argument_group(title)
    # plain text, not reST; a percent sign doubled, as argparse formats a help text with %-style fields
    docs = {name: text.replace("``", "").replace("%", "%%") for name, text in field_docs(cls).items()}
    for f in fields(cls):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            if f.name in NEGATED_FLAGS:
                doc = docs.get(f.name, "")
                group.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_const",
                                   const=False, default=None,
                                   help=f"switch this off (it is on by default): {doc[:1].lower()}{doc[1:]}")
            else:
                group.add_argument(flag, dest=f.name, action="store_const", const=True, default=None,
                                   help=docs.get(f.name, ""))
            continue
        group.add_argument(flag, *ALIASES.get(f.name, []), dest=f.name, default=None, metavar="VALUE",
                           help=f"{docs.get(f.name, '')} (default: {str(f.default).replace('%', '%%')})")


def collect_config(args: argparse.Namespace, config_file: str | None) -> dict[str, Any]:
    """The values of a ``--config`` file with the flags given on top."""
    values = dict(load_yaml(config_file)) if config_file else {}
    for cls in (Hyperparameters, RunSettings):
        for f in fields(cls):
            given = getattr(args, f.name, None)
            if given is not None:
                values[f.name] = given
    return values


def strategies(key: str) -> str:
    """For ``search.algorithm`` and ``scheduler.type``: each registered choice with its one line (from the
    registries, so a backend or scheduler of one's own is listed too)."""
    from istar_tune.search import backends, schedulers

    registry = {"search.algorithm": backends, "scheduler.type": schedulers}.get(key)
    if registry is None:
        return ""
    return " Choices: " + "; ".join(f"`{name}`, {item.summary}" for name, item in registry.registered().items()) + "."


def configuration_reference() -> str:
    """The configuration reference (docs/reference.md), generated from the config dataclasses' field docstrings."""
    def table(cls) -> list[str]:
        docs = field_docs(cls)
        lines = ["| key | flag | default | meaning |", "| --- | --- | --- | --- |"]
        for f in fields(cls):
            flag = ("--no-" if f.name in NEGATED_FLAGS else "--") + f.name.replace("_", "-")
            lines.append(f"| `{f.name}` | `{flag}` | `{f.default}` | {docs.get(f.name, '')} |")
        return lines

    out = ["## Hyperparameters (searchable; `istar-tune train` flags, search-space `hyperparameters`)", ""]
    out += table(Hyperparameters)
    out += ["", "## Run settings (`istar-tune train` flags, search-space `settings`)", ""]
    out += table(RunSettings)
    out += ["", "## Search spaces (`search_spaces/*.yaml`)", "", "| key | default | meaning |", "| --- | --- | --- |"]
    out += [f"| `{key}` | {default} | {meaning}{strategies(key)} |"
            for key, (_, default, meaning) in SPACE_KEYS.items()]
    out += ["", "## Task definitions (a task's YAML file, or inline under a search space's `tasks`)", "",
            "| key | meaning |", "| --- | --- |"]
    out += [f"| `{key}` | {meaning} |" for key, meaning in KEY_DOCS.items()]
    out += ["", "## What a class is (the label rule, without `label_names`)", "", CLASS_RULE.strip()]
    return "\n".join(out) + "\n"
