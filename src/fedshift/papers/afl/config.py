"""AFL's configuration section: checks, tables, experiments, datasets, run ids and resolved hyper-parameters.

The section (``afl:`` in ``config/papers/afl.yaml``, schema ``schema.yaml`` beside this file) holds ``defaults``
merged into every experiment (:func:`fedshift.contract.experiments_of`), ``experiments``, ``tables`` and the
optional ``outputs`` (the tables to build, default all).
:func:`resolve_run` gives the exact dictionary a run's training receives (its :class:`RunSpec` ``hparams``),
so editing one value reruns exactly the runs it affects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedshift.budget import apply_budget
from fedshift.errors import ConfigError
from fedshift.contract import RUN_ID, experiments_of
from fedshift.data.adult import DOMAIN_NAMES as ADULT_DOMAINS

__all__ = ["SECTION", "REQUIRED", "DATASET_DOMAINS", "domain_names", "algorithm_ids", "model_id", "resolve_run",
           "check_section", "enabled_outputs", "active_experiments"]

#: The config section (and registered paper name).
SECTION = "afl"
#: Keys every experiment must hold once ``defaults`` are merged in.
REQUIRED = ("dataset", "domains", "preprocess", "model", "dtype", "partition_seed", "seeds", "train", "algorithms")
#: Domain names of datasets whose domains come from the data itself (``domains.by: domain``).
DATASET_DOMAINS: dict[str, list[str]] = {"adult": list(ADULT_DOMAINS)}
#: Training settings every algorithm needs (in ``train`` or in its own entry).
NEEDED = ("rounds", "batch_size", "optimizer", "client_lr")


def domain_names(experiment: Mapping[str, Any]) -> list[str]:
    """Names of an experiment's domains (from the config or the dataset's known domain list).

    Parameters
    ----------
    experiment : mapping
        One merged experiment (``domains.by``, ``domains.names``, ``dataset``).

    Returns
    -------
    list of str
        ``domains.names`` for ``by: label`` domains, else the dataset's own domains (:data:`DATASET_DOMAINS`, Adult's
        doctorate / non-doctorate); position i is domain id i.

    Raises
    ------
    KeyError
        A ``by: domain`` experiment of a dataset without a domain column (:func:`check_section` refuses it first).
    """
    if experiment["domains"]["by"] == "label":
        return list(experiment["domains"]["names"])
    return list(DATASET_DOMAINS[experiment["dataset"]])


def algorithm_ids(experiment: Mapping[str, Any]) -> list[str]:
    """Run ids of an experiment (one folder each): ``afl``, ``uniform``, ``domain~<name>`` per domain.

    Parameters
    ----------
    experiment : mapping
        One merged experiment (its ``algorithms`` keys, in config order).

    Returns
    -------
    list of str
        The run ids, ``domain`` expanded into one id per domain of :func:`domain_names`.
    """
    out = []
    for alg in experiment["algorithms"]:
        if alg == "domain":
            out += [f"domain~{d}" for d in domain_names(experiment)]
        else:
            out.append(alg)
    return out


def model_id(algorithm_id: str) -> str:
    """Model name used in tables: ``domain~x`` → ``domain:x``; others unchanged.

    Parameters
    ----------
    algorithm_id : str
        A run id of :func:`algorithm_ids`.

    Returns
    -------
    str
        The table row's model name (Mohri et al. 2019, Tables 1–2 rows).
    """
    return algorithm_id.replace("~", ":", 1)


def check_section(section: Mapping[str, Any], datasets: Mapping[str, Any]) -> None:  # 81 lines: a 30-line docstring
    """Cross-reference checks of the ``afl`` section beyond its schema.

    Parameters
    ----------
    section : mapping
        The ``afl`` section as configured (``defaults`` merged here).
    datasets : mapping
        The dataset registry (``config/datasets.yaml``'s ``datasets``).

    Raises
    ------
    ConfigError
        Naming the key path: a merged experiment lacking a required key, an unknown dataset, ``label`` domains
        without classes/names of one length, a domain name that cannot be a run id of a ``domain`` model, a
        missing training setting, an AFL γ_λ (``lambda_lr``) that is not > 0, ``train.select`` without a
        validation split or with more rounds than trained, ``init_lambda`` of the wrong length; a table of an
        unknown experiment, a row no algorithm trains, a column that is not a test domain, ``U`` or ``D_Lambda``;
        an ``outputs`` entry that is not a table.
    """
    experiments = experiments_of(section)
    for name, exp in experiments.items():
        base = f"config error at {SECTION}.experiments.{name}"
        missing = [k for k in REQUIRED if k not in exp]
        if missing:
            raise ConfigError(f"{base}: missing {missing} (set them here or in {SECTION}.defaults)")
        if exp["dataset"] not in datasets:
            raise ConfigError(f"{base}.dataset: unknown dataset {exp['dataset']!r}; known: {sorted(datasets)}")
        dom = exp["domains"]
        if dom["by"] == "label":
            if "classes" not in dom or "names" not in dom or len(dom["classes"]) != len(dom["names"]):
                raise ConfigError(f"{base}.domains: 'label' domains need classes and names of the same length")
        elif exp["dataset"] not in DATASET_DOMAINS:
            raise ConfigError(f"{base}.domains.by: dataset {exp['dataset']!r} has no domain column; use 'label'")
        names = domain_names(exp)
        for alg in exp["algorithms"]:
            hp = {**exp["train"], **(exp["algorithms"][alg] or {})}
            lacking = [k for k in NEEDED if k not in hp]
            if lacking:
                raise ConfigError(f"{base}.algorithms.{alg}: missing {lacking} (set them here or in "
                                  f"{SECTION}.experiments.{name}.train)")
            if alg == "afl" and not hp.get("lambda_lr", 0) > 0:
                raise ConfigError(f"{base}.algorithms.afl.lambda_lr: must be > 0")
            if alg == "domain":
                for i, d in enumerate(names):
                    if not RUN_ID.match(f"domain~{d}"):
                        raise ConfigError(f"{base}.domains.names[{i}]: {d!r} names a domain model's run folder "
                                          "(domain~<name>): letters, digits and _ . + - only")
            init = hp.get("init_lambda")
            if isinstance(init, list) and len(init) != len(names):
                raise ConfigError(f"{base}.algorithms.{alg}.init_lambda: {len(init)} entries for {len(names)} "
                                  "domains")
        sel = exp["train"].get("select")
        if sel is not None:
            if not exp.get("validation_fraction", 0.0) > 0:
                raise ConfigError(f"{base}.train.select: needs a validation set: set "
                                  f"{SECTION}.experiments.{name}.validation_fraction > 0")
            for alg in exp["algorithms"]:
                rounds = {**exp["train"], **(exp["algorithms"][alg] or {})}["rounds"]
                if max(sel["rounds"]) > rounds:
                    raise ConfigError(f"{base}.train.select.rounds: {max(sel['rounds'])} is more than the {rounds} "
                                      "training rounds")
    tables = section.get("tables") or {}
    for i, out in enumerate(section.get("outputs", list(tables))):
        if out not in tables:
            raise ConfigError(f"config error at {SECTION}.outputs[{i}]: unknown table {out!r}; known: {sorted(tables)}")
    for name, table in tables.items():
        base = f"config error at {SECTION}.tables.{name}"
        if table["experiment"] not in experiments:
            raise ConfigError(f"{base}.experiment: unknown experiment {table['experiment']!r}")
        exp = experiments[table["experiment"]]
        models = [model_id(a) for a in algorithm_ids(exp)]
        for row in table["rows"]:
            if row not in models:
                raise ConfigError(f"{base}.rows: {row!r} is not trained by experiment {table['experiment']} "
                                  f"(models {models})")
        columns = [*domain_names(exp), "U", "D_Lambda"]
        for col in table["columns"]:
            if col not in columns:
                raise ConfigError(f"{base}.columns: {col!r} is not a test column of experiment "
                                  f"{table['experiment']} (columns {columns})")


def enabled_outputs(section: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The enabled tables, by target name.

    Parameters
    ----------
    section : mapping
        The ``afl`` section.

    Returns
    -------
    dict
        ``outputs`` (default: every table of ``tables``), in that order, each its ``tables`` entry.
    """
    tables = section.get("tables") or {}
    return {name: tables[name] for name in section.get("outputs", list(tables))}


def active_experiments(section: Mapping[str, Any]) -> list[str]:
    """Experiments the enabled tables read, in config order.

    Parameters
    ----------
    section : mapping
        The ``afl`` section.

    Returns
    -------
    list of str
        Names of the experiments (:func:`fedshift.contract.experiments_of`) that a table of
        :func:`enabled_outputs` reads.
    """
    wanted = {t["experiment"] for t in enabled_outputs(section).values()}
    return [e for e in experiments_of(section) if e in wanted]


def resolve_run(section: Mapping[str, Any], experiment: str, algorithm_id: str,
                budget: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The complete hyper-parameters of one (experiment, algorithm id) run: its :class:`RunSpec` ``hparams``.

    ``train`` defaults merged with ``algorithms.<kind>``; fixed-mixture baselines get ``lambda_lr = 0`` and their
    λ: ``uniform`` → m̄ (``"empirical"``, the pooled sample L_Û), ``domain~k`` → e_k (Mohri et al. 2019, §5). The
    steps are capped by the top-level ``budget`` (:func:`fedshift.budget.apply_budget`; the rehearsal), and so are
    the candidate steps of ``select.rounds`` (duplicates merged). Experiment-level settings (dataset, domains,
    model, dtype, ...) are included so that a change to any of them reruns the run.

    Parameters
    ----------
    section : mapping
        The ``afl`` config section (``defaults`` merged here).
    experiment : str
    algorithm_id : str
        A run id of :func:`algorithm_ids`.
    budget : mapping, optional
        The configuration's ``budget``.

    Returns
    -------
    dict
        ``{"experiment", "algorithm", "paper", "dataset", "domains", "preprocess", "model", "dtype",
        "partition_seed", "validation_fraction", "hparams": {...}}``; ``hparams["client_lr"]`` is γ_w, the model
        step, ``hparams["lambda_lr"]`` γ_λ, the mixture-weight step (Fig. 3).

    Raises
    ------
    ConfigError
        For an unknown experiment or algorithm id, or a bad ``init_lambda`` / ``select`` (:func:`check_section`).
    """
    experiments = experiments_of(section)
    if experiment not in experiments:
        raise ConfigError(f"config error at {SECTION}.experiments: unknown experiment {experiment!r}")
    exp = experiments[experiment]
    kind, _, dom = algorithm_id.partition("~")
    if kind not in exp["algorithms"] or algorithm_id not in algorithm_ids(exp):
        raise ConfigError(f"config error at {SECTION}.experiments.{experiment}.algorithms: no algorithm "
                          f"{algorithm_id!r}; known: {algorithm_ids(exp)}")
    hp = {"lambda_lr": 0.0, "w_gradient": "perdomain", "lambda_gradient": "perdomain", "init_lambda": "uniform",
          "w_radius": None, "gamma": 0.0, "mu": 0.0, "average_iterates": True, "log_every": 100,
          "checkpoint_every": 0, "optimizer_kwargs": {}}
    hp.update(exp["train"])
    hp.update(exp["algorithms"][kind] or {})
    names = domain_names(exp)
    if kind == "uniform":
        hp.update(lambda_lr=0.0, init_lambda="empirical")
    elif kind == "domain":
        hp.update(lambda_lr=0.0, init_lambda=[1.0 if d == dom else 0.0 for d in names])
    if isinstance(hp["init_lambda"], list) and len(hp["init_lambda"]) != len(names):
        raise ConfigError(f"config error at {SECTION}.experiments.{experiment}.algorithms.{kind}.init_lambda: "
                          f"{len(hp['init_lambda'])} entries for {len(names)} domains")
    sel = hp.get("select")
    if sel is not None:
        if not exp.get("validation_fraction", 0.0) > 0:
            raise ConfigError(f"config error at {SECTION}.experiments.{experiment}.train.select: needs a validation "
                              f"set: set {SECTION}.experiments.{experiment}.validation_fraction > 0")
        if max(sel["rounds"]) > hp["rounds"]:
            raise ConfigError(f"config error at {SECTION}.experiments.{experiment}.train.select.rounds: "
                              f"{max(sel['rounds'])} is more than the {hp['rounds']} training rounds")
    hp = apply_budget(hp, budget)
    if sel is not None and max(sel["rounds"]) > hp["rounds"]:  # the budget capped T: candidates T capped alike
        hp["select"] = {**sel, "rounds": sorted({min(int(t), hp["rounds"]) for t in sel["rounds"]})}
    experiment_keys = {k: exp[k] for k in ("dataset", "domains", "preprocess", "model", "dtype", "partition_seed")}
    experiment_keys["validation_fraction"] = exp.get("validation_fraction", 0.0)
    return {"experiment": experiment, "algorithm": algorithm_id, "paper": SECTION, **experiment_keys, "hparams": hp}
