"""The JSON schemas of the configuration, made strict, and the error each reports.

Step 2 of :mod:`fedshift.validation`; :func:`merged_view` gives a paper section as its paper reads it.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import jsonschema

from fedshift.config import key_path
from fedshift.errors import ConfigError, load_yaml

__all__ = ["strict_schema", "MERGED_KEYS", "merged_view", "UNKNOWN_KEY", "best_error", "validate_strict"]


def strict_schema(schema: Any) -> Any:
    """A copy of a JSON schema in which every ``type: object`` schema with ``properties`` refuses other keys.

    Adds ``unevaluatedProperties: false`` (which sees the properties of ``$ref``, ``allOf`` and ``if``/``then``
    beside it) wherever none of ``additionalProperties``, ``unevaluatedProperties``, ``patternProperties`` is
    given; fragments without ``type: object`` (``then: {properties: ...}``) are left alone.
    """
    out = copy.deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if (node.get("type") == "object" and "properties" in node
                    and not {"additionalProperties", "unevaluatedProperties", "patternProperties"} & set(node)):
                node["unevaluatedProperties"] = False
            for v in node.values():
                visit(v)
        elif isinstance(node, list):
            for v in node:
                visit(v)

    visit(out)
    return out


@functools.cache
def _strict_validator(schema_path: Path, mtime_ns: int) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(strict_schema(load_yaml(schema_path)))


UNKNOWN_KEY = ("additionalProperties", "unevaluatedProperties")


def best_error(errors: list[jsonschema.ValidationError]) -> jsonschema.ValidationError | None:
    """The error to report: the offending key itself, not the mapping around it.

    A value that fails inside a conditional (``if``/``then``) schema also makes ``unevaluatedProperties`` reject
    every key of its mapping (the failed branch evaluated none): that error lists every valid key without naming
    the bad one. So an unknown-key error is reported only when it is the only kind there is
    (``labels_per_client: -3`` is named, not its shift); among the others jsonschema's relevance chooses, and
    inside a ``oneOf``/``anyOf`` the branch closest to the value (fewest errors) is the one reported.
    """
    if not errors:
        return None
    real = [e for e in errors if e.validator not in UNKNOWN_KEY]
    best = max(real or errors, key=jsonschema.exceptions.relevance)
    if not best.context:
        return best
    # a oneOf/anyOf: report the closest branch (fewest errors; then the most specific), e.g. the digits network
    # with one unknown key rather than the office network's "kind: 'office' was expected"
    branches: dict[Any, list[jsonschema.ValidationError]] = {}
    for e in best.context:
        branches.setdefault(e.relative_schema_path[0] if e.relative_schema_path else None, []).append(e)
    closest = min(branches.values(), key=lambda b: (len(b), -max(len(e.absolute_path) for e in b)))
    return best_error(closest)


def validate_strict(section: Any, schema_path: Path, prefix: str | None) -> None:
    """Validate ``section`` against the schema file ``schema_path`` made strict (:func:`strict_schema`).

    Parameters
    ----------
    section : any
        The config section (or the whole config less the plug-ins' sections).
    schema_path : Path
        A JSON schema as YAML; its validator is cached per file and modification time.
    prefix : str or None
        The section's key, put before the error's key path (None: the top level).

    Raises
    ------
    ConfigError
        ``config error at <prefix.key.path>: <message>`` for the most specific error (:func:`best_error`); an
        unknown key reads ``unknown key(s)``.
    """
    validator = _strict_validator(schema_path, schema_path.stat().st_mtime_ns)
    error = best_error(list(validator.iter_errors(section)))
    if error is not None:
        where = key_path([*([prefix] if prefix else []), *error.absolute_path])
        msg = error.message
        if error.validator in ("additionalProperties", "unevaluatedProperties"):
            msg = re.sub(r"^(Additional|Unevaluated) properties are not allowed", "unknown key(s)", msg)
        raise ConfigError(f"config error at {where}: {msg}")


#: Keys of a paper section whose entries get the section's ``defaults`` merged in (fedshift.contract.experiments_of).
MERGED_KEYS = ("experiments", "tasks")


def merged_view(section: Any) -> Any:
    """``section`` with ``defaults`` merged into each entry of its experiments (or tasks), as the paper reads it.

    A partial override of a block that ``defaults`` completes (``tasks.<task>.<block>: {mu: 1.0}``) is then
    valid, and a block the merge leaves incomplete is refused at the experiment's key path; ``defaults`` itself is
    validated as written. Sections without ``defaults`` are returned unchanged.
    """
    from fedshift.contract import deep_merge

    if not (isinstance(section, dict) and isinstance(section.get("defaults"), dict)):
        return section
    out = dict(section)
    for key in MERGED_KEYS:
        entries = section.get(key)
        if isinstance(entries, dict):
            out[key] = {n: deep_merge(section["defaults"], e or {}) if e is None or isinstance(e, dict) else e
                        for n, e in entries.items()}
    return out

