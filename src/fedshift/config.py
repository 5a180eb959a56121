"""Configuration: validation against the workflow schema (generic; every paper's own checks live with the paper).

The workflow merges ``config/config.yaml``, ``config/datasets.yaml``, ``config/papers/*.yaml`` and
any overlays, then calls :func:`validate_config` before building the DAG, so a bad key fails
with one message naming its path before any job runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema

from fedshift import errors
from fedshift.errors import load_yaml

__all__ = ["validate_config", "validate_section", "check_registered", "key_path"]
# ConfigError, load_yaml and SAFE_LOADER live in fedshift.errors (the ground floor every layer imports); import them
# from there (this module raises errors.ConfigError without binding the name). The rehearsal's stand-in check is
# fedshift.validation.standin.check_standin.


def key_path(parts: Any) -> str:
    """A key path as an error names it: ``a.b[0].c`` from ``["a", "b", 0, "c"]``; ``<root>`` when empty."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<root>"


def validate_section(section: Any, schema_path: str | Path, prefix: str | None) -> Any:
    """Validate one config section against its own JSON schema.

    Parameters
    ----------
    section : Any
        The section (e.g. ``config["fedpals"]``).
    schema_path : path
        Its schema file.
    prefix : str or None
        Key path of the section, prepended to error locations (e.g. ``"fedpals"``); None for the
        whole configuration.

    Returns
    -------
    Any
        ``section`` itself, unchanged, when valid.

    Raises
    ------
    ConfigError
        For the most relevant violation, naming its key path, e.g.
        ``config error at fedpals.experiments.fmnist_c3.seeds: 0 is less than the minimum of 1``.
    """
    schema = load_yaml(schema_path)
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(section))
    if error is not None:
        where = key_path([*([prefix] if prefix else []), *error.absolute_path])
        msg = error.message
        if error.validator == "additionalProperties":
            msg = msg.replace("Additional properties are not allowed", "unknown key(s)")
        elif error.validator == "propertyNames":
            msg = f"{msg} (allowed names: {error.validator_value})"
        raise errors.ConfigError(f"config error at {where}: {msg}")
    return section


def check_registered(needed: dict[str, list[str]], registry: dict[str, Any]) -> None:
    """Check that every dataset the enabled outputs need has an entry in the dataset registry.

    Parameters
    ----------
    needed : dict
        Config section (``wafl``, ``fedmm``, …) → the registry names its enabled outputs need (the papers'
        ``datasets_of``).
    registry : dict
        ``datasets:`` of ``config/datasets.yaml``.

    Raises
    ------
    ConfigError
        Naming the section, the missing dataset and the registry's names.
    """
    for section, names in needed.items():
        for name in names:
            if name not in registry:
                raise errors.ConfigError(f"config error at {section}: the enabled outputs need dataset {name!r}, "
                                         f"which config/datasets.yaml does not list; known: {sorted(registry)}")


def validate_config(config: dict[str, Any], schema_path: str | Path) -> dict[str, Any]:
    """Validate a merged configuration.

    Parameters
    ----------
    config : dict
        The merged configuration.
    schema_path : path
        ``workflow/schemas/config.schema.yaml``.

    Returns
    -------
    dict
        ``config`` itself (unchanged) when valid.

    Raises
    ------
    ConfigError
        For the first (most relevant) schema violation, naming the key path. Paper sections are the plug-ins'
        business (:mod:`fedshift.contract`: their own schema and ``Paper.validate``).
    """
    validate_section(config, schema_path, None)
    return config
