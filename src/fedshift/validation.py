"""One validation of the whole merged configuration, before any job: every error names its key path.

:func:`validate_workflow_config` runs, in order,

1. value checks over every key at any depth (:func:`check_values`): numbers are finite (YAML's ``.nan`` /
   ``.inf`` are refused), mapping keys are plain names (letters, digits, ``_``; free-text labels only under
   ``reference:``), domain names cannot leave a folder (no ``.``, backslash, leading ``/`` or empty part), probability
   vectors lie on the simplex, class/label lists hold no duplicate and no class the dataset does not have;
2. the JSON schemas, made strict (:func:`strict_schema`: an object schema that lists its ``properties`` refuses
   any other key, at any depth, unless it says otherwise);
3. each paper section's own cross-reference checks (unknown experiments, datasets, outputs, ...), the dataset
   registry check of every section, the rehearsal's stand-ins (:func:`fedshift.config.check_standin`: only at
   ``scale: rehearsal``, for registry datasets with a generator), and that every algorithm named in the config is
   registered (:mod:`fedshift.algorithms.registry`).

The workflow calls it once in ``workflow/rules/common.smk``; the tests call it directly. Jobs never import this
module, so editing it reruns nothing (:mod:`fedshift.codehash`).
"""

from __future__ import annotations

import copy
import functools
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema

from fedshift.config import (
    ConfigError,
    _path,
    check_registered,
    check_standin,
    load_yaml,
)
from fedshift.data.registry import FACTS

__all__ = ["PROBABILITY_KEYS", "CLASS_KEYS", "strict_schema", "check_values",
           "validate_workflow_config"]

#: Keys whose numeric-list values are probability vectors (or lists of them): non-negative, summing to 1.
PROBABILITY_KEYS = ("init_lambda", "init_domain_weights", "target", "client_marginals", "target_start",
                    "target_end")
#: Keys whose integer-list values are classes/labels: no duplicates, each within the dataset's classes.
CLASS_KEYS = ("classes", "removed_labels", "target_drop_labels")
#: Keys whose string-list values (or string value) name domains.
DOMAIN_KEYS = ("names", "domains")
#: Mappings whose keys are free-text labels (a table's published numbers by row and column label).
FREE_TEXT = ("reference",)
SIMPLEX_ATOL = 1e-6

_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_DOMAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_ /-]*$")


def _error(parts: list[Any], msg: str) -> ConfigError:
    return ConfigError(f"config error at {_path(parts)}: {msg}")


def _walk(node: Any, parts: list[Any], free: bool = False) -> Iterator[tuple[list[Any], Any, bool]]:
    yield parts, node, free
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, [*parts, k], free or k in FREE_TEXT)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, [*parts, i], free)


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _dataset_of(config: dict[str, Any], parts: list[Any]) -> str | None:
    """The ``dataset`` of the nearest enclosing mapping that has one."""
    node, found = config, None
    for p in parts:
        if isinstance(node, dict) and isinstance(node.get("dataset"), str):
            found = node["dataset"]
        try:
            node = node[p]
        except (KeyError, IndexError, TypeError):
            break
    return found


def _check_simplex(parts: list[Any], vec: list[Any]) -> None:
    if not all(_number(v) for v in vec):
        return  # the schema names the wrong type
    if any(v < 0 for v in vec):
        raise _error(parts, f"{vec} is not a probability vector (a negative entry)")
    if abs(sum(vec) - 1.0) > SIMPLEX_ATOL:
        raise _error(parts, f"{vec} is not a probability vector: it sums to {sum(vec):g}, not 1")


def check_values(config: dict[str, Any]) -> None:
    """Check every value and key of a merged configuration, at any depth (step 1 of the module docstring).

    Raises
    ------
    ConfigError
        Naming the first offending key path, e.g. ``wafl.experiments.mnist.train.client_lr: nan is not a finite
        number`` or ``afl.experiments.afl_fashion_mnist.domains.classes: class 0 appears twice``.
    """
    for parts, value, free in _walk(config, []):
        key = parts[-1] if parts else None
        if isinstance(value, float) and not math.isfinite(value):
            raise _error(parts, f"{value} is not a finite number")
        if isinstance(value, dict) and not free:
            for k in value:
                if not (isinstance(k, str) and _NAME.match(k)):
                    raise _error([*parts, k], f"{k!r} is not a plain name (letters, digits and _ only)")
        if key in DOMAIN_KEYS:
            names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
            for i, name in enumerate(names):
                if isinstance(name, str) and not (_DOMAIN.match(name) and "//" not in name
                                                  and not name.endswith("/")):
                    raise _error([*parts, i] if isinstance(value, list) else parts,
                                 f"domain name {name!r} is not a plain name (letters, digits, _, -, space, "
                                 "inner /; no '.', '\\' or empty part)")
        if key in PROBABILITY_KEYS and isinstance(value, list) and value:
            if all(isinstance(v, list) for v in value):
                for i, v in enumerate(value):
                    _check_simplex([*parts, i], v)
            else:
                _check_simplex(parts, value)
        if key in CLASS_KEYS and isinstance(value, list) and all(_number(v) for v in value):
            seen = set()
            for i, c in enumerate(value):
                if c in seen:
                    raise _error([*parts, i], f"class {c} appears twice in {value}")
                seen.add(c)
            dataset = _dataset_of(config, parts)
            n = FACTS[dataset].num_classes if dataset in FACTS else None  # the data registry's K
            if n is not None:
                for i, c in enumerate(value):
                    if not 0 <= c < n:
                        raise _error([*parts, i], f"class {c} is out of range: {dataset} has classes 0…{n - 1}")


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


def _validate_strict(section: Any, schema_path: Path, prefix: str | None) -> None:
    validator = _strict_validator(schema_path, schema_path.stat().st_mtime_ns)
    error = jsonschema.exceptions.best_match(validator.iter_errors(section))
    if error is not None:
        where = _path([*([prefix] if prefix else []), *error.absolute_path])
        msg = error.message
        if error.validator in ("additionalProperties", "unevaluatedProperties"):
            msg = re.sub(r"^(Additional|Unevaluated) properties are not allowed", "unknown key(s)", msg)
        raise ConfigError(f"config error at {where}: {msg}")


def _check_run_algorithms(paper: Any) -> None:
    """Every algorithm a plug-in paper's runs name is registered."""
    from fedshift.algorithms import registry

    known = registry.algorithm_modules()
    for spec in paper.runs():
        if not spec.algorithms:
            raise ConfigError(f"config error at {paper.name}.experiments.{spec.experiment}: run {spec.run} names no "
                              "registered algorithm (RunSpec.algorithms; its code hash would miss the algorithm)")
        for name in spec.algorithms:
            if name not in known:
                raise ConfigError(f"config error at {paper.name}.experiments.{spec.experiment}: run {spec.run}: "
                                  f"algorithm {name!r} is not registered; registered: {sorted(known)}")


def validate_workflow_config(config: dict[str, Any], schema_dir: str | Path) -> dict[str, Any]:
    """Validate a merged workflow configuration completely, before any job (module docstring).

    Parameters
    ----------
    config : dict
        ``config/config.yaml`` + ``config/datasets.yaml`` + ``config/papers/*.yaml`` + overlays, merged.
    schema_dir : path
        ``workflow/schemas`` (``config.schema.yaml``; each paper plug-in's section has its own ``Paper.schema``).

    Returns
    -------
    dict
        ``config``, unchanged, when valid.

    Raises
    ------
    ConfigError
        For the first error found, naming its key path. A check that fails on input it did not expect (a
        ``KeyError``, ``TypeError``, ...) is reported as a ConfigError naming the section, never a traceback.
    """
    from fedshift.contract import load_papers

    schema_dir = Path(schema_dir)
    check_values(config)
    plugins = load_papers(config) if isinstance(config.get("papers"), dict) else {}
    # a plug-in's section is its own schema's business; the top-level schema sees the rest
    _validate_strict({k: v for k, v in config.items() if k not in plugins}, schema_dir / "config.schema.yaml", None)
    for name, paper in plugins.items():
        if paper.schema is not None:
            _validate_strict(config.get(name) or {}, paper.resolve_path(paper.schema), name)
    section = "<root>"
    try:
        needed = {}
        for section, paper in plugins.items():
            paper.validate()
            needed[section] = paper.datasets()
            _check_run_algorithms(paper)
        section = "datasets"
        check_registered(needed, config["datasets"])
        section = "standin"
        check_standin(config)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 — a check's own crash must still name where it happened
        raise ConfigError(f"config error in section {section}: {type(err).__name__}: {err}") from err
    return config
