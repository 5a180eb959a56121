"""One validation of the whole merged configuration, before any job: every error names its key path.

:func:`validate_workflow_config` runs, in order,

1. value checks over every key at any depth (:func:`check_values`): numbers are finite (YAML's ``.nan`` /
   ``.inf`` are refused), mapping keys are plain names (letters, digits, ``_``; free-text labels only under
   ``reference:``), domain names cannot leave a folder (no ``.``, backslash, leading ``/`` or empty part), probability
   vectors lie on the simplex, class/label lists hold no duplicate and no class the dataset does not have;
2. the JSON schemas, made strict (:func:`strict_schema`: an object schema that lists its ``properties`` refuses
   any other key, at any depth, unless it says otherwise);
3. each paper section's own cross-reference checks (unknown experiments, datasets, outputs, ...), the dataset
   registry check of every section, the rehearsal's stand-ins (:func:`~fedshift.validation.standin.check_standin`:
   only at ``scale: rehearsal``, for registry datasets with a generator), and that every algorithm named in the
   config is registered (:mod:`fedshift.algorithms.registry`).

Also still before any job: upper bounds by key name (:data:`UPPER_BOUNDS`, each with its reason) and
non-negative step sizes (:data:`STEP_KEYS`) at any depth; paper sections validated with ``defaults`` merged into
their experiments (:func:`merged_view`: partial overrides accepted); errors inside conditional and ``oneOf``
schemas reported at the offending key (:func:`best_error`); optimiser keyword dictionaries checked against the
optimiser (:func:`check_optimizer_kwargs`); every grid/fixed entry typed by a schema generated from the registry,
``**kwargs`` factories included (:func:`hparam_schema`, :func:`check_algorithm_entries`); each paper's own checks
of its section as written (:func:`check_paper_section`, the plug-in's ``check_raw_section``); the ``claims:`` section typed, with paper
keys that exist and tables under ``results/tables/`` (:func:`check_claims`); plain-http unpinned downloads refused
without ``allow_http`` (:func:`check_http_sources`); traversal in ``mirror_dir`` refused. Config files are
pre-parsed so a YAML error names its file (:func:`check_yaml_file`; ``python -m fedshift.validation FILE``), and
the workflow's ``onerror`` names jobs killed by SIGKILL or for memory with their ``mem_mb``
(:func:`explain_killed_jobs`).

The workflow calls it once in ``workflow/rules/common.smk``; the tests call it directly. Jobs never import this
package, so editing it reruns nothing (:mod:`fedshift.codehash`). Its modules, by role:
:mod:`~fedshift.validation.values` (step 1, the bounds), :mod:`~fedshift.validation.schemas` (step 2),
:mod:`~fedshift.validation.sections` (the cross-key checks of step 3), :mod:`~fedshift.validation.hparams` (the
algorithms' hyper-parameter schemas), :mod:`~fedshift.validation.yaml_files`, :mod:`~fedshift.validation.killed` and
:mod:`~fedshift.validation.snakemake_api` (every use of Snakemake's internals, with the versions it works on);
every name is importable from ``fedshift.validation`` itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedshift.config import check_registered
from fedshift.errors import ConfigError
from fedshift.validation.hparams import VAR_KEYWORDS, hparam_schema, hparam_types
from fedshift.validation.killed import KILLED, explain_killed_jobs, killed_jobs
from fedshift.validation.schemas import MERGED_KEYS, validate_strict, merged_view, strict_schema
from fedshift.validation.standin import check_standin
from fedshift.validation.sections import (
    CLAIM_TABLES,
    OPTIMIZER_KWARGS,
    check_run_algorithms,
    check_algorithm_entries,
    check_claim_tables,
    check_claims,
    check_dataset_plugins,
    check_http_sources,
    check_optimizer_kwargs,
    check_paper_section,
)
from fedshift.validation.values import (
    CLASS_KEYS,
    DOMAIN_KEYS,
    FREE_TEXT,
    PROBABILITY_KEYS,
    SIMPLEX_ATOL,
    STEP_KEYS,
    UPPER_BOUNDS,
    check_values,
    config_error,
)
from fedshift.validation.snakemake_api import (
    SNAKEMAKE_VERSIONS,
    UnsupportedSnakemake,
    add_config_file,
    check_snakemake_version,
    inspected_once,
)
from fedshift.validation.yaml_files import check_yaml_file, main

__all__ = ["PROBABILITY_KEYS", "CLASS_KEYS", "UPPER_BOUNDS", "STEP_KEYS", "strict_schema", "add_config_file",
           "check_values", "check_yaml_file", "validate_workflow_config", "VAR_KEYWORDS", "hparam_types",
           "hparam_schema", "killed_jobs", "explain_killed_jobs",
           # importable from here as when validation was one module: the rest of that module's names
           "DOMAIN_KEYS", "FREE_TEXT", "SIMPLEX_ATOL", "MERGED_KEYS", "merged_view", "OPTIMIZER_KWARGS",
           "check_optimizer_kwargs", "check_algorithm_entries", "check_paper_section", "check_http_sources",
           "CLAIM_TABLES", "check_claims", "KILLED", "main", "check_standin", "check_dataset_plugins",
           "check_claim_tables", "config_error", "SNAKEMAKE_VERSIONS", "UnsupportedSnakemake",
           "check_snakemake_version", "inspected_once"]


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
    check_dataset_plugins(config)
    plugins = load_papers(config) if isinstance(config.get("papers"), dict) else {}
    # a plug-in's section is its own schema's business; the top-level schema sees the rest
    validate_strict({k: v for k, v in config.items() if k not in plugins}, schema_dir / "config.schema.yaml", None)
    for name, paper in plugins.items():
        if paper.schema is not None:
            validate_strict(merged_view(config.get(name) or {}), paper.resolve_path(paper.schema), name)
    check_claims(config, plugins)
    check_optimizer_kwargs(config, [])
    check_http_sources(config)
    section = "<root>"
    try:
        needed = {}
        for section, paper in plugins.items():
            check_paper_section(section, config.get(section), paper)
            paper.validate()
            check_algorithm_entries(section, config.get(section), paper)
            needed[section] = paper.datasets()
            check_run_algorithms(paper)
        section = "claims"
        check_claim_tables(config, plugins)
        section = "datasets"
        check_registered(needed, config["datasets"])
        section = "standin"
        check_standin(config)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 — a check's own crash must still name where it happened
        raise ConfigError(f"config error in section {section}: {type(err).__name__}: {err}") from err
    return config
