"""The ``agnostic_fedavg:`` configuration section: checks, experiments, datasets, runs and resolved hyper-parameters.

The section (``config/papers/agnostic_fedavg.yaml``, schema ``schema.yaml`` beside this file) holds ``build``
(the outputs to make), ``outputs`` and ``experiments``; it has no ``defaults:`` block, each experiment is
complete. Experiment kinds (:data:`KINDS`): ``toy`` (Ro et al. 2021, App. A), ``classification``
(Fashion-MNIST with the three AFL domains, EMNIST-62 high school / census, App. B), ``lm`` (Stack Overflow
question / answer, §5.1; PTB document + Cornell conversation, Mohri et al. 2019 §5.3). Algorithms (keys of an
experiment's ``algorithms:``): ``kind: fedavg`` (FedAvg uniform, or FedAvg target-only with ``target: <domain>``)
or ``kind: agnostic_fedavg``. :func:`resolve_run` gives the exact dictionary a run's training receives (its
:class:`~fedshift.contract.RunSpec` ``hparams``).
"""

from __future__ import annotations

from typing import Any

from fedshift.budget import apply_budget
from fedshift.errors import ConfigError
from fedshift.seeds import seed_list

__all__ = ["KINDS", "OUTPUT_KINDS", "SOURCE_DATASETS", "domain_names", "check_section", "active_experiments",
           "runs_of", "resolve_run", "registered_algorithm"]

#: Experiment kinds (``experiments.<name>.kind``).
KINDS = ("toy", "classification", "lm")

#: Output kinds (``outputs.<name>.kind``): the toy figure, curves over rounds, a table, data statistics.
OUTPUT_KINDS = ("toy", "curves", "table", "stats")
#: Datasets each data source needs (registry names).
SOURCE_DATASETS = {"fashion_mnist": ["fashion_mnist"], "emnist": ["emnist_tff"], "stackoverflow": ["stackoverflow_tff"],
                   "ptb": ["ptb"], "cornell": ["cornell_movie_dialogs"]}


def _err(where: str, msg: str) -> ConfigError:
    return ConfigError(f"config error at agnostic_fedavg.{where}: {msg}")


def domain_names(exp: dict[str, Any]) -> list[str]:
    """The experiment's domain names, in domain-id order.

    Parameters
    ----------
    exp : dict
        One experiment of the section (``kind``, ``data``).

    Returns
    -------
    list of str
        ``domain0 .. domain{p-1}`` for the toy (``data.num_domains`` = p), else ``data.domains`` as configured;
        position i is domain id i of the built data (:func:`fedshift.papers.agnostic_fedavg.data.build_data`).
    """
    if exp["kind"] == "toy":
        return [f"domain{i}" for i in range(exp["data"]["num_domains"])]
    return list(exp["data"]["domains"])


def check_section(section: dict[str, Any]) -> None:
    """Cross-reference checks of the ``agnostic_fedavg:`` section (after its JSON schema).

    Parameters
    ----------
    section : dict
        The section as configured (validated against ``schema.yaml``).

    Raises
    ------
    ConfigError
        An enabled output naming an unknown output or experiment; a table row that is not an algorithm of
        its experiment; a target domain that is not a domain of the experiment; an LM source list that mixes
        Stack Overflow with the PTB / Cornell corpora; an AgnosticFedAvg algorithm without ``lambda_lr`` > 0
        or ``window_size`` >= 1; more clients per round than clients; ``checkpoint_every`` not a multiple of
        ``log_every``, or ``rounds`` not a multiple of ``log_every`` (the last row must hold an evaluation).
    """
    outs = section["outputs"]
    exps = section["experiments"]
    for name in section["build"]:
        if name not in outs:
            raise _err("build", f"unknown output {name!r}; known: {sorted(outs)}")
    for name, o in outs.items():
        for e in o.get("experiments", [o.get("experiment")]):
            if e not in exps:
                raise _err(f"outputs.{name}", f"unknown experiment {e!r}; known: {sorted(exps)}")
            for row in o.get("rows", {}):
                if row not in exps[e]["algorithms"]:
                    raise _err(f"outputs.{name}.rows", f"{row!r} is not an algorithm of experiment {e}")
    for name, e in exps.items():
        tr = e["train"]
        doms = domain_names(e)
        if e["kind"] == "lm":
            src = e["data"]["sources"]
            if "stackoverflow" in src and len(src) > 1:
                raise _err(f"experiments.{name}.data.sources", "stackoverflow cannot be mixed with other corpora")
            if "stackoverflow" not in src and len(src) != len(doms):
                raise _err(f"experiments.{name}.data.domains", f"one domain per source {src}, got {doms}")
        for alg, a in e["algorithms"].items():
            hp = {**tr, **a}
            where = f"experiments.{name}.algorithms.{alg}"
            if a.get("target") is not None and a["target"] not in doms:
                raise _err(f"{where}.target", f"{a['target']!r} is not a domain of {name} ({doms})")
            if a["kind"] == "agnostic_fedavg":
                if not hp.get("lambda_lr", 0) > 0:
                    raise _err(f"{where}.lambda_lr", f"must be > 0 (η_λ of the EG step), got {hp.get('lambda_lr')}")
                if not hp.get("window_size", 0) >= 1:
                    raise _err(f"{where}.window_size", f"must be >= 1, got {hp.get('window_size')}")
            if hp["checkpoint_every"] % hp["log_every"] or hp["rounds"] % hp["log_every"]:
                raise _err(f"{where}", "rounds and checkpoint_every must be multiples of log_every")
        clients = e["data"].get("clients")
        if clients is not None and tr["clients_per_round"] > clients:
            raise _err(f"experiments.{name}.train.clients_per_round", f"{tr['clients_per_round']} > {clients} clients")


def active_experiments(section: dict[str, Any]) -> list[str]:
    """Experiments the enabled outputs (``build:``) need.

    Parameters
    ----------
    section : dict
        The ``agnostic_fedavg:`` section (checked by :func:`check_section`).

    Returns
    -------
    list of str
        Sorted names of the experiments that the outputs of ``build`` read (``experiment`` or ``experiments``).
    """
    used = set()
    for name in section["build"]:
        o = section["outputs"][name]
        used.update(o.get("experiments", [o.get("experiment")]))
    return sorted(used)



def runs_of(section: dict[str, Any], experiment: str) -> list[tuple[str, int]]:
    """(algorithm, seed) of every training run of an experiment.

    Parameters
    ----------
    section : dict
        The ``agnostic_fedavg:`` section.
    experiment : str
        One of its experiments.

    Returns
    -------
    list of (str, int)
        Each key of the experiment's ``algorithms`` (the run id) with each seed of ``seeds`` (``0 .. seeds-1`` for a
        count, the list's seeds in its order for a list: :func:`fedshift.seeds.seed_list`), algorithms in config order.

    Raises
    ------
    KeyError
        For an unknown experiment.
    """
    e = section["experiments"][experiment]
    return [(a, s) for a in e["algorithms"] for s in seed_list(e["seeds"])]


def resolve_run(section: dict[str, Any], experiment: str, algorithm: str,
                budget: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything a training job of (experiment, algorithm) depends on, as its ``params``.

    Parameters
    ----------
    section : dict
        The ``agnostic_fedavg:`` section.
    experiment : str
        One of its experiments.
    algorithm : str
        A key of the experiment's ``algorithms`` (the run id).
    budget : dict, optional
        The configuration's top-level ``budget`` (e.g. the rehearsal's ``{max_rounds: 2}``): caps
        ``train.rounds`` and its periods (:func:`fedshift.budget.apply_budget`); None leaves them as configured.

    Returns
    -------
    dict
        ``experiment``, ``algorithm``, ``kind``, ``domains`` (:func:`domain_names`), ``model``, ``data`` and
        ``train``: the experiment's ``train`` updated by the algorithm's own entry (``kind``, ``target``,
        ``lambda_lr`` = η_λ, ...), budget applied. The run's :class:`~fedshift.contract.RunSpec` ``hparams``.

    Raises
    ------
    ConfigError
        For an unknown experiment or algorithm.
    """
    if experiment not in section["experiments"]:
        raise ConfigError(f"unknown AgnosticFedAvg experiment {experiment!r}")
    e = section["experiments"][experiment]
    if algorithm not in e["algorithms"]:
        raise ConfigError(f"experiment {experiment}: unknown algorithm {algorithm!r}; known: {sorted(e['algorithms'])}")
    a = dict(e["algorithms"][algorithm])
    return {"experiment": experiment, "algorithm": algorithm, "kind": e["kind"], "domains": domain_names(e),
            "model": e["model"], "data": e["data"], "train": apply_budget({**e["train"], **a}, budget)}


def registered_algorithm(kind: str) -> str:
    """The registered algorithm (:mod:`fedshift.algorithms.registry`) of ``kind`` (FedAvg: ``domain_fedavg``).

    Parameters
    ----------
    kind : str
        An algorithm's ``kind`` in the config: ``fedavg`` or ``agnostic_fedavg``.

    Returns
    -------
    str
        The registry name: its module is what the run's code hash covers.
    """
    return "domain_fedavg" if kind == "fedavg" else kind
