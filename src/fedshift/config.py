"""Configuration: validation against the workflow schema and resolution of runs and hyper-parameters.

The workflow merges ``config/config.yaml``, ``config/datasets.yaml``, ``config/papers/*.yaml`` and
any overlays, then calls :func:`validate_config` before building the DAG, so a bad key fails
with one message naming its path before any job runs. :func:`resolve_hparams` gives the exact
dictionary a training job receives as ``params`` (so editing one value reruns exactly the jobs
it affects).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from fedshift.budget import apply_budget
from fedshift.data.adult import DOMAIN_NAMES as ADULT_DOMAINS

__all__ = ["ConfigError", "PAPER_SECTIONS", "validate_config", "validate_section", "check_registered",
           "Run", "algorithm_ids", "check_standin", "resolve_hparams", "runs_of", "model_id", "load_yaml"]


class ConfigError(ValueError):
    """An invalid configuration; the message names the offending key path."""


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file."""
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<root>"


#: Top-level config sections owned by one paper each (``config/papers/<paper>.yaml``), validated
#: against ``workflow/schemas/<section>.schema.yaml`` beside the main schema.
PAPER_SECTIONS = ("wafl", "fedmm", "agnostic_fedavg")


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
        where = _path([*([prefix] if prefix else []), *error.absolute_path])
        msg = error.message
        if error.validator == "additionalProperties":
            msg = msg.replace("Additional properties are not allowed", "unknown key(s)")
        elif error.validator == "propertyNames":
            msg = f"{msg} (allowed names: {error.validator_value})"
        raise ConfigError(f"config error at {where}: {msg}")
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
                raise ConfigError(f"config error at {section}: the enabled outputs need dataset {name!r}, which "
                                  f"config/datasets.yaml does not list; known: {sorted(registry)}")


def check_standin(config: dict[str, Any]) -> None:
    """Check the rehearsal's ``standin`` section: stand-ins only at ``scale: rehearsal``, for known datasets.

    Raises
    ------
    ConfigError
        ``standin.datasets`` is set without ``scale: rehearsal`` (stand-in data must never feed a result), or
        names a dataset that is not in the registry or has no generator (:data:`fedshift.data.standin.STANDINS`).
    """
    names = config.get("standin", {}).get("datasets", [])
    if not names:
        return
    if config.get("scale") != "rehearsal":
        raise ConfigError("config error at standin.datasets: stand-in data is for the rehearsal only; set "
                          "scale: rehearsal (config/rehearsal.yaml) or remove standin")
    from fedshift.data.standin import STANDINS

    for name in names:
        if name not in config["datasets"]:
            raise ConfigError(f"config error at standin.datasets: {name!r} is not a registry dataset")
        if name not in STANDINS:
            raise ConfigError(f"config error at standin.datasets: no stand-in generator for {name!r}; known: "
                              f"{sorted(STANDINS)}")


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
        For the first (most relevant) schema violation, or a cross-reference error (unknown
        dataset or experiment, a table row that no algorithm trains, a table column that is not a
        test domain, U or D_Lambda, missing hyper-parameters), naming the key path, e.g.
        ``experiments.afl_adult.seeds: 0 is less than the minimum of 1``. Each paper section of
        :data:`PAPER_SECTIONS` present in ``config`` is validated by :func:`validate_section` against
        ``<section>.schema.yaml`` beside ``schema_path``; its cross-reference checks live with
        its paper's code.
    """
    validate_section(config, schema_path, None)
    for key in PAPER_SECTIONS:
        if key in config:
            validate_section(config[key], Path(schema_path).parent / f"{key}.schema.yaml", key)
    for name, exp in config["experiments"].items():
        base = f"experiments.{name}"
        if exp["dataset"] not in config["datasets"]:
            raise ConfigError(f"config error at {base}.dataset: unknown dataset {exp['dataset']!r}; "
                              f"known: {sorted(config['datasets'])}")
        dom = exp["domains"]
        if dom["by"] == "label":
            if "classes" not in dom or "names" not in dom or len(dom["classes"]) != len(dom["names"]):
                raise ConfigError(f"config error at {base}.domains: 'label' domains need classes and names "
                                  "of the same length")
        for alg in exp["algorithms"]:
            hp = {**exp["train"], **exp["algorithms"][alg]}
            missing = [k for k in ("rounds", "batch_size", "optimizer", "lr_w") if k not in hp]
            if missing:
                raise ConfigError(f"config error at {base}.algorithms.{alg}: missing {missing} "
                                  f"(set them here or in {base}.train)")
            if alg == "afl" and not hp.get("lr_lambda", 0) > 0:
                raise ConfigError(f"config error at {base}.algorithms.afl.lr_lambda: must be > 0")
    for name, table in config["tables"].items():
        base = f"tables.{name}"
        if table["experiment"] not in config["experiments"]:
            raise ConfigError(f"config error at {base}.experiment: unknown experiment {table['experiment']!r}")
        exp = config["experiments"][table["experiment"]]
        models = [model_id(a) for a in algorithm_ids(exp)]
        for row in table["rows"]:
            if row not in models:
                raise ConfigError(f"config error at {base}.rows: {row!r} is not trained by experiment "
                                  f"{table['experiment']} (models {models})")
        columns = [*domain_names(exp, DATASET_DOMAINS), "U", "D_Lambda"]
        for col in table["columns"]:
            if col not in columns:
                raise ConfigError(f"config error at {base}.columns: {col!r} is not a test column of experiment "
                                  f"{table['experiment']} (columns {columns})")
    return config


@dataclass(frozen=True)
class Run:
    """One training job: (experiment, algorithm id, seed)."""

    experiment: str
    algorithm: str
    seed: int


def domain_names(experiment: dict[str, Any], datasets_domains: dict[str, list[str]]) -> list[str]:
    """Names of an experiment's domains (from the config or the dataset's known domain list)."""
    if experiment["domains"]["by"] == "label":
        return list(experiment["domains"]["names"])
    return list(datasets_domains[experiment["dataset"]])


#: Domain names of datasets whose domains come from the data itself (domains.by: domain).
DATASET_DOMAINS: dict[str, list[str]] = {"adult": list(ADULT_DOMAINS)}


def algorithm_ids(experiment: dict[str, Any]) -> list[str]:
    """Algorithm ids of an experiment (path components): ``afl``, ``uniform``, ``domain~<name>``."""
    out = []
    for alg in experiment["algorithms"]:
        if alg == "domain":
            out += [f"domain~{d}" for d in domain_names(experiment, DATASET_DOMAINS)]
        else:
            out.append(alg)
    return out


def model_id(algorithm_id: str) -> str:
    """Model name used in tables: ``domain~x`` → ``domain:x``; others unchanged."""
    return algorithm_id.replace("~", ":", 1)


def runs_of(config: dict[str, Any], experiment: str) -> list[Run]:
    """All training jobs of one experiment."""
    exp = config["experiments"][experiment]
    return [Run(experiment, a, s) for a in algorithm_ids(exp) for s in range(exp["seeds"])]


def resolve_hparams(config: dict[str, Any], experiment: str, algorithm_id: str) -> dict[str, Any]:
    """The complete hyper-parameters of one (experiment, algorithm) job.

    ``train`` defaults merged with ``algorithms.<kind>``; fixed-mixture baselines get
    ``lr_lambda = 0`` and their λ: ``uniform`` → m̄ (``"empirical"``, the pooled sample L_Û),
    ``domain~k`` → e_k. The steps are capped by the top-level ``budget`` (:func:`fedshift.budget.apply_budget`;
    the rehearsal), and so are the candidate steps of ``select.rounds`` (duplicates merged). Experiment-level
    settings (dataset, domains, model, dtype, ...) are included so that a change to any of them reruns the job.

    Raises
    ------
    ConfigError
        For an unknown experiment or algorithm id.
    """
    if experiment not in config["experiments"]:
        raise ConfigError(f"unknown experiment {experiment!r}")
    exp = config["experiments"][experiment]
    kind, _, dom = algorithm_id.partition("~")
    if kind not in exp["algorithms"] or algorithm_id not in algorithm_ids(exp):
        raise ConfigError(f"experiment {experiment} has no algorithm {algorithm_id!r}; "
                          f"known: {algorithm_ids(exp)}")
    hp = {"lr_lambda": 0.0, "w_gradient": "perdomain", "lambda_gradient": "perdomain", "init_lambda": "uniform",
          "w_radius": None, "gamma": 0.0, "mu": 0.0, "average_iterates": True, "log_every": 100,
          "checkpoint_every": 0, "optimizer_kwargs": {}}
    hp.update(exp["train"])
    hp.update(exp["algorithms"][kind])
    names = domain_names(exp, DATASET_DOMAINS)
    if kind == "uniform":
        hp.update(lr_lambda=0.0, init_lambda="empirical")
    elif kind == "domain":
        hp.update(lr_lambda=0.0, init_lambda=[1.0 if d == dom else 0.0 for d in names])
    if isinstance(hp["init_lambda"], list) and len(hp["init_lambda"]) != len(names):
        raise ConfigError(f"experiments.{experiment}: init_lambda has {len(hp['init_lambda'])} entries "
                          f"for {len(names)} domains")
    sel = hp.get("select")
    if sel is not None:
        if not exp.get("validation_fraction", 0.0) > 0:
            raise ConfigError(f"experiments.{experiment}.train.select needs a validation set: set "
                              f"experiments.{experiment}.validation_fraction > 0")
        if max(sel["rounds"]) > hp["rounds"]:
            raise ConfigError(f"experiments.{experiment}.train.select.rounds: {max(sel['rounds'])} is more than the "
                              f"{hp['rounds']} training rounds")
    hp = apply_budget(hp, config.get("budget"))
    if sel is not None and max(sel["rounds"]) > hp["rounds"]:  # the budget capped T: candidates T capped alike
        hp["select"] = {**sel, "rounds": sorted({min(int(t), hp["rounds"]) for t in sel["rounds"]})}
    experiment_keys = {k: exp[k] for k in ("paper", "dataset", "domains", "preprocess", "model", "dtype",
                                           "partition_seed")}
    experiment_keys["validation_fraction"] = exp.get("validation_fraction", 0.0)
    return {"experiment": experiment, "algorithm": algorithm_id, **experiment_keys, "hparams": hp}
