"""Reading YAML files as people write them: YAML 1.2 floats (``1e-5`` is a number) and integers (``010`` is ten, not
YAML 1.1's octal eight; ``1:30`` and ``1_000`` are text, not 90 and 1000), a key given twice refused, the
size and the alias expansion of a file bounded. Every YAML file the package reads (configs, search spaces, task
definitions) goes through :func:`load_yaml`, and every value a typed field reads through :func:`coerce_value`.
"""

from __future__ import annotations

import math
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from istar_tune.errors import ConfigError

MAX_YAML_BYTES = 1 << 20
"""The largest config or search-space file read (1 MiB: the paper's grids take a few hundred bytes)."""
MAX_YAML_NODES = 1_000_000
"""The most values a YAML file may hold, aliases followed (a 100,000-point grid holds 100,000)."""


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's float syntax: ``1e-5`` and ``3E+2`` are numbers, as people write
    them (YAML 1.1, PyYAML's default, reads them as strings because they lack a dot); a key given twice in one
    mapping is an error, as YAML 1.2 says (PyYAML keeps the last one silently)."""

    def construct_document(self, node):
        """Refuse a document whose aliases expand past :data:`MAX_YAML_NODES` (a "billion laughs" file) before
        building any of it."""
        sizes: dict[int, int] = {}

        def size(item) -> int:
            if id(item) not in sizes:
                sizes[id(item)] = 0  # a recursive alias counts once
                children = item.value if isinstance(item.value, list) else []
                flat = [c for pair in children for c in (pair if isinstance(pair, tuple) else (pair,))]
                sizes[id(item)] = 1 + sum(size(child) for child in flat)
            return sizes[id(item)]

        if size(node) > MAX_YAML_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"it expands to more than {MAX_YAML_NODES:,} values (aliases followed)", node.start_mark)
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults` merges; its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice in one mapping: keep one", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


INT = "tag:yaml.org,2002:int"
_Yaml12Loader.yaml_implicit_resolvers = {  # YAML 1.1's integers out: 010 is not octal 8, 1:30 not 90, 1_000 is text
    first: [(tag, pattern) for tag, pattern in resolvers if tag != INT]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Yaml12Loader.add_implicit_resolver(INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
                                    list("-+0123456789"))


def _construct_int(loader: _Yaml12Loader, node) -> int:
    """A YAML 1.2 integer: decimal (a leading zero changes nothing: ``010`` is 10), ``0o`` octal, ``0x`` hex."""
    text = loader.construct_scalar(node)
    base = {"0o": 8, "0x": 16}.get(text[:2], 10)
    return int(text[2:] if base != 10 else text, base)


_Yaml12Loader.add_constructor(INT, _construct_int)
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                  |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                  |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                  |[-+]?\.(?:inf|Inf|INF)
                  |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from ``path``; a clear error for a missing file or a file that is not a mapping."""
    path = Path(path)
    if not path.is_file():
        what = "is a folder, not a YAML file" if path.is_dir() else "does not exist"
        raise ConfigError(f"config file {str(path)!r} {what}")
    if path.stat().st_size > MAX_YAML_BYTES:
        raise ConfigError(f"{path}: {path.stat().st_size:,} bytes; a config or search space is at most "
                          f"{MAX_YAML_BYTES:,} bytes")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Yaml12Loader)  # noqa: S506 - a safe loader
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a text file (byte 0x{err.object[err.start]:02x} at offset {err.start} is not "
                          "UTF-8): give a YAML file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(err, 'problem', err)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys to values, got {type(data).__name__}")
    return data


def coerce_value(name: str, hint: Any, value: Any) -> tuple[Any, str | None]:
    """Coerce ``value`` to ``hint`` (int, float, bool, str, X | None); return (value, problem or None)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
            return None, None
        return coerce_value(name, args[0], value)
    if hint is bool:
        if isinstance(value, bool):
            return value, None
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true", None
        return value, f"{name} must be true or false, got {value!r}"
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value, None
        if isinstance(value, float) and value.is_integer():
            return int(value), None
        if isinstance(value, str):
            try:
                return int(value), None
            except ValueError:
                pass
        return value, f"{name} must be an integer, got {value!r}"
    if hint is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            return value, f"{name} must be a number, got {value!r}"
        if not math.isfinite(number):  # one rule for every float: NaN passes no comparison, inf none that matters
            return value, f"{name} must be a finite number, got {value!r}"
        return number, None
    if hint is str:
        if isinstance(value, (str, Path)):
            return str(value), None
        return value, f"{name} must be a string, got {value!r}"
    return value, None
