"""FedMM configuration (Shen et al., AAMAS 2023; arXiv:2110.08477): tasks, checks, run settings and run ids.

The ``fedmm:`` section's tasks are the contract's experiments: :func:`merged_section` merges ``defaults`` into every
task (:func:`fedshift.contract.experiments_of`); :func:`check_section` cross-checks figures, tasks and settings;
:func:`settings_of` lists the run settings of one output and :func:`resolve_setting` gives a run's hyper-parameters
(budget applied). Part of :mod:`fedshift.papers.fedmm`.

A *task* is one source → target problem (``digits``: MNIST → MNIST-M; ``office_A_W`` …: Office-31); a *run*
is (optimizer, head, client setting, M, η₃) (:func:`settings_of`), labelled
``<optimizer>-<head>-<clients>-M<M>-e<η₃>``, e.g. ``fedmm-dann-p1-M20-e1`` (a label: the values travel typed,
:func:`resolve_setting`). Client settings: ``p<v>``, two clients, client 1 holds the fraction v of the source
and 1 − v of the target, client 2 the rest (Figs. 1 and 4); ``s<k>t<l>``, k clients with source data only and
l with target data only, equal shares (Fig. 7; ``s1t1`` is ``p1``).
"""

from __future__ import annotations

import re
from typing import Any

from fedshift.budget import apply_budget
from fedshift.errors import ConfigError
from fedshift.contract import experiments_of
from fedshift.data.office31 import TASKS as OFFICE_TASKS
from fedshift.seeds import seed_list

__all__ = ["OUTPUTS", "OPTIMIZERS", "DIGIT_TARGETS", "BATCH_SPLITS", "PREPROCESSINGS", "TASK_KEYS", "check_section",
           "run_id", "merged_section", "enabled_outputs", "output_tasks", "parse_run_id",
           "settings_of", "runs_of", "resolve_setting", "resolve_run", "client_settings", "prepared_name"]

#: Named outputs (rules ``<paper>_<name>``, e.g. ``fedmm_fig1``).
OUTPUTS = ("fig1", "fig4", "fig5", "fig6", "fig7", "table1")
#: The optimizers a run may train (registered algorithm names, :mod:`fedshift.algorithms.registry`).
OPTIMIZERS = ("fedmm", "fedavg_sgda", "fedprox_sgda", "fedsgda")
#: Target datasets of the digits task: MNIST-M's train and test splits as mirrored (registry ``mnist_m``), the
#: canonical archive of the same images (registry ``mnist_m_full``) and MNIST-M generated from MNIST and BSDS500
#: (``mnist_m_bsds``, made from the registry's ``mnist`` and ``bsds500``: :data:`fedshift.data.prepare.GENERATED`).
#: The target's train split gives the clients' unlabelled rows, its test split the test set.
DIGIT_TARGETS = ("mnist_m", "mnist_m_full", "mnist_m_bsds")
#: Fig. 7's curves unless ``figures.fig7.optimizers`` names fewer.
FIG7_OPTIMIZERS = ("fedmm", "fedavg_sgda", "fedprox_sgda")
#: Per-client batch compositions (``train.batch_split``, :func:`build_algorithm`): by the client's shares of the
#: two domains (official code, the default) or by its own rows.
BATCH_SPLITS = ("domain_shares", "client_rows")
#: Digits input preprocessing (task key ``preprocessing``, :func:`load_data`): per-domain standardisation (ours,
#: the default) or the official code's binarised MNIST and per-batch centring.
PREPROCESSINGS = ("per_domain", "official")
_SETTING = re.compile(r"^(?:p(?P<p>[0-9.]+)|s(?P<s>\d+)t(?P<t>\d+))$")
_RUN = re.compile(r"^(?P<opt>[a-z_]+)-(?P<head>dann|cdan|mdd)-(?P<clients>[a-z0-9.]+)-M(?P<m>\d+)-e(?P<e>[0-9.e+-]+)$")


def _fmt(v: float) -> str:
    return f"{float(v):g}"


def run_id(optimizer: str, head: str, clients: str, local_steps: int, eta3: float) -> str:
    """``<optimizer>-<head>-<clients>-M<M>-e<η₃>`` (η₃ in ``%g`` form; 0 for the baselines)."""
    return f"{optimizer}-{head}-{clients}-M{int(local_steps)}-e{_fmt(eta3)}"


def parse_run_id(rid: str) -> dict[str, Any]:
    """Inverse of :func:`run_id`.

    Raises
    ------
    ConfigError
        For a malformed id, an unknown optimizer or client setting.
    """
    m = _RUN.match(rid)
    if m is None or m["opt"] not in OPTIMIZERS:
        raise ConfigError(f"malformed FedMM run id {rid!r}; expected <optimizer>-<head>-<clients>-M<M>-e<eta3> "
                          f"with an optimizer of {OPTIMIZERS}")
    client_settings(m["clients"])
    return {"optimizer": m["opt"], "head": m["head"], "clients": m["clients"], "local_steps": int(m["m"]),
            "eta3": float(m["e"])}


def client_settings(setting: str) -> list[tuple[float, float]]:
    """(source share, target share) of every client of a setting (module docstring).

    Raises
    ------
    ConfigError
        For a malformed setting, p outside [0.5, 1], or no client.
    """
    m = _SETTING.match(setting)
    if m is None:
        raise ConfigError(f"client setting {setting!r}: expected p<value> or s<k>t<l>")
    if m["p"] is not None:
        p = float(m["p"])
        if not 0.5 <= p <= 1:
            raise ConfigError(f"client setting {setting!r}: p must be in [0.5, 1]")
        return [(p, 1 - p), (1 - p, p)]
    s, t = int(m["s"]), int(m["t"])
    if s < 1 or t < 1:
        raise ConfigError(f"client setting {setting!r}: needs at least one source and one target client")
    return [(1 / s, 0.0)] * s + [(0.0, 1 / t)] * t


# ---------------------------------------------------------------------------------------------- config

#: Keys every task must hold once ``fedmm.defaults`` is merged in (the schema cannot see the merge).
TASK_KEYS = ("source", "target", "partition_seed", "network", "seeds", "train", "fedmm", "fedprox", "heads")


def merged_section(section: dict[str, Any]) -> dict[str, Any]:
    """The ``fedmm:`` section with ``defaults`` merged into every task (:func:`fedshift.contract.experiments_of`).

    A section without ``defaults`` comes back as it is (the functions below accept either).

    Raises
    ------
    ConfigError
        ``fedmm.tasks.<task>.<key>``: a task that lacks a key of :data:`TASK_KEYS` even with the defaults.
    """
    if "defaults" not in section:
        return section
    tasks = experiments_of({"defaults": section["defaults"], "experiments": section.get("tasks")})
    for name, task in tasks.items():
        for key in TASK_KEYS:
            if key not in task:
                raise ConfigError(f"config error at fedmm.tasks.{name}.{key}: required (in the task or in "
                                  "fedmm.defaults)")
    return {**{k: v for k, v in section.items() if k != "defaults"}, "tasks": tasks}


def output_tasks(section: dict[str, Any], name: str) -> list[str]:
    """The tasks one output reads: Table 1's ``tasks``, a figure's one ``task``.

    Parameters
    ----------
    section : dict
        The ``fedmm:`` section (merged or not: ``figures`` is read).
    name : str
        An output of :data:`OUTPUTS`.

    Returns
    -------
    list of str
        In the figure entry's order (``[]`` for Table 1 without an entry).
    """
    fig = section["figures"].get(name, {})
    t = fig.get("tasks", []) if name == "table1" else fig.get("task")
    return t if isinstance(t, list) else [t]


def enabled_outputs(section: dict[str, Any]) -> list[str]:
    """The outputs of :data:`OUTPUTS` that ``section["outputs"]`` enables, in :data:`OUTPUTS`' order."""
    return [o for o in OUTPUTS if o in section["outputs"]]


def check_section(section: dict[str, Any]) -> None:
    """Cross-reference checks of the ``fedmm:`` section (after its JSON schema).

    That the registry lists :func:`datasets_of` is checked by the workflow for every paper
    (:func:`fedshift.config.check_registered`).

    Raises
    ------
    ConfigError
        An enabled output without its figure entry; a figure naming an unknown task, a digits figure on an
        Office-31 task or Table 1 on a digits task; a head a task does not configure; a malformed client
        setting; ``checkpoint_every`` not a multiple of ``eval_every``; a p value outside [0.5, 1]; Fig. 6
        without M values.
    """
    section = merged_section(section)
    tasks = section["tasks"]
    for name in enabled_outputs(section):
        where = f"fedmm.figures.{name}"
        if name not in section["figures"]:
            raise ConfigError(f"config error at {where}: output {name!r} is enabled but not configured")
        fig = section["figures"][name]
        names = fig["tasks"] if name == "table1" else [fig["task"]]
        for t in names:
            if t not in tasks:
                raise ConfigError(f"config error at {where}: unknown task {t!r}; known: {sorted(tasks)}")
            office = tasks[t]["network"]["kind"] == "office"
            if office != (name == "table1"):
                raise ConfigError(f"config error at {where}: task {t!r} is "
                                  + ("an Office-31 task" if office else "not an Office-31 task"))
            for h in fig["heads"]:
                if h not in tasks[t]["heads"]:
                    raise ConfigError(f"config error at {where}.heads: task {t!r} configures no head {h!r}")
        for key in ("clients", "p"):
            for v in fig.get(key, []):
                client_settings(v if key == "clients" else f"p{_fmt(v)}")
    for t, task in tasks.items():
        base = f"fedmm.tasks.{t}"
        tr = task["train"]
        if tr["checkpoint_every"] % tr["eval_every"]:
            raise ConfigError(f"config error at {base}.train.checkpoint_every: must be a multiple of eval_every")
        for h, hs in task["heads"].items():
            if hs.get("rounds", tr["rounds"]) < tr["eval_every"]:
                raise ConfigError(f"config error at {base}.heads.{h}.rounds: fewer rounds than eval_every")
        office = task["network"]["kind"] == "office"
        if office and task.get("transfer") not in OFFICE_TASKS:
            raise ConfigError(f"config error at {base}.transfer: one of {sorted(OFFICE_TASKS)} for Office-31")
        if not office and task["target"] not in DIGIT_TARGETS:
            raise ConfigError(f"config error at {base}.target: one of {DIGIT_TARGETS} for the digits task")


def prepared_name(task: dict[str, Any], role: str) -> str:
    """File stem under ``data/prepared/`` of a task's ``source`` or ``target`` data.

    Every one is a shared prepared dataset (:mod:`fedshift.data.prepare`, rules ``prepare`` and
    ``prepare_generated``): ``mnist``, ``mnist_m``, ``mnist_m_full``, ``mnist_m_bsds`` or ``office31``.
    """
    return "office31" if task["network"]["kind"] == "office" else task[role]


def _setting(optimizer: str, head: str, clients: str, local_steps: int, eta3: float) -> dict[str, Any]:
    return {"optimizer": optimizer, "head": head, "clients": clients, "local_steps": int(local_steps),
            "eta3": float(eta3)}


def settings_of(section: dict[str, Any], name: str, task: str) -> list[dict[str, Any]]:
    """The run settings one output needs on one task, in the output's order, without repeats.

    Each is ``{"optimizer", "head", "clients", "local_steps", "eta3"}`` (η₃ 0 for the baselines), typed as
    :func:`parse_run_id` returns them; :func:`run_id` labels it.
    """
    section = merged_section(section)
    fig = section["figures"][name]
    t = section["tasks"][task]
    m0, e0 = t["train"]["local_steps"], t["fedmm"]["eta3"]
    out = []
    for h in fig["heads"]:
        if name in ("fig1", "fig4"):
            opts = ["fedavg_sgda"] if name == "fig1" else ["fedavg_sgda", "fedmm"]
            out += [_setting(o, h, f"p{_fmt(p)}", m0, e0 if o == "fedmm" else 0) for o in opts for p in fig["p"]]
        elif name == "fig5":
            out += [_setting("fedmm", h, "p1", m, e) for m in fig["local_steps"] for e in fig["eta3"]]
        elif name == "fig6":
            out += [_setting("fedmm", h, "p1", m, e0) for m in fig["local_steps"]]
            out.append(_setting("fedsgda", h, "p1", 1, 0))
        elif name == "fig7":
            for c in fig["clients"]:
                c = "p1" if c == "s1t1" else c  # the same two clients
                out += [_setting(o, h, c, m0, e0 if o == "fedmm" else 0)
                        for o in fig.get("optimizers", FIG7_OPTIMIZERS)]
        else:
            for o in fig["optimizers"]:
                out.append(_setting(o, h, "p1", 1 if o == "fedsgda" else m0, e0 if o == "fedmm" else 0))
    return list({run_id(**s): s for s in out}.values())


def _ids_of(section: dict[str, Any], name: str, task: str) -> list[str]:
    return [run_id(**s) for s in settings_of(section, name, task)]


def runs_of(section: dict[str, Any], name: str | None = None) -> list[tuple[str, str, int]]:
    """(task, run id, seed) of every training job of one output (or of all enabled outputs)."""
    section = merged_section(section)
    out: list[tuple[str, str, int]] = []
    for n in ([name] if name else enabled_outputs(section)):
        for task in output_tasks(section, n):
            seeds = seed_list(section["tasks"][task]["seeds"])
            out += [(task, r, s) for r in _ids_of(section, n, task) for s in seeds]
    return list(dict.fromkeys(out))


def resolve_run(section: dict[str, Any], task: str, rid: str, budget: dict[str, Any] | None = None
                ) -> dict[str, Any]:
    """:func:`resolve_setting` of the setting a run id labels (:func:`parse_run_id`).

    Raises
    ------
    ConfigError
        For an unknown task or head, or a malformed run id.
    """
    return resolve_setting(section, task, parse_run_id(rid), budget)


def resolve_setting(section: dict[str, Any], task: str, run: dict[str, Any], budget: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """Everything a training job of (task, run setting) depends on: the run's ``hparams``.

    ``run`` is one of :func:`settings_of` (optimizer, head, clients, local_steps, eta3). ``budget`` (the
    configuration's top-level ``budget``, e.g. the rehearsal's ``{max_rounds: 2}``) caps ``train.rounds``
    (after the head's and FedSGDA's own rounds) and its periods (:func:`fedshift.budget.apply_budget`); None
    leaves them as configured.

    Raises
    ------
    ConfigError
        For an unknown task or head.
    """
    section = merged_section(section)
    if task not in section["tasks"]:
        raise ConfigError(f"unknown FedMM task {task!r}")
    t = section["tasks"][task]
    run = _setting(**run)
    if run["head"] not in t["heads"]:
        raise ConfigError(f"task {task!r} configures no head {run['head']!r}")
    head = t["heads"][run["head"]]
    train = {**t["train"], "local_steps": run["local_steps"], "rounds": head.get("rounds", t["train"]["rounds"])}
    if run["optimizer"] == "fedsgda":
        train["rounds"] = t.get("fedsgda", {}).get("rounds", train["rounds"])
    train = apply_budget(train, budget)
    opt: dict[str, Any] = {}
    if run["optimizer"] == "fedmm":
        opt = {**t["fedmm"], "eta3": run["eta3"], "eta3_decay": head["eta3_decay"]}
    elif run["optimizer"] == "fedprox_sgda":
        opt = dict(t["fedprox"])
    return {"task": task, "run": run_id(**run), **run, "nu": head["nu"], "network": t["network"],
            "preprocessing": t.get("preprocessing", "per_domain"), "train": train,
            "optimizer_settings": opt, "data": {k: t.get(k) for k in ("source", "target", "transfer", "source_size",
                                                                       "target_size", "partition_seed")}}
