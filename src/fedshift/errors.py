"""The ground floor of configuration handling: the error every check raises and the one strict YAML reader.

Every layer imports these (algorithms' plug-in loader, the data registry, the papers, validation), so this module
imports nothing of fedshift and nothing heavier than PyYAML. :mod:`fedshift.config` (the schema checks) re-exports
both names for older importers.

YAML is read as strictly as the schema checks the values: a key given twice in one mapping (at the top level,
nested, or in a JSON file, which YAML's parser reads too) is refused naming the file, line and key, where plain
PyYAML and Snakemake keep the last value silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["ConfigError", "SAFE_LOADER", "StrictLoader", "load_yaml", "parse_yaml"]

#: PyYAML's safe loader on libyaml's C parser where PyYAML was built with it: the same safe constructors and YAML 1.1
#: resolver as ``yaml.SafeLoader``, and ~8× less CPU on the workflow's 23 config and schema files (0.27 → 0.03 s).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ConfigError(ValueError):
    """An invalid configuration; the message names the offending key path (or file and line)."""


def _duplicate_check(loader: Any, node: yaml.MappingNode) -> None:
    """Raise a ``ConstructorError`` at the second occurrence of a key of mapping ``node`` (merge keys ``<<`` aside)."""
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: the constructor's own error follows
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"duplicate key {key!r} (first given on line {first}; YAML would keep the last one silently)",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line + 1


class StrictLoader(SAFE_LOADER):  # type: ignore[misc,valid-type]
    """:data:`SAFE_LOADER` that refuses a key given twice in one mapping (``ConstructorError`` at the second one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            _duplicate_check(self, node)
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str) -> Any:
    """Parse YAML (or JSON) text with :class:`StrictLoader`.

    Raises
    ------
    yaml.YAMLError
        For a syntax error, or a ``ConstructorError`` for a duplicate key (its ``problem_mark`` at the second one).
    """
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a safe loader


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file (safe loader: plain data only; a duplicate key is refused).

    Raises
    ------
    ConfigError
        For a key given twice in one mapping, naming the file, line and key.
    """
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        return parse_yaml(text)
    except yaml.constructor.ConstructorError as err:
        if "duplicate key" not in str(err.problem):
            raise
        mark = err.problem_mark
        raise ConfigError(f"config file {path}, line {mark.line + 1} column {mark.column + 1}: {err.problem}"
                          ) from err
